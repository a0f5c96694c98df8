"""Floating-point values on a power-of-two grid: the defence against Mironov (2012).

Adding textbook float noise to a float leaves holes in the output distribution that reveal the
input. Instead a float statistic is rounded to the nearest multiple of 2^k (k chosen from the
NOISE SCALE, never from the data, so the grid is public), exact integer noise is added in grid
units, and the result is scaled back by 2^k, which is exact in binary floating point.

Rounding two neighbouring values moves each by at most 2^(k-1), so an L1 sensitivity Δ over d
coordinates becomes at most floor(Δ / 2^k) + d grid units (see :func:`grid_sensitivity`).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator.errors import DomainError

#: The grid is 2^GRID_BITS times finer than the noise scale: rounding costs a negligible relative
#: privacy inflation of about d·2^-GRID_BITS.
GRID_BITS = 30

#: Largest magnitude in grid units for which float <-> integer conversions are exact.
_MAX_EXACT = 2**52


def grid_exponent(scale: Fraction) -> int:
    """The exponent k of the grid 2^k used for noise of the given (public) scale."""
    return math.floor(math.log2(scale)) - GRID_BITS


def grid_sensitivity(sensitivity: Fraction, exponent: int, dimension: int) -> Fraction:
    """Sensitivity in grid units after rounding ``dimension`` coordinates to the grid 2^exponent."""
    return Fraction(math.floor(sensitivity / Fraction(2) ** exponent) + dimension)


def to_grid(values: npt.ArrayLike, exponent: int) -> npt.NDArray[np.int64]:
    """Round float values to the nearest multiple of 2^exponent (ties to even), in grid units."""
    array = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(array)):
        raise DomainError("Values released with float noise must be finite (no NaN or infinity).")
    units = np.rint(np.ldexp(array, -exponent))
    if units.size and np.max(np.abs(units)) >= _MAX_EXACT:
        raise DomainError(
            "A value is too large for its noise grid: |value| / 2^k must stay below 2^52 "
            f"(grid 2^{exponent}). Rescale the statistic or use a larger noise scale."
        )
    return units.astype(np.int64)


def from_grid(units: npt.NDArray[np.int64], exponent: int) -> npt.NDArray[np.float64]:
    """Scale integers in grid units back to floats (exact for |units| < 2^52)."""
    return np.ldexp(units.astype(np.float64), exponent)
