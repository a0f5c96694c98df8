"""Private-PGM's estimation in numpy: mirror descent over the marginal polytope (McKenna,
Sheldon & Miklau 2019, "Graphical-model based estimation and inference for differential
privacy", Algorithm 1), with mbi 2.0's loss, step size and Armijo line search.

It minimises Σ_M ½‖(Q_M μ_M - y_M)/σ_M‖² over the marginals μ of a graphical model on the
measured cliques (Q_M the identity, or a diagonal of weights); each step moves the
log-potentials against the gradient, θ ← θ - α∇L(μ), and the marginals μ(θ) come from a
junction-tree calibration in numpy (:class:`~dpcurator.synth._jtree.Schedule`). The first α is
2 / (L · total) with L the gradient's Lipschitz constant; a step is kept when the loss falls by
at least ½α∇L·(μ - μ') (then α grows by 1%), else α halves. mbi compiles one XLA program per
set of measured cliques (AIM fits a new set every round: ~7 s of compile on adult against a
fraction of a second of steps); here nothing is compiled.

The fit is post-processing of noisy measurements: it never sees the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpcurator.synth import _mbi
from dpcurator.synth._jtree import Schedule
from dpcurator.synth.domain import Clique, SynthDomain

Tables = dict[Clique, npt.NDArray[np.float64]]


@dataclass(frozen=True)
class Fit:
    """A fitted model: log-potentials over the maximal measured cliques (columns in the
    domain's order), its total and its calibrated junction-tree beliefs."""

    potentials: Tables
    total: float
    beliefs: _mbi.Beliefs


@dataclass(frozen=True)
class _Term:
    """One measurement in the domain's column order, with the maximal clique it is read from."""

    home: Clique
    clique: Clique
    noisy: npt.NDArray[np.float64]
    weights: npt.NDArray[np.float64] | float
    inverse_variance: float
    #: axes of the home clique summed out to reach the measured clique
    outside: tuple[int, ...]


def fit(
    domain: SynthDomain,
    measurements: Sequence[_mbi.Measurement],
    *,
    iters: int,
    warm_start: Fit | None = None,
) -> Fit:
    """The model fitted by ``iters`` mirror-descent steps, from ``warm_start``'s potentials
    (or zero); the total is the minimum-variance estimate from the unweighted measurements."""
    order = {name: i for i, name in enumerate(domain.names)}
    terms = [_term(domain, m, order) for m in measurements]
    cliques = _maximal([t.clique for t in terms])
    sizes = domain.config()
    terms = [_homed(t, cliques, domain) for t in terms]
    total = _total(measurements)
    jtree, elimination = _mbi.junction_tree(domain, cliques)
    schedule = Schedule.of(jtree, sizes)
    holders = {c: next(n for n in jtree.nodes if set(c) <= set(n)) for c in cliques}
    lattice = _Lattice.of(holders, sizes)
    theta = _expanded(warm_start, cliques, domain)
    logs = {n: np.zeros([sizes[a] for a in n]) for n in jtree.nodes}
    logs.update({n: logs[n] + table for n, table in lattice.lift(theta).items()})
    tables = schedule.calibrate(logs, total)
    mu = lattice.project(tables)
    loss, grad = _loss(terms, mu)
    alpha = 2.0 / (_lipschitz(terms, cliques, domain) * total)
    for _ in range(iters):
        # the log-potentials are linear in θ: a step on θ is this step on each node's sum
        step = lattice.lift(grad)
        trial_logs = {n: t - alpha * step[n] if n in step else t for n, t in logs.items()}
        trial_tables = schedule.calibrate(trial_logs, total)
        trial_mu = lattice.project(trial_tables)
        trial_loss, trial_grad = _loss(terms, trial_mu)
        decrease = sum(float(np.vdot(grad[c], mu[c] - trial_mu[c])) for c in cliques)
        if loss - trial_loss >= 0.5 * alpha * decrease:
            theta = {c: theta[c] - alpha * grad[c] for c in cliques}
            logs, tables, mu = trial_logs, trial_tables, trial_mu
            loss, grad = trial_loss, trial_grad
            alpha *= 1.01
        else:
            alpha *= 0.5
    return Fit(theta, total, _mbi.Beliefs.joined(jtree, elimination, tables))


#: a table's place in a :class:`_Lattice`: (junction-tree node, the table's columns)
_Key = tuple[Clique, Clique]


@dataclass(frozen=True)
class _Lattice:
    """How the marginals over the measured cliques follow from the junction tree's nodes, and
    back: each measured clique's marginal is its node's table with the other columns summed out
    one at a time, the most codes first, through intermediate tables shared between cliques
    (summing each clique straight from a large node took most of a fit's time)."""

    #: (source, target, axis of source summed out), every source before its targets
    steps: tuple[tuple[_Key, _Key, int], ...]
    keys: dict[Clique, _Key]

    @classmethod
    def of(cls, nodes: dict[Clique, Clique], sizes: dict[str, int]) -> _Lattice:
        """The lattice of measured cliques ``nodes`` (each to the node holding it)."""
        steps: dict[_Key, tuple[_Key, int]] = {}
        for clique, node in nodes.items():
            outside = sorted((c for c in node if c not in clique), key=lambda c: -sizes[c])
            columns = node
            for column in outside:
                target = tuple(c for c in columns if c != column)
                steps[node, target] = ((node, columns), columns.index(column))
                columns = target
        ordered = sorted(steps.items(), key=lambda item: -len(item[0][1]))
        return cls(
            tuple((source, target, axis) for target, (source, axis) in ordered),
            {clique: (node, clique) for clique, node in nodes.items()},
        )

    def project(self, tables: Tables) -> Tables:
        """The measured cliques' marginals from the nodes' ``tables``."""
        memo = {(n, n): tables[n] for n, _ in self.keys.values()}
        for source, target, axis in self.steps:
            memo[target] = memo[source].sum(axis=axis)
        return {clique: memo[key] for clique, key in self.keys.items()}

    def lift(self, small: Tables) -> Tables:
        """Each node's sum of the measured cliques' ``small`` tables broadcast over it (axes of
        length 1 where none varies): the adjoint of :meth:`project`."""
        acc: dict[_Key, npt.NDArray[np.float64]] = {self.keys[c]: small[c] for c in small}
        for source, target, axis in reversed(self.steps):
            if target in acc:
                acc[source] = acc.get(source, 0.0) + np.expand_dims(acc[target], axis)
        return {n: acc[n, n] for n, _ in self.keys.values()}


def _term(domain: SynthDomain, m: _mbi.Measurement, order: dict[str, int]) -> _Term:
    """``m`` with its axes in the domain's column order (home filled in later)."""
    clique = tuple(sorted(m.clique, key=order.__getitem__))
    axes = [m.clique.index(c) for c in clique]
    shape = domain.shape(m.clique)
    noisy = np.transpose(np.reshape(m.noisy, shape), axes)
    weights: npt.NDArray[np.float64] | float = 1.0
    if m.weights is not None:
        weights = np.transpose(np.reshape(m.weights, shape), axes)
    return _Term(clique, clique, noisy, weights, 1.0 / max(m.sigma, 1e-12) ** 2, ())


def _maximal(cliques: Sequence[Clique]) -> list[Clique]:
    """The cliques not inside another (each once), longest first."""
    kept: list[Clique] = []
    for clique in sorted(dict.fromkeys(cliques), key=len, reverse=True):
        if not any(set(clique) <= set(k) for k in kept):
            kept.append(clique)
    return kept


def _homed(term: _Term, cliques: Sequence[Clique], domain: SynthDomain) -> _Term:
    """``term`` read from the smallest maximal clique holding it (mbi's choice)."""
    home = min((c for c in cliques if set(term.clique) <= set(c)), key=domain.cells)
    outside = tuple(i for i, c in enumerate(home) if c not in term.clique)
    return _Term(home, term.clique, term.noisy, term.weights, term.inverse_variance, outside)


def _total(measurements: Sequence[_mbi.Measurement]) -> float:
    """mbi's minimum-variance total: the inverse-variance weighted mean of the unweighted
    measurements' sums (at least 1)."""
    sums = [float(np.sum(m.noisy)) for m in measurements if m.weights is None]
    variances = [m.sigma**2 * np.size(m.noisy) for m in measurements if m.weights is None]
    if not sums:
        return 1.0
    return max(1.0, float(np.average(sums, weights=1.0 / np.asarray(variances))))


def _lipschitz(terms: Sequence[_Term], cliques: Sequence[Clique], domain: SynthDomain) -> float:
    """The loss gradient's Lipschitz constant: max over maximal cliques C of
    Σ_{M read from C} max(Q_M²)/σ_M² · |C|/|M| (exact for identity queries; mbi's bound)."""
    blocks = dict.fromkeys(cliques, 0.0)
    for t in terms:
        scale = float(np.max(np.square(t.weights))) * domain.cells(t.home) / domain.cells(t.clique)
        blocks[t.home] += scale * t.inverse_variance
    return max(blocks.values())


def _loss(terms: Sequence[_Term], mu: Tables) -> tuple[float, Tables]:
    """The loss at marginals ``mu`` and its gradient (a table per maximal clique)."""
    loss = 0.0
    grad = {c: np.zeros_like(table) for c, table in mu.items()}
    for t in terms:
        marginal = mu[t.home].sum(axis=t.outside, keepdims=True) if t.outside else mu[t.home]
        residual = t.weights * marginal.reshape(t.noisy.shape) - t.noisy
        loss += 0.5 * t.inverse_variance * float(np.vdot(residual, residual))
        step = (t.inverse_variance * t.weights * residual).reshape(marginal.shape)
        grad[t.home] = grad[t.home] + step
    return loss, grad


def _expanded(warm_start: Fit | None, cliques: Sequence[Clique], domain: SynthDomain) -> Tables:
    """``warm_start``'s potentials re-expressed over ``cliques`` (each old table added to the
    smallest new clique holding it: the same distribution), or zeros."""
    sizes = domain.config()
    theta: Tables = {c: np.zeros([sizes[a] for a in c]) for c in cliques}
    for old, table in (warm_start.potentials if warm_start else {}).items():
        home = min((c for c in cliques if set(old) <= set(c)), key=domain.cells)
        theta[home] = theta[home] + table.reshape([sizes[a] if a in old else 1 for a in home])
    return theta
