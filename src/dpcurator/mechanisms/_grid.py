"""Floating-point values on a power-of-two grid: the defence against Mironov (2012).

Adding textbook float noise to a float leaves holes in the output distribution that reveal the
input. Instead a float statistic is rounded to the nearest multiple of 2^k (k chosen from the
NOISE SCALE, never from the data, so the grid is public), exact integer noise is added in grid
units, and the result is scaled back by 2^k.

Rounding two neighbouring values moves each by at most 2^(k-1), so an L1 sensitivity Δ over d
coordinates becomes at most floor(Δ / 2^k) + d grid units (see :func:`grid_sensitivity`).

Every conversion here is total: no value raises. NaN becomes :data:`NAN_FILL` (0), and values are
clamped to the public range of ±:data:`MAX_UNITS` grid units (±inf to its ends). Clamping is
1-Lipschitz, so sensitivities computed for the unclamped values still hold. Rounding a float to
the grid is exact (scaling by 2^-k and rounding to an integer lose nothing in binary floating
point), and noise is added in saturating int64 arithmetic.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

#: The grid is 2^GRID_BITS times finer than the noise scale: rounding costs a negligible relative
#: privacy inflation of about d·2^-GRID_BITS.
GRID_BITS = 30

#: Values are clamped to ±MAX_UNITS grid units, inside int64 with room for the noise
#: (:func:`add_noise` saturates in the rare case that is not enough).
MAX_UNITS = 2**62

#: The grid value a NaN is released as (before noise).
NAN_FILL = 0.0

_I64_MAX = 2**63 - 1


def grid_exponent(scale: Fraction) -> int:
    """The exponent k of the grid 2^k used for noise of the given (public) scale > 0.

    floor(log2(scale)) is computed exactly from the integer bit lengths (no float, which would
    overflow for scales beyond 2^1024 or round near powers of two).
    """
    exact = Fraction(scale)
    exponent = exact.numerator.bit_length() - exact.denominator.bit_length()
    if Fraction(2) ** exponent > exact:
        exponent -= 1
    return exponent - GRID_BITS


def magnitude_text(value: Fraction) -> str:
    """A short text for a (possibly astronomically large) positive scale, for error messages."""
    if value < 2**1000:
        return f"{float(value):.6g}"
    return f"about 2**{value.numerator.bit_length() - value.denominator.bit_length()}"


def grid_sensitivity(sensitivity: Fraction, exponent: int, dimension: int) -> Fraction:
    """Sensitivity in grid units after rounding ``dimension`` coordinates to the grid 2^exponent."""
    return Fraction(math.floor(sensitivity / Fraction(2) ** exponent) + dimension)


def to_grid(values: npt.ArrayLike, exponent: int) -> npt.NDArray[np.int64]:
    """Round float values to the nearest multiple of 2^exponent (ties to even), in grid units.

    Total: NaN -> :data:`NAN_FILL`; values beyond ±MAX_UNITS grid units (and ±inf) are clamped.
    """
    array = np.asarray(values, dtype=np.float64)
    filled = np.where(np.isnan(array), NAN_FILL, array)
    with np.errstate(over="ignore"):  # overflow gives ±inf, clamped below
        units = np.rint(np.ldexp(filled, -exponent))
    return np.clip(units, -float(MAX_UNITS), float(MAX_UNITS)).astype(np.int64)


def add_noise(
    values: npt.NDArray[np.integer], noise: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """values + noise in int64, saturating at ±(2^63 - 1) instead of wrapping around.

    The exact noisy sum is computed first and only then saturated, so this is post-processing of
    the noisy value. Unsigned values above 2^63 - 1 are clamped to it first (1-Lipschitz).
    """
    wide = (
        np.minimum(values, np.uint64(_I64_MAX)).astype(np.int64)
        if values.dtype.kind == "u"
        else values.astype(np.int64)
    )
    total = wide + noise  # wraps silently on overflow; repaired below
    # The sum wrapped exactly where both terms' signs differ from its sign; it then saturates
    # towards the terms' common sign.
    wrapped = ((wide ^ total) & (noise ^ total)) < 0
    if wrapped.any():
        total[wrapped] = np.where(wide[wrapped] > 0, _I64_MAX, -_I64_MAX)
    np.maximum(total, -_I64_MAX, out=total)  # -2^63 itself, whose negation does not fit
    return total


def from_grid(units: npt.NDArray[np.int64], exponent: int) -> npt.NDArray[np.float64]:
    """Scale integers in grid units back to floats (exact for |units| <= 2^53, else the nearest
    float: post-processing of the exact noisy integer)."""
    return np.ldexp(units.astype(np.float64), exponent)
