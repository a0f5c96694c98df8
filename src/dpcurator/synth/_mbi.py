"""The one door to ``mbi`` (McKenna, Sheldon & Miklau 2019, "Graphical-model based estimation
and inference for differential privacy"), pinned in the ``synth`` extra.

mbi's inference is post-processing of our noisy measurements: it never sees the data. JAX runs in
float64 (mbi warns that float32 can stall on large totals) without the persistent compilation
cache, and XLA compiles fast (:data:`FAST_COMPILE_FLAGS`, unless XLA_FLAGS is set), all set
before mbi is first imported; this applies to the whole process.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcurator.random import Rng
from dpcurator.synth._jtree import Schedule, model_cells, networkx
from dpcurator.synth.common import round_counts, round_counts_randomly, shuffle
from dpcurator.synth.domain import Clique, SynthDomain

#: Mirror-descent iterations of each mbi estimation (mbi's default is 1000).
DEFAULT_ITERS = 1000


#: XLA options for mbi's many small programs: compiling them dominates (MST on adult: 160 s ->
#: 80 s); the programs run no slower that matters. XLA's CPU fusion emitters off halves the
#: compile of a new model structure again (titanic, 15 measured cliques: 5.8 s -> 3.1 s of CPU).
#: Only set when XLA_FLAGS is unset.
FAST_COMPILE_FLAGS = (
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    " --xla_cpu_use_fusion_emitters=false"
)


def mbi() -> ModuleType:
    """The configured mbi module (imports JAX on first use)."""
    os.environ.setdefault("XLA_FLAGS", FAST_COMPILE_FLAGS)
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = importlib.import_module("jax")
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_compilation_cache", False)
    return importlib.import_module("mbi")


def _submodule(name: str) -> ModuleType:
    """``mbi.<name>``, after :func:`mbi` configured JAX."""
    mbi()
    return importlib.import_module(f"mbi.{name}")


@dataclass(frozen=True)
class Measurement:
    """A noisy marginal (shape: the clique's codes) and its noise's standard deviation; with
    ``weights``, the noisy vector measures the flattened marginal times ``weights``."""

    clique: Clique
    noisy: npt.NDArray[np.float64]
    sigma: float
    weights: npt.NDArray[np.float64] | None = None


def mbi_domain(domain: SynthDomain) -> Any:
    """The mbi Domain of ``domain``."""
    return mbi().Domain.fromdict(domain.config())


def estimate(
    domain: SynthDomain,
    measurements: Sequence[Measurement],
    *,
    total: float | None = None,
    iters: int = DEFAULT_ITERS,
) -> Any:
    """A graphical model fitted to the measurements by mbi's mirror descent (L2 loss weighted
    by 1/σ); the total is mbi's minimum-variance estimate from the measurements when None."""
    library = mbi()
    linear = [
        library.LinearMeasurement(np.ravel(m.noisy).astype(np.float64), m.clique, m.sigma)
        if m.weights is None
        else library.LinearMeasurement(
            np.ravel(m.noisy).astype(np.float64),
            m.clique,
            m.sigma,
            query=_weighted_query(tuple(np.ravel(m.weights).tolist())),
        )
        for m in measurements
    ]
    estimator = library.estimation.MirrorDescent()
    return estimator.estimate(mbi_domain(domain), linear, known_total=total, iters=iters)


@functools.lru_cache(maxsize=256)
def _weighted_query(weights: tuple[float, ...]) -> Any:
    """The one mbi WeightedQuery of these (public: post-processed) weights in this process.

    mbi compares weighted queries by identity in the static structure of its jitted programs,
    so a new query for the same weights compiled them again on every fit: MST on the tiny
    tables of the conformance matrix spent 0.55 s of CPU per fit compiling (same releases)."""
    return mbi().WeightedQuery(np.asarray(weights, dtype=np.float64))


def model_marginal(model: Any, clique: Clique) -> npt.NDArray[np.float64]:
    """The model's (consistent, non-negative) marginal over ``clique``, in clique order."""
    return np.asarray(model.project(tuple(clique)).datavector(flatten=False), dtype=np.float64)


@dataclass(frozen=True)
class Beliefs:
    """A fitted model's marginals over the maximal cliques of its junction tree, as numpy
    arrays (each sums to the model's total): one belief propagation (in numpy) per model.

    Any marginal of the model follows from them in numpy, without a JAX program per marginal
    shape: the junction tree factorises the model's distribution as P(root) times
    P(C | C ∩ parent(C)) over the other maximal cliques (Koller & Friedman 2009, §10.3), so
    summing out the columns outside a marginal along the smallest subtree that covers it is
    exact. The forest's components are joined by empty separators (independent parts).
    """

    tree: Any
    elimination: tuple[str, ...]
    tables: dict[Clique, npt.NDArray[np.float64]]

    @classmethod
    def of(cls, model: Any) -> Beliefs:
        """The beliefs of an mbi ``model`` over mbi's junction tree of its cliques, calibrated in
        numpy (:class:`~dpcurator.synth._jtree.Schedule`): no XLA program is compiled for a new
        model structure."""
        tree_module = _submodule("junction_tree")
        jtree, elimination = tree_module.make_junction_tree(
            model.domain, [tuple(c) for c in model.cliques]
        )
        sizes = dict(zip(model.domain.attributes, model.domain.shape, strict=True))
        logs = {c: np.zeros([sizes[a] for a in c]) for c in jtree.nodes}
        for factor in model.potentials.tables.values():
            columns = tuple(factor.domain.attributes)
            home = next(c for c in logs if set(columns) <= set(c))
            logs[home] = logs[home] + _aligned(np.asarray(factor.values, np.float64), columns, home)
        schedule = Schedule.of(jtree, sizes)
        return cls.joined(jtree, elimination, schedule.calibrate(logs, float(model.total)))

    @classmethod
    def joined(
        cls,
        jtree: Any,
        elimination: Sequence[str],
        tables: dict[Clique, npt.NDArray[np.float64]],
    ) -> Beliefs:
        """The beliefs of calibrated ``tables`` over the junction forest ``jtree``, its
        components joined by empty separators."""
        tree = jtree.copy()
        heads = [min(part) for part in networkx().connected_components(tree)]
        tree.add_edges_from(itertools.pairwise(heads))
        return cls(tree, tuple(elimination), tables)

    def marginal(self, clique: Clique) -> npt.NDArray[np.float64]:
        """The model's marginal over ``clique`` (axes in clique order)."""
        home = next((c for c in self.tables if set(clique) <= set(c)), None)
        if home is not None:
            return _sum_to(self.tables[home], home, clique)
        holders = [next(c for c in self.tables if column in c) for column in clique]
        root = holders[0]
        nodes = set().union(*(networkx().shortest_path(self.tree, root, h) for h in holders))
        columns, table = self._message(root, None, nodes, set(clique))
        return _sum_to(table, columns, clique)

    def _message(
        self, node: Clique, parent: Clique | None, nodes: set[Clique], query: set[str]
    ) -> tuple[Clique, npt.NDArray[np.float64]]:
        """``node``'s factor towards ``parent``: P(query columns of its subtree | separator)
        over the separator and those columns (at the root, parent None: their counts).

        The node's table is first summed to the columns that matter (the query's and those it
        shares with a neighbour in ``nodes``): by the running intersection property no other
        factor of the subtree holds the others, so this is exact, and a large node is read
        once instead of being multiplied out against every child's message (AIM's scoring of
        a round on salary with a 491,028-cell model: 1.5-2.0 s of CPU before, 0.5 s after).
        The factors are then multiplied one at a time, each column summed out once no factor
        left holds it."""
        children = [c for c in self.tree.neighbors(node) if c in nodes and c != parent]
        linked = set().union(*(set(c) for c in children), set(parent or ()))
        needed = tuple(c for c in node if c in query or c in linked)
        columns, table = needed, _sum_to(self.tables[node], node, needed)
        if parent is not None:
            separator = tuple(c for c in node if c in parent)
            below = _aligned(_sum_to(table, columns, separator), separator, columns)
            table = np.divide(table, below, out=np.zeros_like(table), where=below > 0)
        messages = [self._message(child, node, nodes, query) for child in children]
        outward = set(query) | set(parent or ())
        for i, (child_columns, child_table) in enumerate(messages):
            later = set().union(*(set(c) for c, _ in messages[i + 1 :]))
            joint = tuple(dict.fromkeys((*columns, *child_columns)))
            kept = tuple(c for c in joint if c in outward or c in later)
            label = {c: k for k, c in enumerate(joint)}
            operands: list[Any] = [table, [label[c] for c in columns], child_table]
            operands += [[label[c] for c in child_columns], [label[c] for c in kept]]
            table = np.einsum(*operands)
            columns = kept
        keep = tuple(c for c in columns if c in outward)
        return keep, _sum_to(table, columns, keep)


def _aligned(
    table: npt.NDArray[np.float64], columns: Sequence[str], target: Sequence[str]
) -> npt.NDArray[np.float64]:
    """``table`` (axes: ``columns``, a subset of ``target``) with its axes in ``target``'s order
    and length 1 on the others, to broadcast against a table over ``target``."""
    ordered = [c for c in target if c in columns]
    moved = np.transpose(table, [list(columns).index(c) for c in ordered])
    return moved.reshape([moved.shape[ordered.index(c)] if c in ordered else 1 for c in target])


def _sum_to(
    table: npt.NDArray[np.float64], columns: Sequence[str], keep: Sequence[str]
) -> npt.NDArray[np.float64]:
    """``table`` (axes: ``columns``) summed over the columns not in ``keep``, axes in keep's
    order."""
    summed = table.sum(axis=tuple(i for i, c in enumerate(columns) if c not in keep))
    rest = [c for c in columns if c in keep]
    return np.asarray(np.transpose(summed, [rest.index(c) for c in keep]), dtype=np.float64)


def junction_tree(domain: SynthDomain, cliques: Sequence[Clique]) -> tuple[Any, list[str]]:
    """mbi's junction tree (a networkx forest of cliques, columns in the domain's order) of a
    model over ``cliques``, and its elimination order: no JAX program."""
    tree_module = _submodule("junction_tree")
    return tree_module.make_junction_tree(mbi_domain(domain), [tuple(c) for c in cliques])  # type: ignore[no-any-return]


def model_size_mb(domain: SynthDomain, cliques: Sequence[Clique]) -> float:
    """mbi's size of the junction tree of a model over ``cliques`` (megabytes, as mbi's
    ``hypothetical_model_size``, 8 bytes a cell): public."""
    return model_cells(domain.config(), cliques) * 8 / 2**20


def sample(
    beliefs: Beliefs,
    domain: SynthDomain,
    rows: int,
    rng: Rng | None = None,
    *,
    unbiased: bool = False,
) -> dict[str, npt.NDArray[np.int64]]:
    """``rows`` records from the model of ``beliefs``: ancestral sampling along mbi's junction
    tree (the order and clique marginals mbi's own sampler uses), each column allocated within each
    configuration of its parents and shuffled with ``rng`` (the only entropy:
    dpcurator.random), so the records' marginals follow the model's within one record per
    configuration. The allocation rounds by largest remainders (least spread; a configuration
    holding one record gets its most likely value), or with ``unbiased`` by systematic sampling
    (:func:`~dpcurator.synth.common.round_counts_randomly`: every count's expectation is the
    model's). Contingency tables use the unbiased rounding: on nltcs at ε = 10 (all 2-way
    tables, one 65,536-cell clique, most configurations holding one record) largest remainders
    made the records' 2-way RMSE 34.2 against the model's 6.9; unbiased, 10.6. MST and AIM keep
    largest remainders: on titanic at ε = 1 (1,304 records) the unbiased rounding gave AIM a
    mean 2-way TVD of 0.214 ± 0.013 (4 runs) against 0.194 ± 0.009."""
    rounding = round_counts_randomly if unbiased else _largest_remainders
    total = max(int(rows), 1)
    data: dict[str, npt.NDArray[np.int64]] = {}
    for column in beliefs.elimination[::-1]:
        near = set().union(*(set(c) for c in beliefs.tables if column in c))
        parents = tuple(p for p in data if p in near)
        joint = beliefs.marginal((*parents, column)).reshape(-1, domain.column(column).size)
        data[column] = _allocate(
            joint,
            parents=parents,
            data=data,
            domain=domain,
            total=total,
            rng=rng,
            rounding=rounding,
        )
    return {name: data[name] for name in domain.names}


def _largest_remainders(
    weights: npt.NDArray[np.float64], total: int, _rng: Rng | None
) -> npt.NDArray[np.int64]:
    """:func:`~dpcurator.synth.common.round_counts` with the allocation's signature."""
    return round_counts(weights, total)


def _allocate(
    joint: npt.NDArray[np.float64],
    *,
    parents: tuple[str, ...],
    data: dict[str, npt.NDArray[np.int64]],
    domain: SynthDomain,
    total: int,
    rng: Rng | None,
    rounding: Callable[[npt.NDArray[np.float64], int, Rng | None], npt.NDArray[np.int64]],
) -> npt.NDArray[np.int64]:
    """A column's values: within each parent configuration, counts ∝ that row of ``joint``
    (rounded by ``rounding``)."""
    if parents:
        key = np.ravel_multi_index(tuple(data[p] for p in parents), domain.shape(parents))
    else:
        key = np.zeros(total, dtype=np.int64)
    out = np.empty(total, dtype=np.int64)
    order = np.argsort(key, kind="stable")
    groups, starts, sizes = np.unique(key[order], return_index=True, return_counts=True)
    for group, start, size in zip(groups, starts, sizes, strict=True):
        counts = rounding(joint[group], int(size), rng)
        values = shuffle(np.repeat(np.arange(counts.size), counts), rng)
        out[order[start : start + size]] = values
    return out
