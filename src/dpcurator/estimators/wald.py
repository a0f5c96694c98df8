"""Wald tests of H0: θ_j = 0 for the coefficients of a DP model fit, valid under the noise.

A fit whose (1-α) intervals cover the privacy noise *and* the sampling
(:attr:`~dpcurator.estimators.release.Covers.NOISE_AND_SAMPLING`: linear regression's parametric
bootstrap of the whole release, logistic regression's intervals)
already carries, per coefficient, a standard error that includes the noise: the interval's
normal-equivalent half-width, se_j = (high_j − low_j) / (2 z_{1−α/2}). The Wald statistic is
z_j = c_j / se_j with c_j the interval's centre (the bias-corrected estimate of a bootstrap
interval), and p_j = 2 Φ(−|z_j|) (Wald 1943; with DP standard errors, Ferrando, Wang & Sheldon
2022, "Parametric bootstrap for differentially private confidence intervals"). So p_j <= α
exactly when the released (1−α) interval excludes 0, and at any level the test inherits the
interval's coverage (tests/test_wald.py measures its type-I error under the noise). Computing it
is post-processing of the release: free, and safe to publish.

No test is reported (NaN) where the public coefficient box clamped a coefficient's value or
interval (``at_bound``: the clamped width would understate the standard error), nor where the
estimator marked its release not ``testable`` (linear regression: a released design diagonal not
significantly above its noise, where the bootstrap interval is too narrow), and none at all for
NR or for intervals that cover the noise only (they say nothing about the population).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

from dpcurator.estimators.release import Covers, Estimate, FloatArray


@dataclass(frozen=True)
class WaldTest:
    """Per coefficient: the Wald statistic ``z`` and the two-sided ``p_value`` of H0: θ_j = 0
    (NaN where no test is reported; module docstring)."""

    z: FloatArray
    p_value: FloatArray


def wald_test(estimate: Estimate) -> WaldTest | None:
    """The Wald tests of a fit's coefficients from its released intervals (module docstring), or
    None when it has no population interval (NR, no interval, noise-only coverage)."""
    low, high, value = estimate.ci_low, estimate.ci_high, estimate.value
    if value is None or low is None or high is None:
        return None
    if estimate.covers is not Covers.NOISE_AND_SAMPLING:
        return None
    lows, highs = np.asarray(low, np.float64), np.asarray(high, np.float64)
    se = (highs - lows) / (2 * float(ndtri(1 - estimate.alpha / 2)))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, (lows + highs) / 2 / se, np.nan)
    if not estimate.testable:
        z = np.full_like(z, np.nan)
    if estimate.at_bound is not None:
        z = np.where(np.asarray(estimate.at_bound, bool), np.nan, z)
    return WaldTest(np.asarray(z, np.float64), np.asarray(2 * ndtr(-np.abs(z)), np.float64))


__all__ = ["WaldTest", "wald_test"]
