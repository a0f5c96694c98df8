"""Exact and outward-rounded arithmetic for privacy parameters.

Privacy parameters are kept as :class:`fractions.Fraction` so that composition and budget
subtraction are exact. Where a transcendental function is unavoidable (logarithms, square roots,
exponentials in conversions), the float result is widened by a few units in the last place in the
direction that is safe for privacy (a larger epsilon/delta, a smaller noise scale never).
"""

from __future__ import annotations

import math
from fractions import Fraction

from dpcurator._validation import check_real

#: Units in the last place added when rounding a libm result in the safe direction. libm functions
#: are accurate to within 1 ulp; each operation in a short formula adds at most that much.
SAFETY_ULPS = 4


def to_fraction(value: object, *, owner: str = "to_fraction", name: str = "value") -> Fraction:
    """Convert an int, float or Fraction to an exact Fraction (floats are binary rationals)."""
    number = check_real(owner, name, value)
    return Fraction(number)


def float_up(value: Fraction | float | int) -> float:
    """The smallest float >= ``value`` (exact for Fractions)."""
    exact = Fraction(value)
    approx = float(exact)
    while Fraction(approx) < exact:
        approx = math.nextafter(approx, math.inf)
    return approx


def float_down(value: Fraction | float | int) -> float:
    """The largest float <= ``value`` (exact for Fractions)."""
    exact = Fraction(value)
    approx = float(exact)
    while Fraction(approx) > exact:
        approx = math.nextafter(approx, -math.inf)
    return approx


def widen_up(value: float, ulps: int = SAFETY_ULPS) -> float:
    """Move a float result of libm arithmetic ``ulps`` steps towards +infinity."""
    for _ in range(ulps):
        value = math.nextafter(value, math.inf)
    return value


def widen_down(value: float, ulps: int = SAFETY_ULPS) -> float:
    """Move a float result of libm arithmetic ``ulps`` steps towards -infinity."""
    for _ in range(ulps):
        value = math.nextafter(value, -math.inf)
    return value


def fraction_up(value: float, ulps: int = SAFETY_ULPS) -> Fraction:
    """An exact Fraction that is >= the true value of an approximate float computation."""
    return Fraction(widen_up(value, ulps))


def fraction_down(value: float, ulps: int = SAFETY_ULPS) -> Fraction:
    """An exact Fraction that is <= the true value of an approximate float computation."""
    return Fraction(widen_down(value, ulps))


def dyadic_up(value: Fraction, bits: int = 62) -> Fraction:
    """Round ``value`` > 0 up to a dyadic rational n / 2^k with n < 2^bits.

    Used to give samplers a parameter with a small exact representation: rounding a noise scale
    up only adds noise, so the privacy guarantee computed for the original scale still holds.
    """
    if value <= 0:
        raise ValueError("dyadic_up needs a positive value")
    exponent = bits - 1 - math.floor(math.log2(value))  # so that value * 2^exponent < 2^bits
    numerator = math.ceil(value * Fraction(2) ** exponent)
    while numerator >= 2**bits:
        exponent -= 1
        numerator = math.ceil(value * Fraction(2) ** exponent)
    return Fraction(numerator, 2**exponent) if exponent >= 0 else Fraction(numerator * 2**-exponent)


def dyadic_down(value: Fraction, bits: int = 62) -> Fraction:
    """Round ``value`` > 0 down to a dyadic rational n / 2^k with 0 < n < 2^bits."""
    if value <= 0:
        raise ValueError("dyadic_down needs a positive value")
    exponent = bits - 1 - math.floor(math.log2(value))
    numerator = math.floor(value * Fraction(2) ** exponent)
    while numerator >= 2**bits:
        exponent -= 1
        numerator = math.floor(value * Fraction(2) ** exponent)
    return Fraction(numerator, 2**exponent) if exponent >= 0 else Fraction(numerator * 2**-exponent)
