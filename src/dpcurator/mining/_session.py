"""The one data path of the mining algorithms: noisy aggregates released by a query session.

Every algorithm fits on a :class:`~dpcurator.query.session.Session` table, touching the data only
through :meth:`Session.release` of builder queries (noisy counts, sums and sums of products,
grouped by a public-key column or by a CASE expression with literal results), so it runs on any
engine (DuckDB, Polars, Spark, ...), is bounded per person (``max_rows_per_person``,
``max_groups_per_person`` of the metadata) and is charged to the session's filter like any release:
one reservation per release. A fit on an array is the same fit on a private in-memory DuckDB
session opened on that array with metadata built from the public bounds (row-level privacy).

Refusals (an unknown column, a column that is not numeric, a column without public bounds, a
label column without public keys, a total cost above the remaining budget) are decided from the
metadata and the parameters before the first release, so they are free and name the column.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcurator._validation import fail
from dpcurator.accounting import Budget
from dpcurator.core.measures import ApproxDP, PureDP
from dpcurator.errors import BudgetExceededError, UnsupportedQueryError
from dpcurator.mining._data import Array, clamp_rows
from dpcurator.query import ir
from dpcurator.query.columns import ColumnMeta
from dpcurator.query.frontend.builder import Query
from dpcurator.query.frontend.row_expressions import Expression, col
from dpcurator.query.plan.analysis import public_keys
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from dpcurator.random import Rng

#: The name of the label column of a session opened on an array.
LABEL = "label"


@dataclass(frozen=True)
class Table:
    """A session table with the fitted columns and their public bounds (from the metadata)."""

    session: Session
    columns: tuple[str, ...]
    lower: Array
    upper: Array
    label: str | None = None

    @property
    def middle(self) -> Array:
        return (self.lower + self.upper) / 2

    @property
    def radius(self) -> Array:
        return (self.upper - self.lower) / 2

    def centred(self, j: int) -> Expression:
        """Column j minus the midpoint of its public bounds (halves a sum's sensitivity)."""
        return col(self.columns[j]) - float(self.middle[j])

    def query(self) -> Query:
        return self.session.table()

    def label_keys(self) -> tuple[ir.ScalarValue, ...]:
        assert self.label is not None
        keys = public_keys(ir.Col(self.label), self.session.metadata)
        assert keys is not None  # checked by session_table
        return keys


def session_table(
    owner: str, session: Session, columns: Sequence[str] | None, label: str | None = None
) -> Table:
    """Check ``columns`` (numeric, public bounds) and ``label`` (public keys): free refusals."""
    metadata = session.metadata
    if columns is None or isinstance(columns, str) or not list(columns):
        raise fail(owner, "columns", "a non-empty list of column names", columns)
    lower, upper = [], []
    for name in columns:
        column = _column(owner, metadata, name)
        if column.type not in ("int", "float"):
            raise UnsupportedQueryError(
                f"{owner}: column {name!r} is declared {column.type!r}; the mining algorithms "
                "read numeric columns (int or float) only."
            )
        if column.lower is None or column.upper is None or not column.lower < column.upper:
            raise UnsupportedQueryError(
                f"{owner}: column {name!r} has no public bounds (lower < upper): declare them in "
                "the metadata (or estimate them with Session.dp_bounds)."
            )
        lower.append(float(column.lower))
        upper.append(float(column.upper))
    if label is not None:
        label_keys(owner, metadata, label)
    return Table(session, tuple(columns), np.array(lower), np.array(upper), label)


def label_keys(owner: str, metadata: Metadata, label: str) -> tuple[ir.ScalarValue, ...]:
    """The label column's public keys (free refusal naming it when it has none)."""
    _column(owner, metadata, label)
    keys = public_keys(ir.Col(label), metadata)
    if keys is None:
        raise UnsupportedQueryError(
            f"{owner}: label column {label!r} has no public keys: declare 'keys' for it in "
            "the metadata."
        )
    return keys


def categorical_keys(
    owner: str, metadata: Metadata, columns: Sequence[str] | None
) -> tuple[tuple[ir.ScalarValue, ...], ...]:
    """The public keys of each of ``columns`` (categorical attributes: declared keys, bool, or
    an int column whose public bounds span few integers); free refusals name the column."""
    if columns is None or isinstance(columns, str) or not list(columns):
        raise fail(owner, "columns", "a non-empty list of column names", columns)
    if len(set(columns)) != len(columns):
        raise fail(owner, "columns", "distinct column names", columns)
    found = []
    for name in columns:
        _column(owner, metadata, name)
        keys = public_keys(ir.Col(name), metadata)
        if keys is None or len(keys) < 2:
            raise UnsupportedQueryError(
                f"{owner}: column {name!r} has no public keys (at least two): declare 'keys' "
                "for it in the metadata (ID3 splits on categorical columns only)."
            )
        found.append(keys)
    return tuple(found)


def _column(owner: str, metadata: Metadata, name: object) -> ColumnMeta:
    """The column's metadata (DomainError naming an unknown column and the known ones)."""
    if not isinstance(name, str):
        raise fail(owner, "columns", "column names (strings)", name)
    return metadata.column(name)


def array_table(
    owner: str,
    X: npt.ArrayLike,
    *,
    lower: Array,
    upper: Array,
    epsilon: Fraction,
    rng: Rng | None,
    labels: tuple[npt.ArrayLike, Sequence[ir.ScalarValue]] | None = None,
) -> Table:
    """A private in-memory session on an array (rows clamped to the bounds, NaN -> midpoint),
    with a budget of ``epsilon`` and, given ``labels`` = (y, classes), a label column whose
    public keys are the classes (labels outside them never match a class)."""
    rows = clamp_rows(owner, X, lower, upper)
    names = [f"x{j}" for j in range(lower.size)]
    frame = pd.DataFrame(rows, columns=names)
    columns: dict[str, object] = {
        name: {"type": "float", "lower": float(lo), "upper": float(hi)}
        for name, lo, hi in zip(names, lower, upper, strict=True)
    }
    label = None
    if labels is not None:
        y, classes = labels
        values = np.asarray(y).reshape(-1)
        if values.size != rows.shape[0]:
            raise fail(owner, "y", f"{rows.shape[0]} labels (one per row)", values.size)
        codes = {value: code for code, value in enumerate(classes)}
        frame[LABEL] = [codes.get(v.item() if hasattr(v, "item") else v, -1) for v in values]
        columns[LABEL] = {"type": "int", "keys": list(range(len(classes)))}
        label = LABEL
    metadata = Metadata.from_dict({"table": "data", "columns": columns})
    session = Session.from_data(frame, metadata=metadata, budget=Budget(epsilon), rng=rng)
    return session_table(owner, session, names, label)


def coded_session(
    codes: npt.NDArray[np.int64],
    labels: npt.NDArray[np.int64],
    values: Sequence[int],
    classes: int,
    *,
    epsilon: Fraction,
    rng: Rng | None,
) -> Session:
    """A private in-memory session on categorical codes (already inside their domains): columns
    ``a0, a1, ...`` with public keys ``0..values[j]-1`` and a label column with keys
    ``0..classes-1``, with a budget of ``epsilon``."""
    frame = pd.DataFrame(codes, columns=[f"a{j}" for j in range(len(values))])
    frame[LABEL] = labels
    columns: dict[str, object] = {
        f"a{j}": {"type": "int", "keys": list(range(v))} for j, v in enumerate(values)
    }
    columns[LABEL] = {"type": "int", "keys": list(range(classes))}
    metadata = Metadata.from_dict({"table": "data", "columns": columns})
    return Session.from_data(frame, metadata=metadata, budget=Budget(epsilon), rng=rng)


def check_affordable(owner: str, session: Session, total: Fraction) -> None:
    """Refuse (free) a fit whose total ε exceeds the session's remaining budget."""
    remaining = session.remaining()
    if isinstance(remaining, PureDP | ApproxDP) and remaining.epsilon < total:
        raise BudgetExceededError(PureDP(total), remaining)


def release_epsilon(share: Fraction) -> float:
    """``share`` as a float no larger than it (so that the releases' total stays <= ε)."""
    value = float(share)
    return math.nextafter(value, 0.0) if Fraction(value) > share else value


@dataclass(frozen=True)
class Released:
    """Noisy values of one release: ``values`` (groups x value columns, one row per public key in
    the order given, one row when ungrouped), the exact ε charged, and each value column's noise
    scale (public: from the plan)."""

    values: Array
    epsilon: Fraction
    scales: dict[str, float]


def release(
    session: Session, query: Query, epsilon: float, keys: Sequence[ir.ScalarValue] | None = None
) -> Released:
    """Release ``query`` (at most one grouping expression, with public ``keys``) at ``epsilon``."""
    return release_grid(session, query, epsilon, *([] if keys is None else [keys]))


def release_grid(
    session: Session, query: Query, epsilon: float, *keys: Sequence[ir.ScalarValue]
) -> Released:
    """Release ``query`` grouped by one expression per public key set in ``keys``, at
    ``epsilon``: row i of ``values`` is the group of the i-th key combination in row-major order
    (the first key set varies slowest)."""
    answer = session.release(query, epsilon=epsilon)
    indexes = [{key: i for i, key in enumerate(key_set)} for key_set in keys]
    shape = tuple(len(index) for index in indexes)
    values = np.zeros((math.prod(shape), len(answer.value_columns)))
    for key, estimates in answer.rows:
        position = tuple(index[k] for index, k in zip(indexes, key, strict=True))
        row = int(np.ravel_multi_index(position, shape)) if shape else 0
        values[row] = [e.value for e in estimates]
    scales = {use.column: use.scale for use in answer.mechanisms if use.scale is not None}
    cost = answer.cost
    assert isinstance(cost, PureDP | ApproxDP)  # released at an epsilon, not a rho
    return Released(values, cost.epsilon, scales)
