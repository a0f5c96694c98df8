"""The low-budget rule of MST and AIM (dpcurator.synth.compress): which columns carry signal at
the first round's noise, who is measured a second time and with what ρ, how two measurements
combine and how a lone column is denoised; then MST and AIM end to end where no column carries
signal (they must hold the independent baseline's ρ/d per 1-way marginal and measure no pair)
and where only some do (pairs only among those, the others at ρ/d)."""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.accounting import PrivacyFilter, ZCDPAccountant
from dpcurator.core.measures import ZCDP
from dpcurator.query.privacy_unit import PrivacyUnit
from dpcurator.random import SeededRng
from dpcurator.synth import aim as aim_module
from dpcurator.synth import mst as mst_module
from dpcurator.synth.aim import aim
from dpcurator.synth.common import SyntheticData, combined
from dpcurator.synth.compress import (
    Compression,
    denoised,
    enough_informative,
    is_informative,
    second_one_ways,
)
from dpcurator.synth.domain import ColumnDomain, SynthDomain
from dpcurator.synth.mst import mst, mst_cost

pytest.importorskip("mbi")

SIZES = {"a": 2, "b": 2, "u": 30, "w": 30}
META = dpc.Metadata.from_dict(
    {
        "table": "t",
        "columns": {
            name: {"type": "int", "keys": list(range(size))} for name, size in SIZES.items()
        },
    }
)


def _table(n: int = 3000) -> pd.DataFrame:
    """a: 95% code 0; b copies a 90% of the time; u, w uniform over 30 codes (100 rows each),
    w tracking u; declared seed 3."""
    gen = np.random.default_rng(3)
    a = (gen.random(n) < 0.05).astype(int)
    b = np.where(gen.random(n) < 0.9, a, 1 - a)
    u = np.repeat(np.arange(30), n // 30)
    w = np.where(gen.random(n) < 0.5, u, gen.integers(0, 30, n))
    return pd.DataFrame({"a": a, "b": b, "u": u, "w": w})


def _session(frame: pd.DataFrame, rho: float) -> dpc.Session:
    budget = PrivacyFilter(ZCDP(rho), ZCDPAccountant())
    return dpc.Session.from_data(frame, metadata=META, budget_filter=budget)


def _one_way_rho(result: SyntheticData) -> dict[str, Fraction]:
    """Each column's summed ρ over its 1-way measurements."""
    held: dict[str, Fraction] = defaultdict(Fraction)
    for step in result.steps:
        if step.kind == "measure" and len(step.clique) == 1:
            held[step.clique[0]] += step.cost
    return held


def _measured_twice(result: SyntheticData) -> set[str]:
    ones = [s.clique[0] for s in result.steps if s.kind == "measure" and len(s.clique) == 1]
    return {name for name in ones if ones.count(name) == 2}


def test_a_column_is_informative_when_some_noisy_count_reaches_three_sigma() -> None:
    assert is_informative([30, 1], sigma=10)
    assert not is_informative([29.9, 20, -4], sigma=10)
    assert not is_informative([100], sigma=10)  # one code: a pair with it adds nothing


def test_the_rounds_run_with_two_and_half_of_the_columns_informative() -> None:
    assert enough_informative("abcd", "ab")
    assert not enough_informative("abcde", "ab")  # 2 of 5: fewer than half
    assert not enough_informative("ab", "a")
    assert enough_informative("ab", "ab")


def test_who_is_measured_again_and_with_what() -> None:
    each, spread = Fraction(1, 7), Fraction(3, 5)
    assert second_one_ways("abcd", "ab", each=each, spread=spread) == [("c", each), ("d", each)]
    assert second_one_ways("abcd", "a", each=each, spread=spread) == [
        (name, spread / 4) for name in "abcd"
    ]


def test_two_measurements_combine_by_inverse_variance() -> None:
    values, sigma = combined([10.0, 0.0], 1.0, [0.0, 20.0], 2.0)
    assert values.tolist() == pytest.approx([8.0, 4.0])  # weights 1 and 1/4, over 5/4
    assert sigma == pytest.approx((1 + 1 / 4) ** -0.5)
    full = SynthDomain((ColumnDomain("a", "int", (0, 1)), ColumnDomain("b", "int", (0, 1, 2))))
    compression = Compression.of(full, {"a": [10, 0], "b": [4, 4, 4]}, sigma=1.0)
    again = compression.remeasured("a", [0, 20], 2.0)
    assert again.weights["a"].tolist() == pytest.approx([8.0, 4.0])
    assert again.codes == compression.codes
    assert again.domain == compression.domain
    # total: a's sum 12 with variance 2·σ², b's 12 with 3: weighted 1/(2·0.8) and 1/3
    variance_a = 2 * (1 + 1 / 4) ** -1
    expected = (12 / variance_a + 12 / 3) / (1 / variance_a + 1 / 3)
    assert again.total() == pytest.approx(expected)


def test_a_lone_column_keeps_codes_over_three_sigma_and_spreads_the_rest() -> None:
    out = denoised([100, 5, -3, 7], sigma=10)
    assert out.tolist() == pytest.approx([100, 9 * 5 / 12, 0, 9 * 7 / 12])
    assert denoised([100, -5, 2], sigma=10).tolist() == pytest.approx([100, 0, 0])  # sum < 0
    assert denoised([-1, -2], sigma=10).tolist() == pytest.approx([0, 0])
    assert denoised([3, -1], sigma=10).tolist() == pytest.approx([2, 0])
    assert denoised([-1, 5], sigma=1).tolist() == pytest.approx([0, 5])  # 5 kept, nothing rare


def test_mst_with_no_signal_measures_every_one_way_at_the_independent_share() -> None:
    """ρ = 1e-8 on 3000 rows: σ ≈ 24,000 per count, no column informative (or one by chance):
    no pair measured, every 1-way marginal holds ρ/d, and the charge is the hand computation.
    The old MST spent 2/3 of ρ on selection and pairs here and left each 1-way ρ/(3d)."""
    rho = 1e-8
    result = mst(_session(_table(), rho), rho=rho, rng=SeededRng(1), iters=50)
    assert [s.kind for s in result.steps] == ["measure"] * 8
    held = _one_way_rho(result)
    assert set(held) == set(SIZES)
    for name, value in held.items():
        assert Fraction(rho) / 4 * (1 - Fraction(1, 10**6)) <= value, name
    contribution = PrivacyUnit()
    assert result.event.rho == mst_cost(4, Fraction(rho), contribution)[3]  # type: ignore[attr-defined]
    assert result.spent() <= result.event.rho  # type: ignore[attr-defined]
    assert list(result.frame.columns) == list(SIZES)


def test_aim_with_no_signal_measures_every_one_way_at_the_independent_share() -> None:
    rho = 1e-8
    result = aim(_session(_table(), rho), rho=rho, rng=SeededRng(1), iters=50, round_iters=20)
    assert [s.kind for s in result.steps] == ["measure"] * 8
    for name, value in _one_way_rho(result).items():
        assert Fraction(rho) / 4 * (1 - Fraction(1, 10**6)) <= value, name
    assert result.event.rho == Fraction(rho)  # type: ignore[attr-defined]
    assert Fraction(rho) * (1 - Fraction(1, 10**6)) <= result.spent() <= Fraction(rho)
    for name, size in SIZES.items():
        assert set(result.frame[name]) <= set(range(size))


def _spy(monkeypatch: pytest.MonkeyPatch, module: object) -> dict[bool, list[int]]:
    """Record each is_informative verdict the synthesizer reaches (by column size)."""
    seen: dict[bool, list[int]] = {True: [], False: []}

    def recorded(noisy: np.ndarray, sigma: float) -> bool:
        verdict = is_informative(noisy, sigma)
        seen[verdict].append(np.asarray(noisy).size)
        return verdict

    monkeypatch.setattr(module, "is_informative", recorded)
    return seen


def test_mst_measures_pairs_among_informative_columns_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ρ = 1.5e-4: σ₁ = sqrt(3d/(2ρ)) = 200; a and b (2850 and about 2600 rows in code 0) are
    far over 3σ, u and w (100 rows a code) under it (seed 2: the verdicts are recorded)."""
    seen = _spy(monkeypatch, mst_module)
    rho = 1.5e-4
    result = mst(_session(_table(), rho), rho=rho, rng=SeededRng(2), iters=50)
    assert sorted(seen[True]) == [2, 2]
    assert sorted(seen[False]) == [30, 30]
    assert _measured_twice(result) == {"u", "w"}
    pairs = [s.clique for s in result.steps if len(s.clique) == 2]
    assert pairs == [("a", "b"), ("a", "b")]  # one selection, one measurement
    _, two, epsilon, charge = mst_cost(4, Fraction(rho), PrivacyUnit())
    held = _one_way_rho(result)
    first = held["a"]
    for name in ("u", "w"):  # one round's budget each, on top of the first measurement
        assert (
            first + (epsilon**2 / 8 + two.rho(Fraction(1))) * (1 - Fraction(1, 10**6)) <= held[name]
        )
        assert held[name] <= first + epsilon**2 / 8 + two.rho(Fraction(1))
    assert result.event.rho == charge  # type: ignore[attr-defined]
    assert result.spent() <= charge


def test_aim_rounds_leave_uninformative_columns_at_the_independent_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ρ = 9e-4: AIM's first σ = sqrt(16d/(2·0.9ρ)) ≈ 199; a, b informative, u, w not (seed 0,
    verdicts recorded): u and w hold ρ/d and are in no selected marginal; rounds ran."""
    seen = _spy(monkeypatch, aim_module)
    rho = 9e-4
    result = aim(_session(_table(), rho), rho=rho, rng=SeededRng(0), iters=50, round_iters=20)
    assert sorted(seen[True]) == [2, 2]
    assert sorted(seen[False]) == [30, 30]
    assert _measured_twice(result) >= {"u", "w"}
    held = _one_way_rho(result)
    for name in ("u", "w"):
        assert Fraction(rho) / 4 * (1 - Fraction(1, 10**6)) <= held[name] <= Fraction(rho) / 4
    selected = [s.clique for s in result.steps if s.kind == "select"]
    assert selected
    assert all(set(clique) <= {"a", "b"} for clique in selected)
    assert result.spent() <= Fraction(rho)
