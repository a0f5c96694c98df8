"""The embedded default backend: one DuckDB SQL query per plan (built by :mod:`.duckdb_query`).

Opening a source exposes it as a table with the declared column types, materialised when a CSV
is read or columns are precomputed (fixed-point, key-code and bounding columns, and a
:class:`~.duckdb_columns.Cube`; see :meth:`DuckDBBackend.from_source`). A materialised private copy
never changes, so a whole-table count (no filter, no grouping, row-level) is its size, recorded
when it was created, without a query. Every failure after a plan is checked is the constant
:data:`~dpcurator.errors.ENGINE_FAILURE_MESSAGE` (details logged on ``dpcurator.engine``).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa

from dpcurator._cache import LruCache
from dpcurator.errors import BackendError, DPError
from dpcurator.query.backends.base import HIDDEN_PREFIX, engine_failure
from dpcurator.query.backends.duckdb_columns import (
    Cube,
    Hidden,
    binned_histogram,
    coded_groups,
    collect_columns,
    columnar,
    counts_whole_table,
    decode_groups,
    keys_after_grouping,
    precomputed_bounding,
    unbin,
)
from dpcurator.query.backends.duckdb_query import build_query
from dpcurator.query.backends.duckdb_sql import CUBE_ROWS, SqlBuilder, quote
from dpcurator.query.backends.plan_checks import check_plan
from dpcurator.query.backends.progress import open_step
from dpcurator.query.backends.results import collect_rows
from dpcurator.query.backends.sources import check_table, file_format, is_path, to_arrow
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
    BoundingColumn,
    ExactResult,
    KeyCodeColumn,
    PrecomputedColumns,
    ScalarValue,
)

_DECLARED_SQL = {"int": "BIGINT", "float": "DOUBLE", "string": "VARCHAR", "bool": "BOOLEAN"}
_STAGING = HIDDEN_PREFIX + "source"
_PRIVATE_NAMES = itertools.count()  # several backends may share one connection
_INTEGER_TEXT = r"\s*[+-]?[0-9]+\s*"  # DuckDB would round '1.5' to 2: text must be an integer
#: At most this many cells in a table's :class:`~.duckdb_columns.Cube` (its key-code columns with
#: the fewest keys are its dimensions, as many as fit).
CUBE_CELLS = 65_536


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
    columns.append(f"COUNT(*) AS {CUBE_ROWS}")
    for name, _ in hidden.fixed_point.values():
        columns.append(f"SUM({quote(name)}) AS {quote(name + '_s')}")
        columns.append(f"COUNT({quote(name)}) AS {quote(name + '_c')}")
    return f"SELECT {', '.join(columns)} FROM {quote(target)} GROUP BY ALL"


def _copy_step(hidden: Hidden, casts: Mapping[str, str]) -> str:
    """The name of the step that creates the private copy (what it computes, for the log)."""
    parts = [f"{len(casts)} converted"] if casts else []
    parts += [f"{len(hidden.fixed_point)} fixed-point"] if hidden.fixed_point else []
    parts += [f"{len(hidden.key_codes)} key-code"] if hidden.key_codes else []
    made = f" with {', '.join(parts)} columns" if parts else ""
    return f"loading the private copy{made}"


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


@dataclass(frozen=True)
class _Built:
    """A plan's query, its parameters and the public keys to keep afterwards (if any)."""

    query: str
    params: dict[str, object]
    keys: frozenset[tuple[ScalarValue, ...]] | None
    coded: dict[int, tuple[str, KeyCodeColumn]]
    whole_table_count: bool
    binned: bool
    columnar: bool  # fetched as numpy columns (see :func:`.duckdb_columns.columnar`)


class DuckDBBackend:
    """Exact aggregates on an embedded DuckDB connection.

    Example:
        >>> backend = DuckDBBackend.from_source({"x": [1.0, 2.0]}, table="t")
        >>> backend.tables()
        ['t']
    """

    name = "duckdb"

    def __init__(
        self,
        connection: duckdb.DuckDBPyConnection,
        *,
        owned: bool,
        progress: TextIO | None = None,
    ) -> None:
        self._connection = connection
        self._owned = owned
        self._progress = progress  # where open steps draw their progress line (or nowhere)
        self._lock = threading.Lock()  # temporary views are per connection: no cursors
        self._relations: dict[str, str] = {}  # table -> private typed copy (given connections)
        self._schemas: dict[str, dict[str, str]] = {}  # column types (owned connections only)
        self._queries: LruCache[AggregatePlan, _Built] = LruCache(256)
        self._hidden: dict[str, Hidden] = {}  # table -> its precomputed columns
        self._sizes: dict[str, int] = {}  # table -> rows of its materialised, private copy
        self._flagged: set[str] = set()  # bounding columns computed so far (first use)

    @classmethod
    def from_source(
        cls,
        source: object,
        *,
        table: str,
        column_types: Mapping[str, str] | None = None,
        precomputed: PrecomputedColumns | None = None,
        threads: int | None = None,
        progress: TextIO | None = None,
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
        once more, plus 1 to 8 bytes per row and precomputed column). Pass none for data larger
        than memory.

        When precomputing pays: the fixed-point and key-code columns and the cube cost about one
        more pass over the table and make every row-level count and sum cheaper, so they pay
        from the first few queries. A bounding column is computed when the first plan that reads
        it runs (an unfiltered user-level plan, ungrouped or grouped by one public-key column
        with exactly its keys: see :meth:`_flag`), at about 1.5 times the cost of that one
        query bounding its own rows (a sort of the table); later such plans read it with no
        window. So opening a user-level table costs what opening a row-level one costs, and a
        session that runs only filtered user-level queries never sorts for it (10^7 rows, open
        and one filtered query: 3.1 s of CPU against 3.0 s without precomputing; issue 17
        measured 27.5 s against 14.6 s when the columns were computed at open). Each step of the
        open, and each bounding column, is logged with its time on ``dpcurator.engine`` (INFO).
        ``threads`` caps DuckDB's worker threads of a connection opened here (default: one per
        core), e.g. when several server processes share the cores. ``progress`` (e.g.
        ``sys.stderr`` on a terminal) gets a progress line per step, redrawn while it runs
        (:func:`~.progress.open_step`; the percentage is DuckDB's on a connection opened here).
        """
        declared = check_column_types(column_types)
        if isinstance(source, duckdb.DuckDBPyConnection):
            backend = cls(source, owned=False, progress=progress)
            check_table(backend, table)
            try:
                backend._expose(table, table, declared, materialise=False, precomputed=precomputed)
            except duckdb.Error as exc:
                raise BackendError(f"DuckDB could not read the table {table!r}: {exc}") from exc
            return backend
        connection = duckdb.connect(config={} if threads is None else {"threads": threads})
        backend = cls(connection, owned=True, progress=progress)
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
        numbers = {
            c for c, t in types.items() if declared.get(c, type_class(t)) in ("int", "float")
        }
        numeric = [spec for spec in specs.fixed_point if spec.column in numbers]
        binned = [spec for spec in specs.bin_codes if spec.column in numbers]
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
            {spec.column: (f"{HIDDEN_PREFIX}bc{i}", spec) for i, spec in enumerate(binned)},
        )
        if not self._owned:  # the caller's connection: leave its objects alone
            if casts or numeric or binned or coded or bounding:
                self._relations[table] = relation
                self._create(source, self._relations[table], casts, types, table, temporary=True)
            return
        if not (casts or materialise or numeric or binned or coded or bounding):
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
        the fixed-point and key-code columns of ``table`` added, in one pass over the source.

        The copy is stored in the source's order, not sorted by key code: that sort more than
        doubled the open (10^7 rows: 1.6 s of CPU against 0.7 s; raw DuckDB's load 0.4 s) and
        saved about 20 ms of CPU per filtered row-level GROUP BY on key codes and 10% of a
        filtered user-level query (unfiltered grouped counts and sums are read from the cube),
        so it paid only after some 40 such queries (``benchmarks/open_table.py``)."""
        expressions = {name: _cast(name, kind, types[name]) for name, kind in casts.items()}
        replaced = ", ".join(f"{sql} AS {quote(name)}" for name, sql in expressions.items())
        columns = f"* REPLACE ({replaced})" if replaced else "*"
        translator = SqlBuilder()
        hidden = self._hidden[table]
        for name, spec in hidden.numeric():
            value = expressions.get(spec.column, quote(spec.column))
            columns += f", {translator.precomputed(spec, value)} AS {quote(name)}"
        select = f"SELECT {columns} FROM {quote(source)}"
        if hidden.key_codes:  # a join per key-code column (see SqlBuilder.key_table)
            codes, joins = [], []
            for i, (name, code) in enumerate(hidden.key_codes.values()):
                keys = f"__dp_kt{i}"
                codes.append(f"{keys}.__dp_code AS {quote(name)}")
                joins.append(
                    f" LEFT JOIN ({translator.key_table(code)}) AS {keys}"
                    f" ON __dp_row.{quote(code.column)} IS NOT DISTINCT FROM {keys}.__dp_key"
                )
            select = f"SELECT __dp_row.*, {', '.join(codes)} FROM ({select}) AS __dp_row"
            select += "".join(joins)
        kind = "TEMPORARY TABLE" if temporary else "TABLE"
        try:
            with self._step(table, _copy_step(hidden, casts)):
                created = self._connection.execute(
                    f"CREATE {kind} {quote(target)} AS {select}", translator.params
                ).fetchall()
            # Nothing writes to the copy afterwards: its size answers whole-table counts.
            self._sizes[table] = int(created[0][0])
            if hidden.cube is not None:
                cube = hidden.cube.relation
                with self._step(table, "counting its cube"):
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

    @contextmanager
    def _step(self, table: str, name: str) -> Iterator[None]:
        """Report one long step on ``table`` (:func:`~.progress.open_step`); on a connection
        this backend opened, DuckDB tracks the progress of the step's statements meanwhile."""
        tracked = self._owned  # DuckDB's own bar (printed on stdout) stays off
        if tracked:
            self._connection.execute("SET enable_progress_bar_print = false")
            self._connection.execute("SET enable_progress_bar = true")
        try:
            with open_step(table, name, self._connection.query_progress, self._progress):
                yield
        finally:
            if tracked:
                self._connection.execute("SET enable_progress_bar = false")

    def _flag(self, table: str, name: str, spec: BoundingColumn) -> None:
        """Add the bounding column ``name`` to the private copy of ``table`` (once; the caller
        holds the lock): TRUE on the rows that ``spec`` keeps, found by the same one-sort ranking
        as a query's own bounding (:meth:`.SqlBuilder.bounding`, over the converted columns and
        the key codes), computed in one pass that rewrites the copy with the column added.

        That pass costs about 1.5 times one query bounding its own rows, and later plans read the
        column with no window (10^7 rows, the first unfiltered bounded grouped sum: 3.9-4.5 s of
        CPU; the earlier ADD COLUMN then UPDATE of the kept rows: 5.1-5.2 s, and its column read
        0.09 s per query against 0.06 s; the query with its own windows: 2.8 s every time; at
        10^8 rows both ways cost 51 s of CPU and a peak RSS of 8.8 GB, 3.3 GB over the copy).

        Which plans trigger it, and when, depends on the plans and the metadata only
        (:func:`~.duckdb_columns.precomputed_bounding`); the rows kept are those the plan's own
        windows would keep, so no result depends on whether the column was already there.
        """
        if name in self._flagged:
            return
        hidden = self._hidden[table]
        copy = self._relations.get(table, table)
        relation = quote(copy)
        translator = SqlBuilder()
        row = [quote(column) for column in self._types(copy)]  # the columns the copy was made of
        code = None if spec.group is None else quote(hidden.key_codes[spec.group.column][0])
        kept = translator.bounding(spec, row, code)
        kind = "TABLE" if self._owned else "TEMPORARY TABLE"  # as :meth:`_create` made it
        with self._step(table, f"computing its bounding column {name} (first use)"):
            self._connection.execute(
                f"CREATE OR REPLACE {kind} {relation} AS"
                f" SELECT *, {kept} AS {quote(name)} FROM {relation}",
                translator.params,
            )
        self._flagged.add(name)

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
                columnar(plan, hidden),
            )
            self._queries.put(plan, built)
        size = self._sizes.get(plan.table) if built.whole_table_count else None
        if size is not None:  # COUNT(*) of a table that cannot change: its known size
            return collect_rows(plan, [(size,) * (1 + len(plan.aggregates))])
        bounding = precomputed_bounding(plan, self._hidden.get(plan.table, Hidden()))
        with self._lock:
            if bounding is not None:
                self._flag(plan.table, *bounding)
            result = self._connection.execute(built.query, built.params)
            if built.columnar:
                return collect_columns(plan, result.fetchnumpy(), built.coded, built.keys)
            rows = result.fetchall()
        if built.binned:
            rows = unbin(plan, rows)
        if built.coded:
            rows = decode_groups(rows, built.coded)
        if built.keys is not None:
            width = len(plan.group_by)
            rows = [row for row in rows if row[:width] in built.keys]
        return collect_rows(plan, rows)
