"""Fixed-point grid values shared by every backend: the exact scaling factors, the grid
integer of a clamped value, histogram bin indices, and the clamp of a group total to int64
(see :mod:`dpcurator.query.backends.base`)."""

from __future__ import annotations

import math

from dpcurator.errors import (
    ParameterError,
)
from dpcurator.query.backends.base import INT64_MAX, TOTAL_LIMIT
from dpcurator.query.ir import (
    ExactAggregate,
)


def grid_scales(grid_exponent: int) -> tuple[float, ...]:
    """The powers of two whose product is ``2**-grid_exponent``, each a finite double.

    Scaling a value by them in turn is exact (or correctly rounded once, for tiny results), so
    every engine multiplying by the same factors gets the same double, for every exponent in
    :data:`GRID_EXPONENTS`.
    """
    if grid_exponent == 0:
        return ()
    if grid_exponent >= -1023:
        return (2.0**-grid_exponent,)
    return (2.0**1023, 2.0 ** (-grid_exponent - 1023))


def grid_value(agg: ExactAggregate, value: float) -> int:
    """Return the grid integer of a clamped ``value`` for a sum or sum_squares aggregate (minus
    the aggregate's offset)."""
    return grid_units(agg, value) - agg.offset


def grid_units(agg: ExactAggregate, value: float) -> int:
    """round_half_even(``value`` (squared for a sum_squares) scaled by 2**-grid_exponent), before
    the offset; OverflowError if the scaled value is infinite."""
    scaled = value * value if agg.kind == "sum_squares" else value
    for factor in grid_scales(agg.grid_exponent):
        scaled *= factor
    return round(scaled)  # round(float): half-to-even


def bin_index(agg: ExactAggregate, value: float) -> int:
    """Return the histogram bin of a clamped ``value`` (see :mod:`dpcurator.query.ir`)."""
    assert agg.lower is not None
    assert agg.upper is not None
    scaled = (value - agg.lower) / (agg.upper - agg.lower) * agg.bins
    return min(math.floor(scaled), agg.bins - 1)


def max_grid_value(agg: ExactAggregate) -> int:
    """Return the largest |grid value| one row can add to ``agg``; refuse values beyond int64.

    Rounding is monotone and values are clamped, so the extremes come from the bounds and the fill;
    both the value before the offset and the value after it must fit in int64 (engines compute
    the first in int64). A refusal depends on the plan only.

    Raises:
        ParameterError: one row's grid value could exceed int64.
    """
    assert agg.lower is not None
    assert agg.upper is not None
    candidates = [agg.lower, agg.upper] + ([] if agg.fill is None else [agg.fill])
    try:
        units = [grid_units(agg, float(value)) for value in candidates]
    except OverflowError as exc:
        raise _overflow(agg, "infinite") from exc
    largest = max(max(abs(unit), abs(unit - agg.offset)) for unit in units)
    if largest > INT64_MAX:
        raise _overflow(agg, str(largest))
    return max(abs(unit - agg.offset) for unit in units)


def _overflow(agg: ExactAggregate, largest: str) -> ParameterError:
    return ParameterError(
        f"The {agg.kind} {agg.name!r} could exceed int64 on one row: up to {largest} on the grid "
        f"2**{agg.grid_exponent}. Use a coarser grid (larger grid_exponent) or tighter bounds."
    )


def clamp_total(total: int) -> int:
    """A group's exact sum clamped to [-TOTAL_LIMIT, TOTAL_LIMIT] grid units.

    Clamping is 1-Lipschitz, so the clamped total of neighbouring tables differs by at most what
    the exact totals differ by: the sum's sensitivity is unchanged, and no total is refused.
    """
    return max(-TOTAL_LIMIT, min(TOTAL_LIMIT, total))
