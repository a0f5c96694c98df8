"""Calibration: noise scales from privacy parameters and privacy parameters from noise scales.

Laplace (Dwork, McSherry, Nissim & Smith 2006): noise of scale b on a statistic of L1
sensitivity Δ gives ε = Δ/b pure DP. The same holds for the discrete Laplace on any grid that
contains the statistic's values (Ghosh, Roughgarden & Sundararajan 2009; Canonne, Kamath &
Steinke 2020, "CKS20").

Gaussian: noise N(0, σ²) on a statistic of L2 sensitivity Δ gives ρ = Δ²/(2σ²)-zCDP (Bun &
Steinke 2016, Proposition 1.6); the discrete Gaussian N_Z(0, σ²) gives the same ρ (CKS20,
Theorem 4), so every zCDP or Rényi statement here holds for both.

For (ε, δ) the exact curve of the continuous Gaussian is the analytic Gaussian mechanism of
Balle & Wang 2018, Theorem 8:

    δ(ε) = Φ(Δ/(2σ) - εσ/Δ) - e^ε Φ(-Δ/(2σ) - εσ/Δ).

Caveat for the discrete Gaussian: its exact curve (CKS20, Theorem 7) depends on the grid and is
not proved to lie below the continuous one; CKS20 (Section 4 and Figure 2) find the two curves
numerically indistinguishable once σ is a few grid steps, which is the regime of our samplers.
A release that needs a proven (ε, δ) for the discrete Gaussian should use
:func:`gaussian_rho` and convert with :meth:`dpcurator.core.measures.ZCDP.to_approx`.

All results are exact Fractions where the formula is rational, and otherwise rounded in the safe
direction: ε and δ up, noise scales up (never down).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
from scipy.special import log_ndtr

from dpcurator._validation import check_int, check_nonnegative, check_positive, check_probability
from dpcurator.core.numbers import float_down, float_up, to_fraction, widen_up
from dpcurator.errors import ParameterError

#: Model of the error of one ``scipy.special.log_ndtr`` evaluation: at most this many ulps of
#: max(1, |result|). Tested against mpmath at 50 digits in tests/test_accounting_calibration.py.
_LOG_NDTR_ERROR = 2.0**-40

#: Bisections stop once the bracket's relative width is below this.
_RELATIVE_TOLERANCE = 2.0**-44


def _bisect(
    holds: Callable[[float], bool],
    lo: float,
    hi: float,
    *,
    relative: float = _RELATIVE_TOLERANCE,
    floor: float = 0.0,
) -> float:
    """Narrow [lo, hi] (``holds`` false at lo, true at hi, monotone) and return its upper end.

    Stops when hi - lo <= ``relative`` * max(hi, ``floor``).
    """
    while hi - lo > relative * max(hi, floor):
        mid = (lo + hi) / 2
        if holds(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _positive(owner: str, name: str, value: object) -> Fraction:
    check_positive(owner, name, value)
    return to_fraction(value, owner=owner, name=name)


def _open_probability(owner: str, name: str, value: object) -> Fraction:
    check_probability(owner, name, value, open_low=True, open_high=True)
    return to_fraction(value, owner=owner, name=name)


def laplace_scale(epsilon: object, l1_sensitivity: object) -> Fraction:
    """The Laplace scale b = Δ/ε that makes a release of L1 sensitivity Δ ε-DP (exact).

    Dwork, McSherry, Nissim & Smith 2006, Proposition 1.
    """
    eps = _positive("laplace_scale", "epsilon", epsilon)
    delta_1 = _positive("laplace_scale", "l1_sensitivity", l1_sensitivity)
    return delta_1 / eps


def laplace_epsilon(scale: object, l1_sensitivity: object) -> Fraction:
    """The ε = Δ/b of Laplace noise of scale b on a release of L1 sensitivity Δ (exact).

    Dwork, McSherry, Nissim & Smith 2006, Proposition 1.
    """
    b = _positive("laplace_epsilon", "scale", scale)
    delta_1 = _positive("laplace_epsilon", "l1_sensitivity", l1_sensitivity)
    return delta_1 / b


def gaussian_rho(sigma: object, l2_sensitivity: object) -> Fraction:
    """The ρ = Δ²/(2σ²) of (discrete) Gaussian noise of parameter σ, exact.

    Bun & Steinke 2016, Proposition 1.6 (continuous); CKS20, Theorem 4 (discrete).
    """
    s = _positive("gaussian_rho", "sigma", sigma)
    delta_2 = _positive("gaussian_rho", "l2_sensitivity", l2_sensitivity)
    return delta_2**2 / (2 * s**2)


def gaussian_sigma_for_rho(rho: object, l2_sensitivity: object) -> Fraction:
    """The smallest float σ >= Δ/sqrt(2ρ), as a Fraction: noise that gives ρ-zCDP or better.

    The square root is verified exactly (σ² >= Δ²/(2ρ) in Fractions), so rounding only adds noise.
    Bun & Steinke 2016, Proposition 1.6; CKS20, Theorem 4.
    """
    delta_2 = _positive("gaussian_sigma_for_rho", "l2_sensitivity", l2_sensitivity)
    return gaussian_sigma_for_rho_squared(rho, delta_2**2)


def gaussian_sigma_for_rho_squared(rho: object, l2_squared: object) -> Fraction:
    """:func:`gaussian_sigma_for_rho` from the SQUARED L2 sensitivity Δ², which stays exact when
    Δ is irrational (e.g. sqrt(g)·r·b for a statistic over g groups per person)."""
    r = _positive("gaussian_sigma_for_rho", "rho", rho)
    squared = _positive("gaussian_sigma_for_rho", "l2_squared", l2_squared)
    target = squared / (2 * r)
    sigma = math.sqrt(float_up(target))
    while Fraction(sigma) ** 2 < target:
        sigma = math.nextafter(sigma, math.inf)
    return Fraction(sigma)


def _delta_upper(sigma: float, sensitivity: float, epsilon: float) -> float:
    """An upper bound on the analytic Gaussian δ(ε) (Balle & Wang 2018, Theorem 8).

    Computed in log space, δ = Φ(a)·(1 - exp(ε + log Φ(b) - log Φ(a))), which has no cancellation
    between the two terms, then widened by the modelled error of log_ndtr (:data:`_LOG_NDTR_ERROR`)
    in the direction that increases δ.
    """
    ratio = sigma / sensitivity
    a = 1 / (2 * ratio) - epsilon * ratio
    b = -1 / (2 * ratio) - epsilon * ratio
    log_a = float(log_ndtr(a))
    log_b = float(log_ndtr(b))
    slack = _LOG_NDTR_ERROR * (2 + abs(log_a) + abs(log_b) + epsilon)
    exponent = min(epsilon + log_b - log_a - slack, 0.0)
    return widen_up(math.exp(log_a + slack) * -math.expm1(exponent), 8)


def gaussian_delta(sigma: object, l2_sensitivity: object, epsilon: object) -> float:
    """δ at ε of Gaussian noise N(0, σ²) on a release of L2 sensitivity Δ, rounded up.

    The exact (ε, δ) curve of the continuous Gaussian (Balle & Wang 2018, Theorem 8); see the
    module docstring for the discrete Gaussian caveat. ``epsilon`` may be 0.
    """
    owner = "gaussian_delta"
    s = float_down(_positive(owner, "sigma", sigma))
    sens = float_up(_positive(owner, "l2_sensitivity", l2_sensitivity))
    check_nonnegative(owner, "epsilon", epsilon)
    eps = float_down(to_fraction(epsilon, owner=owner, name="epsilon"))
    return min(_delta_upper(s, sens, eps), 1.0)


def gaussian_sigma_for_approx(epsilon: object, delta: object, l2_sensitivity: object) -> Fraction:
    """The smallest σ (up to a relative 2^-44, rounded up) with gaussian_delta(σ, Δ, ε) <= δ.

    Bisection on the analytic Gaussian curve (Balle & Wang 2018, Theorem 8), which decreases in σ.
    The returned σ always satisfies the bound; a σ smaller by a relative 1e-9 does not.
    """
    owner = "gaussian_sigma_for_approx"
    eps = float_down(_positive(owner, "epsilon", epsilon))
    target = float_down(_open_probability(owner, "delta", delta))
    sens = float_up(_positive(owner, "l2_sensitivity", l2_sensitivity))
    hi = sens * math.sqrt(2 * math.log(1.25 / target)) / min(eps, 1.0)
    while _delta_upper(hi, sens, eps) > target:
        hi *= 2
    lo = hi / 2
    while _delta_upper(lo, sens, eps) <= target:
        hi, lo = lo, lo / 2
    return Fraction(_bisect(lambda sigma: _delta_upper(sigma, sens, eps) <= target, lo, hi))


def gaussian_epsilon(sigma: object, l2_sensitivity: object, delta: object) -> Fraction:
    """The smallest ε (up to an absolute/relative 2^-44, rounded up) with gaussian_delta <= δ.

    Bisection on the analytic Gaussian curve (Balle & Wang 2018, Theorem 8), decreasing in ε.
    Returns 0 when δ already holds at ε = 0.
    """
    owner = "gaussian_epsilon"
    s = float_down(_positive(owner, "sigma", sigma))
    sens = float_up(_positive(owner, "l2_sensitivity", l2_sensitivity))
    target = float_down(_open_probability(owner, "delta", delta))
    if _delta_upper(s, sens, 0.0) <= target:
        return Fraction(0)
    lo, hi = 0.0, 1.0
    while _delta_upper(s, sens, hi) > target:
        lo, hi = hi, hi * 2
    return Fraction(_bisect(lambda e: _delta_upper(s, sens, e) <= target, lo, hi, floor=1.0))


#: Above this σ the exact discrete-Gaussian tails would need too many terms; callers fall back to
#: the zCDP route, which is proven in any regime.
DISCRETE_GAUSSIAN_EXACT_MAX_SIGMA = 10_000.0

#: Relative error allowed for the float tail sums of the discrete Gaussian (pairwise summation of
#: at most ~4e5 positive terms errs far less); δ is widened by this share of the terms it subtracts.
_TAIL_SUM_RELATIVE_ERROR = 1e-9


def _discrete_gaussian_tail(sigma: float, t: float) -> float:
    """P[Y > t] for Y ~ N_Z(0, σ²), summed directly (unnormalised terms exp(-y²/(2σ²)))."""
    reach = math.ceil(40 * sigma) + 10
    support = np.arange(0, reach, dtype=np.float64)
    weights = np.exp(-(support**2) / (2 * sigma**2))
    normaliser = weights[0] + 2 * weights[1:].sum()
    start = math.floor(t) + 1
    if start >= reach:
        return 0.0
    # For start <= 0, symmetry gives P[Y >= start] = 1 - P[Y >= 1 - start].
    tail = weights[start:].sum() if start >= 0 else normaliser - weights[1 - start :].sum()
    return float(tail / normaliser)


def discrete_gaussian_delta(sigma: object, sensitivity: object, epsilon: object) -> float:
    """The exact δ(ε) of ONE integer release with discrete Gaussian noise, rounded up.

    Canonne, Kamath & Steinke 2020, Theorem 7: for integer sensitivity Δ,
    δ = P[Y > εσ²/Δ - Δ/2] - e^ε P[Y > εσ²/Δ + Δ/2] with Y ~ N_Z(0, σ²). The tails are summed
    in floats and the result is widened by their modelled rounding error. Scalar releases only:
    vectors go through zCDP. σ must not exceed :data:`DISCRETE_GAUSSIAN_EXACT_MAX_SIGMA`.
    """
    owner = "discrete_gaussian_delta"
    s = float(_positive(owner, "sigma", sigma))
    if s > DISCRETE_GAUSSIAN_EXACT_MAX_SIGMA:
        raise ParameterError(
            f"The 'sigma' parameter of {owner} must be <= {DISCRETE_GAUSSIAN_EXACT_MAX_SIGMA:g} "
            f"for exact tail sums. Got {s!r}. Use gaussian_rho with ZCDP.to_approx instead."
        )
    delta_units = check_int(owner, "sensitivity", sensitivity, minimum=1)
    check_nonnegative(owner, "epsilon", epsilon)
    eps = float(to_fraction(epsilon, owner=owner, name="epsilon"))
    centre = eps * s * s / delta_units
    first = _discrete_gaussian_tail(s, centre - delta_units / 2)
    second = math.exp(eps) * _discrete_gaussian_tail(s, centre + delta_units / 2)
    slack = _TAIL_SUM_RELATIVE_ERROR * (first + second) + 1e-300
    return min(1.0, widen_up(max(first - second, 0.0) + slack))


def discrete_gaussian_sigma_for_approx(
    epsilon: object, delta: object, sensitivity: object
) -> Fraction:
    """The smallest σ (relative precision 2^-30, rounded up) whose exact discrete δ(ε) is <= δ.

    Bisection on :func:`discrete_gaussian_delta`, which decreases as σ grows. Returns a σ above
    :data:`DISCRETE_GAUSSIAN_EXACT_MAX_SIGMA` as an error: use the zCDP route there.
    """
    owner = "discrete_gaussian_sigma_for_approx"
    eps = float(_positive(owner, "epsilon", epsilon))
    target = float_down(_open_probability(owner, "delta", delta))
    delta_units = check_int(owner, "sensitivity", sensitivity, minimum=1)
    classic = delta_units * math.sqrt(2 * math.log(1.25 / target)) / min(eps, 1.0)
    hi = min(max(1.0, classic), DISCRETE_GAUSSIAN_EXACT_MAX_SIGMA)
    if discrete_gaussian_delta(hi, delta_units, eps) > target:
        raise ParameterError(
            f"The parameters of {owner} need σ above the exact-sum range. Got epsilon={eps!r}, "
            f"delta={float(target)!r}. Use Gaussian.for_rho or the zCDP route."
        )
    lo = hi / 2
    while lo > 1e-3 and discrete_gaussian_delta(lo, delta_units, eps) <= target:
        hi, lo = lo, lo / 2
    return Fraction(
        _bisect(
            lambda sigma: discrete_gaussian_delta(sigma, delta_units, eps) <= target,
            lo,
            hi,
            relative=2.0**-30,
        )
    )
