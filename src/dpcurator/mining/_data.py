"""Inputs of the mining algorithms: a numeric array or pandas frame with public per-column bounds.

Every value is clamped to its column's public bounds and NaN becomes the column's midpoint, so no
data value can raise (the privacy rule); shapes and bounds are checked from public inputs only.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_positive, fail
from dpcurator.core.numbers import to_fraction

Array = npt.NDArray[np.float64]


def as_bounds(owner: str, bounds: object) -> tuple[Array, Array]:
    """Public ``(lower, upper)`` per column: two sequences of equal length with lower < upper."""
    try:
        lower, upper = (np.asarray(b, dtype=np.float64).reshape(-1) for b in bounds)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise fail(
            owner, "bounds", "a pair (lower, upper) of per-column sequences", bounds
        ) from None
    if lower.shape != upper.shape or not np.all(np.isfinite(lower) & np.isfinite(upper)):
        raise fail(owner, "bounds", "finite lower and upper of the same length", bounds)
    if not np.all(upper > lower):
        raise fail(owner, "bounds", "upper > lower in every column", bounds)
    return lower, upper


def clamp_rows(owner: str, data: npt.ArrayLike, lower: Array, upper: Array) -> Array:
    """The data as a float matrix, NaN filled with the midpoint and clamped to the bounds."""
    matrix = np.asarray(data, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[1] != lower.size:
        raise fail(
            owner, "X", f"a 2-D array with {lower.size} columns (one per bound)", matrix.shape
        )
    middle = (lower + upper) / 2
    filled = np.where(np.isnan(matrix), middle, matrix)
    return np.clip(filled, lower, upper)


def epsilon_of(owner: str, epsilon: object) -> Fraction:
    """ε as an exact fraction (> 0)."""
    return to_fraction(check_positive(owner, "epsilon", epsilon))
