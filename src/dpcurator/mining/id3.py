"""Differentially private ID3 decision trees from noisy counts (Friedman & Schuster 2010, "Data
mining with differential privacy", the SuLQ-based ID3 of their §4; Blum, Dwork, McSherry & Nissim
2005).

Features and labels are categorical with public domains (integer codes 0..k-1; codes outside the
domain are clamped into it, never an error). Growing the tree level by level, each node releases
a noisy class histogram and, for every attribute not yet used on its path, a noisy (value x class)
contingency table; the attribute of highest information gain on the NOISY table is split on. A
node becomes a leaf at ``max_depth``, when no attribute is left, or when its noisy size is below
the Friedman-Schuster rule sqrt(2) · values · classes / ε_node (too few rows for the noise).

Privacy guarantee: a row reaches one node per depth. At a node, each released table has L1
sensitivity 1 under adding or removing a row, and the node budget ε / (max_depth + 1) is split
evenly over its tables, so every depth costs ε / (max_depth + 1) (parallel composition over the
nodes of a depth) and the tree is ε-DP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, fail
from dpcurator.mechanisms import Laplace
from dpcurator.mining._data import epsilon_of
from dpcurator.random import Rng, default_rng

__all__ = ["ID3"]

Codes = npt.NDArray[np.int64]


@dataclass
class _Node:
    label: int
    attribute: int | None = None
    children: dict[int, _Node] = field(default_factory=dict)


class ID3:
    """ε-DP ID3 classifier over public categorical domains (sklearn-like ``fit``/``predict``).

    ``values`` lists the number of categories of each feature; ``classes`` the number of labels.
    Attributes after ``fit``: ``n_iter_`` (levels grown) and ``epsilon_spent_`` (exact).
    """

    def __init__(
        self, epsilon: object, values: list[int], classes: int, max_depth: int = 3
    ) -> None:
        owner = "ID3"
        self.epsilon = epsilon_of(owner, epsilon)
        self.values = [check_int(owner, "values", v, minimum=1) for v in values]
        if not self.values:
            raise fail(owner, "values", "a non-empty list of category counts", values)
        self.classes = check_int(owner, "classes", classes, minimum=2)
        self.max_depth = check_int(owner, "max_depth", max_depth, minimum=0)
        self.level_epsilon = self.epsilon / (self.max_depth + 1)
        self.root_: _Node | None = None
        self.n_iter_ = 0
        self.epsilon_spent_ = Fraction(0)

    def fit(self, X: npt.ArrayLike, y: npt.ArrayLike, rng: Rng | None = None) -> ID3:
        source = rng or default_rng()
        features = self._codes(X)
        labels = np.clip(np.asarray(y, dtype=np.int64).reshape(-1), 0, self.classes - 1)
        if labels.size != features.shape[0]:
            raise fail("ID3.fit", "y", f"{features.shape[0]} labels (one per row)", labels.size)
        self.epsilon_spent_ = Fraction(0)
        self.n_iter_ = 0
        frontier: list[tuple[_Node, Codes, tuple[int, ...]]] = []
        self.root_ = _Node(label=0)
        frontier.append((self.root_, np.arange(labels.size), ()))
        for depth in range(self.max_depth + 1):
            if not frontier:
                break
            spent = Fraction(0)
            next_frontier: list[tuple[_Node, Codes, tuple[int, ...]]] = []
            for node, rows, used in frontier:
                free = [a for a in range(len(self.values)) if a not in used]
                if depth == self.max_depth:
                    free = []
                mechanism = Laplace.for_epsilon(self.level_epsilon / (len(free) + 1), 1)
                spent = max(spent, mechanism.epsilon(1) * (len(free) + 1))
                histogram = np.bincount(labels[rows], minlength=self.classes)
                noisy = np.maximum(mechanism.release_integers(histogram, source), 0)
                node.label = int(np.argmax(noisy))
                widest = max((self.values[a] for a in free), default=1)
                node_eps = float(mechanism.epsilon(1))
                if not free or noisy.sum() < math.sqrt(2) * widest * self.classes / node_eps:
                    continue
                best, best_gain = free[0], -math.inf
                for attribute in free:
                    table = np.zeros((self.values[attribute], self.classes), dtype=np.int64)
                    np.add.at(table, (features[rows, attribute], labels[rows]), 1)
                    released = np.maximum(mechanism.release_integers(table, source), 0)
                    gain = -_conditional_entropy(released)
                    if gain > best_gain:
                        best, best_gain = attribute, gain
                node.attribute = best
                for value in range(self.values[best]):
                    child = _Node(label=node.label)
                    node.children[value] = child
                    subset = rows[features[rows, best] == value]
                    next_frontier.append((child, subset, (*used, best)))
            self.epsilon_spent_ += spent
            self.n_iter_ = depth + 1
            frontier = next_frontier
        return self

    def predict(self, X: npt.ArrayLike) -> Codes:
        """The leaf label of each row (post-processing, no cost)."""
        if self.root_ is None:
            raise fail("ID3.predict", "self", "fitted (call fit first)", "an unfitted model")
        features = self._codes(X)
        out = np.empty(features.shape[0], dtype=np.int64)
        for i, row in enumerate(features):
            node = self.root_
            while node.attribute is not None:
                node = node.children[int(row[node.attribute])]
            out[i] = node.label
        return out

    def _codes(self, X: npt.ArrayLike) -> Codes:
        matrix = np.asarray(X)
        if matrix.ndim != 2 or matrix.shape[1] != len(self.values):
            raise fail("ID3", "X", f"a 2-D array with {len(self.values)} columns", matrix.shape)
        codes = np.nan_to_num(matrix.astype(np.float64), nan=0.0).astype(np.int64)
        return np.clip(codes, 0, np.array(self.values) - 1)


def _conditional_entropy(table: Codes) -> float:
    """Σ_v n_v · H(class | value v) of a (value x class) count table (lower is a better split)."""
    totals = table.sum(axis=1, keepdims=True).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        shares = np.where(totals > 0, table / totals, 0.0)
        logs = np.where(shares > 0, np.log2(np.where(shares > 0, shares, 1.0)), 0.0)
    return float(-(table * logs).sum())
