"""Consistent contingency tables (dpcurator.synth.marginals): consistency, non-negativity,
integrality, the charge against a hand computation, free refusals, the neighbour rule."""

from __future__ import annotations

from fractions import Fraction

import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.accounting import PrivacyFilter, ZCDPAccountant
from dpcurator.core.measures import ZCDP
from dpcurator.errors import UnsupportedQueryError
from dpcurator.random import SeededRng
from dpcurator.synth.marginals import plan_marginals, release_marginals
from dpcurator.synth.mwem import MAX_MWEM_CELLS, mwem
from tests.synth_people import COLUMNS, demo_people, zcdp_session

pytest.importorskip("mbi")


def _session(frame: pd.DataFrame, rho: float = 1.0) -> dpc.Session:
    return zcdp_session(frame, rho)


@pytest.fixture(scope="module")
def people() -> pd.DataFrame:
    return demo_people()


def test_tables_are_consistent_nonnegative_integral(people: pd.DataFrame) -> None:
    s = _session(people)
    plan = plan_marginals(s, 2, rho=0.5, columns=COLUMNS, max_bins=4)
    tables = release_marginals(s, plan, rng=SeededRng(3), iters=200)
    for clique, frame in tables.tables.items():
        assert (frame["count"] >= 0).all(), clique
        assert frame["count"].dtype.kind == "i", clique
        assert int(frame["count"].sum()) == tables.total, clique
    # every 2-way table's margin equals the 1-way table exactly
    for clique, frame in tables.tables.items():
        if len(clique) != 2:
            continue
        for column in clique:
            margin = frame.groupby(column, sort=False)["count"].sum()
            one = tables.table(column).set_index(column)["count"]
            assert margin.reindex(one.index).tolist() == one.tolist(), (clique, column)
    ages = tables.table("age")["age"].tolist()
    assert ages[0].startswith("<")  # honest labels of the clamped edge bins
    assert ages[-1].startswith(">=")


def test_charge_is_the_hand_computed_sum(people: pd.DataFrame) -> None:
    """ρ_i ∝ sqrt(cells) (L2 sensitivity 1: one row per person here), σ_i = sqrt(1/(2ρ_i))
    rounded up, charge Σ 1/(2σ_i²) ≤ ρ; the filter records exactly that."""
    s = _session(people)
    cliques = [("sex",), ("sex", "region")]  # 2 and 8 cells
    plan = plan_marginals(s, cliques, rho=0.5)
    shares = [
        Fraction(1, 2) * w / (Fraction(2) ** 0.5 + Fraction(8) ** 0.5) for w in (2**0.5, 8**0.5)
    ]
    sigmas = [m.sigma for m in plan.mechanisms]  # type: ignore[union-attr]
    for sigma, share in zip(sigmas, shares, strict=True):
        assert 1 / (2 * sigma**2) <= share * (1 + Fraction(1, 10**12))
        assert float(1 / (2 * sigma**2)) == pytest.approx(float(share), rel=1e-6)
    hand = sum(1 / (2 * sigma**2) for sigma in sigmas)
    release_marginals(s, plan, rng=SeededRng(1), iters=50)
    assert s.spent().rho == hand  # type: ignore[union-attr]
    assert hand <= Fraction(1, 2)


def test_column_without_public_domain_is_refused_free(people: pd.DataFrame) -> None:
    meta = dpc.Metadata.from_dict(
        {"table": "people", "columns": {"sex": {"type": "string"}, "age": {"type": "int"}}}
    )
    s = dpc.Session.from_data(
        people[["sex", "age"]],
        metadata=meta,
        budget_filter=PrivacyFilter(ZCDP(1), ZCDPAccountant()),
    )
    with pytest.raises(UnsupportedQueryError, match=r"'sex'.*keys"):
        plan_marginals(s, 1, rho=0.5)
    with pytest.raises(UnsupportedQueryError, match=r"'age'.*lower"):
        plan_marginals(s, 1, rho=0.5, columns=["age"])
    assert s.spent().rho == 0  # type: ignore[union-attr]


def test_domain_too_large_for_mwem_is_refused_free(people: pd.DataFrame) -> None:
    s = dpc.Session.from_data(
        people, metadata=dpc.Metadata.from_yaml(dpc.demo_path("people.yaml")), budget=dpc.Budget(1)
    )
    with pytest.raises(UnsupportedQueryError, match=f"{MAX_MWEM_CELLS:,}") as refused:
        mwem(s, epsilon=0.5, max_bins=200)
    assert "cells" in str(refused.value)
    assert s.spent().epsilon == 0  # type: ignore[union-attr]


def test_neighbour_tables_differ_only_in_noisy_values(people: pd.DataFrame) -> None:
    """D and D minus person 4322: same tables, cells, columns, types, charge; only numbers."""
    outputs = []
    for frame in (people, people[people["pid"] != 4322]):
        s = _session(frame)
        plan = plan_marginals(s, 2, rho=0.5, columns=COLUMNS, max_bins=4)
        tables = release_marginals(s, plan, rng=SeededRng(5), iters=50)
        shape = {
            c: (list(t.columns), t.dtypes.astype(str).tolist(), t.iloc[:, : len(c)].values.tolist())
            for c, t in tables.tables.items()
        }
        outputs.append((shape, s.spent(), plan.expected_error().to_dict()))
    assert outputs[0] == outputs[1]
