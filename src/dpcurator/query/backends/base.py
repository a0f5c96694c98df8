"""The backend protocol and the checks and conversions every backend shares.

A backend executes an :class:`~dpcurator.query.ir.AggregatePlan` and returns EXACT aggregates
(:class:`~dpcurator.query.ir.ExactResult`); it never adds noise and never imports
:mod:`dpcurator.random`, :mod:`dpcurator.mechanisms` or :mod:`dpcurator.accounting`.

Semantics fixed here for all backends (in addition to those of :mod:`dpcurator.query.ir`, whose
docstring defines the total evaluation rules: integer overflow is NULL, floats are IEEE doubles):

* Rows whose person id is NULL are dropped when the plan bounds contributions per person: they
  cannot be attributed to a person, so they cannot be bounded.
* An aggregate with ``fill=None`` skips NULL/NaN values (they add nothing to sums and histograms).
* ``In`` with an empty value list is FALSE (even for a NULL argument); otherwise ``In`` follows SQL.
* Public group keys match NULL-safely: a key ``None`` selects the rows whose group value is NULL.
* ``Func("round", (x,))`` rounds half away from zero (SQL ``ROUND``); only one argument is accepted.
* Sums accumulate exactly (wider than int64) and each group's total is then clamped to
  ``[-(2**63-1), 2**63-1]`` grid units (:func:`clamp_total`). Clamping the exact total is
  1-Lipschitz, so a sum's sensitivity is unchanged, and no sum is refused after the charge. A plan
  whose ONE row could already exceed int64 on its grid is refused by :func:`check_plan` (a public
  fact of the bounds and grid: the planner refuses it first, before any charge).
* Evaluation is total: once :func:`check_plan` has accepted a plan, no data value makes
  ``compute`` raise. Whatever an engine raises anyway becomes
  ``BackendError(ENGINE_FAILURE_MESSAGE)`` (:func:`engine_failure`), the same text for every
  failure; the engine's own text, which can quote data values, goes to the logger
  ``dpcurator.engine`` only.
"""

from __future__ import annotations

import logging
import math
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pa_parquet

from dpcurator._validation import fail
from dpcurator.errors import (
    ENGINE_FAILURE_MESSAGE,
    BackendError,
    ParameterError,
    UnsupportedQueryError,
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
    ExactResult,
    Expr,
    Func,
    In,
    IsNull,
    Lit,
    Not,
    Or,
    ScalarValue,
)

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
#: The most negative and positive grid values a group total is clamped to (see :func:`clamp_total`).
TOTAL_LIMIT = INT64_MAX
#: The grid exponents a plan may use: 2**-k is then a product of at most two finite powers of two.
GRID_EXPONENTS = range(-2046, 2047)
HIDDEN_PREFIX = "__dp_"
VALUE_KINDS = frozenset({"sum", "sum_squares", "histogram"})
UNARY_FUNCTIONS = frozenset({"abs", "round", "floor", "ceil", "lower", "upper", "length"})
ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
}
"""The arithmetic operators other than ``/`` (whose NULL-on-zero rule each backend writes)."""
COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
OPERATORS = {**ARITHMETIC, **COMPARISONS}
"""Python operators for the IR's binary operators, for engines that overload them."""

ENGINE_LOG = logging.getLogger("dpcurator.engine")
"""Where engine failures are logged in full (the data owner's log; never shown to an analyst)."""


def engine_failure(engine: str, plan: AggregatePlan) -> BackendError:
    """Log the exception being handled on :data:`ENGINE_LOG` and return the one analyst-facing
    error, ``BackendError(ENGINE_FAILURE_MESSAGE)`` (raise it ``from None``).

    Call it in an ``except`` block: the traceback and the engine's text (which can quote data
    values) go to the log only.
    """
    ENGINE_LOG.error(
        "The %s engine failed to compute a plan on %r.", engine, plan.table, exc_info=True
    )
    return BackendError(ENGINE_FAILURE_MESSAGE)


# ----------------------------------------------------------------------------------------------
# Static types (see the evaluation rules of :mod:`dpcurator.query.ir`)


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


@runtime_checkable
class Backend(Protocol):
    """An engine that computes exact aggregates for aggregate plans."""

    name: str

    def tables(self) -> list[str]:
        """Return the names of the tables this backend can query."""
        ...

    def columns(self, table: str) -> dict[str, str]:
        """Return the columns of ``table`` mapped to engine type names (metadata checks only)."""
        ...

    def compute(self, plan: AggregatePlan) -> ExactResult:
        """Execute ``plan`` and return its exact aggregates."""
        ...

    def close(self) -> None:
        """Release the engine resources this backend opened (not those it was given)."""
        ...


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
    _check_expressions(plan, columns)
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


# ----------------------------------------------------------------------------------------------
# Grid values and int64 overflow


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


# ----------------------------------------------------------------------------------------------
# Results


def empty_values(plan: AggregatePlan) -> dict[str, object]:
    """Return the aggregate values of a group with no rows (used for ungrouped plans)."""
    return {
        agg.name: np.zeros(agg.bins, dtype=np.int64) if agg.kind == "histogram" else 0
        for agg in plan.aggregates
    }


def histogram_array(bins: int, counts: Mapping[object, object] | None) -> np.ndarray:
    """Build the int64 histogram of ``bins`` bins from a mapping bin index -> count."""
    array = np.zeros(bins, dtype=np.int64)
    for index, count in (counts or {}).items():
        if index is not None:
            array[int(index)] = int(count)  # type: ignore[call-overload]
    return array


def hidden_columns(plan: AggregatePlan) -> tuple[list[str], dict[str, str]]:
    """The hidden names of the group key columns and of each aggregate's value column."""
    groups = [f"{HIDDEN_PREFIX}g{i}" for i in range(len(plan.group_by))]
    values = {
        agg.name: f"{HIDDEN_PREFIX}v{i}"
        for i, agg in enumerate(plan.aggregates)
        if agg.expr is not None
    }
    return groups, values


def bin_counts(rows: Iterable[Sequence[Any]]) -> dict[tuple[object, ...], dict[int, int]]:
    """Map group key -> bin -> count, from engine rows ``(group key..., bin, count)``."""
    per_group: dict[tuple[object, ...], dict[int, int]] = {}
    for row in rows:
        per_group.setdefault(tuple(row[:-2]), {})[row[-2]] = row[-1]
    return per_group


def merge_histograms(
    plan: AggregatePlan,
    rows: Iterable[Sequence[Any]],
    counts: Mapping[str, Mapping[tuple[object, ...], Mapping[int, int]]],
) -> list[tuple[object, ...]]:
    """Put each histogram's bin counts (by aggregate name, see :func:`bin_counts`) in its place.

    ``rows`` are ``(group key..., row count, non-histogram aggregate...)``; the result rows are
    what :func:`collect_rows` reads.
    """
    width = len(plan.group_by) + 1
    merged_rows: list[tuple[object, ...]] = []
    for row in rows:
        key, rest = tuple(row[: width - 1]), iter(row[width:])
        merged = [
            counts[agg.name].get(key) if agg.kind == "histogram" else next(rest)
            for agg in plan.aggregates
        ]
        merged_rows.append((*row[:width], *merged))
    return merged_rows


def collect_rows(plan: AggregatePlan, rows: Iterable[Sequence[object]]) -> ExactResult:
    """Build the ExactResult from engine rows ``(group key..., row count, aggregate...)``.

    Histogram aggregates arrive as mappings bin -> count; the others as exact integers (None for
    a sum over no values); sums are clamped by :func:`clamp_total`.
    """
    width = len(plan.group_by)
    rows = list(rows)
    columns = list(zip(*rows, strict=True))  # column-wise: one loop per column, not per cell
    keys = list(zip(*(map(python_scalar, column) for column in columns[:width]), strict=True))
    values = [
        [histogram_array(agg.bins, value) for value in column]
        if agg.kind == "histogram"
        else [0 if value is None else clamp_total(int(value)) for value in column]
        for agg, column in zip(plan.aggregates, columns[width + 1 :], strict=False)
    ]
    names = [agg.name for agg in plan.aggregates]
    groups: dict[tuple[ScalarValue, ...], dict[str, object]] = {
        key: dict(zip(names, group, strict=True))
        for key, *group in zip(keys or [()] * len(rows), *values, strict=True)
    }
    if not plan.group_by and () not in groups:
        groups[()] = empty_values(plan)
    return ExactResult(groups=groups)


def python_scalar(value: object) -> ScalarValue:
    """Convert an engine scalar (numpy, Decimal-free) to the Python scalar used in result keys."""
    if isinstance(value, np.generic):
        return value.item()  # type: ignore[no-any-return]
    return value  # type: ignore[return-value]


# ----------------------------------------------------------------------------------------------
# Sources


def is_path(source: object) -> bool:
    """Return whether ``source`` names a file (str or os.PathLike)."""
    return isinstance(source, str | os.PathLike)


def file_format(path: str | os.PathLike[str]) -> str:
    """Return ``"csv"`` or ``"parquet"`` from a file name; raise ParameterError otherwise."""
    lowered = os.fspath(path).lower()
    for suffix, kind in ((".csv", "csv"), (".parquet", "parquet"), (".pq", "parquet")):
        if lowered.endswith(suffix):
            return kind
    raise fail("open_backend", "source", "a .csv or .parquet file", os.fspath(path))


def is_spark_dataframe(source: object) -> bool:
    """Return whether ``source`` is a PySpark DataFrame (checked without importing pyspark)."""
    return any(
        cls.__module__.startswith("pyspark.") and cls.__name__ == "DataFrame"
        for cls in type(source).__mro__
    )


def to_arrow(source: object, table: str, text: Iterable[str] = ()) -> pa.Table:
    """Convert any supported non-Spark source to a pyarrow Table.

    pandas missing values (NaN, None, NA) become NULL, as pandas means them; NaN in numpy arrays
    and pyarrow/polars data stays NaN. A CSV file's columns named in ``text`` are read as strings,
    and empty CSV fields are NULL in every column (as DuckDB, Polars and Spark read them).
    """
    if is_path(source):
        path = os.fspath(source)  # type: ignore[call-overload]
        if file_format(path) == "csv":
            options = pa_csv.ConvertOptions(
                column_types=dict.fromkeys(text, pa.string()), strings_can_be_null=True
            )
            return pa_csv.read_csv(path, convert_options=options)
        return pa_parquet.read_table(path)
    if isinstance(source, pa.Table):
        return source
    if isinstance(source, pd.DataFrame):
        return pa.Table.from_pandas(source, preserve_index=False)
    if isinstance(source, pl.LazyFrame):
        return source.collect().to_arrow()
    if isinstance(source, pl.DataFrame):
        return source.to_arrow()
    if isinstance(source, duckdb.DuckDBPyRelation):
        return source.to_arrow_table()
    if isinstance(source, duckdb.DuckDBPyConnection):
        try:
            return source.table(table).to_arrow_table()
        except duckdb.Error as exc:
            raise BackendError(f"The DuckDB connection has no table {table!r}: {exc}") from exc
    if isinstance(source, Mapping):
        if not all(isinstance(key, str) for key in source):
            raise fail("open_backend", "source", "a dict with str keys", list(source))
        try:
            return pa.table({key: np.asarray(value) for key, value in source.items()})
        except (pa.ArrowException, ValueError) as exc:
            raise fail("open_backend", "source", "a dict of equal-length 1-d arrays", exc) from exc
    raise ParameterError(
        "The 'source' parameter of open_backend must be a CSV/Parquet path, a pandas, polars, "
        "pyarrow, DuckDB or Spark table, or a dict of numpy arrays. "
        f"Got an object of type {type(source).__module__}.{type(source).__qualname__}."
    )


def check_table(backend: Backend, table: str) -> None:
    """Raise BackendError if ``table`` is not one of the backend's tables."""
    if table not in backend.tables():
        raise BackendError(
            f"The {backend.name} backend has no table {table!r}. Its tables are {backend.tables()}."
        )
