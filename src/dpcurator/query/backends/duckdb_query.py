"""One DuckDB SQL query per aggregate plan (expressions are translated by :mod:`.duckdb_sql`; which
precomputed columns a plan reads, and how its result comes back, is decided by
:mod:`.duckdb_columns`, where :class:`Cube`, :func:`coded_groups` and the other names below live).

Every data value (literals, bounds, seeds, public keys) is a bound ``?`` parameter with an explicit
``CAST``, so no value is ever spliced into SQL text; identifiers are double-quoted with embedded
quotes doubled. The query is a pipeline of common table expressions::

    base     filter; evaluate group keys, person id and aggregated values
    keyed    SEMI JOIN with the public key set (NULL-safe, one LIST parameter per key column),
             when given and persons are bounded (or a test of the key code: see
             :func:`bounded_codes`); without bounding the caller keeps the public keys among
             the aggregated groups instead (equivalent, and it filters a few groups instead of
             every row: see :func:`keys_after_grouping`)
    bounded  hash keys, then DENSE_RANK over a person's groups and the row's position within
             (person, group), all from ONE sort of each person's rows (see :func:`_bounding`);
             the hashes are materialised first because DuckDB rejects volatile window orderings,
             and ``rn < k`` is the fast form on DuckDB (``rn <= k`` triggers a slower top-N
             rewrite)
    final    one CASE per value (clamp / fill / round half-even to the grid 2**k), GROUP BY,
             exact HUGEINT sums, each group total clamped to int64 (:func:`.grid.clamp_total`)
             in the query, so that results of counts and sums grouped by key codes are
             fetched as numpy columns (see :func:`columnar`); a quantile's histogram instead
             counts rows per group and bin, then lists each group's bins and counts
             (:func:`binned_histogram`)

Fixed-point columns (:class:`~dpcurator.query.ir.FixedPointColumn`, from the public bounds) are
computed once when the table is materialised; a row-level sum of a bare column on the same bounds
and grid then reads its INTEGER/BIGINT column with a plain SUM and COUNT, with no per-row work
(fill and offset are applied to the group totals: ``SUM(g) - offset·COUNT(g) + (fill - offset) ·
(rows - COUNT(g))``). Likewise key-code columns (:class:`~dpcurator.query.ir.KeyCodeColumn`): a
row-level plan grouped by a column with public keys groups its small integer code instead (much
cheaper than hashing text) and the codes are mapped back to keys afterwards. Bounded (user-level)
plans read the values themselves: their row and group hashes are computed from them. A
quantile's histograms read bin-code columns (:class:`~dpcurator.query.ir.BinCodeColumn`) where
:mod:`.duckdb_bins` finds their bins there, unless the query bounds the rows itself.

The bounding hash is DuckDB's ``hash(person, group key..., seed)`` for groups and
``hash(person, aggregated values..., seed)`` for rows (see :mod:`.memory` on why ties are harmless).
User-level tables also get bounding columns (:class:`~dpcurator.query.ir.BoundingColumn`): one
flag per row saying whether the bounding of an unfiltered plan, ungrouped or grouped by one
public-key column, keeps it (one sort of the table each, when the first plan that reads it
runs; rows are ordered by a hash of the whole row, which also depends on the person's own rows
only). Such a plan reads the
flag, the fixed-point and the key-code columns, with no window at query time.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from dpcurator.query.backends.base import TOTAL_LIMIT
from dpcurator.query.backends.block_sample import columns_with_block, duckdb_sample
from dpcurator.query.backends.duckdb_bins import coded_bins
from dpcurator.query.backends.duckdb_columns import (
    Hidden,
    binned_histogram,
    bounded_codes,
    coded_groups,
    counts_whole_table,
    fixed_point_sums,
    precomputed_bounding,
)
from dpcurator.query.backends.duckdb_sql import (
    CUBE_ROWS,
    SqlBuilder,
    cube_sum,
    quote,
)
from dpcurator.query.ir import (
    AggregatePlan,
    And,
    Col,
    Compare,
    ExactAggregate,
    Expr,
    Lit,
    ScalarValue,
)


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
    sql = SqlBuilder(None if columns is None else columns_with_block(plan, columns))
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
    # aggregate name -> the SQL of a precomputed value: fixed-point sum values, histogram bins
    precomputed = (
        {}
        if bound_here
        else fixed_point_sums(plan, hidden.fixed_point) | coded_bins(sql, plan, hidden)
    )
    coded = coded_groups(plan, hidden)
    if cube_serves(plan, hidden):
        return _cube_query(sql, plan, hidden, groups, precomputed), sql.params
    pid = quote("__dp_pid")
    codes = {i: quote(f"__dp_c{i}") for i in bounded_codes(plan, hidden)}
    select = [
        f"{quote(coded[i][0]) if i in coded and i not in codes else sql.expr(g.expr)} AS {name}"
        for i, (g, name) in enumerate(zip(plan.group_by, groups, strict=True))
    ]
    select += [f"{quote(coded[i][0])} AS {code}" for i, code in codes.items()]
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
        conditions += [f"{code} IS NOT NULL" for code in codes.values()]  # the public keys
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    table = quote(relation or plan.table)
    if plan.sample is not None and person is not None:  # the sampled persons' rows
        table = duckdb_sample(plan.sample, person, table, sql.literal)
    trivial = counts_whole_table(plan)  # read the table directly (DuckDB keeps its row count)
    ctes = [] if trivial else [f"__dp_base AS (SELECT {', '.join(select)} FROM {table}{where})"]
    source = table if trivial else "__dp_base"
    # Without bounding, dropping rows outside the public keys before grouping equals dropping
    # groups after it: the caller drops those few groups (see keys_after_grouping).
    if bound_here and plan.group_keys is not None and not codes:
        ctes.append(f"__dp_keyed AS ({_key_filter(sql, plan.group_keys, groups, source)})")
        source = "__dp_keyed"
    if bound_here:
        ctes.append(
            f"__dp_bounded AS ({_bounding(sql, plan, source, groups, values, codes=codes)})"
        )
        source = "__dp_bounded"
    grouped, keys = _grouping(groups, codes)
    histogram = binned_histogram(plan)
    if histogram is not None:  # GROUP BY group, bin: see binned_histogram
        binned = histogram.name in precomputed  # its value column is its bin
        ctes.append(
            _binned(sql, histogram, values[histogram.name], binned=binned, by=grouped, rows=source)
        )
        aggregated = f"SELECT {', '.join([*keys, *_BIN_LISTS])} FROM __dp_binned"
    else:
        aggregates = [
            f"{_aggregate(sql, agg, values.get(agg.name, 'NULL'), person is not None, precomputed)}"
            f" AS {quote(agg.name)}"
            for agg in plan.aggregates
        ]
        outputs = [*keys, "COUNT(*) AS __dp_rows", *aggregates]
        aggregated = f"SELECT {', '.join(outputs)} FROM {source}"
    aggregated += f" GROUP BY {', '.join(grouped)}" if groups else ""
    query = f"WITH {', '.join(ctes)} {aggregated}" if ctes else aggregated
    return query, sql.params


def _grouping(groups: list[str], codes: Mapping[int, str]) -> tuple[list[str], list[str]]:
    """The GROUP BY columns and the key outputs: bounded_codes' groups, bounded by their keys,
    are grouped by their codes (output under the group's name)."""
    grouped = [codes.get(i, name) for i, name in enumerate(groups)]
    keys = [f"{codes[i]} AS {name}" if i in codes else name for i, name in enumerate(groups)]
    return grouped, keys


#: A binned histogram's outputs per group: its rows, then its bins and their counts (a NULL bin,
#: a value in no bin, counts among the rows only).
_BIN_LISTS = (
    "SUM(__dp_n)",
    "list(__dp_bin) FILTER (WHERE __dp_bin IS NOT NULL)",
    "list(__dp_n) FILTER (WHERE __dp_bin IS NOT NULL)",
)


def _binned(
    sql: SqlBuilder,
    histogram: ExactAggregate,
    value: str,
    *,
    binned: bool,
    by: list[str],
    rows: str,
) -> str:
    """The CTE counting the rows of ``rows`` per group (columns ``by``) and bin (``__dp_bin``,
    ``__dp_n``) of ``histogram`` over the column ``value`` (already its bin when ``binned``)."""
    bin_sql = value if binned else sql.histogram_bin(histogram, value)
    columns = ", ".join([*by, f"{bin_sql} AS __dp_bin"])
    keys = ", ".join([*by, "__dp_bin"])
    return f"__dp_binned AS (SELECT {columns}, COUNT(*) AS __dp_n FROM {rows} GROUP BY {keys})"


def _int64(total: str) -> str:
    """An exact total (HUGEINT, NULL over no value) as the BIGINT that
    :func:`~.results.collect_rows` would make of it: NULL -> 0, clamped by
    :func:`~.grid.clamp_total`; so that every count and sum is fetched as int64 (see
    :func:`columnar`)."""
    return f"CAST(greatest(least(COALESCE({total}, 0), {TOTAL_LIMIT}), {-TOTAL_LIMIT}) AS BIGINT)"


def _aggregate(
    sql: SqlBuilder, agg: ExactAggregate, column: str, bounded: bool, read: Collection[str]
) -> str:
    """The SQL of one aggregate read from the value ``column``: sums as int64 (see
    :func:`_int64`). ``read``: the aggregates whose value column is precomputed (a sum's
    fixed-point values or a histogram's bins)."""
    if agg.name in read:
        if agg.kind == "histogram":
            return f"histogram({column})"
        return _int64(sql.fixed_point_sum(agg, column))
    aggregate = sql.aggregate(agg, column, bounded=bounded)
    return aggregate if agg.kind in ("count", "count_persons", "histogram") else _int64(aggregate)


def cube_serves(plan: AggregatePlan, hidden: Hidden) -> bool:
    """Whether the table's :class:`Cube` answers ``plan`` exactly: row-level, filtered at most
    by :func:`_cube_conditions`, grouped only by cube dimensions, counts and precomputed
    fixed-point sums only."""
    cube = hidden.cube
    if cube is None or plan.bound.person_column is not None:
        return False
    if plan.where is not None and _cube_conditions(plan.where, hidden) is None:
        return False
    sums = fixed_point_sums(plan, hidden.fixed_point)
    return all(
        isinstance(g.expr, Col) and g.expr.name in cube.dimensions for g in plan.group_by
    ) and all(agg.kind in ("count", "count_persons") or agg.name in sums for agg in plan.aggregates)


def _cube_query(
    sql: SqlBuilder, plan: AggregatePlan, hidden: Hidden, groups: list[str], sums: Mapping[str, str]
) -> str:
    """The query of a plan that :func:`cube_serves`: the same result columns, summed over the
    cube's cells instead of the table's rows (integer sums: exactly the same values)."""
    assert hidden.cube is not None
    codes = [hidden.key_codes[g.expr.name][0] for g in plan.group_by if isinstance(g.expr, Col)]
    columns = [f"{quote(code)} AS {name}" for code, name in zip(codes, groups, strict=True)]
    columns.append(f"{cube_sum(CUBE_ROWS)} AS __dp_rows")
    for agg in plan.aggregates:
        total = (
            sql.fixed_point_sum(agg, hidden.fixed_point[agg.expr.name][0], cube=True)
            if agg.name in sums and isinstance(agg.expr, Col)
            else cube_sum(CUBE_ROWS)
        )
        columns.append(f"{_int64(total)} AS {quote(agg.name)}")
    query = f"SELECT {', '.join(columns)} FROM {quote(hidden.cube.relation)}"
    conditions = [] if plan.where is None else _cube_conditions(plan.where, hidden)
    if conditions:
        query += f" WHERE {' AND '.join(conditions)}"
    return query + (f" GROUP BY {', '.join(groups)}" if groups else "")


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


def _key_filter(
    sql: SqlBuilder, keys: tuple[tuple[ScalarValue, ...], ...], groups: list[str], relation: str
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
    sql: SqlBuilder,
    plan: AggregatePlan,
    source: str,
    groups: list[str],
    values: dict[str, str],
    *,
    codes: Mapping[int, str],
) -> str:
    """Each person's rows cut to ``max_groups`` groups and ``max_rows_per_group`` rows in each.

    One sort serves both limits: the window functions share ``PARTITION BY person`` and their
    orderings share a prefix, so DuckDB evaluates them over one sorted run. A row's position
    inside its (person, group) is its row number in that person's (group hash, group, row hash)
    order minus the RANK of its group (the row number of the group's first row).

    A group with a key code (``codes``: position -> code column, see :func:`bounded_codes`) is
    hashed by its value but sorted by its code, and its value is not carried through the sort
    (about 7% less CPU at 10^7 rows). The order is the same but for groups of one person whose
    64-bit hashes collide, which are then ordered by code instead of value: still by public
    rules and the person's own rows.
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
    group_order = ", ".join(["__dp_gh", *(codes.get(i, g) for i, g in enumerate(groups))])
    coded = [g for i, g in enumerate(groups) if i in codes]
    kept = f"* EXCLUDE ({', '.join(coded)})" if coded else "*"
    hashed = f"SELECT {kept}, {', '.join(hashes)} FROM {source}"
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
