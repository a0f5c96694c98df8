"""MST, AIM, MWEM (dpcurator.synth): charges against hand computations, utility against the
independent baseline on strongly correlated data (with a mutant that must lose), the output
schema, and the neighbour rule."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.accounting import PrivacyFilter, ZCDPAccountant
from dpcurator.core.measures import ZCDP
from dpcurator.random import SeededRng
from dpcurator.synth import mst as mst_module
from dpcurator.synth.aim import aim
from dpcurator.synth.common import SyntheticData
from dpcurator.synth.mst import independent, mst
from dpcurator.synth.mwem import mwem
from dpcurator.synth.report import mean_tvd

pytest.importorskip("mbi")

KEYS = ["x", "y", "z"]
META = dpc.Metadata.from_dict(
    {
        "table": "t",
        "columns": {
            "a": {"type": "string", "keys": KEYS},
            "b": {"type": "string", "keys": KEYS},
            "c": {"type": "string", "keys": KEYS},
            "v": {"type": "float", "lower": 0, "upper": 30},
        },
    }
)


def _correlated(n: int = 4000) -> pd.DataFrame:
    """b copies a, c copies b, v tracks a, each with 10% noise (declared seed 11)."""
    gen = np.random.default_rng(11)
    a = gen.integers(0, 3, n)
    b = np.where(gen.random(n) < 0.9, a, gen.integers(0, 3, n))
    c = np.where(gen.random(n) < 0.9, b, gen.integers(0, 3, n))
    v = a * 10 + gen.random(n) * 10
    keys = np.asarray(KEYS)
    return pd.DataFrame({"a": keys[a], "b": keys[b], "c": keys[c], "v": v})


@pytest.fixture(scope="module")
def data() -> pd.DataFrame:
    return _correlated()


def _zcdp_session(frame: pd.DataFrame, rho: float = 10.0) -> dpc.Session:
    budget = PrivacyFilter(ZCDP(rho), ZCDPAccountant())
    return dpc.Session.from_data(frame, metadata=META, budget_filter=budget)


def _tvd(result: SyntheticData, frame: pd.DataFrame) -> float:
    """Mean total variation distance over all 2-way marginals (every one is under the cap)."""
    tvd = mean_tvd(result.domain.encode(frame), result, 2)
    assert tvd is not None
    return tvd


def _beats_independent(candidate: float, baseline: float) -> bool:
    """The utility claim: at most half the independent baseline's mean 2-way TVD."""
    return candidate <= 0.5 * baseline


def test_mst_charge_is_the_hand_computation(data: pd.DataFrame) -> None:
    """d = 4, ρ = 1, sensitivity 1: 4 Gaussians of ρ/12, 3 selections with ε = sqrt(8ρ/9)
    rounded down (ε²/8 each), 3 Gaussians of ρ/9; σ rounded up from sqrt(1/(2ρ_i))."""
    s = _zcdp_session(data)
    result = mst(s, rho=1, rng=SeededRng(1), iters=100)
    sigma1 = math.sqrt(6.0)  # 1/(2σ²) = 1/12
    sigma2 = math.sqrt(4.5)  # 1/(2σ²) = 1/9
    kinds = [(st.kind, len(st.clique)) for st in result.steps]
    assert kinds == [("measure", 1)] * 4 + [("select", 2)] * 3 + [("measure", 2)] * 3
    for st in result.steps:
        if st.kind == "measure":
            sigma = sigma1 if len(st.clique) == 1 else sigma2
            assert float(st.cost) == pytest.approx(1 / (2 * sigma**2), rel=1e-9)
            assert st.cost <= (Fraction(1, 12) if len(st.clique) == 1 else Fraction(1, 9))
        else:
            assert float(st.cost) == pytest.approx(1 / 9, rel=1e-9)
            assert st.cost <= Fraction(1, 9)
    assert result.spent() == result.event.rho == s.spent().rho  # type: ignore[attr-defined]
    assert Fraction(1) * (1 - Fraction(1, 10**9)) <= result.spent() <= 1


def test_aim_charge_is_rho_and_rounds_fit(data: pd.DataFrame) -> None:
    s = _zcdp_session(data)
    result = aim(s, rho=1, rng=SeededRng(2), iters=100, round_iters=50)
    assert result.event.rho == 1 == s.spent().rho  # type: ignore[attr-defined]
    # 16·d = 64 rounds of αρ/64 = 9/640 per 1-way measurement at the start
    first = result.steps[:4]
    assert all(st.kind == "measure" and len(st.clique) == 1 for st in first)
    assert all(st.cost <= Fraction(9, 640) for st in first)
    assert float(first[0].cost) == pytest.approx(9 / 640, rel=1e-9)
    assert Fraction(99, 100) <= result.spent() <= 1  # the last round spends what is left


def test_mwem_charge_is_epsilon(data: pd.DataFrame) -> None:
    """T rounds of ε/(2T) selection + Laplace of scale 2T/ε (sensitivity 1): exactly ε."""
    s = dpc.Session.from_data(data, metadata=META, budget=dpc.Budget(2))
    result = mwem(s, epsilon=1, rounds=5, rng=SeededRng(3))
    assert result.event.epsilon == 1 == s.spent().epsilon  # type: ignore[attr-defined]
    assert result.spent() == 1
    assert [st.kind for st in result.steps] == ["select", "measure"] * 5


@pytest.mark.slow
def test_mst_and_aim_beat_independent_and_a_mutant_does_not(
    data: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeds declared; ρ = 1 on 4000 rows. The mutant MST measures no pair (its spanning tree
    is empty), so it is the independent model, and must fail the same claim."""
    baseline = _tvd(independent(_zcdp_session(data), rho=1, rng=SeededRng(7)), data)
    got_mst = _tvd(mst(_zcdp_session(data), rho=1, rng=SeededRng(7), iters=300), data)
    got_aim = _tvd(
        aim(_zcdp_session(data), rho=1, rng=SeededRng(7), iters=300, round_iters=50), data
    )
    assert _beats_independent(got_mst, baseline), (got_mst, baseline)
    assert _beats_independent(got_aim, baseline), (got_aim, baseline)
    monkeypatch.setattr(mst_module, "_spanning_tree", lambda *_a, **_k: [])
    mutant = _tvd(mst(_zcdp_session(data), rho=1, rng=SeededRng(7), iters=300), data)
    assert not _beats_independent(mutant, baseline), (mutant, baseline)


def test_output_has_the_input_schema(data: pd.DataFrame) -> None:
    s = dpc.Session.from_data(data, metadata=META, budget=dpc.Budget(2))
    result = mwem(s, epsilon=1, rounds=5, rng=SeededRng(4))
    assert list(result.frame.columns) == ["a", "b", "c", "v"]
    assert set(result.frame["a"]) <= set(KEYS)
    assert result.frame["v"].dtype == np.float64
    assert result.frame["v"].between(0, 30).all()


def test_neighbour_output_differs_only_in_values(data: pd.DataFrame) -> None:
    """D and D minus one row: same columns, types, domain, charge and step structure."""
    seen = []
    for frame in (data, data.iloc[1:]):
        s = _zcdp_session(frame)
        result = mst(s, rho=1, rng=SeededRng(9), iters=50)
        seen.append(
            (
                list(result.frame.columns),
                result.frame.dtypes.astype(str).tolist(),
                result.domain,
                result.event,
                [(st.kind, len(st.clique), st.cost) for st in result.steps],
                s.spent(),
            )
        )
    assert seen[0] == seen[1]
