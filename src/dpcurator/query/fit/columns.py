"""Which columns and parameters a fit (:mod:`dpcurator.query.fit.core`) reads, decided from the
public metadata and request alone, so every refusal is free: numeric columns with public bounds
(never the person column), a 0/1 label, the public value of a NULL and the parameter box (how
far one person moves a fit comes from :mod:`dpcurator.query.privacy_unit`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Final

import numpy as np

from dpcurator._validation import fail
from dpcurator.errors import UnsupportedQueryError
from dpcurator.estimators.sample_aggregate import Box
from dpcurator.query import ir
from dpcurator.query.columns import ColumnMeta
from dpcurator.query.schema import Metadata

#: The owner named in the fit's refusals.
OWNER: Final = "Session.fit"


def column_names(name: str, values: Sequence[str]) -> tuple[str, ...]:
    """The column names given as parameter ``name`` (a sequence of strings, else refused)."""
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise fail(OWNER, name, "a sequence of column names", values)
    return tuple(values)


def required_column(name: str, value: str | None) -> str:
    """The column name given as parameter ``name`` (refused when missing or not a string)."""
    if not isinstance(value, str):
        raise fail(OWNER, name, "a column name", value)
    return value


def numeric_columns(metadata: Metadata, names: Sequence[str]) -> tuple[ColumnMeta, ...]:
    """The metadata of numeric columns with public bounds (refused otherwise, free)."""
    if len(set(names)) != len(names):
        raise fail(OWNER, "x", "distinct columns (y included)", list(names))
    metas = tuple(metadata.column(name) for name in names)
    for meta in metas:
        if meta.name == metadata.person_column:
            raise UnsupportedQueryError(
                f"Column {meta.name!r} is the person column: it cannot be a fit's variable."
            )
        if not meta.is_numeric:
            raise UnsupportedQueryError(
                f"Column {meta.name!r} is declared {meta.type}: a fit needs numeric columns."
            )
        if meta.lower is None or meta.upper is None:
            raise UnsupportedQueryError(
                f"Column {meta.name!r} has no public bounds in the metadata (lower/upper): a fit "
                "clamps every variable to its bounds."
            )
    return metas


def label_column(metadata: Metadata, name: str) -> ColumnMeta:
    """The 0/1 response of a logistic regression: a bool column, or a numeric one clamped to
    [0, 1] (:func:`~dpcurator.estimators.logistic.logistic_regression` thresholds it)."""
    meta = metadata.column(name)
    if meta.type == "bool":
        return replace(meta, type="int", lower=0, upper=1, fill=0)
    (numeric,) = numeric_columns(metadata, (name,))
    return replace(numeric, lower=0, upper=1, fill=0)


def null_fill(meta: ColumnMeta) -> float:
    """The public value of a NULL: the declared fill, else the midpoint of the bounds."""
    assert meta.lower is not None  # checked by numeric_columns
    assert meta.upper is not None
    if isinstance(meta.fill, int | float) and not isinstance(meta.fill, bool):
        return float(meta.fill)
    return (meta.lower + meta.upper) / 2


def scaled_column(meta: ColumnMeta, mid: float, half: float) -> ir.Expr:
    """(clamp(column, lower, upper) - mid) / half, NULL -> the column's fill (or midpoint): a
    bounded column rescaled (to [-1, 1] when mid and half are its bounds' own)."""
    assert meta.lower is not None  # checked by numeric_columns
    assert meta.upper is not None
    column = ir.Col(meta.name)
    low, high = ir.Lit(float(meta.lower)), ir.Lit(float(meta.upper))
    clamped = ir.Case(
        (
            (ir.IsNull(column), ir.Lit(float(null_fill(meta)))),
            (ir.Compare("<", column, low), low),
            (ir.Compare(">", column, high), high),
        ),
        column,
    )
    return ir.BinOp("*", ir.BinOp("-", clamped, ir.Lit(float(mid))), ir.Lit(1.0 / half))


def difference_column(first: ColumnMeta, second: ColumnMeta) -> tuple[ir.Expr, float, float]:
    """Each row's ``first - second``, both clamped to their bounds (NULL -> the column's fill),
    and its public bounds [L1 - U2, U1 - L2]: the paired t-test's value."""
    bounds = (first.lower, first.upper, second.lower, second.upper)
    assert None not in bounds  # checked by the callers
    low_1, high_1, low_2, high_2 = (float(b) for b in bounds)  # type: ignore[arg-type]
    value = ir.BinOp("-", scaled_column(first, 0.0, 1.0), scaled_column(second, 0.0, 1.0))
    return value, low_1 - high_2, high_1 - low_2


def parameter_box(lower: object, upper: object, size: int | None) -> Box:
    """The public parameter box (validated before the charge), broadcast to ``size``."""
    if lower is None or upper is None:
        raise fail(OWNER, "upper", "given with lower: public bounds of the parameters", upper)
    if size is None:
        return Box.of(OWNER, lower, upper)
    try:
        low = np.broadcast_to(np.asarray(lower, np.float64), (size,))
        high = np.broadcast_to(np.asarray(upper, np.float64), (size,))
    except (TypeError, ValueError) as exc:
        raise fail(OWNER, "lower", f"a number or {size} numbers", lower) from exc
    return Box.of(OWNER, low, high)
