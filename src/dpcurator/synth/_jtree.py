"""Sum-product calibration of a junction forest in numpy (Koller & Friedman 2009, §10.2-10.3).

Every node of the forest is a clique whose columns are in one global order (mbi's junction
trees list each clique's columns in the domain's order), so a table over a separator lines up
with a table over either of its nodes by a reshape. :class:`Schedule` fixes the message order of
one forest once; :meth:`Schedule.calibrate` then turns log-potentials into the nodes' marginals
with no program compiled per structure: messages go up to each component's root in log space
(log-sum-exp), then come down as probabilities, P(C) = P(C | S) · P(S) with S the separator to
the parent. Calibration is exact on a junction tree.
"""

from __future__ import annotations

import importlib
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

Clique = tuple[str, ...]


@dataclass(frozen=True)
class _Edge:
    """A non-root node, its parent, and how a separator table lines up with each."""

    node: Clique
    parent: Clique
    #: axes of the node summed out towards the parent (the node's columns not in the parent)
    outside: tuple[int, ...]
    #: axes of the parent summed out towards the node
    parent_outside: tuple[int, ...]
    #: the separator's shape broadcast against the parent's table
    parent_shape: tuple[int, ...]
    #: the separator's shape broadcast against the node's table
    node_shape: tuple[int, ...]


@dataclass(frozen=True)
class Schedule:
    """The message order of a junction forest: the roots (the least clique of each component)
    and the other nodes in preorder, each with its parent."""

    roots: tuple[Clique, ...]
    edges: tuple[_Edge, ...]

    @classmethod
    def of(cls, jtree: Any, sizes: Mapping[str, int]) -> Schedule:
        """The schedule of ``jtree`` (a networkx forest whose nodes are cliques in one global
        column order) over columns of ``sizes`` codes."""
        graphs = networkx()
        roots, edges = [], []
        for part in sorted(graphs.connected_components(jtree), key=min):
            root = min(part)
            roots.append(root)
            parents = dict(graphs.dfs_predecessors(jtree, root))
            for node in graphs.dfs_preorder_nodes(jtree, root):
                if node != root:
                    edges.append(_edge(node, parents[node], sizes))
        return cls(tuple(roots), tuple(edges))

    def calibrate(
        self, logs: Mapping[Clique, npt.NDArray[np.float64]], total: float
    ) -> dict[Clique, npt.NDArray[np.float64]]:
        """Each node's marginal of the model whose log-potential over node c is ``logs[c]``
        (shaped as c), each component's summing to ``total``. Going up, a node's
        exp(log-potential - peak) and its sums over the separator are kept: going down, its
        conditional given the separator is their ratio, with no second exponential."""
        beliefs = dict(logs)
        kept: dict[Clique, tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]] = {}
        for edge in reversed(self.edges):
            scaled, sums, message = _exp_sum(beliefs[edge.node], edge.outside)
            kept[edge.node] = scaled, sums
            beliefs[edge.parent] = beliefs[edge.parent] + message.reshape(edge.parent_shape)
        tables: dict[Clique, npt.NDArray[np.float64]] = {}
        for root in self.roots:
            scaled, sums, _ = _exp_sum(beliefs[root], tuple(range(beliefs[root].ndim)))
            tables[root] = scaled * (total / sums)
        for edge in self.edges:
            separator = tables[edge.parent].sum(axis=edge.parent_outside, keepdims=True)
            scaled, sums = kept[edge.node]
            ratio = np.zeros_like(sums)
            np.divide(separator.reshape(edge.node_shape), sums, out=ratio, where=sums > 0)
            tables[edge.node] = scaled * ratio
        return tables


def _edge(node: Clique, parent: Clique, sizes: Mapping[str, int]) -> _Edge:
    """The :class:`_Edge` from ``node`` to ``parent``."""
    return _Edge(
        node,
        parent,
        outside=tuple(i for i, c in enumerate(node) if c not in parent),
        parent_outside=tuple(i for i, c in enumerate(parent) if c not in node),
        parent_shape=tuple(sizes[c] if c in node else 1 for c in parent),
        node_shape=tuple(sizes[c] if c in parent else 1 for c in node),
    )


def _exp_sum(
    table: npt.NDArray[np.float64], axes: tuple[int, ...]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """exp(``table`` - peak), its sums over ``axes`` (kept as length-1 axes) and their logs
    plus the peak (log Σ exp(``table``)), the peak being the maximum over ``axes``."""
    peak = table.max(axis=axes, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    scaled = table - peak
    np.exp(scaled, out=scaled)
    sums = scaled.sum(axis=axes, keepdims=True)
    with np.errstate(divide="ignore"):
        return scaled, sums, np.log(sums) + peak


def networkx() -> ModuleType:
    """networkx (a dependency of mbi)."""
    return importlib.import_module("networkx")


def model_cells(sizes: Mapping[str, int], cliques: Sequence[Clique]) -> int:
    """The cells of mbi's junction tree of a model over ``cliques`` (columns of ``sizes``
    codes, in the domain's order): the same triangulation as mbi 2.0's ``make_junction_tree``
    without building it, for AIM's size check of every candidate every round (mbi's was a
    third of AIM's time on adult once the fits stopped compiling). A graph that is a tree is
    its own triangulation (its maximal cliques are its edges); otherwise the columns are
    eliminated in mbi's greedy order (the least cells first, ties to the earliest column) and
    the maximal cliques of the triangulated graph are the largest of the sets {v} ∪ (v's
    neighbours when eliminated) (Koller & Friedman 2009, Theorem 9.6 and §9.4.3.1)."""
    names = list(sizes)
    edges = {frozenset(pair) for c in cliques for pair in itertools.combinations(c, 2)}
    if edges and len(edges) == len(names) - 1 and _connected(names, edges):
        return sum(math.prod(sizes[c] for c in edge) for edge in edges)
    neighbours: dict[str, set[str]] = {n: set() for n in names}
    for a, b in map(tuple, edges):
        neighbours[a].add(b)
        neighbours[b].add(a)
    formed = []
    for name in _greedy_order(sizes, cliques):
        near = neighbours.pop(name)
        formed.append(frozenset({name, *near}))
        for other in near:
            neighbours[other] |= near - {other}
            neighbours[other].discard(name)
    maximal = [c for c in formed if not any(c < other for other in formed)]
    return sum(math.prod(sizes[n] for n in c) for c in maximal)


def _greedy_order(sizes: Mapping[str, int], cliques: Sequence[Clique]) -> list[str]:
    """mbi's greedy elimination order: repeatedly the column whose cliques' union has the
    fewest cells (the earliest in ``sizes``'s order on a tie), its cliques then merged
    without it."""
    left = list(sizes)
    merged = {frozenset(c) for c in cliques}
    order = []
    while left:
        unions = {a: frozenset().union(*(c for c in merged if a in c)) for a in left}
        name = min(left, key=lambda a: math.prod(sizes[c] for c in unions[a]))
        order.append(name)
        left.remove(name)
        merged = {c for c in merged if name not in c} | {unions[name] - {name}}
    return order


def _connected(names: Sequence[str], edges: set[frozenset[str]]) -> bool:
    """Whether the graph on ``names`` with ``edges`` is connected."""
    reached, frontier = {names[0]}, [names[0]]
    while frontier:
        node = frontier.pop()
        for edge in edges:
            if node in edge:
                fresh = edge - reached
                reached |= fresh
                frontier.extend(fresh)
    return len(reached) == len(names)
