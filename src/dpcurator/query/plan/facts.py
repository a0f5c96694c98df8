"""Public facts the planner derives from an aggregate and the metadata alone: the value bounds and
the fixed-point grid 2^k of a sum (see :mod:`dpcurator.query.plan.planner` for the rules and their
reasons; sensitivities come from :mod:`dpcurator.query.privacy_unit`)."""

from __future__ import annotations

import math
from fractions import Fraction

from dpcurator.errors import DomainError
from dpcurator.query import ir
from dpcurator.query.frontend.builder import Aggregate
from dpcurator.query.plan.analysis import columns_of, infer_bounds, is_integer_valued
from dpcurator.query.schema import Metadata

#: Grid steps spanned by the largest bound of a float sum (see :mod:`dpcurator.query.plan.planner`).
GRID_STEPS_EXPONENT = 20

#: Integer-valued sums use the unit grid while their bounds stay within ±2^53 (exact doubles).
MAX_UNIT_GRID_MAGNITUDE = 2.0**53


def choose_grid_exponent(lower: float, upper: float, *, integer: bool) -> int:
    """The fixed-point grid 2^k of a sum: 0 for integers (bounds within ±2^53), else ~2^20 steps
    for the largest bound (so one row's grid value always fits int64)."""
    magnitude = max(abs(lower), abs(upper))
    if magnitude == 0 or (integer and magnitude <= MAX_UNIT_GRID_MAGNITUDE):
        return 0
    return math.floor(math.log2(magnitude)) - GRID_STEPS_EXPONENT


def unit_grid(expr: ir.Expr, metadata: Metadata, lower: float, upper: float) -> bool:
    """Whether a value is summed on the unit grid: integer-valued, with integer bounds within
    ±2^53 (beyond, the float grid keeps one row's grid value, and its square, in int64)."""
    return (
        is_integer_valued(expr, metadata)
        and float(lower).is_integer()
        and float(upper).is_integer()
        and max(-lower, upper) <= MAX_UNIT_GRID_MAGNITUDE
    )


def grid_units(value: float, exponent: int) -> int:
    """round_half_even(value / 2^exponent), exactly (the rounding rule of the IR)."""
    return round(Fraction(value) / Fraction(2) ** exponent)


def value_bounds(aggregate: Aggregate, metadata: Metadata) -> tuple[float, float]:
    if aggregate.lower is not None and aggregate.upper is not None:
        return float(aggregate.lower), float(aggregate.upper)
    assert aggregate.expr is not None  # every value aggregate has an expression
    bounds = infer_bounds(aggregate.expr, metadata)
    if bounds is None:
        columns = columns_of(aggregate.expr)
        first = (columns or ["x"])[0]
        kind = aggregate.kind.upper()
        raise DomainError(
            f"{kind}({aggregate.output_name}) needs public bounds for "
            f"{', '.join(columns) or 'its expression'}: declare lower/upper in the metadata, "
            f"clamp the value in the query (SQL: {kind}(CLAMP({first}, 0, 100)); builder: "
            f"dpc.{aggregate.kind}({first!r}, lower=0, upper=100)), or spend budget on a DP "
            "estimate "
            f"with session.dp_bounds({first!r}, epsilon=...)."
        )
    if not bounds[0] < bounds[1]:
        return bounds[0] - 0.5, bounds[1] + 0.5
    return bounds
