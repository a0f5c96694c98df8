"""The columns an engine may precompute when it opens a table (fixed-point values, public key
codes, contribution-bounding ranks), each on the grid or with the bound that
:func:`~dpcurator.query.plan.planner.plan_query` gives plans of that shape, so precomputing them
changes no result."""

from __future__ import annotations

from dataclasses import replace

from dpcurator.query import ir
from dpcurator.query.frontend.builder import Aggregate
from dpcurator.query.plan.analysis import infer_bounds
from dpcurator.query.plan.facts import (
    choose_grid_exponent,
    unit_grid,
    value_bounds,
)
from dpcurator.query.schema import Metadata


def fixed_point_columns(metadata: Metadata) -> tuple[ir.FixedPointColumn, ...]:
    """One :class:`~dpcurator.query.ir.FixedPointColumn` per bounded numeric column, on the grid
    that a SUM or AVG of the bare column is planned on (engines may precompute them)."""
    columns = []
    for name, kind in metadata.column_types().items():
        column = ir.Col(name)
        if kind not in ("int", "float") or infer_bounds(column, metadata) is None:
            continue
        aggregate = Aggregate("sum", column)
        lower, upper = value_bounds(aggregate, metadata)
        k = choose_grid_exponent(lower, upper, integer=unit_grid(column, metadata, lower, upper))
        columns.append(ir.FixedPointColumn(name, lower, upper, k))
    return tuple(columns)


def key_code_columns(metadata: Metadata) -> tuple[ir.KeyCodeColumn, ...]:
    """One :class:`~dpcurator.query.ir.KeyCodeColumn` per column with declared (or bool) public
    keys, other than the person column (engines may precompute them; int columns whose keys
    come from their bounds are grouped without precomputed codes, so opening a table does not
    grow with every bounded int column)."""
    return tuple(
        ir.KeyCodeColumn(name, keys)
        for name, kind in metadata.column_types().items()
        if kind in ("string", "int", "bool")
        and name != metadata.person_column
        and (keys := metadata.column(name).public_keys) is not None
    )


def bounding_columns(
    metadata: Metadata, key_codes: tuple[ir.KeyCodeColumn, ...]
) -> tuple[ir.BoundingColumn, ...]:
    """Under user-level privacy, one :class:`~dpcurator.query.ir.BoundingColumn` for ungrouped
    plans and one per column of ``key_codes``, with the bound that
    :func:`~dpcurator.query.plan.planner.plan_query` gives plans of that shape (engines may
    precompute them); none under row-level privacy."""
    if metadata.person_column is None:
        return ()
    bound = metadata.contribution_bound
    unit = metadata.unit
    specs = [ir.BoundingColumn(replace(bound, max_groups=unit.groups_per_person(False, None)))]
    for code in key_codes:
        groups = unit.groups_per_person(True, code.keys)
        specs.append(ir.BoundingColumn(replace(bound, max_groups=groups), code))
    return tuple(specs)


def precomputed_columns(metadata: Metadata) -> ir.PrecomputedColumns:
    """The fixed-point, key-code and bounding columns an engine may compute when it opens the
    table."""
    codes = key_code_columns(metadata)
    return ir.PrecomputedColumns(
        fixed_point_columns(metadata), codes, bounding_columns(metadata, codes)
    )
