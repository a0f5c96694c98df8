"""The in-memory reference backend: the oracle every other backend must agree with.

Written for obviousness, not speed: each column is a Python list (``None`` is NULL), each row is
evaluated by a direct transcription of the semantics in :mod:`dpcurator.query.ir` and
:mod:`dpcurator.query.backends.base`. Use it for small data and for tests.

Contribution bounding orders a person's groups, and the rows of each kept group, by a SHA-256
digest of ``(seed, person, group key)`` and ``(seed, person, aggregated values)``. Rows with equal
digests carry equal values, so the result does not depend on how ties are broken. The engines use
their own fast hashes, so on data where persons exceed their bounds they may keep other rows than
this oracle (never more rows); on data within the bounds every backend agrees exactly.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pa_compute

from dpcurator.query.backends.base import (
    ARITHMETIC,
    COMPARISONS,
    INT64_MAX,
    INT64_MIN,
    engine_failure,
)
from dpcurator.query.backends.block_sample import columns_with_block, sample_rows
from dpcurator.query.backends.grid import bin_index, clamp_total, grid_value
from dpcurator.query.backends.plan_checks import check_plan, expr_type
from dpcurator.query.backends.results import empty_values
from dpcurator.query.backends.sources import check_table, to_arrow
from dpcurator.query.backends.types import cast_error, check_column_types, needed_casts
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

Row = Mapping[str, object]
Key = tuple[ScalarValue, ...]

_ARROW_TYPES = {"int": pa.int64(), "float": pa.float64(), "string": pa.string(), "bool": pa.bool_()}


class MemoryBackend:
    """Reference backend over Python lists (one table per name).

    Example:
        >>> backend = MemoryBackend({"t": pa.table({"x": [1, 2, None]})})
        >>> backend.columns("t")
        {'x': 'int64'}
    """

    name = "memory"

    def __init__(self, tables: Mapping[str, pa.Table]) -> None:
        self._columns = {
            name: {field.name: str(field.type) for field in table.schema}
            for name, table in tables.items()
        }
        self._rows = {name: table.to_pylist() for name, table in tables.items()}

    @classmethod
    def from_source(
        cls, source: object, *, table: str, column_types: Mapping[str, str] | None = None
    ) -> MemoryBackend:
        """Load any source accepted by :func:`~dpcurator.query.backends.sources.to_arrow`.

        Declared ``column_types`` are applied with Arrow's safe casts, which refuse inexact
        conversions (DomainError); CSV columns declared strings are read as text.
        """
        declared = check_column_types(column_types)
        text = [name for name, kind in declared.items() if kind == "string"]
        data = to_arrow(source, table, text)
        types = {field.name: str(field.type) for field in data.schema}
        for name, kind in needed_casts(declared, types, table=table).items():
            index = data.column_names.index(name)
            try:
                converted = pa_compute.cast(data[name], _ARROW_TYPES[kind], safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise cast_error("Arrow", table, name, kind, types[name]) from exc
            data = data.set_column(index, name, converted)
        return cls({table: data})

    def tables(self) -> list[str]:
        """Return the table names."""
        return list(self._rows)

    def columns(self, table: str) -> dict[str, str]:
        """Return the column names of ``table`` mapped to Arrow type names."""
        check_table(self, table)
        return dict(self._columns[table])

    def close(self) -> None:
        """Nothing to release."""

    def compute(self, plan: AggregatePlan) -> ExactResult:
        """Evaluate ``plan`` row by row (any failure: ``BackendError(ENGINE_FAILURE_MESSAGE)``)."""
        check_plan(plan, self.columns(plan.table))
        try:
            return self._compute(plan)
        except Exception:
            raise engine_failure(self.name, plan) from None

    def _compute(self, plan: AggregatePlan) -> ExactResult:
        types = columns_with_block(plan, self._columns[plan.table])
        person = plan.bound.person_column
        key_set = None if plan.group_keys is None else set(plan.group_keys)
        table = self._rows[plan.table]
        if plan.sample is not None and person is not None:
            table = sample_rows(table, plan.sample, person)
        # (group key, person or row number, aggregated values) of each selected row
        selected: list[tuple[Key, object, tuple[object, ...]]] = []
        for index, row in enumerate(table):
            if plan.where is not None and evaluate(plan.where, row, types) is not True:
                continue
            key = tuple(_canonical(evaluate(group.expr, row, types)) for group in plan.group_by)
            if key_set is not None and key not in key_set:
                continue
            unit = index if person is None else row[person]
            if unit is None:
                continue
            values = tuple(
                None if agg.expr is None else evaluate(agg.expr, row, types)
                for agg in plan.aggregates
            )
            selected.append((key, unit, values))  # type: ignore[arg-type]
        if person is not None:
            selected = _bound(selected, plan)
        by_group: dict[Key, list[tuple[object, tuple[object, ...]]]] = defaultdict(list)
        for key, unit, values in selected:
            by_group[key].append((unit, values))
        groups: dict[Key, dict[str, object]] = {}
        for key, rows in by_group.items():
            groups[key] = {
                agg.name: _aggregate(agg, [(unit, values[i]) for unit, values in rows])
                for i, agg in enumerate(plan.aggregates)
            }
        if not plan.group_by and () not in groups:
            groups[()] = empty_values(plan)
        return ExactResult(groups=groups)


_NAN = math.nan


def _canonical(value: object) -> object:
    """One NaN object for every NaN group key, so NaN keys form one group (as in the engines)."""
    return _NAN if isinstance(value, float) and math.isnan(value) else value


def _digest(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _bound(
    selected: list[tuple[Key, object, tuple[object, ...]]], plan: AggregatePlan
) -> list[tuple[Key, object, tuple[object, ...]]]:
    """Keep max_groups groups per person and max_rows_per_group rows per kept (person, group)."""
    bound = plan.bound
    cells: dict[tuple[object, Key], list[tuple[object, ...]]] = defaultdict(list)
    for key, unit, values in selected:
        cells[(unit, key)].append(values)
    groups_of: dict[object, list[Key]] = defaultdict(list)
    for unit, key in cells:
        groups_of[unit].append(key)
    kept: list[tuple[Key, object, tuple[object, ...]]] = []
    for unit, keys in groups_of.items():
        ranked = sorted(keys, key=lambda key: (_digest(bound.seed, unit, key), repr(key)))
        for key in ranked[: bound.max_groups]:
            rows = sorted(cells[(unit, key)], key=lambda v: _digest(bound.seed, unit, v))
            kept.extend((key, unit, values) for values in rows[: bound.max_rows_per_group])
    return kept


def _aggregate(agg: ExactAggregate, rows: list[tuple[object, object]]) -> object:
    """Compute one aggregate over the (person, value) pairs of a group."""
    if agg.kind == "count":
        return len(rows)
    if agg.kind == "count_persons":
        return len({unit for unit, _ in rows})
    values = [v for v in (_clamped(agg, value) for _, value in rows) if v is not None]
    if agg.kind == "histogram":
        counts = np.zeros(agg.bins, dtype=np.int64)
        for value in values:
            counts[bin_index(agg, value)] += 1
        return counts
    return clamp_total(sum(grid_value(agg, value) for value in values))


def _clamped(agg: ExactAggregate, value: object) -> float | None:
    """Return the fill for NULL/NaN, else the value clamped to [lower, upper], as a float."""
    assert agg.lower is not None
    assert agg.upper is not None
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None if agg.fill is None else float(agg.fill)
    return min(max(float(value), float(agg.lower)), float(agg.upper))  # type: ignore[arg-type]


def evaluate(expr: Expr, row: Row, types: Mapping[str, str]) -> object:  # noqa: PLR0912
    """Evaluate an expression on one row by the rules of :mod:`dpcurator.query.ir` (``None`` is
    NULL); ``types`` maps the table's columns to their engine types (see
    :func:`~dpcurator.query.backends.plan_checks.expr_type`)."""
    match expr:
        case Col(name=name):
            return row[name]
        case Lit(value=literal):
            return literal
        case BinOp(op=op, left=left, right=right):
            return _arithmetic(op, evaluate(left, row, types), evaluate(right, row, types))
        case Compare(op=op, left=left, right=right):
            return _compare(op, evaluate(left, row, types), evaluate(right, row, types))
        case And(args=args):
            return _kleene([evaluate(arg, row, types) for arg in args], absorbing=False)
        case Or(args=args):
            return _kleene([evaluate(arg, row, types) for arg in args], absorbing=True)
        case Not(arg=arg):
            truth = evaluate(arg, row, types)
            return None if truth is None else not truth
        case IsNull(arg=arg):
            return evaluate(arg, row, types) is None
        case In(arg=arg, values=listed):
            return _in(evaluate(arg, row, types), listed)
        case Between(arg=arg, low=low, high=high):
            between = And((Compare("<=", low, arg), Compare("<=", arg, high)))
            return evaluate(between, row, types)
        case Case(whens=whens, default=default):
            chosen = next(
                (value for condition, value in whens if evaluate(condition, row, types) is True),
                default,
            )
            result = None if chosen is None else evaluate(chosen, row, types)
            return _as_type(result, expr_type(expr, types))
        case Func(name="coalesce", args=args):
            found = next(
                (v for v in (evaluate(a, row, types) for a in args) if v is not None), None
            )
            return _as_type(found, expr_type(expr, types))
        case Func(name=name, args=args):
            return _function(name, [evaluate(arg, row, types) for arg in args])
    raise AssertionError(f"unknown expression {expr!r}")  # pragma: no cover


def _as_type(value: object, static: str) -> object:
    """An int taken by an expression of static type float (CASE, coalesce) becomes a float."""
    if static == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int64(value: int) -> int | None:
    """``value`` if it fits in int64, else NULL (integer overflow is NULL)."""
    return value if INT64_MIN <= value <= INT64_MAX else None


def _arithmetic(op: str, a: object, b: object) -> object:
    """Two ints: exact, NULL outside int64. Otherwise IEEE doubles (±inf, NaN). ``/`` is the
    double quotient, NULL for a zero divisor."""
    if a is None or b is None:
        return None
    if op == "/":
        divisor = float(b)  # type: ignore[arg-type]
        return None if divisor == 0 else float(a) / divisor  # type: ignore[arg-type]
    if _is_int(a) and _is_int(b):
        return _int64(ARITHMETIC[op](a, b))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return ARITHMETIC[op](float(a), float(b))
    return ARITHMETIC[op](a, b)


def _compare(op: str, a: object, b: object) -> bool | None:
    """SQL comparison: NULL if either side is NULL; an int and a float compare as doubles, and
    NaN equals NaN and is above every other double (the engines' total order)."""
    if a is None or b is None:
        return None
    if isinstance(a, float) or isinstance(b, float):
        return COMPARISONS[op](_double_order(a), _double_order(b))  # type: ignore[no-any-return]
    return COMPARISONS[op](a, b)  # type: ignore[no-any-return]


def _double_order(value: object) -> tuple[bool, float]:
    number = float(value)  # type: ignore[arg-type]
    return (True, 0.0) if math.isnan(number) else (False, number)


def _kleene(values: list[object], *, absorbing: bool) -> bool | None:
    """Three-valued AND (absorbing=False) or OR (absorbing=True)."""
    if any(value is absorbing for value in values):
        return absorbing
    if any(value is None for value in values):
        return None
    return not absorbing


def _in(value: object, values: tuple[ScalarValue, ...]) -> bool | None:
    if not values:
        return False
    if value is None:
        return None
    if any(candidate is not None and _compare("=", value, candidate) for candidate in values):
        return True
    return None if None in values else False


def _function(name: str, args: list[object]) -> object:
    (value,) = args
    if value is None:
        return None
    if name == "lower":
        return str(value).lower()
    if name == "upper":
        return str(value).upper()
    if name == "length":
        return len(str(value))
    if name == "abs":
        return _int64(abs(value)) if _is_int(value) else abs(value)  # type: ignore[arg-type]
    if _is_int(value) or not math.isfinite(value):  # type: ignore[arg-type]
        return value  # integers, infinities and NaN are their own round, floor and ceil
    if name == "round":
        return float(Decimal(value).to_integral_value(ROUND_HALF_UP))  # type: ignore[arg-type]
    return float(math.floor(value) if name == "floor" else math.ceil(value))  # type: ignore[call-overload]
