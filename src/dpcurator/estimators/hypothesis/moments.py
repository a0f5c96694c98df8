"""Noisy moments of bounded values: the sufficient statistics of the t-tests and ANOVA.

For each of k groups of values clamped to public [L, U] (NaN -> the midpoint c; half-width h),
with u = x − c in [−h, h], the release is, per group,

* ñ = n + Z₁ (a count; per row 1),
* S̃ = Σu + Z₂ (per row |u| <= h),
* R̃ = Σ(u² − h²/2) + Z₃ (per row |u² − h²/2| <= h²/2: centring halves the sensitivity),

each vector with discrete Laplace noise at a public share of ε and L1 sensitivity ``count_l1(k)`` ×
the per-row bound (or discrete Gaussian noise at a share of ρ, :mod:`.core`), so the release is ε-DP
(ρ-zCDP) by composition. Means, variances and the noise variance of each mean are post-processing.

The null simulator draws each group's (n, Σu, Σu²) from the normal model at public-plus-released
parameters (S ~ N(nμ, nσ²), the within-group sum of squares σ²·χ²(n − 1), both clipped to what
bounded data can reach) and adds fresh noise of the same public law: the parametric bootstrap of
Ferrando, Wang & Sheldon (2022). The simulated statistics see the same clamping as the observed
ones; H0 is about the mean of the clamped values (bounds from public metadata: when the data lie
inside them clamping changes nothing; Wang, Chang & Awan 2025 treat the bias when they do not).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpcurator.estimators.hypothesis.core import (
    FloatArray,
    IntArray,
    Noise,
    Setup,
    as_tuple,
    chi_square_sample,
    noise_draws,
    normals,
    scale_of,
)
from dpcurator.estimators.release import noisy

#: Shares of ε for (counts, sums, centred squares): the sums carry the signal.
WEIGHTS = (Fraction(1, 10), Fraction(7, 10), Fraction(2, 10))

#: Variances are floored at this share of h² (a release whose variance estimate is 0 or less).
VARIANCE_FLOOR = 1e-9


@dataclass(frozen=True)
class Moments:
    """Noisy (ñ, S̃, R̃) of k groups (arrays (..., k): a leading axis holds simulations)."""

    counts: FloatArray
    sums: FloatArray
    squares: FloatArray
    centre: float
    half: float
    noise: tuple[Noise, Noise, Noise]

    def summary(self) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """(n, mean, variance, Var of the mean) per group, centred units: the mean's variance
        adds the noise of S̃ and of ñ (first order: Var(Z₂)/n² + mean²·Var(Z₁)/n²)."""
        h = self.half
        n = np.maximum(self.counts, 2.0)
        mean = np.clip(self.sums / n, -h, h)
        second = self.squares / n + h * h / 2
        var = np.clip(second - mean**2, VARIANCE_FLOOR * h * h, h * h)
        count_var, sum_var, _ = (noise.variance for noise in self.noise)
        mean_var = var / n + (sum_var + mean**2 * count_var) / n**2
        return n, mean, var, mean_var

    def released(self) -> dict[str, tuple[float, ...]]:
        """The noisy statistics by name, and the derived means and variances in data units."""
        _, mean, var, _ = self.summary()
        return {
            "n": as_tuple(self.counts),
            f"sum of (x - {self.centre:g})": as_tuple(self.sums),
            f"sum of ((x - {self.centre:g})^2 - {self.half**2 / 2:g})": as_tuple(self.squares),
            "mean": as_tuple(mean + self.centre),
            "variance": as_tuple(var),
        }

    def noise_scales(self) -> dict[str, float]:
        names = (
            "n",
            f"sum of (x - {self.centre:g})",
            f"sum of ((x - {self.centre:g})^2 - {self.half**2 / 2:g})",
        )
        return {name: noise.scale for name, noise in zip(names, self.noise, strict=True)}


def release_moments(plan: Setup, groups: list[FloatArray], lower: float, upper: float) -> Moments:
    """Release (ñ, S̃, R̃) of ``groups`` (values already clamped to [lower, upper])."""
    centre, half = (lower + upper) / 2, (upper - lower) / 2
    units = [g - centre for g in groups]
    counts = np.array([u.size for u in units], np.int64)
    sums = np.array([float(u.sum()) for u in units])
    squares = np.array([float((u * u - half * half / 2).sum()) for u in units])
    return noisy_moments(plan, (counts, sums, squares), centre, half)


def noisy_moments(
    plan: Setup, exact: tuple[IntArray, FloatArray, FloatArray], centre: float, half: float
) -> Moments:
    """Release exact per-group (n, Σu, Σ(u² − h²/2)) of values u = x − ``centre`` in
    [−``half``, ``half``] (what an engine computes for a query layer; module docstring)."""
    counts, sums, squares = exact
    k = counts.size
    count_mech = plan.counts(WEIGHTS[0], k)
    sum_mech = plan.sums(WEIGHTS[1], k, half)
    square_mech = plan.sums(WEIGHTS[2], k, half * half / 2)
    noisy_counts = count_mech.release_integers(counts, plan.rng).astype(np.float64)
    noisy_sums = noisy(sum_mech, scale_of(sum_mech), sums, plan.rng)
    noisy_squares = noisy(square_mech, scale_of(square_mech), squares, plan.rng)
    noise = (
        Noise.of(count_mech, floats=False),
        Noise.of(sum_mech, floats=True),
        Noise.of(square_mech, floats=True),
    )
    return Moments(noisy_counts, noisy_sums, noisy_squares, centre, half, noise)


def simulate_moments(
    observed: Moments, n: FloatArray, mean: FloatArray, var: FloatArray, plan: Setup
) -> Moments:
    """``plan.simulations`` noisy releases of k groups drawn under the normal model with
    (integer) sizes ``n``, centred means ``mean`` and variances ``var`` (module docstring)."""
    draws, k, h = plan.simulations, n.size, observed.half
    rng = plan.rng
    sums = n * mean + np.sqrt(n * var) * normals(rng, draws * k).reshape(draws, k)
    sums = np.clip(sums, -n * h, n * h)
    within = var * chi_square_sample(rng, np.maximum(n - 1, 1), draws)
    squares = np.clip(within + sums**2 / n, sums**2 / n, n * h * h)
    centred = squares - n * h * h / 2
    count_noise, sum_noise, square_noise = observed.noise
    return Moments(
        n + noise_draws(rng, count_noise, (draws, k)),
        sums + noise_draws(rng, sum_noise, (draws, k)),
        centred + noise_draws(rng, square_noise, (draws, k)),
        observed.centre,
        h,
        observed.noise,
    )


def sizes(counts: FloatArray) -> FloatArray:
    """The group sizes the null simulates: the noisy counts rounded, at least 2."""
    return np.maximum(np.rint(counts), 2.0)


__all__ = [
    "VARIANCE_FLOOR",
    "WEIGHTS",
    "Moments",
    "noisy_moments",
    "release_moments",
    "simulate_moments",
]
