"""The Laplace mechanism on exact discrete noise (the geometric mechanism).

Privacy guarantee: releasing ``f(x) + Z`` where each coordinate of Z is drawn independently from
the discrete Laplace distribution P[Z = z] ∝ exp(-|z| / scale) satisfies ε-differential privacy
with ε = Δ₁ / scale for integer-valued f of L1 sensitivity Δ₁ (Dwork, McSherry, Nissim & Smith
2006 for the continuous version; Ghosh, Roughgarden & Sundararajan 2009 for the two-sided geometric
mechanism; Canonne, Kamath & Steinke 2020 for exact sampling). Float-valued statistics are first
rounded to a public power-of-two grid (:mod:`dpcurator.mechanisms._grid`), which enlarges the
sensitivity by at most one grid step per coordinate; :meth:`Laplace.epsilon_for_floats` accounts
for it.

Nothing raises on a data value: float releases map NaN to 0 and clamp to the public grid range,
and noise is added with saturation (:mod:`dpcurator.mechanisms._grid`). Everything else is decided
at construction from public inputs: a scale beyond 2^52, the exact sampler's range, is refused
there (so a planner building the mechanism refuses it before any charge), and the CI half-width
is a closed form with bounded work for every admissible scale.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from decimal import Context, Decimal, localcontext
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, check_positive, check_probability, fail
from dpcurator.accounting.calibration import laplace_epsilon, laplace_scale
from dpcurator.accounting.events import LaplaceEvent
from dpcurator.core.numbers import float_up, to_fraction
from dpcurator.mechanisms._grid import (
    add_noise,
    from_grid,
    grid_exponent,
    grid_sensitivity,
    magnitude_text,
    to_grid,
)
from dpcurator.random import Rng, default_rng
from dpcurator.random.samplers.laplace import MAX_LAPLACE_SCALE, discrete_laplace

#: Decimal digits of the closed-form tail computations.
_DIGITS = 60


@dataclass(frozen=True)
class Laplace:
    """Discrete Laplace noise of a given scale, for integer or float statistics.

    >>> from dpcurator.random import SeededRng
    >>> mech = Laplace.for_epsilon(epsilon=1, l1_sensitivity=1)
    >>> mech.epsilon(1)
    Fraction(1, 1)
    >>> mech.release_integers([10, 20], rng=SeededRng(7)).shape
    (2,)
    """

    scale: Fraction

    def __init__(self, scale: object) -> None:
        check_positive("Laplace", "scale", scale)
        exact = to_fraction(scale, owner="Laplace", name="scale")
        if exact > MAX_LAPLACE_SCALE:
            raise fail(
                "Laplace",
                "scale",
                "<= 2**52 (the exact sampler's range)",
                magnitude_text(exact),
                "Ask for a larger epsilon or a smaller sensitivity.",
            )
        object.__setattr__(self, "scale", exact)

    @classmethod
    def for_epsilon(cls, epsilon: object, l1_sensitivity: object) -> Laplace:
        """The mechanism whose integer releases of Δ₁-sensitive statistics are exactly ε-DP."""
        return cls(laplace_scale(epsilon, l1_sensitivity))

    @classmethod
    def for_epsilon_floats(
        cls, epsilon: object, l1_sensitivity: object, dimension: int = 1
    ) -> Laplace:
        """The mechanism whose float releases (grid-rounded, ``dimension`` coordinates) are ε-DP."""
        check_int("Laplace.for_epsilon_floats", "dimension", dimension, minimum=1)
        eps = to_fraction(check_positive("Laplace.for_epsilon_floats", "epsilon", epsilon))
        sens = to_fraction(check_positive("Laplace", "l1_sensitivity", l1_sensitivity))
        mech = cls(laplace_scale(eps, sens))
        while mech.epsilon_for_floats(sens, dimension) > eps:
            k = grid_exponent(mech.scale)
            mech = cls((sens + dimension * Fraction(2) ** k) / eps)
        return mech

    def epsilon(self, l1_sensitivity: object) -> Fraction:
        """ε = Δ₁ / scale for integer-valued statistics (exact)."""
        return laplace_epsilon(self.scale, l1_sensitivity)

    def epsilon_for_floats(self, l1_sensitivity: object, dimension: int = 1) -> Fraction:
        """ε for float statistics rounded to this mechanism's grid (rounding inflates Δ₁)."""
        sens = to_fraction(check_positive("Laplace", "l1_sensitivity", l1_sensitivity))
        k = grid_exponent(self.scale)
        units = grid_sensitivity(sens, k, dimension)
        return units / (self.scale / Fraction(2) ** k)

    def event(self, l1_sensitivity: object) -> LaplaceEvent:
        """The accounting event of one release of a Δ₁-sensitive integer statistic."""
        return LaplaceEvent(self.scale, l1_sensitivity)

    def release_integers(
        self, values: npt.ArrayLike, rng: Rng | None = None
    ) -> npt.NDArray[np.int64]:
        """Add independent discrete Laplace noise to each integer value."""
        array = np.asarray(values)
        if array.dtype.kind not in "iu":
            raise TypeError(
                "Laplace.release_integers needs integer values; use release_floats for floats."
            )
        noise = discrete_laplace(rng or default_rng(), self.scale, array.size)
        return add_noise(array, noise.reshape(array.shape))

    def release_floats(
        self, values: npt.ArrayLike, rng: Rng | None = None
    ) -> npt.NDArray[np.float64]:
        """Round values to the public grid, add discrete Laplace noise in grid units, scale back."""
        k = grid_exponent(self.scale)
        units = to_grid(values, k)
        noise = discrete_laplace(rng or default_rng(), self.scale / Fraction(2) ** k, units.size)
        return from_grid(add_noise(units, noise.reshape(units.shape)), k)

    def ci_halfwidth(self, alpha: object = 0.05) -> float:
        """Smallest integer t with P[|Z| > t] <= α for one coordinate of integer noise (exact)."""
        return _discrete_laplace_halfwidth(self.scale, alpha)

    def ci_halfwidth_floats(self, alpha: object = 0.05) -> float:
        """The same bound for :meth:`release_floats`, in the units of the values."""
        k = grid_exponent(self.scale)
        return math.ldexp(_discrete_laplace_halfwidth(self.scale / Fraction(2) ** k, alpha), k)

    def __str__(self) -> str:
        return f"discrete Laplace(scale={float(self.scale):.6g})"


@functools.lru_cache(maxsize=1024)
def smallest_tail_index(scale: Fraction, level: Fraction) -> int:
    """The smallest integer m >= 1 with P[|Z| >= m] <= ``level`` for Z discrete Laplace(scale).

    With p = exp(-1/scale), P[|Z| >= m] = 2 p^m / (1 + p) for m >= 1, so m is the smallest
    integer >= max(1, scale · ln(2 / (level (1 + p)))): a closed form, evaluated in 60-digit
    decimal arithmetic, so the work is bounded for every scale (a float loop would not end once
    exp(-1/scale) rounds to 1). Cached: both inputs are public, and a release's interval and its
    noise index would otherwise cost two 60-digit logarithms per query.
    """
    with localcontext(Context(prec=_DIGITS)):
        b = Decimal(scale.numerator) / Decimal(scale.denominator)
        p = (-1 / b).exp()
        ratio = Decimal(2 * level.denominator) / (Decimal(level.numerator) * (1 + p))
        bound = b * ratio.ln()
    return max(1, math.ceil(bound))


def _discrete_laplace_halfwidth(scale: Fraction, alpha: object) -> float:
    """Smallest t with P[|Z| > t] <= α for Z discrete Laplace of the given scale (rounded up to
    a float)."""
    a = check_probability("ci_halfwidth", "alpha", alpha, open_low=True, open_high=True)
    return float_up(smallest_tail_index(scale, Fraction(a)) - 1)
