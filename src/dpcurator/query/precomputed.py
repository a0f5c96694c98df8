"""The columns an engine may precompute when it opens a table (fixed-point values, fine
histogram bin codes, public key codes, contribution-bounding ranks), each on the grid, bins or
bound that :func:`~dpcurator.query.plan.planner.plan_query` gives plans of that shape, so
precomputing them changes no result."""

from __future__ import annotations

from dataclasses import replace

from dpcurator.estimators.quantiles import QuantileBins
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


#: The resolution 2**bits of a :class:`~dpcurator.query.ir.BinCodeColumn`: finer than every
#: quantile level (the query layer's finest is 2**18 bins of the bounds), and its codes, up to
#: 2**30, fit a 32-bit INTEGER.
BIN_CODE_BITS = 30


def bin_code_columns(metadata: Metadata) -> tuple[ir.BinCodeColumn, ...]:
    """One :class:`~dpcurator.query.ir.BinCodeColumn` per bounded numeric column whose quantiles
    are refined over equal-width bins of its bounds (not unit bins over its integers), on the
    bounds a quantile of the bare column is planned with (engines may precompute them)."""
    columns = []
    for spec in fixed_point_columns(metadata):
        integer = unit_grid(ir.Col(spec.column), metadata, spec.lower, spec.upper)
        if QuantileBins.for_bounds(spec.lower, spec.upper, integer=integer).lower == spec.lower:
            columns.append(ir.BinCodeColumn(spec.column, spec.lower, spec.upper, BIN_CODE_BITS))
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
    """The fixed-point, key-code, bounding and bin-code columns an engine may compute when it
    opens the table."""
    codes = key_code_columns(metadata)
    return ir.PrecomputedColumns(
        fixed_point_columns(metadata),
        codes,
        bounding_columns(metadata, codes),
        bin_code_columns(metadata),
    )
