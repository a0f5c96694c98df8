"""Result collection shared by the backends: empty groups, histogram arrays and merges,
and the conversion of engine rows to an :class:`~dpcurator.query.ir.ExactResult`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from dpcurator.query.backends.base import HIDDEN_PREFIX
from dpcurator.query.backends.grid import (
    clamp_total,
)
from dpcurator.query.ir import (
    AggregatePlan,
    ExactResult,
    ScalarValue,
)


def empty_values(plan: AggregatePlan) -> dict[str, object]:
    """Return the aggregate values of a group with no rows (used for ungrouped plans)."""
    return {
        agg.name: np.zeros(agg.bins, dtype=np.int64) if agg.kind == "histogram" else 0
        for agg in plan.aggregates
    }


def histogram_array(
    bins: int,
    counts: Mapping[object, object] | tuple[Sequence[int], Sequence[int]] | None,
) -> np.ndarray:
    """Build the int64 histogram of ``bins`` bins from a mapping bin index -> count (a NULL
    index counts in no bin), or from two lists (bin indices, counts)."""
    array = np.zeros(bins, dtype=np.int64)
    if counts is not None and not isinstance(counts, Mapping):
        indices, values = counts
        array[np.asarray(indices, dtype=np.int64)] = np.asarray(values, dtype=np.int64)
        return array
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
    columns = columns or [()] * (width + 1 + len(plan.aggregates))  # no rows: empty columns
    keys = list(zip(*(map(python_scalar, column) for column in columns[:width]), strict=True))
    values = [
        [histogram_array(agg.bins, value) for value in column]
        if agg.kind == "histogram"
        else [0 if value is None else clamp_total(int(value)) for value in column]
        for agg, column in zip(plan.aggregates, columns[width + 1 :], strict=False)
    ]
    return collect_groups(plan, keys or [()] * len(rows), values)


def collect_groups(
    plan: AggregatePlan, keys: Sequence[tuple[ScalarValue, ...]], values: Sequence[Sequence[object]]
) -> ExactResult:
    """The ExactResult of groups ``keys`` (``()`` for an ungrouped plan) whose aggregates are the
    columns ``values`` (one per aggregate of ``plan``, in its order, final values: clamped
    totals and histogram arrays); an ungrouped plan over no rows gets :func:`empty_values`."""
    names = [agg.name for agg in plan.aggregates]
    if len(names) == 1:  # the common case, without a zip per group
        (name,), (column,) = names, values
        groups: dict[tuple[ScalarValue, ...], dict[str, object]] = {
            key: {name: value} for key, value in zip(keys, column, strict=True)
        }
    else:
        groups = {
            key: dict(zip(names, group, strict=True))
            for key, *group in zip(keys, *values, strict=True)
        }
    if not plan.group_by and () not in groups:
        groups[()] = empty_values(plan)
    return ExactResult(groups=groups)


def python_scalar(value: object) -> ScalarValue:
    """Convert an engine scalar (numpy, Decimal-free) to the Python scalar used in result keys."""
    if isinstance(value, np.generic):
        return value.item()  # type: ignore[no-any-return]
    return value  # type: ignore[return-value]
