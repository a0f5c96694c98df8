"""The Gaussian mechanism on exact discrete Gaussian noise.

Privacy guarantee: releasing ``f(x) + Z`` with Z a vector of independent discrete Gaussians,
P[Z = z] ∝ exp(-z² / (2σ²)), for integer-valued f of L2 sensitivity Δ₂ satisfies
ρ-zero-concentrated DP with ρ = Δ₂² / (2σ²), exactly as the continuous Gaussian does (Canonne,
Kamath & Steinke 2020, Theorem 4; zCDP of Bun & Steinke 2016). The (ε, δ) statements here are
derived from that ρ with the conversion of CKS20 (Corollary 13), proven for the discrete Gaussian
in any dimension, or, for a scalar release with integer sensitivity, from the exact discrete
(ε, δ) curve of CKS20 Theorem 7 — the discrete analogue of the analytic Gaussian of Balle & Wang
2018. (The continuous analytic curve is NOT safe for discrete noise at small σ: at σ = 1, Δ = 1,
ε = 1 the discrete δ is 0.141 against 0.127.) Float statistics are rounded
to a public power-of-two grid first (:mod:`dpcurator.mechanisms._grid`); rounding d coordinates
moves an L2 distance by at most sqrt(d) grid steps, which :meth:`Gaussian.rho_for_floats` adds.

Nothing raises on a data value (NaN -> 0, clamping to the public grid range, saturating noise
addition; :mod:`dpcurator.mechanisms._grid`); σ beyond 2^31, the exact sampler's range, is
refused at construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt
from scipy.special import ndtri

from dpcurator._validation import check_int, check_positive, check_probability, fail
from dpcurator.accounting.calibration import (
    DISCRETE_GAUSSIAN_EXACT_MAX_SIGMA,
    discrete_gaussian_delta,
    discrete_gaussian_sigma_for_approx,
    gaussian_rho,
    gaussian_sigma_for_rho,
    gaussian_sigma_for_rho_squared,
)
from dpcurator.accounting.concentrated import largest_rho
from dpcurator.accounting.events import GaussianEvent
from dpcurator.core.measures import ZCDP
from dpcurator.core.numbers import fraction_up, to_fraction
from dpcurator.mechanisms._grid import (
    add_noise,
    from_grid,
    grid_exponent,
    magnitude_text,
    to_grid,
)
from dpcurator.random import Rng, default_rng
from dpcurator.random.samplers.gaussian import MAX_SIGMA, discrete_gaussian

#: Below this σ the CI half-width is found by summing the discrete pmf; above it the discrete and
#: continuous tails agree to within exp(-2π²σ²) relative error (Poisson summation) and the normal
#: quantile plus one integer step is used.
_EXACT_TAIL_MAX_SIGMA = 1000.0
#: At or below this σ, P[Z != 0] < 3·exp(-2048) is below every positive float α (>= 2^-1074 >
#: exp(-745)), so the half-width is 0 (no float arithmetic on σ², which would underflow).
_POINT_MASS_SIGMA = 1 / 64


@dataclass(frozen=True)
class Gaussian:
    """Discrete Gaussian noise with standard-deviation parameter σ.

    >>> from dpcurator.random import SeededRng
    >>> mech = Gaussian.for_rho(rho=0.5, l2_sensitivity=1)
    >>> mech.rho(1) <= 0.5
    True
    >>> mech.release_integers([3], rng=SeededRng(1)).dtype
    dtype('int64')
    """

    sigma: Fraction

    def __init__(self, sigma: object) -> None:
        check_positive("Gaussian", "sigma", sigma)
        exact = to_fraction(sigma, owner="Gaussian", name="sigma")
        if exact > MAX_SIGMA:
            raise fail(
                "Gaussian",
                "sigma",
                "<= 2**31 (the exact sampler's range)",
                magnitude_text(exact),
                "Ask for a larger privacy budget or a smaller sensitivity.",
            )
        object.__setattr__(self, "sigma", exact)

    @classmethod
    def for_rho(cls, rho: object, l2_sensitivity: object) -> Gaussian:
        """The mechanism whose integer releases of Δ₂-sensitive statistics are ρ-zCDP."""
        return cls(gaussian_sigma_for_rho(rho, l2_sensitivity))

    @classmethod
    def for_rho_squared(cls, rho: object, l2_squared: object) -> Gaussian:
        """:meth:`for_rho` from the squared L2 sensitivity Δ₂² (exact when Δ₂ is irrational)."""
        return cls(gaussian_sigma_for_rho_squared(rho, l2_squared))

    @classmethod
    def for_approx(
        cls, epsilon: object, delta: object, l2_sensitivity: object, *, dimension: int = 1
    ) -> Gaussian:
        """The mechanism whose integer releases of Δ₂-sensitive statistics are (ε, δ)-DP.

        A scalar release (``dimension`` 1) with integer sensitivity uses the exact discrete curve
        of CKS20 Theorem 7 (:func:`~dpcurator.accounting.calibration.discrete_gaussian_delta`)
        when the zCDP σ is within its range (the exact σ is never larger).
        Otherwise the largest ρ whose zCDP conversion at δ is within ε is found by bisection, and
        σ = Δ₂ / sqrt(2ρ) rounded up.
        """
        owner = "Gaussian.for_approx"
        eps = to_fraction(check_positive(owner, "epsilon", epsilon))
        check_probability(owner, "delta", delta, open_low=True, open_high=True)
        check_int(owner, "dimension", dimension, minimum=1)
        sens = to_fraction(check_positive(owner, "l2_sensitivity", l2_sensitivity))
        through_zcdp = cls.for_rho(largest_rho(eps, to_fraction(delta)), sens)
        exact_range = through_zcdp.sigma <= DISCRETE_GAUSSIAN_EXACT_MAX_SIGMA
        if dimension == 1 and sens.denominator == 1 and exact_range:
            exact = discrete_gaussian_sigma_for_approx(eps, delta, sens.numerator)
            if exact < through_zcdp.sigma:
                return cls(exact)
        return through_zcdp

    def rho(self, l2_sensitivity: object) -> Fraction:
        """ρ = Δ₂² / (2σ²) for integer-valued statistics (exact)."""
        return gaussian_rho(self.sigma, l2_sensitivity)

    def rho_for_floats(self, l2_sensitivity: object, dimension: int = 1) -> Fraction:
        """ρ for float statistics rounded to this mechanism's grid (sensitivity + sqrt(d) steps)."""
        check_int("Gaussian.rho_for_floats", "dimension", dimension, minimum=1)
        sens = check_positive("Gaussian", "l2_sensitivity", l2_sensitivity)
        k = grid_exponent(self.sigma)
        units = fraction_up(float(sens) / math.ldexp(1.0, k) + math.sqrt(dimension))
        return gaussian_rho(self.sigma / Fraction(2) ** k, units)

    def epsilon(self, l2_sensitivity: object, delta: object, *, dimension: int = 1) -> Fraction:
        """ε (rounded up) at δ for integer statistics: the zCDP conversion, or for a scalar
        release with integer sensitivity the exact discrete curve (CKS20 Theorem 7) when tighter.
        """
        through_zcdp = ZCDP(self.rho(l2_sensitivity)).to_approx(delta).epsilon
        sens = to_fraction(l2_sensitivity)
        exact_ok = dimension == 1 and sens.denominator == 1
        if not exact_ok or float(self.sigma) > DISCRETE_GAUSSIAN_EXACT_MAX_SIGMA:
            return through_zcdp
        target = float(to_fraction(delta))
        lo, hi = Fraction(0), through_zcdp
        if discrete_gaussian_delta(self.sigma, sens.numerator, hi) > target:
            return through_zcdp
        while hi - lo > hi * Fraction(1, 2**30):
            mid = (lo + hi) / 2
            if discrete_gaussian_delta(self.sigma, sens.numerator, mid) <= target:
                hi = mid
            else:
                lo = mid
        return hi

    def event(self, l2_sensitivity: object) -> GaussianEvent:
        """The accounting event of one release of a Δ₂-sensitive integer statistic."""
        return GaussianEvent(self.sigma, l2_sensitivity)

    def release_integers(
        self, values: npt.ArrayLike, rng: Rng | None = None
    ) -> npt.NDArray[np.int64]:
        """Add independent discrete Gaussian noise to each integer value."""
        array = np.asarray(values)
        if array.dtype.kind not in "iu":
            raise TypeError(
                "Gaussian.release_integers needs integer values; use release_floats for floats."
            )
        noise = discrete_gaussian(rng or default_rng(), self.sigma, array.size)
        return add_noise(array, noise.reshape(array.shape))

    def release_floats(
        self, values: npt.ArrayLike, rng: Rng | None = None
    ) -> npt.NDArray[np.float64]:
        """Round to the public grid, add discrete Gaussian noise in grid units, scale back."""
        k = grid_exponent(self.sigma)
        units = to_grid(values, k)
        noise = discrete_gaussian(rng or default_rng(), self.sigma / Fraction(2) ** k, units.size)
        return from_grid(add_noise(units, noise.reshape(units.shape)), k)

    def ci_halfwidth(self, alpha: object = 0.05) -> float:
        """Smallest integer t with P[|Z| > t] <= α for one coordinate of integer noise."""
        return _discrete_gaussian_halfwidth(float(self.sigma), alpha)

    def ci_halfwidth_floats(self, alpha: object = 0.05) -> float:
        """The same bound for :meth:`release_floats`, in the units of the values."""
        k = grid_exponent(self.sigma)
        return math.ldexp(_discrete_gaussian_halfwidth(math.ldexp(float(self.sigma), -k), alpha), k)

    def __str__(self) -> str:
        return f"discrete Gaussian(sigma={float(self.sigma):.6g})"


def _discrete_gaussian_halfwidth(sigma: float, alpha: object) -> float:
    """Smallest t with P[|Z| > t] <= α for the discrete Gaussian (exact tail sum for small σ)."""
    a = float(check_probability("ci_halfwidth", "alpha", alpha, open_low=True, open_high=True))
    if sigma > _EXACT_TAIL_MAX_SIGMA:
        return float(math.ceil(float(ndtri(1 - a / 2)) * sigma) + 1)
    if sigma <= _POINT_MASS_SIGMA:
        return 0.0
    support = np.arange(0, math.ceil(40 * sigma) + 2, dtype=np.float64)
    weights = np.exp(-0.5 * (support / sigma) ** 2)
    total = weights[0] + 2 * weights[1:].sum()
    # P[|Z| > t] = 2 * sum_{z > t} w(z) / total, for each t in the support.
    tail_above = 2 * (weights[::-1].cumsum()[::-1] - weights) / total
    return float(np.flatnonzero(tail_above <= a)[0])
