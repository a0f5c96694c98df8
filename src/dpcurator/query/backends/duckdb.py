"""The embedded default backend: one DuckDB SQL query per plan.

Every data value (literals, bounds, seeds, public keys) is a bound ``?`` parameter with an explicit
``CAST``, so no value is ever spliced into SQL text; identifiers are double-quoted with embedded
quotes doubled. The query is a pipeline of common table expressions::

    base     filter; evaluate group keys, person id and aggregated values
    keyed    SEMI JOIN with the public key set (NULL-safe, one LIST parameter per key column),
             when given and persons are bounded; without bounding the caller keeps the public
             keys among the aggregated groups instead (equivalent, and it filters a few groups
             instead of every row: see :func:`keys_after_grouping`)
    bounded  hash keys, then DENSE_RANK over a person's groups and the row's position within
             (person, group), all from ONE sort of each person's rows (see :func:`_bounding`);
             the hashes are materialised first because DuckDB rejects volatile window orderings,
             and ``rn < k`` is the fast form on DuckDB (``rn <= k`` triggers a slower top-N
             rewrite)
    final    one CASE per value (clamp / fill / round half-even to the grid 2**k), GROUP BY,
             integer sums without per-row overflow checks (refused afterwards if they could
             overflow: see :func:`.base.check_sum_overflow`)

Fixed-point columns (:class:`~dpcurator.query.ir.FixedPointColumn`, from the public bounds) are
computed once when the table is materialised; a row-level sum of a bare column on the same bounds
and grid then reads its INTEGER/BIGINT column with a plain SUM and COUNT, with no per-row work
(fill and offset are applied to the group totals: ``SUM(g) - offset·COUNT(g) + (fill - offset) ·
(rows - COUNT(g))``). Likewise key-code columns (:class:`~dpcurator.query.ir.KeyCodeColumn`): a
row-level plan grouped by a column with public keys groups its small integer code instead (much
cheaper than hashing text) and the codes are mapped back to keys afterwards. Bounded (user-level)
plans read the values themselves: their row and group hashes are computed from them.

The bounding hash is DuckDB's ``hash(person, group key..., seed)`` for groups and
``hash(person, aggregated values..., seed)`` for rows (see :mod:`.memory` on why ties are harmless).
User-level tables also get bounding columns (:class:`~dpcurator.query.ir.BoundingColumn`): one
flag per row saying whether the bounding of an unfiltered plan, ungrouped or grouped by one
public-key column, keeps it (one sort of the table each, when it is opened; rows are ordered by
a hash of the whole row, which also depends on the person's own rows only). Such a plan reads the
flag, the fixed-point and the key-code columns, with no window at query time.

A materialised private copy never changes, so a whole-table count (no filter, no grouping,
row-level) is its size, recorded when it was created, without a query.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa

from dpcurator._cache import LruCache
from dpcurator.errors import BackendError, DPError
from dpcurator.query.backends.base import (
    HIDDEN_PREFIX,
    bin_index,
    check_plan,
    check_table,
    collect_rows,
    engine_failure,
    expr_type,
    file_format,
    grid_scales,
    grid_value,
    is_path,
    max_grid_value,
    to_arrow,
)
from dpcurator.query.backends.types import (
    cast_error,
    check_column_types,
    is_fractional,
    needed_casts,
    text_columns,
    type_class,
)
from dpcurator.query.ir import (
    AggregatePlan,
    And,
    Between,
    BinOp,
    BoundingColumn,
    Case,
    Col,
    Compare,
    ExactAggregate,
    ExactResult,
    Expr,
    FixedPointColumn,
    Func,
    In,
    IsNull,
    KeyCodeColumn,
    Lit,
    Not,
    Or,
    PrecomputedColumns,
    ScalarValue,
)

_SQL_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "BOOLEAN"),  # before int: bool is an int subclass
    (int, "BIGINT"),
    (float, "DOUBLE"),
    (str, "VARCHAR"),
)
_OPERATORS = {"!=": "<>"}
_DECLARED_SQL = {"int": "BIGINT", "float": "DOUBLE", "string": "VARCHAR", "bool": "BOOLEAN"}
_CODE_TYPES = (("UTINYINT", 2**8), ("USMALLINT", 2**16), ("UINTEGER", 2**32))
_STAGING = HIDDEN_PREFIX + "source"
_PRIVATE_NAMES = itertools.count()  # several backends may share one connection
_INTEGER_TEXT = r"\s*[+-]?[0-9]+\s*"  # DuckDB would round '1.5' to 2: text must be an integer
#: At most this many cells in a table's :class:`Cube` (its key-code columns with the fewest keys
#: are its dimensions, as many as fit).
CUBE_CELLS = 65_536
_CUBE_ROWS = f'"{HIDDEN_PREFIX}n"'


def _clustering(hidden: Hidden) -> str:
    """``ORDER BY`` the key-code columns, smallest key set first ('' when there are none).

    A private copy stored clustered by its public-key codes is aggregated by those codes in long
    runs of equal values (DuckDB's perfect-hash GROUP BY then costs about 40% less CPU on the
    service benchmark's mix) and lets zone maps skip row groups for filters on key columns. The
    order depends on public metadata only, and no exact aggregate depends on the row order.
    """
    codes = sorted(hidden.key_codes.values(), key=lambda named: len(named[1].keys))
    return " ORDER BY " + ", ".join(quote(name) for name, _ in codes) if codes else ""


def _cube_dimensions(coded: list[KeyCodeColumn]) -> frozenset[str]:
    """The key-code columns a :class:`Cube` is built over: fewest keys first, while the number
    of cells (keys + 1 for NULL, per column, multiplied) stays within :data:`CUBE_CELLS`."""
    chosen: list[str] = []
    cells = 1
    for spec in sorted(coded, key=lambda spec: len(spec.keys)):
        cells *= len(spec.keys) + 1
        if cells > CUBE_CELLS:
            break
        chosen.append(spec.column)
    return frozenset(chosen)


def _cube_sql(hidden: Hidden, target: str) -> str:
    """The SELECT that builds ``hidden.cube`` from the private copy ``target``."""
    assert hidden.cube is not None
    columns = [quote(hidden.key_codes[c][0]) for c in sorted(hidden.cube.dimensions)]
    columns.append(f"COUNT(*) AS {_CUBE_ROWS}")
    for name, _ in hidden.fixed_point.values():
        columns.append(f"SUM({quote(name)}) AS {quote(name + '_s')}")
        columns.append(f"COUNT({quote(name)}) AS {quote(name + '_c')}")
    return f"SELECT {', '.join(columns)} FROM {quote(target)} GROUP BY ALL"


def _cast(name: str, declared: str, engine_type: str) -> str:
    """The SQL converting column ``name`` to its declared type exactly (error() otherwise)."""
    column = quote(name)
    converted = f"CAST({column} AS {_DECLARED_SQL[declared]})"
    if declared != "int":
        return converted
    if is_fractional(engine_type):
        exact = f"{column} = trunc({column})"
    elif type_class(engine_type) == "string":
        exact = f"regexp_full_match({column}, '{_INTEGER_TEXT}')"
    else:
        return converted
    return f"(CASE WHEN {column} IS NULL OR {exact} THEN {converted} ELSE error('inexact') END)"


def quote(identifier: str) -> str:
    """Quote an SQL identifier (embedded double quotes are doubled)."""
    return '"' + identifier.replace('"', '""') + '"'


class _Sql:
    """Accumulates named parameters (``$p0``, ``$p1``...) while translating IR to DuckDB SQL.

    ``columns`` (column -> DuckDB type) gives expressions their static types
    (:func:`~.base.expr_type`): integer arithmetic is computed in HUGEINT, where no product or sum
    of two int64 overflows, and ``TRY_CAST`` back to BIGINT makes a result outside int64 NULL;
    float arithmetic is on DOUBLE, where DuckDB 2 gives ±inf and NaN instead of errors.
    """

    def __init__(self, columns: Mapping[str, str] | None = None) -> None:
        self.params: dict[str, object] = {}
        self.columns: Mapping[str, str] = columns or {}

    def literal(self, value: ScalarValue) -> str:
        """A typed, bound parameter for ``value`` (NULL is the keyword, not a parameter)."""
        if value is None:
            return "NULL"
        sql_type = next(name for kind, name in _SQL_TYPES if isinstance(value, kind))
        name = f"p{len(self.params)}"
        self.params[name] = value
        return f"CAST(${name} AS {sql_type})"

    def column(self, values: list[ScalarValue]) -> str:
        """A typed, bound LIST parameter (one parameter, however many values: fast to bind).

        The element type is the widest of the values' types (an int and a float make DOUBLE).
        """
        kinds = {
            next(name for kind, name in _SQL_TYPES if isinstance(v, kind))
            for v in values
            if v is not None
        }
        sql_type = "DOUBLE" if kinds == {"BIGINT", "DOUBLE"} else next(iter(kinds), "VARCHAR")
        name = f"p{len(self.params)}"
        self.params[name] = values
        return f"CAST(${name} AS {sql_type}[])"

    def expr(self, expr: Expr) -> str:  # noqa: PLR0912 (one branch per IR node)
        """The SQL text of an expression."""
        match expr:
            case Col(name=name):
                return quote(name)
            case Lit(value=literal):
                return self.literal(literal)
            case BinOp(op="/", left=left, right=right):
                divisor = f"NULLIF({self.double(right)}, 0)"
                return f"({self.double(left)} / {divisor})"
            case BinOp(op=op, left=left, right=right):
                return self.arithmetic(expr, op, left, right)
            case Compare(op=op, left=left, right=right):
                return f"({self.expr(left)} {_OPERATORS.get(op, op)} {self.expr(right)})"
            case And(args=args):
                return "(" + " AND ".join(self.expr(arg) for arg in args) + ")"
            case Or(args=args):
                return "(" + " OR ".join(self.expr(arg) for arg in args) + ")"
            case Not(arg=arg):
                return f"(NOT {self.expr(arg)})"
            case IsNull(arg=arg):
                return f"({self.expr(arg)} IS NULL)"
            case In(values=()):
                return "FALSE"
            case In(arg=arg, values=values):
                listed = ", ".join(self.literal(value) for value in values)
                return f"({self.expr(arg)} IN ({listed}))"
            case Between(arg=arg, low=low, high=high):
                lower = f"({self.expr(low)} <= {self.expr(arg)})"
                return f"({lower} AND ({self.expr(arg)} <= {self.expr(high)}))"
            case Case(whens=whens, default=default):
                parts = " ".join(f"WHEN {self.expr(c)} THEN {self.expr(v)}" for c, v in whens)
                otherwise = "NULL" if default is None else self.expr(default)
                return f"(CASE {parts} ELSE {otherwise} END)"
            case Func(name="abs", args=(arg,)) if self.type(arg) == "int":
                return f"TRY_CAST(abs(CAST({self.expr(arg)} AS HUGEINT)) AS BIGINT)"
            case Func(name="round" | "floor" | "ceil", args=(arg,)) if self.type(arg) == "int":
                return self.expr(arg)  # an integer is its own (DuckDB's floor would make a DOUBLE)
            case Func(name=name, args=args):
                return f"{name}(" + ", ".join(self.expr(arg) for arg in args) + ")"
        raise AssertionError(f"unknown expression {expr!r}")  # pragma: no cover

    def type(self, expr: Expr) -> str:
        """The static type of ``expr`` (see :func:`~.base.expr_type`)."""
        return expr_type(expr, self.columns)

    def double(self, expr: Expr) -> str:
        """``expr`` as a DOUBLE (NULL where it cannot be one)."""
        return f"TRY_CAST({self.expr(expr)} AS DOUBLE)"

    def arithmetic(self, node: BinOp, op: str, left: Expr, right: Expr) -> str:
        """``left op right`` for ``+ - *``: int64 (NULL on overflow), double, or the engine's own
        operator wrapped in TRY for other types."""
        kind = self.type(node)
        if kind in ("int", "null"):
            wide = f"CAST({self.expr(left)} AS HUGEINT) {op} CAST({self.expr(right)} AS HUGEINT)"
            return f"TRY_CAST({wide} AS BIGINT)"
        if kind == "float":
            return f"({self.double(left)} {op} {self.double(right)})"
        return f"TRY({self.expr(left)} {op} {self.expr(right)})"

    def clamped(
        self,
        agg: ExactAggregate,
        column: str,
        inside: Callable[[str], str],
        at: Callable[[float], str],
    ) -> str:
        """``inside(value)`` for a value within the bounds, else ``at(bound)`` or ``at(fill)``.

        One CASE whose first branch takes the common in-range rows: DuckDB's least/greatest cost
        several times a comparison, and ``isnan`` is evaluated only on rows above the upper bound
        (DuckDB orders NaN above every number; NULL fails every comparison and reaches ELSE).
        """
        assert agg.lower is not None  # checked by check_plan
        assert agg.upper is not None
        value = f"TRY_CAST({column} AS DOUBLE)"
        lower, upper = self.literal(float(agg.lower)), self.literal(float(agg.upper))
        missing = "NULL" if agg.fill is None else at(float(agg.fill))
        return (
            f"(CASE WHEN {value} BETWEEN {lower} AND {upper} THEN {inside(value)} "
            f"WHEN {value} < {lower} THEN {at(agg.lower)} "
            f"WHEN {value} > {upper} AND NOT isnan({value}) THEN {at(agg.upper)} "
            f"ELSE {missing} END)"
        )

    def grid(self, agg: ExactAggregate, value: str) -> str:
        """The grid integer of an in-range DOUBLE ``value`` (squared for sum_squares), minus the
        aggregate's offset.

        Scaling by 2**-k is exact, and DuckDB's CAST(DOUBLE AS BIGINT) rounds half to even
        (``nearbyint``), exactly like ``round_even`` at a fraction of its cost; the conformance
        tests pin both facts against the oracle.
        """
        scaled = f"({value} * {value})" if agg.kind == "sum_squares" else value
        for factor in grid_scales(agg.grid_exponent):
            scaled = f"({scaled} * {self.literal(factor)})"
        grid = f"TRY_CAST({scaled} AS BIGINT)"
        return f"({grid} - {self.literal(agg.offset)})" if agg.offset else grid

    def fixed_point(self, spec: FixedPointColumn, column: str) -> str:
        """The SQL of a fixed-point column (see :class:`~dpcurator.query.ir.FixedPointColumn`):
        INTEGER when every grid value fits in 32 bits, else BIGINT."""
        agg = _fixed_point_sum(spec)
        value = self.clamped(agg, column, lambda v: self.grid(agg, v), self._grid_literal(agg))
        narrow = max_grid_value(agg) < 2**31
        return f"TRY_CAST({value} AS {'INTEGER' if narrow else 'BIGINT'})"

    def key_code(self, spec: KeyCodeColumn, column: str) -> str:
        """The SQL of a key-code column (see :class:`~dpcurator.query.ir.KeyCodeColumn`)."""
        width = next(t for t, size in _CODE_TYPES if len(spec.keys) <= size)
        position = f"list_position({self.column(list(spec.keys))}, {column})"
        return f"CAST({position} - 1 AS {width})"

    def bounding(self, spec: BoundingColumn, row: list[str], code: str | None) -> str:
        """The SQL of a bounding column (see :class:`~dpcurator.query.ir.BoundingColumn`) over
        columns ``row`` (the person column among them) and the quoted key-code column ``code``
        of ``spec.group``; the same one-sort ranking as :func:`_bounding`, with rows ordered by
        a hash of the whole row."""
        assert spec.bound.person_column is not None
        pid = quote(spec.bound.person_column)
        seed = self.literal(spec.bound.seed)
        rows = self.literal(spec.bound.max_rows_per_group)
        row_hash = f"hash({', '.join([pid, *row, seed])})"
        if code is None:
            rank = f"ROW_NUMBER() OVER (PARTITION BY {pid} ORDER BY {row_hash})"
            return f"({pid} IS NOT NULL AND {rank} <= {rows})"
        window = f"PARTITION BY {pid}, {code} IS NULL ORDER BY hash({pid}, {code}, {seed}), {code}"
        place = f"ROW_NUMBER() OVER ({window}, {row_hash}) - RANK() OVER ({window})"
        groups = self.literal(spec.bound.max_groups)
        return (
            f"({pid} IS NOT NULL AND {code} IS NOT NULL"
            f" AND DENSE_RANK() OVER ({window}) <= {groups} AND {place} < {rows})"
        )

    def fixed_point_sum(self, agg: ExactAggregate, column: str, cube: bool = False) -> str:
        """A row-level ``sum`` read from the fixed-point ``column`` (group totals only), or
        from its per-cell sums and counts in the table's :class:`Cube` if ``cube``."""
        values, present, rows = (
            (
                f"SUM({quote(column + '_s')})",
                _cube_sum(quote(column + "_c")),
                _cube_sum(_CUBE_ROWS),
            )
            if cube
            else (f"SUM({column})", f"COUNT({column})", "COUNT(*)")
        )
        total = f"CAST(COALESCE({values}, 0) AS HUGEINT)"  # exact: clamped by collect_rows
        if agg.offset:
            total += f" - CAST({self.literal(agg.offset)} AS HUGEINT) * {present}"
        if agg.fill is not None:
            missing = grid_value(agg, float(agg.fill))  # already minus the offset
            total += f" + CAST({self.literal(missing)} AS HUGEINT) * ({rows} - {present})"
        return total

    def _grid_literal(self, agg: ExactAggregate) -> Callable[[float], str]:
        return lambda x: self.literal(grid_value(agg, float(x)))

    def bin(self, agg: ExactAggregate, value: str) -> str:
        """The histogram bin of an in-range DOUBLE ``value`` (the last bin includes ``upper``)."""
        assert agg.lower is not None
        assert agg.upper is not None
        scaled = (
            f"({value} - {self.literal(float(agg.lower))}) / "
            f"{self.literal(float(agg.upper - agg.lower))} * {self.literal(agg.bins)}"
        )
        return f"least(TRY_CAST(floor({scaled}) AS BIGINT), {self.literal(agg.bins - 1)})"

    def histogram_bin(self, agg: ExactAggregate, column: str) -> str:
        """The bin of each row of a histogram over ``column`` (NULL, which no bin counts, for a
        missing value without fill)."""
        return self.clamped(
            agg, column, lambda v: self.bin(agg, v), lambda x: self.literal(bin_index(agg, x))
        )

    def aggregate(self, agg: ExactAggregate, column: str, *, bounded: bool) -> str:
        """The SQL aggregate of ``agg`` over ``column`` (persons are rows unless ``bounded``)."""
        if agg.kind == "count":
            return "COUNT(*)"
        if agg.kind == "count_persons":
            return f"COUNT(DISTINCT {quote('__dp_pid')})" if bounded else "COUNT(*)"
        if agg.kind == "histogram":
            return f"histogram({self.histogram_bin(agg, column)})"
        grid = self.clamped(agg, column, lambda v: self.grid(agg, v), self._grid_literal(agg))
        return f"SUM({grid})"  # HUGEINT: exact (collect_rows clamps the total)


def build_query(
    plan: AggregatePlan,
    relation: str | None = None,
    hidden: Hidden | None = None,
    columns: Mapping[str, str] | None = None,
) -> tuple[str, dict[str, object]]:
    """Translate a checked plan into one DuckDB query and its bound parameters.

    ``relation`` is the table or view read (default: ``plan.table``); ``hidden`` names the
    precomputed columns of that relation; ``columns`` are its column types (for the static types
    of expressions: without them every column is of an unknown type). Groups listed by
    :func:`coded_groups` come back as codes (see :func:`decode_groups`).
    """
    sql = _Sql(columns)
    groups = [quote(f"__dp_g{i}") for i in range(len(plan.group_by))]
    values = {
        agg.name: quote(f"__dp_v{i}")
        for i, agg in enumerate(plan.aggregates)
        if agg.expr is not None
    }
    person = plan.bound.person_column
    hidden = hidden or Hidden()
    bounding = precomputed_bounding(plan, hidden)
    bound_here = person is not None and bounding is None  # bounded by this query's windows
    precomputed = {} if bound_here else _fixed_point_sums(plan, hidden.fixed_point)
    coded = coded_groups(plan, hidden)
    if cube_serves(plan, hidden):
        return _cube_query(sql, plan, hidden, groups, precomputed), sql.params
    pid = quote("__dp_pid")
    select = [
        f"{quote(coded[i][0]) if i in coded else sql.expr(g.expr)} AS {name}"
        for i, (g, name) in enumerate(zip(plan.group_by, groups, strict=True))
    ]
    if person is not None:
        select.append(f"{quote(person)} AS {pid}")
    select += [
        f"{precomputed.get(agg.name) or sql.expr(agg.expr)} AS {values[agg.name]}"
        for agg in plan.aggregates
        if agg.expr is not None
    ]
    select = select or ["*"]  # counts only: DuckDB reads no column (or just the row count)
    conditions = [] if plan.where is None else [sql.expr(plan.where)]
    if bounding is not None:
        conditions.append(quote(bounding[0]))
    elif person is not None:
        conditions.append(f"{quote(person)} IS NOT NULL")
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    table = quote(relation or plan.table)
    trivial = counts_whole_table(plan)  # read the table directly (DuckDB keeps its row count)
    ctes = [] if trivial else [f"__dp_base AS (SELECT {', '.join(select)} FROM {table}{where})"]
    source = table if trivial else "__dp_base"
    # Without bounding, dropping rows outside the public keys before grouping equals dropping
    # groups after it: the caller drops those few groups (see keys_after_grouping).
    if bound_here and plan.group_keys is not None:
        ctes.append(f"__dp_keyed AS ({_key_filter(sql, plan.group_keys, groups, source)})")
        source = "__dp_keyed"
    if bound_here:
        ctes.append(f"__dp_bounded AS ({_bounding(sql, plan, source, groups, values)})")
        source = "__dp_bounded"
    histogram = binned_histogram(plan)
    if histogram is not None:  # GROUP BY the bin: ~1.5x faster than DuckDB's histogram()
        binned = sql.histogram_bin(histogram, values[histogram.name])
        aggregated = f"SELECT {binned} AS __dp_bin, COUNT(*) FROM {source} GROUP BY __dp_bin"
    else:
        aggregates = [
            (
                sql.fixed_point_sum(agg, values[agg.name])
                if agg.name in precomputed
                else sql.aggregate(agg, values.get(agg.name, "NULL"), bounded=person is not None)
            )
            + f" AS {quote(agg.name)}"
            for agg in plan.aggregates
        ]
        outputs = [*groups, "COUNT(*) AS __dp_rows", *aggregates]
        if paced(plan, hidden):
            outputs.append(f"any_value({groups[0]}) AS __dp_pace")
        aggregated = f"SELECT {', '.join(outputs)} FROM {source}"
        aggregated += f" GROUP BY {', '.join(groups)}" if groups else ""
    query = f"WITH {', '.join(ctes)} {aggregated}" if ctes else aggregated
    return query, sql.params


def cube_serves(plan: AggregatePlan, hidden: Hidden) -> bool:
    """Whether the table's :class:`Cube` answers ``plan`` exactly: row-level, filtered at most
    by :func:`_cube_conditions`, grouped only by cube dimensions, counts and precomputed
    fixed-point sums only."""
    cube = hidden.cube
    if cube is None or plan.bound.person_column is not None:
        return False
    if plan.where is not None and _cube_conditions(plan.where, hidden) is None:
        return False
    sums = _fixed_point_sums(plan, hidden.fixed_point)
    return all(
        isinstance(g.expr, Col) and g.expr.name in cube.dimensions for g in plan.group_by
    ) and all(agg.kind in ("count", "count_persons") or agg.name in sums for agg in plan.aggregates)


def _cube_query(
    sql: _Sql, plan: AggregatePlan, hidden: Hidden, groups: list[str], sums: Mapping[str, str]
) -> str:
    """The query of a plan that :func:`cube_serves`: the same result columns, summed over the
    cube's cells instead of the table's rows (integer sums: exactly the same values)."""
    assert hidden.cube is not None
    codes = [hidden.key_codes[g.expr.name][0] for g in plan.group_by if isinstance(g.expr, Col)]
    columns = [f"{quote(code)} AS {name}" for code, name in zip(codes, groups, strict=True)]
    columns.append(f"{_cube_sum(_CUBE_ROWS)} AS __dp_rows")
    for agg in plan.aggregates:
        total = (
            sql.fixed_point_sum(agg, hidden.fixed_point[agg.expr.name][0], cube=True)
            if agg.name in sums and isinstance(agg.expr, Col)
            else _cube_sum(_CUBE_ROWS)
        )
        columns.append(f"{total} AS {quote(agg.name)}")
    query = f"SELECT {', '.join(columns)} FROM {quote(hidden.cube.relation)}"
    conditions = [] if plan.where is None else _cube_conditions(plan.where, hidden)
    if conditions:
        query += f" WHERE {' AND '.join(conditions)}"
    return query + (f" GROUP BY {', '.join(groups)}" if groups else "")


def _cube_sum(column: str) -> str:
    """The total of a cube column over the selected cells: 0 over none (as COUNT(*) would be)."""
    return f"COALESCE(SUM({column}), 0)"


def _cube_conditions(where: Expr, hidden: Hidden) -> list[str] | None:
    """``where`` as conditions on the cube's key codes, or None if it is not a conjunction of
    ``column = key`` and bare boolean ``column`` tests on cube dimensions.

    ``column = v`` for a public key ``v`` holds exactly on the rows coded ``v``'s position:
    rows with another value, a value outside the keys (code NULL) or NULL fail both. Keys are
    matched by type as well (True is not 1), and float keys are left alone (-0.0, NaN).
    """
    assert hidden.cube is not None
    parts = where.args if isinstance(where, And) else (where,)
    conditions = []
    for part in parts:
        column: str | None = None
        value: ScalarValue = None
        if isinstance(part, Col):
            column, value = part.name, True
        elif isinstance(part, Compare) and part.op == "=":
            sides = (part.left, part.right)
            columns = [side.name for side in sides if isinstance(side, Col)]
            literals = [side.value for side in sides if isinstance(side, Lit)]
            if len(columns) == 1 and len(literals) == 1:
                column, value = columns[0], literals[0]
        if column is None or column not in hidden.cube.dimensions:
            return None
        name, code = hidden.key_codes[column]
        positions = [
            i
            for i, key in enumerate(code.keys)
            if type(key) is type(value) and not isinstance(key, float) and key == value
        ]
        if not positions:
            return None
        conditions.append(f"{quote(name)} = {positions[0]}")
    return conditions


def paced(plan: AggregatePlan, hidden: Hidden) -> bool:
    """Whether the query of ``plan`` ends with a discarded ``any_value`` of its first group.

    On a copy clustered by key codes (see :func:`_clustering`), DuckDB 2.0's perfect-hash GROUP
    BY runs about twice as fast with that extra aggregate when grouping only by key codes
    (measured: COUNT(*) by one code of 10^6 rows 5.3 -> 2.0 ms, by two codes 5.6 -> 2.7 ms,
    filtered 4.3 -> 3.2 ms; on unclustered rows it does not help, so it is added only here).
    Query-time bounding groups a windowed relation, not the clustered copy: not paced.
    """
    bounded_here = (
        plan.bound.person_column is not None and precomputed_bounding(plan, hidden) is None
    )
    coded = coded_groups(plan, hidden)
    return (
        bool(plan.group_by)
        and not bounded_here
        and len(coded) == len(plan.group_by)
        and not cube_serves(plan, hidden)
    )


def binned_histogram(plan: AggregatePlan) -> ExactAggregate | None:
    """The histogram of an ungrouped plan whose other aggregates are row counts (a quantile's
    plan), which the query computes as rows (bin, count) instead of one histogram() value; or
    None. :func:`unbin` turns those rows back into the plan's one result row."""
    histograms = [agg for agg in plan.aggregates if agg.kind == "histogram"]
    others = [agg for agg in plan.aggregates if agg.kind != "histogram"]
    if plan.group_by or len(histograms) != 1 or any(agg.kind != "count" for agg in others):
        return None
    return histograms[0]


def unbin(plan: AggregatePlan, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The result row ``(rows, aggregate...)`` of a :func:`binned_histogram` plan."""
    total = sum(int(count) for _, count in rows)
    counts = dict(rows)
    return [(total, *(counts if agg.kind == "histogram" else total for agg in plan.aggregates))]


def counts_whole_table(plan: AggregatePlan) -> bool:
    """Whether every aggregate of ``plan`` is the number of rows of its whole table (row-level
    counts without filter or grouping)."""
    return (
        plan.where is None
        and not plan.group_by
        and plan.bound.person_column is None
        and all(agg.kind in ("count", "count_persons") for agg in plan.aggregates)
    )


def keys_after_grouping(plan: AggregatePlan) -> frozenset[tuple[ScalarValue, ...]] | None:
    """The public keys whose groups the caller of :func:`build_query` must keep, or None.

    Without contribution bounding the query groups every row and the public keys are applied to
    its few result groups (in Python: cheaper than binding and joining the key list in SQL);
    with bounding they filter the rows first, inside the query (rows outside the keys must not
    use up a person's groups).
    """
    if plan.group_keys is None or plan.bound.person_column is not None:
        return None
    return frozenset(plan.group_keys)


def precomputed_bounding(plan: AggregatePlan, hidden: Hidden) -> tuple[str, BoundingColumn] | None:
    """The bounding column (see :class:`~dpcurator.query.ir.BoundingColumn`) that decides which
    rows the bounded ``plan`` keeps, or None (row-level plans, filters, other groupings, other
    bounds or keys: the query bounds the rows itself)."""
    if plan.bound.person_column is None or plan.where is not None or len(plan.group_by) > 1:
        return None
    wanted = None  # the grouping column and its public keys
    if plan.group_by:
        expr = plan.group_by[0].expr
        if not isinstance(expr, Col) or plan.group_keys is None:
            return None
        wanted = (expr.name, frozenset(key for (key,) in plan.group_keys))
    for name, spec in hidden.bounding:
        group = None if spec.group is None else (spec.group.column, frozenset(spec.group.keys))
        if spec.bound == plan.bound and group == wanted:
            return name, spec
    return None


def coded_groups(plan: AggregatePlan, hidden: Hidden) -> dict[int, tuple[str, KeyCodeColumn]]:
    """Group positions of a plan that are grouped by key code: a bare column with a key-code
    column holding every public key the plan releases for that position (row-level plans), or
    the column that a precomputed bounding column ranked (bounded plans)."""
    bounding = precomputed_bounding(plan, hidden)
    if bounding is not None:
        ranked = bounding[1].group
        return {} if ranked is None else {0: hidden.key_codes[ranked.column]}
    keys = keys_after_grouping(plan)  # public keys of a row-level plan, or None
    if keys is None:
        return {}
    coded = {}
    for i, group in enumerate(plan.group_by):
        if isinstance(group.expr, Col) and group.expr.name in hidden.key_codes:
            name, spec = hidden.key_codes[group.expr.name]
            if {key[i] for key in keys} <= set(spec.keys):
                coded[i] = (name, spec)
    return coded


def decode_groups(
    rows: list[tuple[Any, ...]], coded: Mapping[int, tuple[str, KeyCodeColumn]]
) -> list[tuple[Any, ...]]:
    """Rows with their group codes replaced by keys; rows of the NULL code (no key) dropped."""
    decoded = []
    for row in rows:
        values = list(row)
        for i, (_, spec) in coded.items():
            code = values[i]
            if code is None:
                break
            values[i] = spec.keys[code]
        else:
            decoded.append(tuple(values))
    return decoded


def _fixed_point_sums(
    plan: AggregatePlan, fixed_point: Mapping[str, tuple[str, FixedPointColumn]]
) -> dict[str, str]:
    """Aggregate name -> quoted fixed-point column, for the sums that such a column answers."""
    found = {}
    for agg in plan.aggregates:
        if agg.kind != "sum" or not isinstance(agg.expr, Col) or agg.expr.name not in fixed_point:
            continue
        column, spec = fixed_point[agg.expr.name]
        if _fixed_point_sum(spec) == replace(agg, name="", fill=None, offset=0):
            found[agg.name] = quote(column)
    return found


def _fixed_point_sum(spec: FixedPointColumn) -> ExactAggregate:
    """The unnamed sum aggregate, without fill or offset, whose values ``spec`` precomputes."""
    return ExactAggregate(
        "", "sum", Col(spec.column), spec.lower, spec.upper, None, spec.grid_exponent
    )


def _key_filter(
    sql: _Sql, keys: tuple[tuple[ScalarValue, ...], ...], groups: list[str], relation: str
) -> str:
    """Rows of ``relation`` whose group key is one of the public ``keys`` (NULL-safe)."""
    if not keys:
        return f"SELECT * FROM {relation} WHERE FALSE"
    names = [quote(f"__dp_k{i}") for i in range(len(groups))]
    # One list parameter per group column, unnested side by side into the key rows.
    columns = ", ".join(
        f"unnest({sql.column([key[i] for key in keys])}) AS {name}" for i, name in enumerate(names)
    )
    on = " AND ".join(
        f"{relation}.{g} IS NOT DISTINCT FROM __dp_keys.{k}"
        for g, k in zip(groups, names, strict=True)
    )
    return f"SELECT {relation}.* FROM {relation} SEMI JOIN (SELECT {columns}) AS __dp_keys ON {on}"


def _bounding(
    sql: _Sql, plan: AggregatePlan, source: str, groups: list[str], values: dict[str, str]
) -> str:
    """Each person's rows cut to ``max_groups`` groups and ``max_rows_per_group`` rows in each.

    One sort serves both limits: the window functions share ``PARTITION BY person`` and their
    orderings share a prefix, so DuckDB evaluates them over one sorted run. A row's position
    inside its (person, group) is its row number in that person's (group hash, group, row hash)
    order minus the RANK of its group (the row number of the group's first row).
    """
    pid = quote("__dp_pid")
    seed = sql.literal(plan.bound.seed)
    hashes = [f"hash({', '.join([pid, *values.values(), seed])}) AS __dp_rh"]
    rows = sql.literal(plan.bound.max_rows_per_group)
    if not groups:
        hashed = f"SELECT *, {hashes[0]} FROM {source}"
        ranked = (
            f"SELECT *, ROW_NUMBER() OVER (PARTITION BY {pid} ORDER BY __dp_rh) - 1 AS __dp_rn"
            f" FROM ({hashed})"
        )
        return f"SELECT * FROM ({ranked}) WHERE __dp_rn < {rows}"
    hashes.insert(0, f"hash({', '.join([pid, *groups, seed])}) AS __dp_gh")
    group_order = ", ".join(["__dp_gh", *groups])
    hashed = f"SELECT *, {', '.join(hashes)} FROM {source}"
    ranked = (
        "SELECT *, DENSE_RANK() OVER __dp_w AS __dp_gr,"
        f" ROW_NUMBER() OVER (PARTITION BY {pid} ORDER BY {group_order}, __dp_rh)"
        " - RANK() OVER __dp_w AS __dp_rn"
        f" FROM ({hashed}) WINDOW __dp_w AS (PARTITION BY {pid} ORDER BY {group_order})"
    )
    return (
        f"SELECT * FROM ({ranked})"
        f" WHERE __dp_gr <= {sql.literal(plan.bound.max_groups)} AND __dp_rn < {rows}"
    )


@dataclass(frozen=True)
class _Built:
    """A plan's query, its parameters and the public keys to keep afterwards (if any)."""

    query: str
    params: dict[str, object]
    keys: frozenset[tuple[ScalarValue, ...]] | None
    coded: dict[int, tuple[str, KeyCodeColumn]]
    whole_table_count: bool
    binned: bool
    paced: bool  # the rows end with the discarded column of :func:`paced`


@dataclass(frozen=True)
class Cube:
    """A row-level private copy's rows counted per cell of some of its key codes: per cell the
    row count and, for each fixed-point column F, its sum ``F_s`` and non-NULL count ``F_c``.

    Built once when the table is opened (one GROUP BY), it answers the grouped counts and sums
    of :func:`cube_serves` (unfiltered, or filtered by ``column = key``) from at most
    :data:`CUBE_CELLS` rows instead of every row.
    Like the precomputed columns it is a function of the private data computed exactly (integer
    sums), so every result equals the table's; which columns it has is public (metadata only).
    """

    relation: str
    dimensions: frozenset[str]  # the columns whose key codes are the cells


@dataclass(frozen=True)
class Hidden:
    """The precomputed columns of one table: column -> (hidden column name, spec)."""

    fixed_point: Mapping[str, tuple[str, FixedPointColumn]] = field(default_factory=dict)
    key_codes: Mapping[str, tuple[str, KeyCodeColumn]] = field(default_factory=dict)
    bounding: tuple[tuple[str, BoundingColumn], ...] = ()
    cube: Cube | None = None


class DuckDBBackend:
    """Exact aggregates on an embedded DuckDB connection.

    Example:
        >>> backend = DuckDBBackend.from_source({"x": [1.0, 2.0]}, table="t")
        >>> backend.tables()
        ['t']
    """

    name = "duckdb"

    def __init__(self, connection: duckdb.DuckDBPyConnection, *, owned: bool) -> None:
        self._connection = connection
        self._owned = owned
        self._lock = threading.Lock()  # temporary views are per connection: no cursors
        self._relations: dict[str, str] = {}  # table -> private typed copy (given connections)
        self._schemas: dict[str, dict[str, str]] = {}  # column types (owned connections only)
        self._queries: LruCache[AggregatePlan, _Built] = LruCache(256)
        self._hidden: dict[str, Hidden] = {}  # table -> its precomputed columns
        self._sizes: dict[str, int] = {}  # table -> rows of its materialised, private copy

    @classmethod
    def from_source(
        cls,
        source: object,
        *,
        table: str,
        column_types: Mapping[str, str] | None = None,
        precomputed: PrecomputedColumns | None = None,
        threads: int | None = None,
    ) -> DuckDBBackend:
        """Load a CSV once, view a Parquet file, register a frame, or wrap an existing connection.

        Declared ``column_types`` are applied when opening (see :mod:`.types`): the table is then
        materialised with the converted columns, so an impossible conversion raises DomainError
        here. A CSV file is always materialised (parsed once, not per query). A DuckDB connection
        is used as is (``table`` must be one of its tables) and is not closed by :meth:`close`;
        when conversions are needed they go to a private temporary table on that connection. A
        DuckDB relation is materialised once through Arrow (a relation cannot be read from another
        connection); pass its connection and a table name for large data.

        ``precomputed`` fixed-point columns (of numeric columns), key-code columns (of any
        column) and bounding columns (specs naming absent columns are ignored) are computed once,
        which materialises the table in DuckDB's memory: a Parquet file or a frame is loaded, a
        given connection's table is copied into a private temporary table (memory: the table
        once more, plus 1 to 8 bytes per row and precomputed column; time: one sort of the table
        per bounding column). Pass none for data larger than memory.
        ``threads`` caps DuckDB's worker threads of a connection opened here (default: one per
        core), e.g. when several server processes share the cores.
        """
        declared = check_column_types(column_types)
        if isinstance(source, duckdb.DuckDBPyConnection):
            backend = cls(source, owned=False)
            check_table(backend, table)
            try:
                backend._expose(table, table, declared, materialise=False, precomputed=precomputed)
            except duckdb.Error as exc:
                raise BackendError(f"DuckDB could not read the table {table!r}: {exc}") from exc
            return backend
        connection = duckdb.connect(config={} if threads is None else {"threads": threads})
        backend = cls(connection, owned=True)
        try:
            materialise = False
            if is_path(source):
                path = os.fspath(source)  # type: ignore[call-overload]
                if file_format(path) == "csv":
                    materialise = True
                    text = text_columns(declared, connection.read_csv(path).columns)
                    relation = connection.read_csv(path, dtype=dict.fromkeys(text, "VARCHAR"))
                else:
                    relation = connection.read_parquet(path)
                relation.to_view(_STAGING)
            elif isinstance(source, pd.DataFrame | pl.DataFrame | pa.Table):
                connection.register(_STAGING, source)
            else:
                connection.register(_STAGING, to_arrow(source, table))
            backend._expose(
                _STAGING, table, declared, materialise=materialise, precomputed=precomputed
            )
        except duckdb.Error as exc:
            connection.close()
            raise BackendError(
                f"DuckDB could not open the source of table {table!r}: {exc}"
            ) from exc
        except DPError:
            connection.close()
            raise
        return backend

    def _expose(
        self,
        source: str,
        table: str,
        declared: Mapping[str, str],
        *,
        materialise: bool,
        precomputed: PrecomputedColumns | None,
    ) -> None:
        """Expose ``source`` as ``table`` with the declared types (see :meth:`from_source`)."""
        types = self._types(source)
        casts = needed_casts(declared, types, table=table)
        specs = precomputed or PrecomputedColumns()
        numeric = [
            spec
            for spec in specs.fixed_point
            if spec.column in types
            and declared.get(spec.column, type_class(types[spec.column])) in ("int", "float")
        ]
        coded = [spec for spec in specs.key_codes if spec.column in types]
        bounding = [
            spec
            for spec in specs.bounding
            if spec.bound.person_column in types and (spec.group is None or spec.group in coded)
        ]
        relation = table if self._owned else f"{_STAGING}{next(_PRIVATE_NAMES)}_{table}"
        dimensions = _cube_dimensions(coded) if not bounding else frozenset()
        self._hidden[table] = Hidden(
            {spec.column: (f"{HIDDEN_PREFIX}fp{i}", spec) for i, spec in enumerate(numeric)},
            {spec.column: (f"{HIDDEN_PREFIX}kc{i}", spec) for i, spec in enumerate(coded)},
            tuple((f"{HIDDEN_PREFIX}bk{i}", spec) for i, spec in enumerate(bounding)),
            Cube(f"{HIDDEN_PREFIX}cube_{relation}", dimensions) if dimensions else None,
        )
        if not self._owned:  # the caller's connection: leave its objects alone
            if casts or numeric or coded or bounding:
                self._relations[table] = relation
                self._create(source, self._relations[table], casts, types, table, temporary=True)
            return
        if not (casts or materialise or numeric or coded or bounding):
            self._connection.execute(f"CREATE VIEW {quote(table)} AS SELECT * FROM {quote(source)}")
            return
        self._create(source, table, casts, types, table, temporary=False)
        self._connection.execute(f"DROP VIEW {quote(source)}")

    def _create(
        self,
        source: str,
        target: str,
        casts: Mapping[str, str],
        types: Mapping[str, str],
        table: str,
        *,
        temporary: bool,
    ) -> None:
        """Create the table ``target`` from ``source`` with ``casts`` applied (DomainError) and
        the fixed-point and key-code columns of ``table`` added."""
        expressions = {name: _cast(name, kind, types[name]) for name, kind in casts.items()}
        replaced = ", ".join(f"{sql} AS {quote(name)}" for name, sql in expressions.items())
        columns = f"* REPLACE ({replaced})" if replaced else "*"
        translator = _Sql()
        hidden = self._hidden[table]
        for name, spec in hidden.fixed_point.values():
            value = expressions.get(spec.column, quote(spec.column))
            columns += f", {translator.fixed_point(spec, value)} AS {quote(name)}"
        for name, code in hidden.key_codes.values():
            value = expressions.get(code.column, quote(code.column))
            columns += f", {translator.key_code(code, value)} AS {quote(name)}"
        select = f"SELECT {columns} FROM {quote(source)}"
        if hidden.bounding:  # ranked over the converted and coded columns
            row = [quote(name) for name in types]
            ranked = ", ".join(
                f"{translator.bounding(spec, row, self._code(hidden, spec))} AS {quote(name)}"
                for name, spec in hidden.bounding
            )
            select = f"SELECT *, {ranked} FROM ({select})"
        select += _clustering(hidden)
        kind = "TEMPORARY TABLE" if temporary else "TABLE"
        try:
            created = self._connection.execute(
                f"CREATE {kind} {quote(target)} AS {select}", translator.params
            ).fetchall()
            # Nothing writes to the copy afterwards: its size answers whole-table counts.
            self._sizes[table] = int(created[0][0])
            if hidden.cube is not None:
                cube = hidden.cube.relation
                self._connection.execute(
                    f"CREATE {kind} {quote(cube)} AS {_cube_sql(hidden, target)}"
                )
        except duckdb.Error as exc:
            for name, sql in expressions.items():  # find the column that cannot be converted
                try:
                    self._connection.execute(f"SELECT count({sql}) FROM {quote(source)}")
                except duckdb.Error:
                    raise cast_error("DuckDB", table, name, casts[name], types[name]) from exc
            raise

    @staticmethod
    def _code(hidden: Hidden, spec: BoundingColumn) -> str | None:
        """The quoted key-code column of a bounding column's group (None when ungrouped)."""
        return None if spec.group is None else quote(hidden.key_codes[spec.group.column][0])

    def _types(self, relation: str) -> dict[str, str]:
        """Column types of ``relation``, without this backend's hidden columns."""
        described = self._connection.table(relation)
        return {
            n: str(t)
            for n, t in zip(described.columns, described.types, strict=True)
            if not n.startswith(HIDDEN_PREFIX)
        }

    def tables(self) -> list[str]:
        """Return the tables and views of the connection (but not this backend's private ones)."""
        query = "SELECT DISTINCT table_name FROM information_schema.tables ORDER BY 1"
        with self._lock:
            rows = self._connection.execute(query).fetchall()
        return [str(row[0]) for row in rows if not str(row[0]).startswith(HIDDEN_PREFIX)]

    def columns(self, table: str) -> dict[str, str]:
        """Return the column names of ``table`` mapped to DuckDB type names."""
        if table.startswith(HIDDEN_PREFIX):
            check_table(self, table)  # raises: private tables are not exposed
        if table in self._schemas:
            return dict(self._schemas[table])
        try:
            with self._lock:
                types = self._types(self._relations.get(table, table))
        except duckdb.CatalogException:
            check_table(self, table)  # raises with the list of tables (listed on error only)
            raise
        if self._owned:  # nobody else can change the tables of a connection this backend owns
            self._schemas[table] = types
        return dict(types)

    def close(self) -> None:
        """Close the connection if this backend opened it (else drop its private tables)."""
        if self._owned:
            self._connection.close()
            return
        cubes = [hidden.cube.relation for hidden in self._hidden.values() if hidden.cube]
        with self._lock:
            for relation in [*self._relations.values(), *cubes]:
                self._connection.execute(f"DROP TABLE IF EXISTS {quote(relation)}")
        self._relations.clear()

    def loaded_copy(self, table: str) -> bool:
        """Whether ``table`` is a private copy this backend loaded, which nothing writes
        afterwards: its exact aggregates never change."""
        return table in self._sizes

    def compute(self, plan: AggregatePlan) -> ExactResult:
        """Run ``plan`` as one DuckDB query (checked and translated once per distinct plan).

        Raises:
            BackendError: the plan names an unknown table or column (checked first), or
                ``ENGINE_FAILURE_MESSAGE`` if anything fails afterwards (details logged).
        """
        built = self._queries.get(plan)
        if built is None:
            check_plan(plan, self.columns(plan.table))
        try:
            return self._compute(plan, built)
        except Exception:
            raise engine_failure(self.name, plan) from None

    def _compute(self, plan: AggregatePlan, built: _Built | None) -> ExactResult:
        if built is None:
            hidden = self._hidden.get(plan.table, Hidden())
            relation = self._relations.get(plan.table)
            query, params = build_query(plan, relation, hidden, self.columns(plan.table))
            built = _Built(
                query,
                params,
                keys_after_grouping(plan),
                coded_groups(plan, hidden),
                counts_whole_table(plan),
                binned_histogram(plan) is not None,
                paced(plan, hidden),
            )
            self._queries.put(plan, built)
        size = self._sizes.get(plan.table) if built.whole_table_count else None
        if size is not None:  # COUNT(*) of a table that cannot change: its known size
            return collect_rows(plan, [(size,) * (1 + len(plan.aggregates))])
        with self._lock:
            rows = self._connection.execute(built.query, built.params).fetchall()
        if built.paced:
            rows = [row[:-1] for row in rows]
        if built.binned:
            rows = unbin(plan, rows)
        if built.coded:
            rows = decode_groups(rows, built.coded)
        if built.keys is not None:
            width = len(plan.group_by)
            rows = [row for row in rows if row[:width] in built.keys]
        return collect_rows(plan, rows)
