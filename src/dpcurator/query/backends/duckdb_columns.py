"""What a DuckDB table's precomputed columns answer, and how a query's result comes back.

A materialised private copy carries hidden columns computed once from public metadata
(:class:`Hidden`): fixed-point values and fine bin codes of bounded numeric columns, key codes
of columns with public keys, bounding flags of user-level tables
(:class:`~dpcurator.query.ir.BoundingColumn`) and a :class:`Cube` of row-level counts and sums.
The functions here decide, from the plan and the metadata only, which of them a plan reads
(:func:`precomputed_bounding`, :func:`coded_groups`, :func:`bounded_codes`,
:func:`fixed_point_sums`; bin codes: :mod:`.duckdb_bins`), and turn the rows or columns the
query returns back into the plan's exact result (:func:`decode_groups`, :func:`unbin`,
:func:`columnar`, :func:`collect_columns`). The SQL itself is built by :mod:`.duckdb_query`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dpcurator.query.backends.duckdb_sql import fixed_point_aggregate, quote
from dpcurator.query.backends.results import collect_groups
from dpcurator.query.ir import (
    AggregatePlan,
    BinCodeColumn,
    BoundingColumn,
    Col,
    ExactAggregate,
    ExactResult,
    FixedPointColumn,
    KeyCodeColumn,
    ScalarValue,
)


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
    bin_codes: Mapping[str, tuple[str, BinCodeColumn]] = field(default_factory=dict)

    def numeric(self) -> list[tuple[str, FixedPointColumn | BinCodeColumn]]:
        """The fixed-point and bin-code columns: (hidden column name, spec)."""
        return [*self.fixed_point.values(), *self.bin_codes.values()]


def binned_histogram(plan: AggregatePlan) -> ExactAggregate | None:
    """The histogram of a plan whose other aggregates are row counts (a quantile's plan, grouped
    or not), which the query counts by ``GROUP BY group..., bin`` and returns per group as two
    lists (bins, counts) instead of one histogram() value; or None. :func:`unbin` turns those
    rows back into the plan's rows.

    DuckDB's histogram() builds a map per group and hands it to Python as a dict: measured at
    10^6 rows, 1,000 groups and 1,024 bins (``benchmarks/quantile_speed.py``'s grouped median),
    about 3.3 s of CPU against 0.6 s for the grouped count and the two lists."""
    histograms = [agg for agg in plan.aggregates if agg.kind == "histogram"]
    others = [agg for agg in plan.aggregates if agg.kind != "histogram"]
    if len(histograms) != 1 or any(agg.kind != "count" for agg in others):
        return None
    return histograms[0]


def unbin(plan: AggregatePlan, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The result rows ``(group..., rows, aggregate...)`` of a :func:`binned_histogram` plan from
    its query's rows ``(group..., rows, bins, counts)`` (NULL total and lists: no row)."""
    width = len(plan.group_by)
    unbinned = []
    for row in rows:
        total = int(row[width] or 0)
        histogram = (row[width + 1] or [], row[width + 2] or [])
        values = [histogram if agg.kind == "histogram" else total for agg in plan.aggregates]
        unbinned.append((*row[:width], total, *values))
    return unbinned


def counts_whole_table(plan: AggregatePlan) -> bool:
    """Whether every aggregate of ``plan`` is the number of rows of its whole table (row-level
    counts without filter or grouping)."""
    return (
        plan.where is None
        and not plan.group_by
        and plan.bound.person_column is None
        and plan.sample is None
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
    column holding every public key the plan releases for that position (row-level plans), the
    column that a precomputed bounding column ranked, or :func:`bounded_codes` (bounded
    plans)."""
    bounding = precomputed_bounding(plan, hidden)
    if bounding is not None:
        ranked = bounding[1].group
        return {} if ranked is None else {0: hidden.key_codes[ranked.column]}
    if plan.bound.person_column is not None:
        return bounded_codes(plan, hidden)
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


def bounded_codes(plan: AggregatePlan, hidden: Hidden) -> dict[int, tuple[str, KeyCodeColumn]]:
    """The group of a plan bounded by its own windows, when it is one bare column whose
    key-code column codes exactly the plan's public keys (position 0), else nothing.

    Such a query keeps the rows of the public keys by their code (``IS NOT NULL``: a NULL code
    is a value outside the keys, as the key SEMI JOIN would drop it) and groups the bounded
    rows by code; the bounding itself still ranks the values (same rows kept). Measured at 10^7
    rows (``benchmarks/query.py``'s filtered bounded sum): about 7% less CPU.
    """
    if plan.bound.person_column is None or precomputed_bounding(plan, hidden) is not None:
        return {}
    if plan.group_keys is None or len(plan.group_by) != 1:
        return {}
    expr = plan.group_by[0].expr
    if not isinstance(expr, Col) or expr.name not in hidden.key_codes:
        return {}
    named = hidden.key_codes[expr.name]
    return {0: named} if {key for (key,) in plan.group_keys} == set(named[1].keys) else {}


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


def columnar(plan: AggregatePlan, hidden: Hidden) -> bool:
    """Whether the result of ``plan``'s query is read column-wise (DuckDB's ``fetchnumpy``) by
    :func:`collect_columns`: counts and sums only (the query casts them to int64), every group
    coded (small integer columns) and no aggregate named like a generated column. About 3x
    cheaper than Python rows for 1,000 groups; chosen from the plan and the metadata only."""
    if binned_histogram(plan) is not None or any(a.kind == "histogram" for a in plan.aggregates):
        return False
    names = [agg.name for agg in plan.aggregates]
    generated = {"__dp_rows", *(f"__dp_g{i}" for i in range(len(plan.group_by)))}
    return len(coded_groups(plan, hidden)) == len(plan.group_by) and (
        len(set(names)) == len(names) and not generated.intersection(names)
    )


def collect_columns(
    plan: AggregatePlan,
    columns: Mapping[str, Any],  # numpy arrays (masked where NULL), as fetchnumpy gives them
    coded: Mapping[int, tuple[str, KeyCodeColumn]],
    keys: frozenset[tuple[ScalarValue, ...]] | None,
) -> ExactResult:
    """The exact result of a :func:`columnar` plan from its query's columns: group codes back to
    keys (a row with a NULL code, no key, dropped: as :func:`decode_groups`), groups outside the
    public ``keys`` (if given) dropped, the int64 totals as Python integers."""
    codes = [columns[f"__dp_g{i}"] for i in range(len(plan.group_by))]
    present = np.ones(len(columns["__dp_rows"]), dtype=bool)
    for code in codes:
        present &= ~np.ma.getmaskarray(code)
    decoded = [
        [coded[i][1].keys[c] for c in np.ma.getdata(code)[present].tolist()]
        for i, code in enumerate(codes)
    ]
    values = [np.asarray(columns[agg.name])[present].tolist() for agg in plan.aggregates]
    groups = list(zip(*decoded, strict=True)) if decoded else [()] * int(present.sum())
    if keys is not None:
        kept = [i for i, key in enumerate(groups) if key in keys]
        groups = [groups[i] for i in kept]
        values = [[column[i] for i in kept] for column in values]
    return collect_groups(plan, groups, values)


def fixed_point_sums(
    plan: AggregatePlan, fixed_point: Mapping[str, tuple[str, FixedPointColumn]]
) -> dict[str, str]:
    """Aggregate name -> quoted fixed-point column, for the sums that such a column answers."""
    found = {}
    for agg in plan.aggregates:
        if agg.kind != "sum" or not isinstance(agg.expr, Col) or agg.expr.name not in fixed_point:
            continue
        column, spec = fixed_point[agg.expr.name]
        if fixed_point_aggregate(spec) == replace(agg, name="", fill=None, offset=0):
            found[agg.name] = quote(column)
    return found
