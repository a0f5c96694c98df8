"""DP quantiles: exact integer scores, their sensitivity, and the limit at large epsilon."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pandas as pd
import polars as pl
import pytest
from scipy import stats

from dpcurator.core.measures import PureDP
from dpcurator.errors import ParameterError
from dpcurator.estimators import Covers, median
from dpcurator.estimators.quantile_refine import (
    DEFAULT_LEVELS,
    FINE_ONE_LEVEL,
    RefinedQuantile,
    choose_levels,
    dp_quantile,
    edge_scores,
    refined_quantile,
)
from dpcurator.estimators.quantiles import (
    QuantileBins,
    quantile_scores,
    rank_error,
    rational_level,
)
from dpcurator.random import SeededRng


def test_scores_hand_computed() -> None:
    # values 0,1,1,2 in bins 0..3 (bin 3 empty); median rank ρ = (4-1)/2 = 1.5
    scores, sensitivity = quantile_scores([1, 2, 1, 0], Fraction(1, 2))
    # bin 0 holds rank 0 -> distance 1.5; bin 1 ranks 1-2 -> 0; bin 2 rank 3 -> 1.5; bin 3 -> 2.5
    assert scores.tolist() == [-3, 0, -3, -5]  # times the denominator 2
    assert sensitivity == 1
    minimum, _ = quantile_scores([0, 0, 3, 1], Fraction(0))
    assert minimum.tolist() == [-1, -1, 0, -3]  # unique best bin for MIN
    maximum, _ = quantile_scores([0, 0, 3, 1], Fraction(1))
    assert maximum.tolist() == [-4, -4, -1, 0]


@pytest.mark.parametrize(
    "p", [Fraction(0), Fraction(1, 4), Fraction(1, 2), Fraction(9, 10), Fraction(1)]
)
def test_sensitivity_bounds_every_neighbour(p: Fraction) -> None:
    for counts in itertools.product(range(3), repeat=4):
        scores, sensitivity = quantile_scores(counts, p)
        for b in range(4):
            neighbour = list(counts)
            neighbour[b] += 1
            other, _ = quantile_scores(neighbour, p)
            assert np.max(np.abs(other - scores)) <= sensitivity
    _, doubled = quantile_scores([1, 2], p, rows_per_person=2)
    assert doubled == 2 * max(p.numerator, p.denominator - p.numerator)


def test_bins_for_integers_and_floats() -> None:
    unit = QuantileBins.for_bounds(0, 100, integer=True)
    assert (unit.lower, unit.upper, unit.bins) == (-0.5, 100.5, 101)
    assert unit.centres()[42] == 42.0
    assert unit.counts([0, 42, 42, 100, 500]).tolist()[42] == 2
    wide = QuantileBins.for_bounds(0, 1, integer=False, max_bins=4)
    assert wide.centres().tolist() == [0.125, 0.375, 0.625, 0.875]


def test_large_epsilon_gives_the_exact_quantile() -> None:
    values = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    rng = SeededRng(5)
    assert dp_quantile(values, 0.5, 1e9, lower=0, upper=10, integer=True, rng=rng) == 4.0
    assert dp_quantile(values, 0.0, 1e9, lower=0, upper=10, integer=True, rng=rng) == 1.0
    assert dp_quantile(values, 1.0, 1e9, lower=0, upper=10, integer=True, rng=rng) == 9.0


def test_rank_error_and_level_validation() -> None:
    assert rational_level(0.3) == Fraction(3, 10)
    expected = 2 * 1 * (np.log(100) + np.log(20)) / (1.0 * 2)
    assert rank_error(1.0, 0.5, 100, 0.05) == pytest.approx(expected)
    with pytest.raises(ParameterError, match="'p'"):
        rational_level(1.5)
    with pytest.raises(ParameterError, match="'upper'"):
        QuantileBins(1.0, 0.0, 3)


@pytest.mark.parametrize("p", [Fraction(0), Fraction(1, 4), Fraction(1, 2), Fraction(1)])
def test_edge_score_sensitivity_bounds_every_neighbour(p: Fraction) -> None:
    for counts in itertools.product(range(3), repeat=4):
        scores, sensitivity = edge_scores(counts, p)
        for b in range(4):
            for change in (1, -1):
                neighbour = list(counts)
                neighbour[b] += change
                if neighbour[b] < 0:
                    continue
                other, _ = edge_scores(neighbour, p)
                assert np.max(np.abs(other - scores)) <= sensitivity


def test_edge_scores_hand_computed() -> None:
    # values 0,1,1,2 in bins 0..3 (edges 0..4 have 0,1,3,4,4 values below); median rank ρ = 1.5;
    # the ideal edge would have 2 below (between ranks 1 and 2): edges 1 and 2 are one rank off.
    scores, sensitivity = edge_scores([1, 2, 1, 0], Fraction(1, 2))
    assert scores.tolist() == [-8, -4, -4, -8, -8]  # -|4L - 8|
    assert sensitivity == 2


def test_error_shrinks_below_the_bin_resolution() -> None:
    # Lognormal data in public bounds [0, 100]: one selection among 1,024 bins cannot do better
    # than about a quarter of a bin (0.024) on average; refinement must do 10x better at ε = 1.
    gen = np.random.default_rng(11)
    rng = SeededRng(3)
    errors = []
    for _ in range(20):
        x = gen.lognormal(0, 1, 10_000)
        errors.append(abs(dp_quantile(x, 0.5, 1.0, lower=0, upper=100, rng=rng) - np.median(x)))
    assert np.mean(errors) < 0.0024


def _covered(n: int, epsilon: float, alpha: float, narrow: float | None, reps: int) -> int:
    """How many of ``reps`` intervals (or value ± ``narrow`` when given) hold the sample
    quantile of fresh normal data (p cycling through 0.25, 0.5, 0.9)."""
    gen = np.random.default_rng(n)
    rng = SeededRng(n + 1)
    hits = 0
    for i in range(reps):
        p = (0.25, 0.5, 0.9)[i % 3]
        x = gen.normal(0, 1, n)
        value, low, high = refined_quantile(x, p, epsilon, lower=-4, upper=4, alpha=alpha, rng=rng)
        assert low is not None
        assert high is not None
        assert low <= value <= high
        if narrow is not None:
            low, high = value - narrow, value + narrow
        hits += bool(low <= np.quantile(x, p) <= high)
    return hits


# The coverage test: a one-sided binomial test at level TEST_ALPHA of H0 "coverage >= 1 - α".
TEST_ALPHA = 0.01
CI_ALPHA = 0.1


@pytest.mark.parametrize("n", [100, 10_000])
@pytest.mark.parametrize("epsilon", [0.1, 1.0])
def test_interval_covers(n: int, epsilon: float) -> None:
    reps = 60
    hits = _covered(n, epsilon, CI_ALPHA, None, reps)
    assert stats.binomtest(hits, reps, 1 - CI_ALPHA, alternative="less").pvalue > TEST_ALPHA


def test_interval_coverage_test_has_power() -> None:
    # The same test rejects value ± 1e-4, narrower than the mechanism's error (n = 10^4, ε = 1).
    reps = 60
    hits = _covered(10_000, 1.0, CI_ALPHA, 1e-4, reps)
    assert stats.binomtest(hits, reps, 1 - CI_ALPHA, alternative="less").pvalue <= TEST_ALPHA


def test_refined_plan_is_public_and_validated() -> None:
    # a third of ε on the selection (two levels from a selection ε of 1/2), two thirds on the
    # interval's counts
    plan = RefinedQuantile.plan(0.5, 3.0, 0.0, 1.0, alpha=0.05)
    assert [level.bins for level in plan.levels] == [1024, 8192]
    spent = sum(level.mechanism.epsilon for level in plan.levels)
    assert 1 - Fraction(1, 2**38) <= spent <= 1
    # ε rounded down to a dyadic: permute-and-flip's coins take the int64 path
    assert all(level.mechanism.epsilon.denominator < 2**45 for level in plan.levels)
    assert plan.interval is not None
    assert plan.interval.epsilon(plan.p, 1) == 2
    small = RefinedQuantile.plan(0.5, 1.0, 0.0, 1.0, alpha=0.05)
    assert [level.bins for level in small.levels] == [65536]
    with pytest.raises(ParameterError, match="'upper'"):
        RefinedQuantile.plan(0.5, 1.0, 1.0, 1.0)
    with pytest.raises(ParameterError, match="'lower'"):
        RefinedQuantile.plan(0.5, 1.0, float("nan"), 1.0)
    # bounds whose width overflows a float: before, edges of inf and NaN (a released value of
    # inf and a numpy warning); now refused before anything runs
    with pytest.raises(ParameterError, match="upper - lower must be a finite number"):
        RefinedQuantile.plan(0.5, 1.0, -1e308, 1e308, alpha=0.05)


def test_interval_shells_continue_outside_the_last_window() -> None:
    # n = 10^4, ε = 0.1 on [-4, 4] with two levels: the counts at ε/5 need more reach than the
    # last level's window (1/32 of the range, ±0.125); the shells go on over the first level's
    # bins, so the interval is about ±1 around the median instead of the whole range (width 8).
    x = np.random.default_rng(1).normal(0, 1, 10_000)
    plan = RefinedQuantile.plan(0.5, 0.1, -4, 4, alpha=0.05, levels=DEFAULT_LEVELS)
    for seed in range(5):
        _, low, high = plan.run(lambda bins: bins.counts(x), SeededRng(seed))
        assert low is not None
        assert high is not None
        assert low <= np.median(x) <= high
        assert high - low < 3


def test_median_takes_numpy_pandas_and_polars_and_releases_an_estimate() -> None:
    x = np.random.default_rng(2).normal(3, 1, 5_000)
    releases = [
        median(data, epsilon=1.0, bounds=(-4, 10), rng=SeededRng(3))
        for data in (x, pd.Series(x), pl.Series(x))
    ]
    triples = set()
    for r in releases:
        assert r.value is not None
        assert r.ci_low is not None
        assert r.ci_high is not None
        triples.add((float(r.value), float(r.ci_low), float(r.ci_high)))
    assert len(triples) == 1
    ((value, low, high),) = triples
    assert low <= value <= high
    assert abs(value - np.median(x)) < 0.05
    release = releases[0]
    assert release.cost == PureDP(1)
    assert release.covers is Covers.NOISE
    with pytest.raises(ParameterError, match="'bounds'"):
        median(x, epsilon=1.0, bounds=(1, 2, 3))  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="'upper'"):
        median(x, epsilon=1.0, bounds=(2, 1))


def test_bounds_too_narrow_for_float_edges_keep_one_level() -> None:
    # [1e15, 1e15 + 1]: 32 first-level bins are 1/32 wide, below the doubles' spacing (0.125)
    # there, so a second level's window would collapse (two levels raised after the charge).
    plan = RefinedQuantile.plan(0.5, 1.0, 1e15, 1e15 + 1, alpha=0.05)
    assert len(plan.levels) == 1
    value, low, high = plan.run(lambda bins: bins.counts(np.full(100, 1e15 + 0.5)), SeededRng(1))
    assert low is not None
    assert high is not None
    assert 1e15 <= low <= value <= high <= 1e15 + 1


def test_small_epsilon_spends_all_of_it_on_one_fine_level() -> None:
    # A public rule (selection ε, bounds): below ε = 1/2 one level of 65,536 bins gets the whole
    # selection budget (two levels gave the coarse level a fifth of it); the interval's share
    # counts: ε = 0.6 with an interval leaves 0.48 to select.
    assert choose_levels(-4, 4, 0.1) == FINE_ONE_LEVEL
    assert choose_levels(-4, 4, 1.0) == DEFAULT_LEVELS
    # the query layer holds each histogram to 10,000 bins per group: two levels at every ε
    assert choose_levels(-4, 4, 0.1, max_bins=10_000) == DEFAULT_LEVELS
    plan = RefinedQuantile.plan(0.25, 0.6, -4, 4, alpha=0.05)
    assert [level.bins for level in plan.levels] == [65536]
    assert len(RefinedQuantile.plan(0.25, 0.6, -4, 4).levels) == 2


@pytest.mark.parametrize(("p", "epsilon", "bound"), [(0.25, 0.1, 0.003), (0.25, 1.0, 0.00038)])
def test_lognormal_quartile_error(p: float, epsilon: float, bound: float) -> None:
    # n = 10^4 lognormal(0, 1) values in [0, 100], 40 data sets: the mean absolute error of the
    # lower quartile against np.quantile (0.0026 and 0.00029 now). Two levels of 1,024 and 2,048
    # bins gave 0.0033 at ε = 0.1 (a fifth of ε on the coarse level) and 0.00045 at ε = 1 (fine
    # bins of 1.5e-3, wider than the gaps between order statistics there, 1.6e-4); diffprivlib
    # 0.0031 and 0.0004 (the benchmark's 200 data sets).
    gen = np.random.default_rng(7)
    rng = SeededRng(8)
    errors = []
    for _ in range(40):
        x = gen.lognormal(0, 1, 10_000)
        release = dp_quantile(x, p, epsilon, lower=0, upper=100, rng=rng)
        errors.append(abs(release - np.quantile(x, p)))
    assert np.mean(errors) < bound
