"""DP logistic regression (objective perturbation and sample-and-aggregate): statsmodels at
large ε, accuracy, person bounds, degenerate data, refusals, CIs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest
import statsmodels.api as sm  # type: ignore[import-untyped]
from scipy import stats

from dpcurator.core.measures import ApproxDP, PureDP
from dpcurator.errors import ParameterError
from dpcurator.estimators import Covers, logistic_regression
from dpcurator.random import SeededRng
from tests.stat_tools import ALPHA

TRUTH = np.array([-0.5, 1.0, -0.8])
BOUNDS: dict[str, Any] = {"x_lower": -2, "x_upper": 2, "coef_lower": -5, "coef_upper": 5}
SA: dict[str, Any] = {**BOUNDS, "method": "sample_and_aggregate"}


def simulated(gen: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    X = gen.uniform(-2, 2, (n, 2))
    eta = TRUTH[0] + X @ TRUTH[1:]
    return X, (gen.random(n) < 1 / (1 + np.exp(-eta))).astype(float)


@pytest.mark.parametrize("kind", ["numpy", "pandas", "polars"])
def test_large_epsilon_matches_statsmodels_logit(kind: str) -> None:
    X, y = simulated(np.random.default_rng(1), 20_000)
    reference = sm.Logit(y, sm.add_constant(X)).fit(disp=0).params
    frame = {"numpy": X, "pandas": pd.DataFrame(X), "polars": pl.DataFrame(X)}[kind]
    out = logistic_regression(frame, y, epsilon=1e4, blocks=10, rng=SeededRng(1), **SA)
    assert out.value == pytest.approx(reference, abs=0.01)
    assert out.cost == PureDP(10_000)
    assert out.covers is Covers.NOISE_AND_SAMPLING
    perturbed = logistic_regression(frame, y, epsilon=1e4, x_lower=-2, x_upper=2, rng=SeededRng(1))
    assert perturbed.value == pytest.approx(reference, abs=0.002)
    assert perturbed.cost == PureDP(10_000)
    gauss = logistic_regression(
        X, y, epsilon=1e3, delta=1e-6, x_lower=-2, x_upper=2, rng=SeededRng(1)
    )
    assert gauss.value == pytest.approx(reference, abs=0.005)
    assert gauss.cost == ApproxDP(1000, 1e-6)


def test_objective_perturbation_is_more_accurate_than_sample_and_aggregate() -> None:
    """The default route's coefficient RMSE at n = 10^4, ε = 1 is below half of S&A's."""
    gen = np.random.default_rng(6)
    errors: dict[str, list[float]] = {"objective_perturbation": [], "sample_and_aggregate": []}
    for seed in range(10):
        X, y = simulated(gen, 10_000)
        for method, squares in errors.items():
            out = logistic_regression(
                X, y, epsilon=1.0, method=method, rng=SeededRng(seed), **BOUNDS
            )
            assert out.value is not None
            squares.append(float(np.mean((out.value - TRUTH) ** 2)))
    assert np.mean(errors["objective_perturbation"]) < np.mean(errors["sample_and_aggregate"]) / 4


def test_rows_beyond_the_person_bound_are_dropped() -> None:
    """With rows_per_person = 1 a person's repeated rows count once: the release equals the one
    on the de-duplicated rows (same seed), and the bound is public (k = 2 costs more noise)."""
    X, y = simulated(np.random.default_rng(7), 2_000)
    person = np.repeat(np.arange(1_000), 2)
    kept = np.arange(0, 2_000, 2)
    base = logistic_regression(
        X[kept], y[kept], epsilon=1.0, x_lower=-2, x_upper=2, rng=SeededRng(8)
    )
    bounded = logistic_regression(
        X, y, epsilon=1.0, x_lower=-2, x_upper=2, person=person, rng=SeededRng(8)
    )
    assert base.value is not None
    np.testing.assert_array_equal(bounded.value, base.value)


def test_default_blocks_are_bias_corrected() -> None:
    """Blocks of ~50 rows: the plain block MLE is biased by ~8%; the release is within 3%."""
    X, y = simulated(np.random.default_rng(2), 20_000)
    reference = sm.Logit(y, sm.add_constant(X)).fit(disp=0).params
    out = logistic_regression(X, y, epsilon=1e5, rng=SeededRng(2), **SA)
    assert out.value == pytest.approx(reference, rel=0.03, abs=0.01)


def test_degenerate_data_gives_a_finite_release() -> None:
    rng = SeededRng(3)
    separable = np.linspace(-1, 1, 400)[:, None]
    for X, y in [
        (separable, (separable[:, 0] > 0).astype(float)),  # perfect separation
        (np.ones((400, 1)), np.zeros(400)),  # constant feature, one class
        (np.full((5, 1), np.nan), np.array([np.nan, 1, 0, 1, 7.0])),  # fewer rows than blocks
    ]:
        for route in ({"blocks": 20, **SA}, {**BOUNDS}, {"x_lower": -2, "x_upper": 2}):
            out = logistic_regression(X, y, epsilon=1.0, rng=rng, **route)
            assert out.value is not None
            assert out.ci_low is not None
            assert out.ci_high is not None
            assert np.all(np.isfinite(out.value))
            assert np.all(np.isfinite(out.ci_low))
            assert np.all(np.isfinite(out.ci_high))


def test_parameters_are_checked_before_any_release() -> None:
    X, y = np.zeros((4, 2)), np.zeros(4)
    with pytest.raises(ParameterError, match="coef_upper"):
        logistic_regression(X, y, epsilon=1, x_lower=0, x_upper=1, coef_lower=-1, coef_upper=[1, 2])
    with pytest.raises(ParameterError, match=r"x_upper.*logistic_regression"):
        logistic_regression(X, y, epsilon=1, x_lower=1, x_upper=0, coef_lower=-1, coef_upper=1)
    with pytest.raises(ParameterError, match="clipping_share"):
        logistic_regression(X, y, epsilon=1, clipping_share=0.1, person=[1, 1, 2, 2], **BOUNDS)
    with pytest.raises(ParameterError, match="method"):
        logistic_regression(X, y, epsilon=1, method="newton", **BOUNDS)
    with pytest.raises(ParameterError, match="blocks"):
        logistic_regression(X, y, epsilon=1, blocks=4, **BOUNDS)
    with pytest.raises(ParameterError, match="delta"):
        logistic_regression(X, y, epsilon=1, delta=1e-6, **SA)
    with pytest.raises(ParameterError, match=r"coef_upper.*sample_and_aggregate"):
        logistic_regression(X, y, epsilon=1, x_lower=0, x_upper=1, method="sample_and_aggregate")
    with pytest.raises(ParameterError, match="rows_per_person"):
        logistic_regression(X, y, epsilon=1, rows_per_person=0, **BOUNDS)


def coverage(
    n: int, epsilon: float, blocks: int | None, shrinks: tuple[float, ...], reps: int
) -> list[int]:
    """For each factor in ``shrinks``: how many of ``reps`` seeded fits' intervals for the first
    slope, scaled about the estimate by that factor, hold the true slope (one fit per data set,
    every factor scored on it)."""
    gen, rng = np.random.default_rng(4), SeededRng(5)
    hits = [0] * len(shrinks)
    for _ in range(reps):
        X, y = simulated(gen, n)
        out = logistic_regression(X, y, epsilon=epsilon, blocks=blocks, rng=rng, **SA)
        assert out.value is not None
        assert out.ci_low is not None
        assert out.ci_high is not None
        centre = float(out.value[1])
        for i, shrink in enumerate(shrinks):
            low = centre - (centre - float(out.ci_low[1])) * shrink
            high = centre + (float(out.ci_high[1]) - centre) * shrink
            hits[i] += low <= TRUTH[1] <= high
    return hits


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize(
    ("epsilon", "blocks"),
    [(1.0, None), (1e3, 100)],  # noise dominates, then sampling dominates
)
def test_bootstrap_ci_covers_the_true_coefficient(epsilon: float, blocks: int | None) -> None:
    """Noise + sampling coverage >= 0.95 - 0.05 (binomial test at ALPHA); 4x narrower is caught
    (the same 100 fits, their intervals narrowed)."""
    reps = 100
    hits, narrow = coverage(20_000, epsilon, blocks, (1.0, 0.25), reps)
    assert stats.binomtest(hits, reps, 0.90, alternative="less").pvalue > ALPHA
    assert stats.binomtest(narrow, reps, 0.90, alternative="less").pvalue < ALPHA
