"""Gaussian partition selection: release only groups whose discrete-Gaussian noisy count clears a
threshold (the zCDP analogue of :mod:`dpcurator.mechanisms.threshold`).

Each candidate group (a group present in the data) gets its count c_G of distinct persons (or
any count to which one person adds at most ``per_group`` to each of at most g groups) plus
independent discrete Gaussian noise Z ~ N_Z(0, σ²), and is released when c_G + Z >= τ.

**Theorem** (Gaussian thresholding; the analysis of Wilson, Zhang, Lam, Desfontaines,
Simmons-Marengo & Gipson 2020, "Differentially private SQL with bounded user contribution", §4,
with Gaussian noise as in Wilkins, Kifer, Zhang & Karrer 2024, "Exact privacy analysis of the
Gaussian sparse histogram mechanism", and its discrete form by Canonne, Kamath & Steinke 2020).
Let D' be D plus one person. Groups present in both tables see a change of at most ``per_group``
in each of at most g coordinates, so their noisy counts are the Gaussian mechanism of L2
sensitivity ``per_group``·sqrt(g): ρ = g·per_group²/(2σ²)-zCDP (CKS20 Theorem 4), and the
thresholding is post-processing. The at most g groups present only in D' have count <= per_group,
and each is released with probability q <= P[Z >= τ - per_group]; they are never released on D.
Hence, with p = 1 - (1 - q)^g <= g·q <= δ:

* conditioned on none of them being released (an event of probability >= 1 - δ on D', and the
  whole space on D) the outputs are ρ-close in every Rényi divergence: the selection is
  δ-approximately ρ-zCDP (Bun & Steinke 2016, Definition 8.1);
* the release indicators of those groups are (0, p)-DP by themselves, so by basic composition with
  the Gaussian part's (ε', δ') conversion the selection is (ε', δ' + δ)-DP.

The threshold τ = per_group + t takes the smallest integer t >= 1 with g·P[Z >= t] <= δ, using a
rigorous upper bound on the discrete Gaussian's tail: P[Z >= t] <= min(exp(-t²/(2σ²)),
Φ̄(t/σ) + φ(t/σ)/σ). The first is its sub-Gaussian bound (CKS20, Corollary 9); the second bounds
the numerator Σ_{z>=t} exp(-z²/2σ²) by its first term plus the integral from t, and the
normaliser Σ_z exp(-z²/2σ²) = sqrt(2π)σ·Σ_k exp(-2π²σ²k²) >= sqrt(2π)σ from below (Poisson
summation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt
from scipy.special import log_ndtr

from dpcurator._validation import check_int, check_probability
from dpcurator.core.numbers import to_fraction
from dpcurator.mechanisms.gaussian import Gaussian
from dpcurator.random import Rng

#: Slack on the log of the tail bound, so that float rounding never lets a threshold through
#: whose exact bound would exceed the level.
_LOG_SLACK = 1e-9
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@dataclass(frozen=True)
class GaussianPartitionSelection:
    """Discrete Gaussian noise on counts plus a release threshold (module docstring).

    Attributes:
        gaussian: the noise added to each candidate group's count.
        threshold: a group is released when its noisy count is >= this.
        rho: the zCDP cost of the noisy counts of the groups of both tables.
        tail_delta: the probability bound δ of releasing a group only one table has (the
            selection is ``tail_delta``-approximately ``rho``-zCDP).
        epsilon, delta: the (ε, δ) view of the selection, δ including ``tail_delta``
            (ε = 0 and δ = ``tail_delta`` when it is costed in ρ only).
    """

    gaussian: Gaussian
    threshold: int
    rho: Fraction
    tail_delta: Fraction
    epsilon: Fraction
    delta: Fraction

    def select(
        self, counts: npt.ArrayLike, rng: Rng | None = None
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
        """Which groups to release (boolean mask) and their noisy counts."""
        noisy = self.gaussian.release_integers(np.asarray(counts, dtype=np.int64), rng)
        return noisy >= self.threshold, noisy


def gaussian_selection(
    gaussian: Gaussian,
    tail_delta: object,
    max_groups: int,
    *,
    per_group: int = 1,
    epsilon: object = 0,
    conversion_delta: object = 0,
) -> GaussianPartitionSelection:
    """The Gaussian partition selection with noise ``gaussian`` whose tail costs ``tail_delta``.

    ``per_group``: the most one person adds to one group's count; ``max_groups``: the most groups
    a person is in (g). ``epsilon``/``conversion_delta``: the (ε, δ') the Gaussian part was
    calibrated to, for the selection's (ε, δ' + ``tail_delta``) view.
    """
    owner = "gaussian_selection"
    check_probability(owner, "tail_delta", tail_delta, open_low=True, open_high=True)
    g = check_int(owner, "max_groups", max_groups, minimum=1)
    c = check_int(owner, "per_group", per_group, minimum=1)
    tail = to_fraction(tail_delta)
    t = smallest_gaussian_tail(float(gaussian.sigma), float(tail / g))
    rho = Fraction(g * c * c) / (2 * gaussian.sigma**2)
    return GaussianPartitionSelection(
        gaussian,
        c + t,
        rho,
        tail,
        to_fraction(epsilon),
        to_fraction(conversion_delta) + tail,
    )


def tail_bound_log(sigma: float, t: int) -> float:
    """log of the upper bound on P[Z >= t] for Z ~ N_Z(0, σ²), t >= 1 (module docstring)."""
    x = t / sigma
    chernoff = -x * x / 2
    integral = float(np.logaddexp(float(log_ndtr(-x)), chernoff - _LOG_SQRT_2PI - math.log(sigma)))
    return min(chernoff, integral)


def smallest_gaussian_tail(sigma: float, level: float) -> int:
    """The smallest integer t >= 1 whose tail bound P[Z >= t] is <= ``level`` (bisection between
    1 and the sub-Gaussian bound's t, so the work is logarithmic in σ)."""
    target = math.log(level) - _LOG_SLACK
    high = max(1, math.ceil(sigma * math.sqrt(2 * -target)))
    while tail_bound_log(sigma, high) > target:  # float rounding of the closed form only
        high += 1
    low = 0  # invariant: low fails (or is 0), high passes
    while high - low > 1:
        middle = (low + high) // 2
        if tail_bound_log(sigma, middle) <= target:
            high = middle
        else:
            low = middle
    return high
