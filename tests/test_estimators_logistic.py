"""DP logistic regression (sample-and-aggregate): statsmodels at large ε, degenerate data, CIs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest
import statsmodels.api as sm  # type: ignore[import-untyped]
from scipy import stats

from dpcurator.core.measures import PureDP
from dpcurator.errors import ParameterError
from dpcurator.estimators import Covers, logistic_regression
from dpcurator.random import SeededRng
from tests.stat_tools import ALPHA

TRUTH = np.array([-0.5, 1.0, -0.8])
BOUNDS: dict[str, Any] = {"x_lower": -2, "x_upper": 2, "coef_lower": -5, "coef_upper": 5}


def simulated(gen: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    X = gen.uniform(-2, 2, (n, 2))
    eta = TRUTH[0] + X @ TRUTH[1:]
    return X, (gen.random(n) < 1 / (1 + np.exp(-eta))).astype(float)


@pytest.mark.parametrize("kind", ["numpy", "pandas", "polars"])
def test_large_epsilon_matches_statsmodels_logit(kind: str) -> None:
    X, y = simulated(np.random.default_rng(1), 20_000)
    reference = sm.Logit(y, sm.add_constant(X)).fit(disp=0).params
    frame = {"numpy": X, "pandas": pd.DataFrame(X), "polars": pl.DataFrame(X)}[kind]
    out = logistic_regression(frame, y, epsilon=1e4, blocks=10, rng=SeededRng(1), **BOUNDS)
    assert out.value == pytest.approx(reference, abs=0.01)
    assert out.cost == PureDP(10_000)
    assert out.covers is Covers.NOISE_AND_SAMPLING


def test_default_blocks_are_bias_corrected() -> None:
    """Blocks of ~50 rows: the plain block MLE is biased by ~8%; the release is within 3%."""
    X, y = simulated(np.random.default_rng(2), 20_000)
    reference = sm.Logit(y, sm.add_constant(X)).fit(disp=0).params
    out = logistic_regression(X, y, epsilon=1e5, rng=SeededRng(2), **BOUNDS)
    assert out.value == pytest.approx(reference, rel=0.03, abs=0.01)


def test_degenerate_data_gives_a_finite_release() -> None:
    rng = SeededRng(3)
    separable = np.linspace(-1, 1, 400)[:, None]
    for X, y in [
        (separable, (separable[:, 0] > 0).astype(float)),  # perfect separation
        (np.ones((400, 1)), np.zeros(400)),  # constant feature, one class
        (np.full((5, 1), np.nan), np.array([np.nan, 1, 0, 1, 7.0])),  # fewer rows than blocks
    ]:
        out = logistic_regression(X, y, epsilon=1.0, blocks=20, rng=rng, **BOUNDS)
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


def coverage(n: int, epsilon: float, blocks: int | None, shrink: float, reps: int) -> int:
    gen, rng = np.random.default_rng(4), SeededRng(5)
    hits = 0
    for _ in range(reps):
        X, y = simulated(gen, n)
        out = logistic_regression(X, y, epsilon=epsilon, blocks=blocks, rng=rng, **BOUNDS)
        assert out.value is not None
        assert out.ci_low is not None
        assert out.ci_high is not None
        centre = float(out.value[1])
        low = centre - (centre - float(out.ci_low[1])) * shrink
        high = centre + (float(out.ci_high[1]) - centre) * shrink
        hits += low <= TRUTH[1] <= high
    return hits


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("epsilon", "blocks"),
    [(1.0, None), (1e3, 100)],  # noise dominates, then sampling dominates
)
def test_bootstrap_ci_covers_the_true_coefficient(epsilon: float, blocks: int | None) -> None:
    """Noise + sampling coverage >= 0.95 - 0.05 (binomial test at ALPHA); 4x narrower is caught."""
    reps = 100
    hits = coverage(20_000, epsilon, blocks, 1.0, reps)
    assert stats.binomtest(hits, reps, 0.90, alternative="less").pvalue > ALPHA
    narrow = coverage(20_000, epsilon, blocks, 0.25, reps)
    assert stats.binomtest(narrow, reps, 0.90, alternative="less").pvalue < ALPHA
