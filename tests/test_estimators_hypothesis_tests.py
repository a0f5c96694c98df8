"""DP hypothesis tests (the three of the first version, through their names exported by
``dpcurator.estimators``): type-I error under the null (with the noise), power, and the naive test.

Every rate check is a one-sided binomial test at the suite's ALPHA over repeated data sets. The
declared level of the DP tests is LEVEL; their type-I error must not exceed LEVEL + TOLERANCE
(the Monte Carlo null is a parametric bootstrap, so the level holds approximately).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import polars as pl
import pytest
from scipy import stats

from dpcurator.errors import ParameterError
from dpcurator.estimators import (
    HypothesisTestResult,
    difference_of_means_test,
    goodness_of_fit_test,
    independence_test,
)
from dpcurator.random import SeededRng
from tests.stat_tools import ALPHA

LEVEL = 0.05
TOLERANCE = 0.03
REPS = 300
P0 = np.array([0.1, 0.2, 0.3, 0.4])


def rate_at_most(hits: int, reps: int, bound: float) -> bool:
    return bool(stats.binomtest(hits, reps, bound, alternative="greater").pvalue > ALPHA)


def rate_above(hits: int, reps: int, bound: float) -> bool:
    return bool(stats.binomtest(hits, reps, bound, alternative="greater").pvalue < ALPHA)


def gof(gen: np.random.Generator, rng: SeededRng, p: np.ndarray) -> HypothesisTestResult:
    x = gen.choice(4, 500, p=p)
    return goodness_of_fit_test(x, range(4), P0, epsilon=0.1, simulations=199, rng=rng)


def independence(gen: np.random.Generator, rng: SeededRng, shift: float) -> HypothesisTestResult:
    a = gen.choice(3, 400, p=[0.2, 0.3, 0.5])
    b = np.where(gen.random(400) < 0.4 + shift * (a == 2), 1, 0)
    return independence_test(a, b, range(3), range(2), epsilon=0.2, simulations=199, rng=rng)


def means(gen: np.random.Generator, rng: SeededRng, shift: float) -> HypothesisTestResult:
    first, second = gen.normal(5, 2, 1000), gen.normal(5 + shift, 2, 1000)
    return difference_of_means_test(
        first, second, epsilon=0.1, lower=0, upper=10, simulations=199, rng=rng
    )


def naive_gof(result: HypothesisTestResult) -> float:
    """Pearson's chi-square test on the noisy counts, ignoring the noise."""
    counts = np.maximum(np.array(result.released["counts"]), 0.0)
    return float(stats.chisquare(counts, counts.sum() * P0).pvalue)


def naive_independence(result: HypothesisTestResult) -> float:
    table = np.maximum(np.reshape(result.released["table (row-major)"], (3, 2)), 0.5)
    return float(stats.chi2_contingency(table, correction=False).pvalue)


def naive_means(result: HypothesisTestResult) -> float:
    """Welch's test on the released (n, mean, variance), ignoring the noise."""
    (n1, n2), (m1, m2) = result.released["n"], result.released["mean"]
    v1, v2 = result.released["variance"]
    z = (m1 - m2) / np.sqrt(v1 / n1 + v2 / n2)
    return float(2 * stats.norm.sf(abs(z)))


Run = Callable[[np.random.Generator, SeededRng, float], HypothesisTestResult]
CASES: dict[str, tuple[Run, Callable[[HypothesisTestResult], float], float]] = {
    "goodness_of_fit": (
        lambda g, r, alt: gof(g, r, np.array([0.25, 0.25, 0.25, 0.25]) if alt else P0),
        naive_gof, 1.0,
    ),
    "independence": (independence, naive_independence, 0.35),
    "difference_of_means": (means, naive_means, 1.0),
}  # fmt: skip


@pytest.mark.statistical
@pytest.mark.parametrize("name", sorted(CASES))
def test_type_one_error_holds_under_the_noise_and_the_naive_test_is_inflated(name: str) -> None:
    """Under H0: DP rejections <= LEVEL + TOLERANCE, naive (noise-ignoring) rejections above it."""
    run, naive, _ = CASES[name]
    gen, rng = np.random.default_rng(11), SeededRng(11)
    results = [run(gen, rng, 0.0) for _ in range(REPS)]
    assert rate_at_most(sum(r.rejects(LEVEL) for r in results), REPS, LEVEL + TOLERANCE)
    assert rate_above(sum(naive(r) <= LEVEL for r in results), REPS, LEVEL + TOLERANCE)


@pytest.mark.statistical
@pytest.mark.parametrize("name", sorted(CASES))
def test_power_at_the_stated_alternative(name: str) -> None:
    """Power > 0.8 at the alternative of CASES (uniform cells; +0.35 in one row; +1.0 = 0.5 sd)."""
    run, _, alternative = CASES[name]
    gen, rng = np.random.default_rng(12), SeededRng(12)
    rejections = sum(run(gen, rng, alternative).rejects(LEVEL) for _ in range(REPS // 3))
    assert rate_above(rejections, REPS // 3, 0.8)


@pytest.mark.parametrize("kind", ["numpy", "pandas", "polars"])
def test_inputs_and_release(kind: str) -> None:
    values = ["a", "b", "a", "c", "zz"] * 200  # "zz" is outside the categories: in no cell
    column = {"numpy": np.array(values), "pandas": pd.Series(values), "polars": pl.Series(values)}
    out = goodness_of_fit_test(
        column[kind], ["a", "b", "c"], [0.5, 0.25, 0.25], epsilon=1e4, rng=SeededRng(1)
    )
    assert out.released["counts"] == (400, 200, 200)
    assert out.cost.epsilon == 10_000
    assert out.p_value > 0.9  # the counts fit H0 exactly
    assert out.simulations == 999


def test_parameters_are_checked_before_any_release() -> None:
    with pytest.raises(ParameterError, match="probabilities"):
        goodness_of_fit_test([1, 2], [1, 2], [1.0], epsilon=1)
    with pytest.raises(ParameterError, match="row_categories"):
        independence_test([1], [1], [1], [1, 2], epsilon=1)
    with pytest.raises(ParameterError, match="upper"):
        difference_of_means_test([1.0], [2.0], epsilon=1, lower=1, upper=1)
