"""Translating IR expressions and aggregates into DuckDB SQL (see :mod:`.duckdb_query`).

Every data value (literals, bounds, seeds, public keys) is a bound ``$p`` parameter with an
explicit ``CAST``, so no value is ever spliced into SQL text; identifiers are double-quoted with
embedded quotes doubled. Evaluation is total (the rules of :mod:`dpcurator.query.ir`): integer
arithmetic goes through HUGEINT and ``TRY_CAST`` back to BIGINT (NULL outside int64), float
arithmetic is DuckDB's IEEE DOUBLE (±inf and NaN, no error), and every other cast is a
``TRY_CAST``. Sums are HUGEINT (exact); :func:`~.base.collect_rows` clamps the totals.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from dpcurator.query.backends.base import HIDDEN_PREFIX
from dpcurator.query.backends.grid import bin_index, grid_scales, grid_value, max_grid_value
from dpcurator.query.backends.plan_checks import expr_type
from dpcurator.query.ir import (
    And,
    Between,
    BinCodeColumn,
    BinOp,
    BoundingColumn,
    Case,
    Col,
    Compare,
    ExactAggregate,
    Expr,
    FixedPointColumn,
    Func,
    In,
    IsNull,
    KeyCodeColumn,
    Lit,
    Not,
    Or,
    ScalarValue,
)

_SQL_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "BOOLEAN"),  # before int: bool is an int subclass
    (int, "BIGINT"),
    (float, "DOUBLE"),
    (str, "VARCHAR"),
)
_OPERATORS = {"!=": "<>"}
_CODE_TYPES = (("UTINYINT", 2**8), ("USMALLINT", 2**16), ("UINTEGER", 2**32))
#: The row-count column of a table's cube (see :class:`~.duckdb_columns.Cube`).
CUBE_ROWS = f'"{HIDDEN_PREFIX}n"'


def quote(identifier: str) -> str:
    """Quote an SQL identifier (embedded double quotes are doubled)."""
    return '"' + identifier.replace('"', '""') + '"'


class SqlBuilder:
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
        agg = fixed_point_aggregate(spec)
        value = self.clamped(agg, column, lambda v: self.grid(agg, v), self._grid_literal(agg))
        narrow = max_grid_value(agg) < 2**31
        return f"TRY_CAST({value} AS {'INTEGER' if narrow else 'BIGINT'})"

    def precomputed(self, spec: FixedPointColumn | BinCodeColumn, column: str) -> str:
        """The SQL of a fixed-point or bin-code column over ``column``."""
        if isinstance(spec, FixedPointColumn):
            return self.fixed_point(spec, column)
        return self.bin_code(spec, column)

    def key_table(self, spec: KeyCodeColumn) -> str:
        """A SELECT of ``spec``'s keys ``__dp_key`` with their codes ``__dp_code`` (see
        :class:`~dpcurator.query.ir.KeyCodeColumn`): the 0-based position of each key's first
        occurrence, in the narrowest unsigned integer type that holds every code.

        A key-code column is the ``__dp_code`` of a LEFT JOIN of the table with this key table
        ``ON value IS NOT DISTINCT FROM __dp_key``: a NULL value matches a NULL key (NULL-safe,
        as public keys are), and a value that is no key gets a NULL code. A hash join costs a
        lookup per row, where searching the key list per row (``list_position``) costs up to one
        comparison per key (the 1,000-key column of ``benchmarks/query.py``: about 7x faster).
        """
        width = next(t for t, size in _CODE_TYPES if len(spec.keys) <= size)
        keys = self.column(list(spec.keys))
        listed = f"SELECT unnest({keys}) AS k, generate_subscripts({keys}, 1) AS i"
        return (
            f"SELECT k AS __dp_key, CAST(min(i) - 1 AS {width}) AS __dp_code"
            f" FROM ({listed}) GROUP BY k"
        )

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
                cube_sum(quote(column + "_c")),
                cube_sum(CUBE_ROWS),
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
        scaled = self._scaled(agg, value, self.literal(agg.bins))
        return f"least(TRY_CAST(floor({scaled}) AS BIGINT), {self.literal(agg.bins - 1)})"

    def _scaled(self, agg: ExactAggregate, value: str, bins: str) -> str:
        assert agg.lower is not None
        assert agg.upper is not None
        lower, width = self.literal(float(agg.lower)), self.literal(float(agg.upper - agg.lower))
        return f"({value} - {lower}) / {width} * {bins}"

    def bin_code(self, spec: BinCodeColumn, column: str) -> str:
        """The SQL of a bin-code column (see :class:`~dpcurator.query.ir.BinCodeColumn`): the
        bin rule's scaled value times 2**bits (a double: exactly), floored, at most 2**bits - 1,
        as an INTEGER."""
        agg = ExactAggregate("", "histogram", Col(spec.column), spec.lower, spec.upper)
        top = float(2**spec.bits - 1)
        value = self.clamped(
            agg,
            column,
            lambda v: f"least(floor({self._scaled(agg, v, self.literal(top + 1))}), {top})",
            lambda x: self.literal(0.0 if x == spec.lower else top),
        )
        return f"TRY_CAST({value} AS INTEGER)"

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


def cube_sum(column: str) -> str:
    """The total of a cube column over the selected cells: 0 over none (as COUNT(*) would be)."""
    return f"COALESCE(SUM({column}), 0)"


def fixed_point_aggregate(spec: FixedPointColumn) -> ExactAggregate:
    """The unnamed sum aggregate, without fill or offset, whose values ``spec`` precomputes."""
    return ExactAggregate(
        "", "sum", Col(spec.column), spec.lower, spec.upper, None, spec.grid_exponent
    )
