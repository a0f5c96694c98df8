"""The embedded default backend: one DuckDB SQL query per plan.

Every data value (literals, bounds, seeds, public keys) is a bound ``?`` parameter with an explicit
``CAST``, so no value is ever spliced into SQL text; identifiers are double-quoted with embedded
quotes doubled. The query is a pipeline of common table expressions::

    base     filter; evaluate group keys, person id and aggregated values
    keyed    SEMI JOIN with the public key set (NULL-safe), when given
    ranked   hash keys, then DENSE_RANK over a person's groups and ROW_NUMBER() - 1 within
             (person, group); the hashes are materialised first because DuckDB rejects volatile
             window orderings, and ``rn < k`` is the fast form on DuckDB (``rn <= k`` triggers a
             slower top-N rewrite)
    final    clamp / fill, round half-even to the grid 2**k, GROUP BY, exact HUGEINT sums

The bounding hash is DuckDB's ``hash(person, group key..., seed)`` for groups and
``hash(person, aggregated values..., seed)`` for rows (see :mod:`.memory` on why ties are harmless).
"""

from __future__ import annotations

import os
import threading

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa

from dpcurator.errors import BackendError
from dpcurator.query.backends.base import (
    check_plan,
    check_table,
    collect_rows,
    file_format,
    is_path,
    to_arrow,
)
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

_SQL_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "BOOLEAN"),  # before int: bool is an int subclass
    (int, "BIGINT"),
    (float, "DOUBLE"),
    (str, "VARCHAR"),
)
_OPERATORS = {"!=": "<>"}


def quote(identifier: str) -> str:
    """Quote an SQL identifier (embedded double quotes are doubled)."""
    return '"' + identifier.replace('"', '""') + '"'


class _Sql:
    """Accumulates named parameters (``$p0``, ``$p1``...) while translating IR to DuckDB SQL."""

    def __init__(self) -> None:
        self.params: dict[str, object] = {}

    def literal(self, value: ScalarValue) -> str:
        """A typed, bound parameter for ``value`` (NULL is the keyword, not a parameter)."""
        if value is None:
            return "NULL"
        sql_type = next(name for kind, name in _SQL_TYPES if isinstance(value, kind))
        name = f"p{len(self.params)}"
        self.params[name] = value
        return f"CAST(${name} AS {sql_type})"

    def expr(self, expr: Expr) -> str:  # noqa: PLR0912 (one branch per IR node)
        """The SQL text of an expression."""
        match expr:
            case Col(name=name):
                return quote(name)
            case Lit(value=literal):
                return self.literal(literal)
            case BinOp(op="/", left=left, right=right):
                return f"({self.expr(left)} / NULLIF({self.expr(right)}, 0))"
            case BinOp(op=op, left=left, right=right) | Compare(op=op, left=left, right=right):
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
            case Func(name=name, args=args):
                return f"{name}(" + ", ".join(self.expr(arg) for arg in args) + ")"
        raise AssertionError(f"unknown expression {expr!r}")  # pragma: no cover

    def clamped(self, agg: ExactAggregate, column: str) -> str:
        """The clamped DOUBLE value of ``column`` (the fill for NULL/NaN; NULL if no fill)."""
        value = f"CAST({column} AS DOUBLE)"
        fill = "NULL" if agg.fill is None else self.literal(float(agg.fill))
        bounds = f"least(greatest({value}, {self.literal(float(agg.lower))}), "  # type: ignore[arg-type]
        bounds += f"{self.literal(float(agg.upper))})"  # type: ignore[arg-type]
        return f"(CASE WHEN {value} IS NULL OR isnan({value}) THEN {fill} ELSE {bounds} END)"

    def aggregate(self, agg: ExactAggregate, column: str, *, bounded: bool) -> str:
        """The SQL aggregate of ``agg`` over ``column`` (persons are rows unless ``bounded``)."""
        if agg.kind == "count":
            return "COUNT(*)"
        if agg.kind == "count_persons":
            return f"COUNT(DISTINCT {quote('__dp_pid')})" if bounded else "COUNT(*)"
        value = self.clamped(agg, column)
        if agg.kind == "histogram":
            assert agg.lower is not None
            assert agg.upper is not None
            scaled = (
                f"({value} - {self.literal(float(agg.lower))}) / "
                f"{self.literal(float(agg.upper - agg.lower))} * {self.literal(agg.bins)}"
            )
            return (
                f"histogram(least(CAST(floor({scaled}) AS BIGINT), {self.literal(agg.bins - 1)}))"
            )
        if agg.kind == "sum_squares":
            value = f"({value} * {value})"
        grid = self.literal(2.0**agg.grid_exponent)
        return f"SUM(CAST(round_even({value} / {grid}, 0) AS BIGINT))"


def build_query(plan: AggregatePlan) -> tuple[str, dict[str, object]]:
    """Translate a checked plan into one DuckDB query and its bound parameters."""
    sql = _Sql()
    groups = [quote(f"__dp_g{i}") for i in range(len(plan.group_by))]
    values = {
        agg.name: quote(f"__dp_v{i}")
        for i, agg in enumerate(plan.aggregates)
        if agg.expr is not None
    }
    person = plan.bound.person_column
    pid = quote("__dp_pid")
    select = [
        f"{sql.expr(g.expr)} AS {name}" for g, name in zip(plan.group_by, groups, strict=True)
    ]
    if person is not None:
        select.append(f"{quote(person)} AS {pid}")
    select += [
        f"{sql.expr(agg.expr)} AS {values[agg.name]}"
        for agg in plan.aggregates
        if agg.expr is not None
    ]
    select = select or ["TRUE AS __dp_row"]  # a plan of counts only reads no column
    conditions = [] if plan.where is None else [sql.expr(plan.where)]
    if person is not None:
        conditions.append(f"{quote(person)} IS NOT NULL")
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    ctes = [f"__dp_base AS (SELECT {', '.join(select)} FROM {quote(plan.table)}{where})"]
    source = "__dp_base"
    if plan.group_keys is not None:
        ctes.append(f"__dp_keyed AS ({_key_filter(sql, plan.group_keys, groups)})")
        source = "__dp_keyed"
    if person is not None:
        ctes.append(f"__dp_bounded AS ({_bounding(sql, plan, source, groups, values)})")
        source = "__dp_bounded"
    aggregates = [
        f"{sql.aggregate(agg, values.get(agg.name, 'NULL'), bounded=person is not None)}"
        f" AS {quote(agg.name)}"
        for agg in plan.aggregates
    ]
    query = f"WITH {', '.join(ctes)} SELECT {', '.join([*groups, 'COUNT(*)', *aggregates])} "
    query += f"FROM {source}" + (f" GROUP BY {', '.join(groups)}" if groups else "")
    return query, sql.params


def _key_filter(sql: _Sql, keys: tuple[tuple[ScalarValue, ...], ...], groups: list[str]) -> str:
    if not keys:
        return "SELECT * FROM __dp_base WHERE FALSE"
    rows = ", ".join("(" + ", ".join(sql.literal(v) for v in key) + ")" for key in keys)
    names = [quote(f"__dp_k{i}") for i in range(len(groups))]
    on = " AND ".join(
        f"__dp_base.{g} IS NOT DISTINCT FROM __dp_keys.{k}"
        for g, k in zip(groups, names, strict=True)
    )
    return (
        f"SELECT __dp_base.* FROM __dp_base SEMI JOIN (VALUES {rows}) "
        f"AS __dp_keys({', '.join(names)}) ON {on}"
    )


def _bounding(
    sql: _Sql, plan: AggregatePlan, source: str, groups: list[str], values: dict[str, str]
) -> str:
    pid = quote("__dp_pid")
    seed = sql.literal(plan.bound.seed)
    row_hash = f"hash({', '.join([pid, *values.values(), seed])}) AS __dp_rh"
    hashes = [row_hash]
    windows = [
        f"ROW_NUMBER() OVER (PARTITION BY {', '.join([pid, *groups])} ORDER BY __dp_rh) - 1"
        " AS __dp_rn"
    ]
    conditions = [f"__dp_rn < {sql.literal(plan.bound.max_rows_per_group)}"]
    if groups:
        hashes.insert(0, f"hash({', '.join([pid, *groups, seed])}) AS __dp_gh")
        windows.insert(
            0,
            f"DENSE_RANK() OVER (PARTITION BY {pid} ORDER BY __dp_gh, {', '.join(groups)})"
            " AS __dp_gr",
        )
        conditions.insert(0, f"__dp_gr <= {sql.literal(plan.bound.max_groups)}")
    hashed = f"SELECT *, {', '.join(hashes)} FROM {source}"
    ranked = f"SELECT *, {', '.join(windows)} FROM ({hashed})"
    return f"SELECT * FROM ({ranked}) WHERE {' AND '.join(conditions)}"


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

    @classmethod
    def from_source(cls, source: object, *, table: str) -> DuckDBBackend:
        """Open a file (read lazily), register a frame, or wrap an existing connection.

        A DuckDB connection is used as is (``table`` must be one of its tables) and is not closed
        by :meth:`close`. A DuckDB relation is materialised once through Arrow (a relation cannot
        be read from another connection); pass its connection and a table name for large data.
        """
        if isinstance(source, duckdb.DuckDBPyConnection):
            backend = cls(source, owned=False)
            check_table(backend, table)
            return backend
        connection = duckdb.connect()
        try:
            if is_path(source):
                path = os.fspath(source)  # type: ignore[call-overload]
                reader = (
                    connection.read_csv if file_format(path) == "csv" else connection.read_parquet
                )
                reader(path).to_view(table)
            elif isinstance(source, pd.DataFrame | pl.DataFrame | pa.Table):
                connection.register(table, source)
            else:
                connection.register(table, to_arrow(source, table))
        except duckdb.Error as exc:
            connection.close()
            raise BackendError(
                f"DuckDB could not open the source of table {table!r}: {exc}"
            ) from exc
        return cls(connection, owned=True)

    def tables(self) -> list[str]:
        """Return the tables and views of the connection."""
        query = "SELECT DISTINCT table_name FROM information_schema.tables ORDER BY 1"
        with self._lock:
            rows = self._connection.execute(query).fetchall()
        return [str(row[0]) for row in rows]

    def columns(self, table: str) -> dict[str, str]:
        """Return the column names of ``table`` mapped to DuckDB type names."""
        check_table(self, table)
        with self._lock:
            relation = self._connection.table(table)
            return {
                name: str(kind) for name, kind in zip(relation.columns, relation.types, strict=True)
            }

    def close(self) -> None:
        """Close the connection if this backend opened it."""
        if self._owned:
            self._connection.close()

    def compute(self, plan: AggregatePlan) -> ExactResult:
        """Run ``plan`` as one DuckDB query."""
        check_plan(plan, self.columns(plan.table))
        query, params = build_query(plan)
        try:
            with self._lock:
                rows = self._connection.execute(query, params).fetchall()
        except duckdb.Error as exc:
            raise BackendError(
                f"DuckDB failed to compute the plan on {plan.table!r}: {exc}"
            ) from exc
        return collect_rows(plan, rows)
