"""Contingency tables by Barak et al.'s Fourier method (dpcurator.synth.fourier): the basis and
its reconstruction against brute force, the sensitivity bound behind the charge, the charge
against a hand computation, consistency / non-negativity / integrality, interval coverage by
simulation, the free refusal of a large domain, and the neighbour rule."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

import dpcurator as dpc
from dpcurator.errors import UnsupportedQueryError
from dpcurator.query.privacy_unit import PrivacyUnit
from dpcurator.random import SeededRng
from dpcurator.synth import fourier
from dpcurator.synth.fourier import helmert, plan_fourier, release_fourier, round_table
from dpcurator.synth.marginals import tabulate
from tests.synth_people import COLUMNS, demo_people, zcdp_session


def _session(frame: pd.DataFrame, rho: float = 50.0) -> dpc.Session:
    return zcdp_session(frame, rho)


@pytest.fixture(scope="module")
def people() -> pd.DataFrame:
    return demo_people()


def _truth(session: dpc.Session, frame: pd.DataFrame, clique: tuple[str, ...]) -> np.ndarray:
    plan = plan_fourier(session, [clique], rho=1, columns=COLUMNS, max_bins=4)
    codes = plan.domain.encode(frame)
    return tabulate(codes, plan.domain, clique)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_helmert_rows_are_orthogonal_with_the_stated_norms(n: int) -> None:
    basis = helmert(n)
    gram = basis @ basis.T
    norms = [n] + [k * (k + 1) for k in range(1, n)]
    assert (gram == np.diag(norms)).all()
    for k, bound in enumerate(fourier._column_bounds(n), start=1):
        assert bound * bound >= k * (k + 1)
        assert float(bound) == pytest.approx(math.sqrt(k * (k + 1)), rel=1e-9)


def test_exact_coefficients_give_back_the_exact_marginals(people: pd.DataFrame) -> None:
    """Coefficients of every support, from the exact 3-way table, mapped back (the release's own
    reconstruction) equal the brute-force marginals, in any column order."""
    s = _session(people)
    cliques = [("age", "sex", "region"), ("sex",), ("region", "age"), ("age",)]
    plan = plan_fourier(s, cliques, rho=1, columns=COLUMNS, max_bins=4)
    home = cliques[0]
    exact = _truth(s, people, home)
    blocks = {
        support: fourier._coefficients(exact, home, support, plan.domain)
        for support in plan.supports
    }
    assert int(blocks[()]) == len(people)
    for clique in cliques:
        rebuilt = fourier._noisy_marginal(plan, clique, blocks)
        assert np.allclose(rebuilt, _truth(s, people, clique), atol=1e-8), clique


@pytest.mark.parametrize(("rows", "groups"), [(1, 1), (2, 2), (1, 3)])
def test_a_persons_move_of_a_block_is_within_its_sensitivity(rows: int, groups: int) -> None:
    """The bound the charge rests on, by brute force over a 3 x 4 table: a person keeping ``rows``
    rows in each of at most ``groups`` cells of the support's own marginal moves the block's
    coefficients by Σ_b Δc_b² / s_b² ≤ Δ_S² (s_b ≥ |ψ_b|); and the total, summed from the 1-way
    marginal of a (same bounding), moves by at most derived_l2."""
    sizes = {"a": 3, "b": 4}
    contribution = PrivacyUnit(rows=rows, groups=groups)
    bases = {n: helmert(k)[1:] for n, k in sizes.items()}
    bounds = {n: np.array([float(b) for b in fourier._column_bounds(k)]) for n, k in sizes.items()}
    for support in [("a",), ("b",), ("a", "b")]:
        cells = list(itertools.product(*(range(sizes[n]) for n in support)))
        limit = float(contribution.count_l2(len(cells))) ** 2
        scale = bounds[support[0]]
        if len(support) == 2:
            scale = np.multiply.outer(bounds["a"], bounds["b"])
        worst = 0.0
        for person in itertools.combinations(cells, min(groups, len(cells))):
            move = np.zeros(scale.shape)
            for cell in person:
                vectors = [bases[n][:, code] for n, code in zip(support, cell, strict=True)]
                term = vectors[0] if len(vectors) == 1 else np.multiply.outer(*vectors)
                move = move + rows * term
            worst = max(worst, float(((move / scale) ** 2).sum()))
        assert worst <= limit * (1 + 1e-12), (support, worst, limit)
        if rows == groups == 1:  # one record: the projection keeps Π (1 - 1/n_j) of it
            assert worst == pytest.approx(math.prod(1 - 1 / sizes[n] for n in support))
    total_move = rows * min(groups, sizes["a"])
    assert fourier.derived_l2(contribution, sizes["a"], 1) == total_move
    assert fourier.derived_l2(contribution, 12, 12) == contribution.count_l2(12)
    # a 4-cell marginal summed from 12 cells (3 each): g' = min(g, 12) cells, 3 per summed cell
    full, rest = divmod(min(groups, 12), 3)
    assert float(fourier.derived_l2(contribution, 12, 4)) == pytest.approx(
        rows * math.sqrt(full * 9 + rest * rest)
    )


def test_charge_is_the_hand_computed_sum(people: pd.DataFrame) -> None:
    """Supports {}, sex, region, sex x region of the tables sex and sex x region: coefficients
    1, 1, 3, 3; variance weights (Σ over the tables C ⊇ S of Π_{C∖S} 1/n_j) 1/2 + 1/8, 1 + 1/4,
    1/2, 1; Δ = 1 (one row per person). ρ_S ∝ sqrt(n·w), c_S rounded up, charge Σ 1/(2c_S²) ≤ ρ;
    the filter records exactly that."""
    s = _session(people)
    plan = plan_fourier(s, [("sex",), ("sex", "region")], rho=Fraction(1, 2))
    assert plan.supports == ((), ("sex",), ("region",), ("sex", "region"))
    raw = [math.sqrt(1 * 0.625), math.sqrt(1 * 1.25), math.sqrt(3 * 0.5), math.sqrt(3 * 1)]
    for scale, weight in zip(plan.scales, raw, strict=True):
        share = 0.5 * weight / sum(raw)
        assert float(1 / (2 * scale**2)) == pytest.approx(share, rel=1e-6)
    hand = sum(1 / (2 * scale**2) for scale in plan.scales)
    release_fourier(s, plan, rng=SeededRng(1))
    assert s.spent().rho == hand  # type: ignore[union-attr]
    assert hand <= Fraction(1, 2)


def test_tables_are_consistent_nonnegative_integral(people: pd.DataFrame) -> None:
    s = _session(people)
    plan = plan_fourier(s, 2, rho=0.05, columns=COLUMNS, max_bins=4)
    tables = release_fourier(s, plan, rng=SeededRng(3))
    for clique, frame in tables.tables.items():
        assert (frame["count"] >= 0).all(), clique
        assert frame["count"].dtype.kind == "i", clique
        assert int(frame["count"].sum()) == tables.total, clique
        assert frame["noisy"].sum() == pytest.approx(tables.table("sex")["noisy"].sum())
    for clique, frame in tables.tables.items():
        if len(clique) != 2:
            continue
        for column in clique:
            one = tables.table(column).set_index(column)
            for field in ("count", "noisy"):
                margin = frame.groupby(column, sort=False)[field].sum().reindex(one.index)
                assert np.allclose(margin.to_numpy(float), one[field].to_numpy(float)), field
    assert abs(tables.total - len(people)) < 60  # the total's σ is about 6 here


def test_round_table_keeps_the_rounded_total_and_each_cell_within_one() -> None:
    table = np.array([[0.4, 1.6], [2.5, 0.0], [3.3, 0.2]])
    counts = round_table(table)
    assert counts.sum() == round(table.sum())
    assert (np.abs(counts - table) < 1).all()
    assert counts.tolist() == [[0, 2], [3, 0], [3, 0]]


def test_intervals_cover_the_true_counts(people: pd.DataFrame) -> None:
    """alpha = 0.1 intervals of all 2-way cells of sex x region (8 cells x 150 runs): the
    coverage's exact binomial test at level 0.001 does not reject 0.9 (cells of one run are
    dependent, so the test is conservative only in power). Power: intervals of half the width
    (an implementation using c_S instead of the cell's full variance is narrower still) cover
    about 59% and are rejected."""
    s = _session(people, rho=1000)
    truth = _truth(s, people, ("sex", "region")).ravel()
    plan = plan_fourier(s, [("sex", "region")], rho=0.01)
    hits = half_hits = 0
    runs = 150
    for seed in range(runs):
        frame = release_fourier(s, plan, alpha=0.1, rng=SeededRng(seed)).table("sex", "region")
        low, high, noisy = frame["ci_low"], frame["ci_high"], frame["noisy"]
        hits += int(((low <= truth) & (truth <= high)).sum())
        half = (high - low) / 4
        half_hits += int(((noisy - half <= truth) & (truth <= noisy + half)).sum())
    trials = 8 * runs
    assert binomtest(hits, trials, 0.9).pvalue > 0.001, hits / trials
    assert binomtest(half_hits, trials, 0.9).pvalue < 0.001, half_hits / trials


def test_plans_over_the_lp_or_support_limits_are_refused_free(
    people: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _session(people)
    monkeypatch.setattr(fourier, "MAX_LP_CELLS", 50)
    with pytest.raises(UnsupportedQueryError, match=r"64 cells, over its limit of 50"):
        plan_fourier(s, 2, rho=0.5, columns=COLUMNS, max_bins=4)
    monkeypatch.setattr(fourier, "MAX_SUPPORTS", 10)
    with pytest.raises(UnsupportedQueryError, match=r"11 here, over its limit of 10"):
        plan_fourier(s, 2, rho=0.5, columns=COLUMNS, max_bins=2)
    with pytest.raises(UnsupportedQueryError, match="fewer columns"):
        plan_fourier(s, [COLUMNS], rho=0.5, max_bins=2)  # 16 subsets of one 4-way marginal
    assert s.spent().rho == 0  # type: ignore[union-attr]


def test_neighbour_tables_differ_only_in_noisy_values(people: pd.DataFrame) -> None:
    """D and D minus person 4322: same tables, cells, columns, types, charge, expected errors
    and interval widths; only the numbers differ."""
    outputs = []
    for frame in (people, people[people["pid"] != 4322]):
        s = _session(frame)
        plan = plan_fourier(s, 2, rho=0.5, columns=COLUMNS, max_bins=4)
        tables = release_fourier(s, plan, rng=SeededRng(5))
        shape = {
            c: (
                list(t.columns),
                t.dtypes.astype(str).tolist(),
                t.iloc[:, : len(c)].values.tolist(),
                (t["ci_high"] - t["ci_low"]).round(9).tolist(),
            )
            for c, t in tables.tables.items()
        }
        outputs.append((shape, s.spent(), plan.expected_error().to_dict()))
    assert outputs[0] == outputs[1]
