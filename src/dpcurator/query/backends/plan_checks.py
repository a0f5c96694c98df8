"""Plan checks every backend runs before computing: static expression types
(:func:`expr_type`) and :func:`check_plan`, which refuses what no data value can rescue (names,
keys, literals, functions, grids whose one row could leave int64), so that evaluation is total
after it (see :mod:`dpcurator.query.backends.base`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping

from dpcurator._validation import fail
from dpcurator.errors import (
    BackendError,
    UnsupportedQueryError,
)
from dpcurator.query.backends.base import (
    GRID_EXPONENTS,
    HIDDEN_PREFIX,
    INT64_MAX,
    INT64_MIN,
    UNARY_FUNCTIONS,
    VALUE_KINDS,
)
from dpcurator.query.backends.block_sample import check_sample, columns_with_block
from dpcurator.query.backends.grid import (
    max_grid_value,
)
from dpcurator.query.backends.types import is_fractional, type_class
from dpcurator.query.ir import (
    AggregatePlan,
    And,
    Between,
    BinOp,
    Case,
    Col,
    Compare,
    ExactAggregate,
    Expr,
    Func,
    In,
    IsNull,
    Lit,
    Not,
    Or,
    ScalarValue,
)


def expr_type(expr: Expr, columns: Mapping[str, str]) -> str:
    """The static type of ``expr``: ``"int"`` (int64), ``"float"`` (double), ``"string"``,
    ``"bool"``, ``"null"`` (the NULL literal) or ``"other"`` (anything else, e.g. a column of an
    undeclared engine type, or a type mismatch the planner refuses).

    ``columns`` maps column names to engine type names; a missing column is ``"other"``.
    """
    match expr:
        case Col(name=name):
            engine_type = columns.get(name, "")
            return type_class(engine_type) or ("float" if is_fractional(engine_type) else "other")
        case Lit(value=value):
            return _literal_type(value)
        case BinOp(op="/"):
            return "float"
        case BinOp(left=left, right=right):
            common = _common_type([expr_type(left, columns), expr_type(right, columns)])
            return common if common in ("int", "float", "null") else "other"
        case Compare() | And() | Or() | Not() | IsNull() | In() | Between():
            return "bool"
        case Case(whens=whens, default=default):
            results = [value for _, value in whens] + [Lit(None) if default is None else default]
            return _common_type([expr_type(value, columns) for value in results])
        case Func(name="coalesce", args=args):
            return _common_type([expr_type(arg, columns) for arg in args])
        case Func(name="length"):
            return "int"
        case Func(name="lower" | "upper"):
            return "string"
        case Func(args=(arg,)):  # abs, round, floor, ceil keep their argument's type
            return expr_type(arg, columns)
    return "other"


def _literal_type(value: ScalarValue) -> str:
    if value is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", str: "string"}.get(type(value), "other")


def _common_type(types: Iterable[str]) -> str:
    """The type of a value taken from one of several expressions (CASE, coalesce, arithmetic):
    NULL takes the others' type; int and float make float."""
    present = set(types) - {"null"}
    if not present:
        return "null"
    if len(present) == 1:
        return present.pop()
    return "float" if present == {"int", "float"} else "other"


# ----------------------------------------------------------------------------------------------
# Plan checks


def walk(expr: Expr) -> Iterator[Expr]:
    """Yield ``expr`` and every sub-expression (pre-order)."""
    yield expr
    match expr:
        case BinOp(left=left, right=right) | Compare(left=left, right=right):
            yield from walk(left)
            yield from walk(right)
        case And(args=args) | Or(args=args) | Func(args=args):
            for arg in args:
                yield from walk(arg)
        case Not(arg=arg) | IsNull(arg=arg) | In(arg=arg):
            yield from walk(arg)
        case Between(arg=arg, low=low, high=high):
            yield from walk(arg)
            yield from walk(low)
            yield from walk(high)
        case Case(whens=whens, default=default):
            for condition, value in whens:
                yield from walk(condition)
                yield from walk(value)
            if default is not None:
                yield from walk(default)


def plan_expressions(plan: AggregatePlan) -> list[Expr]:
    """Return the top-level expressions a plan evaluates per row."""
    exprs: list[Expr] = [group.expr for group in plan.group_by]
    exprs.extend(agg.expr for agg in plan.aggregates if agg.expr is not None)
    if plan.where is not None:
        exprs.append(plan.where)
    return exprs


def check_plan(plan: AggregatePlan, columns: Mapping[str, str]) -> None:
    """Check a plan against the columns of its table; raise before any engine work.

    Raises:
        BackendError: a referenced column does not exist in the table.
        ParameterError: the plan is malformed (duplicate names, missing bounds, bad keys...).
        UnsupportedQueryError: a function is called with the wrong number of arguments.
    """
    check_sample(plan, columns)
    _check_expressions(plan, columns_with_block(plan, columns))
    _check_names(plan)
    for agg in plan.aggregates:
        _check_aggregate(agg)
    _check_keys(plan)
    _check_bound(plan)


def _check_expressions(plan: AggregatePlan, columns: Mapping[str, str]) -> None:
    referenced = {plan.bound.person_column} - {None}
    for expr in plan_expressions(plan):
        for node in walk(expr):
            if isinstance(node, Col):
                referenced.add(node.name)
            elif isinstance(node, Func):
                _check_func(node)
            elif isinstance(node, Lit):
                _check_literal(node.value)
            elif isinstance(node, In):
                for value in node.values:
                    _check_literal(value)
    missing = sorted(str(name) for name in referenced if name not in columns)
    if missing:
        raise BackendError(
            f"The table {plan.table!r} has no column {', '.join(map(repr, missing))}. "
            f"Its columns are {sorted(columns)}."
        )


def _check_names(plan: AggregatePlan) -> None:
    owner = "AggregatePlan"
    if not plan.aggregates:
        raise fail(owner, "aggregates", "a non-empty tuple", plan.aggregates)
    names = [agg.name for agg in plan.aggregates] + [group.name for group in plan.group_by]
    if len(set(names)) != len(names):
        raise fail(owner, "aggregates", "uniquely named (group names included)", names)
    for name in names:
        if not name or name.startswith(HIDDEN_PREFIX):
            raise fail(owner, "name", f"non-empty and not starting with {HIDDEN_PREFIX!r}", name)


def _check_keys(plan: AggregatePlan) -> None:
    if plan.group_keys is None:
        return
    if not plan.group_by:
        raise fail("AggregatePlan", "group_keys", "None for an ungrouped plan", plan.group_keys)
    for key in plan.group_keys:
        if len(key) != len(plan.group_by):
            raise fail("AggregatePlan", "group_keys", f"tuples of length {len(plan.group_by)}", key)
        for value in key:
            _check_literal(value)


def _check_bound(plan: AggregatePlan) -> None:
    bound = plan.bound
    if bound.person_column is None:
        return
    for field_name in ("max_groups", "max_rows_per_group"):
        value = getattr(bound, field_name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise fail("ContributionBound", field_name, "an integer >= 1", value)
    if isinstance(bound.seed, bool) or not isinstance(bound.seed, int):
        raise fail("ContributionBound", "seed", "an integer", bound.seed)


def _check_func(node: Func) -> None:
    if node.name in UNARY_FUNCTIONS and len(node.args) != 1:
        raise UnsupportedQueryError(
            f"The function {node.name!r} takes exactly one argument. Got {len(node.args)}."
        )
    if node.name == "coalesce" and not node.args:
        raise UnsupportedQueryError("The function 'coalesce' needs at least one argument.")
    if node.name not in UNARY_FUNCTIONS | {"coalesce"}:
        raise UnsupportedQueryError(f"The function {node.name!r} is not supported.")


def _check_literal(value: object) -> None:
    if value is None or isinstance(value, bool | str | float):
        return
    if isinstance(value, int):
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise fail("Lit", "value", "an integer that fits in int64", value)
        return
    raise fail("Lit", "value", "an int, float, str, bool or None", value)


def _check_aggregate(agg: ExactAggregate) -> None:
    owner = f"ExactAggregate {agg.name!r}"
    if agg.kind not in VALUE_KINDS:
        if agg.kind not in ("count", "count_persons"):
            raise fail(owner, "kind", "a known aggregate kind", agg.kind)
        return
    if agg.expr is None:
        raise fail(owner, "expr", f"an expression for a {agg.kind}", None)
    for name in ("lower", "upper"):
        value = getattr(agg, name)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise fail(owner, name, "a finite number", value)
    assert agg.lower is not None  # checked just above
    assert agg.upper is not None
    if not agg.lower <= agg.upper:
        raise fail(owner, "upper", f">= lower ({agg.lower})", agg.upper)
    if agg.fill is not None and not agg.lower <= agg.fill <= agg.upper:
        raise fail(owner, "fill", f"None or in [{agg.lower}, {agg.upper}]", agg.fill)
    if agg.kind == "histogram":
        if isinstance(agg.bins, bool) or not isinstance(agg.bins, int) or agg.bins < 1:
            raise fail(owner, "bins", "an integer >= 1", agg.bins)
        if not agg.lower < agg.upper:
            raise fail(owner, "upper", f"> lower ({agg.lower}) for a histogram", agg.upper)
        if not math.isfinite(agg.upper - agg.lower):
            raise fail(
                owner, "upper", f"within a finite distance of lower ({agg.lower})", agg.upper
            )
    else:
        _check_offset(owner, agg)
        max_grid_value(agg)


def _check_offset(owner: str, agg: ExactAggregate) -> None:
    if isinstance(agg.offset, bool) or not isinstance(agg.offset, int):
        raise fail(owner, "offset", "an integer", agg.offset)
    if not INT64_MIN <= agg.offset <= INT64_MAX:
        raise fail(owner, "offset", "an integer that fits in int64", agg.offset)
    exponent = agg.grid_exponent
    if (
        isinstance(exponent, bool)
        or not isinstance(exponent, int)
        or exponent not in GRID_EXPONENTS
    ):
        raise fail(owner, "grid_exponent", "an integer in [-2046, 2046]", exponent)
    if agg.offset and agg.kind != "sum":
        raise fail(owner, "offset", f"0 for a {agg.kind}", agg.offset)
