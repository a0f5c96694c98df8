"""Differentially private ID3 decision trees from noisy counts (Friedman & Schuster 2010, "Data
mining with differential privacy", the SuLQ-based ID3 of their §4; Blum, Dwork, McSherry & Nissim
2005).

Attributes and labels are categorical with public domains: on a session table, columns with
public keys (:func:`~dpcurator.query.plan.analysis.public_keys`: declared keys, bool, small int
ranges); on an array, integer codes 0..k-1 (codes outside the domain are clamped into it, never
an error). A value outside a column's keys (or NULL) counts as its first key. The tree grows
level by level; at depth d every node has used d attributes, so each has A - d free ones (A
attributes). A level releases, through :meth:`Session.release` of builder queries
(:mod:`dpcurator.mining._session`), a noisy class histogram of every node (``GROUP BY <node>,
label``) and, for each free-attribute slot k, a noisy (value x class) table of every node's k-th
free attribute (``GROUP BY <node, value>, label``). ``<node>`` is a CASE over the public split
path (literal results, ELSE -1 for rows of finished leaves), a function of public inputs and
earlier noisy outputs only. A node takes the label of its noisy histogram's largest count; it
becomes a leaf at the last level or when its noisy size is below the Friedman-Schuster rule
sqrt(2) · b · values · classes (b the count's public noise scale: too few rows for the noise);
otherwise it splits on the attribute of highest information gain on the NOISY tables.

Privacy guarantee: a row is in one node per level, so every release of a level has one group per
row and the session plans and charges it like any grouped count (user-level bounds from the
metadata). The levels are min(max_depth, A) + 1 and each costs ε / levels, split evenly over its
1 + (A - d) releases (1 at the last level): the number of releases and their ε are fixed by
(ε, max_depth, A) before the first one, the fit is ε-DP (sequential composition) and
``epsilon_spent_`` is the sum of the charges (<= ε, exact). Releases of a level whose nodes are
all leaves are still made (and ignored), so the charge never depends on the data. Fitting an
array is the same fit on a private in-memory session of the codes (row-level privacy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, fail
from dpcurator.mining._data import epsilon_of
from dpcurator.mining._session import (
    LABEL,
    categorical_keys,
    check_affordable,
    coded_session,
    label_keys,
    release_epsilon,
    release_grid,
)
from dpcurator.query import ir
from dpcurator.query.frontend.builder import count
from dpcurator.query.frontend.row_expressions import Expression, col, when
from dpcurator.query.plan.limits import MAX_PUBLIC_GROUPS, check_at_most
from dpcurator.query.session import Session
from dpcurator.random import Rng

__all__ = ["ID3"]

Codes = npt.NDArray[np.int64]
Path = tuple[tuple[int, int], ...]


@dataclass
class _Node:
    label: int
    attribute: int | None = None
    children: dict[int, _Node] = field(default_factory=dict)


@dataclass(frozen=True)
class _Table:
    """The fitted session table: attribute columns, their keys, the label and its keys."""

    session: Session
    columns: tuple[str, ...]
    keys: tuple[tuple[ir.ScalarValue, ...], ...]
    label: str
    classes: tuple[ir.ScalarValue, ...]


class ID3:
    """ε-DP ID3 classifier over public categorical domains (sklearn-like ``fit``/``predict``).

    ``fit(session, columns=[...], label=...)`` reads the domains from the metadata; ``fit(X, y)``
    needs ``values`` (the number of categories of each feature) and ``classes`` (the number of
    labels). Attributes after ``fit``: ``root_``, ``classes_``, ``n_iter_`` (levels grown) and
    ``epsilon_spent_`` (exact).
    """

    def __init__(
        self,
        epsilon: object,
        values: Sequence[int] | None = None,
        classes: int | None = None,
        max_depth: int = 3,
    ) -> None:
        owner = "ID3"
        self.epsilon = epsilon_of(owner, epsilon)
        self.values = (
            None if values is None else [check_int(owner, "values", v, minimum=2) for v in values]
        )
        if self.values is not None and not self.values:
            raise fail(owner, "values", "a non-empty list of category counts", values)
        self.classes = None if classes is None else check_int(owner, "classes", classes, minimum=2)
        self.max_depth = check_int(owner, "max_depth", max_depth, minimum=0)
        self.root_: _Node | None = None
        self.classes_: npt.NDArray[np.generic] | None = None
        self.keys_: tuple[tuple[ir.ScalarValue, ...], ...] | None = None
        self.n_iter_ = 0
        self.epsilon_spent_ = Fraction(0)

    def fit(
        self,
        data: Session | npt.ArrayLike,
        y: npt.ArrayLike | None = None,
        rng: Rng | None = None,
        *,
        columns: Sequence[str] | None = None,
        label: str | None = None,
    ) -> ID3:
        """Fit on a session table (categorical ``columns``, ``label`` with public keys) or on an
        array of codes ``data`` with labels ``y`` (``rng`` draws its noise)."""
        table = self._table(data, y, rng, columns, label)
        attributes = len(table.columns)
        levels = min(self.max_depth, attributes) + 1
        widest = max(len(k) for k in table.keys)
        for depth in range(levels):
            nodes = math.prod(sorted((len(k) for k in table.keys), reverse=True)[:depth])
            cells = nodes * (widest if depth < levels - 1 else 1) + 1
            check_at_most(
                "ID3: groups of one level",
                cells * len(table.classes),
                "MAX_PUBLIC_GROUPS",
                MAX_PUBLIC_GROUPS,
            )
        check_affordable("ID3", table.session, self.epsilon)
        self.epsilon_spent_ = Fraction(0)
        self.root_ = _Node(label=0)
        frontier: list[tuple[_Node, Path]] = [(self.root_, ())]
        for depth in range(levels):
            slots = 0 if depth == levels - 1 else attributes - depth
            share = release_epsilon(self.epsilon / levels / (slots + 1))
            histograms, scale = self._release(table, share, [(path, None) for _, path in frontier])
            splitting: list[tuple[_Node, Path, list[int]]] = []
            for (node, path), histogram in zip(frontier, histograms, strict=True):
                noisy = np.maximum(histogram[0], 0)
                node.label = int(np.argmax(noisy))
                used = {attribute for attribute, _ in path}
                free = [a for a in range(attributes) if a not in used]
                values = max((len(table.keys[a]) for a in free), default=1)
                if slots and noisy.sum() >= math.sqrt(2) * scale * values * len(table.classes):
                    splitting.append((node, path, free))
            gains = np.zeros((len(splitting), slots))
            for slot in range(slots):
                pairs = [(path, free[slot]) for _, path, free in splitting]
                tables, _ = self._release(table, share, pairs)
                for i, counts in enumerate(tables):
                    gains[i, slot] = -_conditional_entropy(np.maximum(counts, 0))
            frontier = []
            for (node, path, free), node_gains in zip(splitting, gains, strict=True):
                best = free[int(np.argmax(node_gains))]
                node.attribute = best
                for value in range(len(table.keys[best])):
                    child = _Node(label=node.label)
                    node.children[value] = child
                    frontier.append((child, (*path, (best, value))))
        self.n_iter_ = levels
        return self

    def predict(self, X: npt.ArrayLike) -> npt.NDArray[np.generic]:
        """The leaf label of each row (post-processing, no cost): ``X`` holds codes after an
        array fit, the columns' values after a session fit."""
        if self.root_ is None or self.classes_ is None:
            raise fail("ID3.predict", "self", "fitted (call fit first)", "an unfitted model")
        features = self._codes(X)
        out = np.empty(features.shape[0], dtype=np.int64)
        for i, row in enumerate(features):
            node = self.root_
            while node.attribute is not None:
                node = node.children[int(row[node.attribute])]
            out[i] = node.label
        result: npt.NDArray[np.generic] = self.classes_[out]
        return result

    def _release(
        self, table: _Table, epsilon: float, cells: Sequence[tuple[Path, int | None]]
    ) -> tuple[list[npt.NDArray[np.float64]], float]:
        """ONE release of noisy (value x class) counts for each (node path, attribute) of
        ``cells`` (attribute None: the node's class histogram, one value), and the counts' noise
        scale. Cell i's value v is the group ``offset_i + v`` of a CASE with literal results."""
        whens: list[tuple[Expression, int]] = []
        default, offsets = -1, list[tuple[int, int]]()
        for path, attribute in cells:
            offset = sum(size for _, size in offsets)
            offsets.append((offset, 1 if attribute is None else len(table.keys[attribute])))
            condition = _path_condition(table, path)
            if attribute is not None:
                for value in range(len(table.keys[attribute]) - 1, 0, -1):
                    test = _is_value(table, attribute, value)
                    whens.append((test if condition is None else condition & test, offset + value))
            if condition is None:
                default = offset  # the root: every row left
            else:
                whens.append((condition, offset))
        query = table.session.table()
        if whens:
            case = when(*whens[0])
            for condition, group in whens[1:]:
                case = case.when(condition, group)
            query = query.group_by(case.otherwise(default))
        ids = [group for _, group in whens] + [default]
        keys = [ids] if whens else []
        query = query.group_by(table.label).agg(count(name="n"))
        grid = release_grid(table.session, query, epsilon, *keys, table.classes)
        self.epsilon_spent_ += grid.epsilon
        counts = grid.values[:, 0].reshape(-1, len(table.classes))
        row = {group: i for i, group in enumerate(ids if whens else [default])}
        tables = [counts[[row[offset + v] for v in range(size)]] for offset, size in offsets]
        return tables, grid.scales["n"]

    def _table(
        self,
        data: Session | npt.ArrayLike,
        y: npt.ArrayLike | None,
        rng: Rng | None,
        columns: Sequence[str] | None,
        label: str | None,
    ) -> _Table:
        if isinstance(data, Session):
            if label is None:
                raise fail("ID3", "label", "the label column's name", None)
            metadata = data.metadata
            keys = categorical_keys("ID3", metadata, columns)
            assert columns is not None  # checked by categorical_keys
            classes = label_keys("ID3", metadata, label)
            self.keys_ = keys
            self.classes_ = np.asarray(classes)
            return _Table(data, tuple(columns), keys, label, classes)
        if self.values is None or self.classes is None or y is None:
            raise fail("ID3", "values", "values and classes (and y) to fit an array", None)
        self.keys_ = None
        self.classes_ = np.arange(self.classes)
        codes = self._codes(data)
        labels = np.clip(np.asarray(y, dtype=np.int64).reshape(-1), 0, self.classes - 1)
        if labels.size != codes.shape[0]:
            raise fail("ID3.fit", "y", f"{codes.shape[0]} labels (one per row)", labels.size)
        session = coded_session(
            codes, labels, self.values, self.classes, epsilon=self.epsilon, rng=rng
        )
        keys = tuple(tuple(range(v)) for v in self.values)
        names = tuple(f"a{j}" for j in range(len(self.values)))
        return _Table(session, names, keys, LABEL, tuple(range(self.classes)))

    def _codes(self, X: npt.ArrayLike) -> Codes:
        """Codes of a 2-D array: array fits clamp codes into their domains; session fits map
        each value to its key's index (a value outside the keys to 0)."""
        matrix = np.asarray(X)
        width = len(self.keys_) if self.keys_ is not None else len(self.values or [])
        if matrix.ndim != 2 or matrix.shape[1] != width:
            raise fail("ID3", "X", f"a 2-D array with {width} columns", matrix.shape)
        if self.keys_ is None:
            codes = np.nan_to_num(matrix.astype(np.float64), nan=0.0).astype(np.int64)
            return np.clip(codes, 0, np.array(self.values) - 1)
        indexes = [{key: i for i, key in enumerate(keys)} for keys in self.keys_]
        out = np.zeros(matrix.shape, dtype=np.int64)
        for j, index in enumerate(indexes):
            out[:, j] = [index.get(v.item() if hasattr(v, "item") else v, 0) for v in matrix[:, j]]
        return out


def _is_value(table: _Table, attribute: int, value: int) -> Expression:
    """The row's value of ``attribute`` is its key number ``value`` (a value outside the keys or
    NULL is key 0)."""
    keys = table.keys[attribute]
    column = col(table.columns[attribute])
    if value:
        return column == keys[value]
    code = when(column == keys[1], 1)
    for key in keys[2:]:
        code = code.when(column == key, 1)
    return code.otherwise(0) == 0


def _path_condition(table: _Table, path: Path) -> Expression | None:
    """The rows of the node at the end of ``path`` (None at the root: every row)."""
    condition = None
    for attribute, value in path:
        test = _is_value(table, attribute, value)
        condition = test if condition is None else condition & test
    return condition


def _conditional_entropy(table: npt.NDArray[np.float64]) -> float:
    """Σ_v n_v · H(class | value v) of a (value x class) count table (lower is a better split)."""
    totals = table.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        shares = np.where(totals > 0, table / totals, 0.0)
        logs = np.where(shares > 0, np.log2(np.where(shares > 0, shares, 1.0)), 0.0)
    return float(-(table * logs).sum())
