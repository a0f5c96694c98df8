"""Consistent contingency tables by the Fourier method of Barak, Chaudhuri, Dwork, Kale,
McSherry & Talwar 2007 ("Privacy, accuracy, and consistency too"), as Dwork & Smith's survey
describes it: change to the Fourier domain, where low-order marginals need only a few
coefficients; add noise to those coefficients; map back. Every released marginal is then a
function of ONE set of noisy coefficients, so the tables agree on every shared margin. A linear
program then finds a non-negative table over the full domain whose marginals are closest (L1) to
the noisy ones, and rounding it gives integral tables that still agree exactly.

**Basis.** Each column of n values gets the Helmert basis: ψ_0 = 1 and, for k = 1..n-1, ψ_k = 1
on the values below k, -k on value k, 0 above (orthogonal integer vectors, |ψ_k|² = k(k+1)). A
table over a clique C has the tensor basis ψ_b = ⊗_j ψ_{b_j}; its SUPPORT is {j : b_j ≥ 1}. The
coefficient <M_C, ψ_b> of support S ⊆ C depends only on the S-marginal, so one coefficient serves
every requested marginal containing S; the plan measures the coefficients of every support S
inside some requested clique (the empty support is the total count).

**Privacy (zCDP, Bun & Steinke 2016).** Each non-empty support's marginal is its own bounded
engine query (a person keeps r rows in each of at most g of its cells). Its coefficients, divided
by their norms, are the coordinates of P_S·M_S in the orthonormal basis ψ_b/|ψ_b| of the
pure-interaction subspace, P_S = ⊗_{j ∈ S} (I − J/n_j) (ψ_b, b_j >= 1, is orthogonal to the
constant on every axis of S and these vectors span that subspace: Π (n_j − 1) of them). So one
neighbour moves them by exactly the largest ‖P_S·v‖ over the count changes v the unit allows,
Δ_S² = :meth:`~dpcurator.query.privacy_unit.PrivacyUnit.interaction_l2_squared` (exact for one
cell a person: r²·Π_{j ∈ S} (1 − 1/n_j) under add/remove, the worst pair of cells under
replace-one; where a person may touch g > 1 cells, the marginal's own bound). The charge of a
support used to be the marginal's Δ², a factor Π_j (1 − 1/n_j)^-1 above this (2x for a binary
column's block). The total (the empty support) is summed from the first 1-way marginal,
Δ² = (r·g')² (:meth:`~dpcurator.query.privacy_unit.PrivacyUnit.total_count_l2_squared`).
Coefficient b gets discrete Gaussian noise (Canonne, Kamath & Steinke 2020) of σ_b = c_S·s_b
with s_b >= |ψ_b| a rational upper bound, so the block costs at most Σ_b Δc_b²/(2σ_b²) <=
‖P_S·v‖²/(2c_S²) <= Δ_S²/(2c_S²) = ρ_S (zCDP of independent coordinates adds); the split of ρ
over the supports is :func:`~dpcurator.synth.marginals.split_budget`'s with the number of
coefficients of a support as its cells and :func:`_variance_weight` as its weight, which
minimises the summed variance of every released cell. The charge is the exact sum of the ρ_S,
reserved before any data is read. Under add/remove with g = 1 it is attained: one row changes
every block by its Δ_S at once (any cell), so no smaller ρ holds for these σ. Pure ε is not
offered (heterogeneous Laplace scales would need an L1 analysis); plan it with mbi's
consistency.

**Released numbers.** Per cell: ``noisy``, the consistent (unrounded) value Σ_b ĉ_b·ψ_b(x)/|ψ_b|²
with the other columns' constants 1/n_j; it is unbiased for the true count, with variance at
most Σ_b σ_b²·(ψ_b(x)/|ψ_b|²)², and ``ci_low``/``ci_high`` are the normal interval of that
variance (a sum of independent discrete Gaussians). ``count`` is the integral table.

**Non-negativity and integrality (post-processing).** The LP (HiGHS, through scipy) has a variable
per cell of the full domain of the requested columns, and minimises Σ |marginal - noisy| / sd over
the cells of the maximal requested marginals. Its solution is rounded to N = round(its total)
records by largest remainders; every released table is a margin of that one integral table. The
full domain must be at most :data:`MAX_LP_CELLS` cells: decided from the public domain at plan
time (free refusal naming the size; mbi's graphical-model consistency has no such limit).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy import sparse
from scipy.optimize import linprog

from dpcurator._validation import check_probability, fail
from dpcurator.accounting import ZCDPEvent
from dpcurator.core.numbers import fraction_up, to_fraction
from dpcurator.errors import UnsupportedQueryError
from dpcurator.mechanisms import Gaussian
from dpcurator.query.privacy_unit import PrivacyUnit
from dpcurator.query.session import Session
from dpcurator.random import Rng
from dpcurator.synth.common import Progress, largest_remainders, report
from dpcurator.synth.domain import DEFAULT_MAX_BINS, Clique, SynthDomain
from dpcurator.synth.marginals import (
    ContingencyTables,
    choose_cliques,
    split_budget,
    tidy_table,
)
from dpcurator.synth.measure import exact_marginals

#: The largest full domain (cells) of the requested columns the linear program is run over.
MAX_LP_CELLS = 100_000
#: The most supports (marginals measured, one engine query each) a plan may have.
MAX_SUPPORTS = 2_000


def helmert(n: int) -> npt.NDArray[np.int64]:
    """The n×n Helmert basis as rows: ψ_0 = 1; ψ_k = (1,…,1 [k times], -k, 0,…,0)."""
    basis = np.zeros((n, n), dtype=np.int64)
    basis[0] = 1
    for k in range(1, n):
        basis[k, :k] = 1
        basis[k, k] = -k
    return basis


def _norm_squared(n: int) -> npt.NDArray[np.float64]:
    """|ψ_k|² for k = 0..n-1: n, then k(k+1)."""
    k = np.arange(n, dtype=np.float64)
    return np.where(k == 0, float(n), k * (k + 1))


@functools.cache
def _column_bounds(n: int) -> tuple[Fraction, ...]:
    """s_k ≥ |ψ_k| for k = 1..n-1."""
    return tuple(_norm_bound(k) for k in range(1, n))


def _norm_bound(k: int) -> Fraction:
    """A rational s ≥ sqrt(k(k+1)) (checked exactly; k(k+1) is never a square for k ≥ 1)."""
    target = k * (k + 1)
    bound = fraction_up(math.sqrt(target))
    while bound * bound < target:
        bound = fraction_up(float(bound) * (1 + 2**-40))
    return bound


def block_l2_squared(
    unit: PrivacyUnit, domain: SynthDomain, support: Clique, home: Clique
) -> Fraction:
    """Δ_S², the squared sensitivity of the normalised coefficients of ``support`` (module
    docstring): for the empty support the total's (r·g')² over its ``home`` marginal, else the
    projection's :meth:`~dpcurator.query.privacy_unit.PrivacyUnit.interaction_l2_squared`."""
    if not support:
        return Fraction(unit.total_count_l2_squared(domain.cells(home)))
    return unit.interaction_l2_squared([domain.column(n).size for n in support])


def _variance_weight(domain: SynthDomain, support: Clique, cliques: Sequence[Clique]) -> float:
    """Σ over the requested marginals C ⊇ S of Π_{j ∈ C∖S} 1/n_j: a unit of noise variance per
    coefficient of S adds this much to the summed variance of all released cells."""
    return sum(
        1 / domain.cells(tuple(n for n in c if n not in support))
        for c in cliques
        if set(support) <= set(c)
    )


def supports_of(cliques: Sequence[Clique], names: Sequence[str]) -> tuple[Clique, ...]:
    """Every subset of every clique (the empty one first), in the domain's column order."""
    order = {n: i for i, n in enumerate(names)}
    found: set[Clique] = set()
    for clique in cliques:
        ordered = sorted(clique, key=order.__getitem__)
        for mask in range(1 << len(ordered)):
            found.add(tuple(n for i, n in enumerate(ordered) if mask >> i & 1))
    return tuple(sorted(found, key=lambda s: (len(s), [order[n] for n in s])))


def _maximal(cliques: Sequence[Clique]) -> tuple[Clique, ...]:
    """The cliques contained in no other (first occurrence kept)."""
    kept: list[Clique] = []
    for clique in cliques:
        others = (c for c in cliques if c != clique)
        if not any(set(clique) < set(c) for c in others) and not any(
            set(clique) == set(k) for k in kept
        ):
            kept.append(clique)
    return tuple(kept)


def _apply(tensor: npt.NDArray[Any], matrices: Sequence[npt.NDArray[Any]]) -> npt.NDArray[Any]:
    """Multiply axis j of ``tensor`` by matrix j (out = A_j @ axis j)."""
    out = tensor
    for axis, matrix in enumerate(matrices):
        out = np.moveaxis(np.tensordot(matrix, out, axes=([1], [axis])), 0, axis)
    return out


def _used(domain: SynthDomain, cliques: Sequence[Clique]) -> Clique:
    """The columns of the requested marginals, in the domain's order (the LP's full domain)."""
    return tuple(n for n in domain.names if any(n in c for c in cliques))


@dataclass(frozen=True)
class FourierPlan:
    """A Fourier release plan: public, computed without data (:func:`plan_fourier`).

    Attributes:
        domain: the public domain of the columns.
        cliques: the requested marginals, in order.
        supports: every measured support (subsets of the cliques, the empty one first).
        homes: the marginal each support's coefficients are computed from (the support itself;
            the first 1-way marginal for the empty support, the total).
        scales: c_S of each support (coefficient b's σ is c_S·s_b).
        sensitivities: Δ_S², the squared sensitivity of each support's normalised coefficients.
        event: the charge (exact sum of the blocks' ρ_S).
    """

    domain: SynthDomain
    cliques: tuple[Clique, ...]
    supports: tuple[Clique, ...]
    homes: tuple[Clique, ...]
    scales: tuple[Fraction, ...]
    sensitivities: tuple[Fraction, ...]
    event: ZCDPEvent

    def sigmas(self, support: Clique) -> list[Fraction]:
        """σ_b (exact) of every coefficient of ``support``, in C order over the shape
        (n_j - 1 for j in support)."""
        scale = self.scales[self.supports.index(support)]
        axes = [_column_bounds(self.domain.column(n).size) for n in support]
        return [scale * math.prod(index, start=Fraction(1)) for index in itertools.product(*axes)]

    def coefficient_variance(self, clique: Clique) -> npt.NDArray[np.float64]:
        """σ_b² of every coefficient of the clique's full tensor basis (shape: the clique's)."""
        variance = np.zeros(self.domain.shape(clique), dtype=np.float64)
        for support, scale in zip(self.supports, self.scales, strict=True):
            if not set(support) <= set(clique):
                continue
            block = np.full((), float(scale) ** 2)
            for name in clique:
                if name in support:
                    bounds = _column_bounds(self.domain.column(name).size)
                    block = np.multiply.outer(block, np.array([float(b) ** 2 for b in bounds]))
            index = tuple(slice(1, None) if name in support else 0 for name in clique)
            variance[index] = block
        return variance

    def cell_variance(self, clique: Clique) -> npt.NDArray[np.float64]:
        """The variance bound of every released (unrounded) cell of ``clique``."""
        squared = [_dual(self.domain.column(n).size) ** 2 for n in clique]
        return _apply(self.coefficient_variance(clique), squared)

    def expected_error(self, alpha: float = 0.05) -> pd.DataFrame:
        """Per marginal: cells, the root-mean-square noise sd of a cell and its (1-α) normal
        CI half-width (the interval of each cell is its own; see the module docstring)."""
        z = NormalDist().inv_cdf(1 - alpha / 2)
        rms = [float(np.sqrt(self.cell_variance(c).mean())) for c in self.cliques]
        return pd.DataFrame(
            {
                "marginal": [" x ".join(c) for c in self.cliques],
                "cells": [self.domain.cells(c) for c in self.cliques],
                "noise_std": rms,
                "ci_halfwidth": [z * r for r in rms],
            }
        )


def _dual(n: int) -> npt.NDArray[np.float64]:
    """Columns ψ_k / |ψ_k|²: a marginal is this matrix applied to its coefficients (per axis)."""
    return helmert(n).T.astype(np.float64) / _norm_squared(n)


def plan_fourier(
    session: Session,
    cliques: Sequence[Sequence[str]] | int = 2,
    *,
    rho: object,
    columns: Sequence[str] | None = None,
    max_bins: int = DEFAULT_MAX_BINS,
) -> FourierPlan:
    """The plan of a Fourier release of ``cliques`` (column tuples, or k for every marginal of at
    most k columns) under ``rho``-zCDP.

    Free refusals (nothing charged): a column without a public domain, a marginal over the cell
    limit, a full domain of the requested columns over :data:`MAX_LP_CELLS`, more than
    :data:`MAX_SUPPORTS` supports, a bad budget.
    """
    domain, chosen = choose_cliques(session, cliques, columns, max_bins, owner="plan_fourier")
    if not all(chosen):
        raise fail("plan_fourier", "cliques", "non-empty lists of columns", cliques)
    used = _used(domain, chosen)
    full = domain.cells(used)
    if full > MAX_LP_CELLS:
        raise UnsupportedQueryError(
            f"The Fourier method's linear program runs over the full domain of {list(used)}: "
            f"{full:,} cells, over its limit of {MAX_LP_CELLS:,}. Ask for fewer or coarser "
            "columns, or use plan_marginals (mbi's consistency has no such limit)."
        )
    budget = to_fraction(rho, owner="plan_fourier", name="rho")
    if budget <= 0:
        raise fail("plan_fourier", "rho", "> 0", budget)
    supports = supports_of(chosen, domain.names)
    if len(supports) > MAX_SUPPORTS:
        raise UnsupportedQueryError(
            f"The Fourier method measures every subset of every requested marginal: "
            f"{len(supports):,} here, over its limit of {MAX_SUPPORTS:,}. Ask for marginals of "
            "fewer columns."
        )
    homes = (supports[1], *supports[1:])  # the total comes from the first 1-way marginal
    unit = session.metadata.unit
    coefficients = [math.prod(domain.column(n).size - 1 for n in s) for s in supports]
    squared = [
        block_l2_squared(unit, domain, s, home) for s, home in zip(supports, homes, strict=True)
    ]
    weights = [_variance_weight(domain, s, chosen) for s in supports]
    sens = [math.sqrt(x) for x in squared]
    shares = split_budget(budget, coefficients, sens, zcdp=True, weights=weights)
    scales = [Gaussian.for_rho_squared(r, x).sigma for r, x in zip(shares, squared, strict=True)]
    rho = sum((x / (2 * c**2) for x, c in zip(squared, scales, strict=True)), Fraction(0))
    return FourierPlan(
        domain, chosen, supports, homes, tuple(scales), tuple(squared), ZCDPEvent(rho)
    )


def _coefficients(
    marginal: npt.NDArray[np.int64], clique: Clique, support: Clique, domain: SynthDomain
) -> npt.NDArray[np.int64]:
    """The exact integer coefficients of ``support`` (shape n_j - 1 per support column) from the
    exact marginal of a clique containing it."""
    summed = marginal.sum(axis=tuple(i for i, n in enumerate(clique) if n not in support))
    kept = [n for n in clique if n in support]
    out = _apply(summed, [helmert(domain.column(n).size)[1:] for n in kept])
    return np.asarray(np.transpose(out, [kept.index(n) for n in support]), dtype=np.int64)


def _noisy_marginal(
    plan: FourierPlan, clique: Clique, noisy: dict[Clique, npt.NDArray[np.int64]]
) -> npt.NDArray[np.float64]:
    """The consistent noisy marginal of ``clique`` from the noisy coefficient blocks."""
    tensor = np.zeros(plan.domain.shape(clique), dtype=np.float64)
    for support, block in noisy.items():
        if set(support) <= set(clique):
            index = tuple(slice(1, None) if n in support else 0 for n in clique)
            order = [support.index(n) for n in clique if n in support]
            tensor[index] = (
                np.transpose(block, order).astype(np.float64).reshape(tensor[index].shape)
            )
    return _apply(tensor, [_dual(plan.domain.column(n).size) for n in clique])


def _nonnegative_table(
    plan: FourierPlan,
    used: Clique,
    targets: dict[Clique, npt.NDArray[np.float64]],
    sds: dict[Clique, npt.NDArray[np.float64]],
) -> npt.NDArray[np.float64]:
    """The LP: a non-negative full table over ``used`` whose margins on the target cliques are
    closest (Σ |margin - target| / sd) to the targets. Total: a failed solve gives zeros."""
    shape = plan.domain.shape(used)
    cells = math.prod(shape)
    codes = np.unravel_index(np.arange(cells), shape)
    projections, rhs, weights = [], [], []
    for clique, target in targets.items():
        rows = np.ravel_multi_index(tuple(codes[used.index(n)] for n in clique), target.shape)
        ones = (np.ones(cells), (rows, np.arange(cells)))
        projections.append(sparse.csr_matrix(ones, shape=(target.size, cells)))
        rhs.append(target.ravel())
        weights.append(1.0 / np.maximum(sds[clique].ravel(), 1e-9))
    # variables: the table, then e+ and e- per target cell: margins - e+ + e- = targets
    slack = sparse.identity(sum(b.size for b in rhs), format="csr")
    weight = np.concatenate(weights)
    objective = np.concatenate([np.zeros(cells), weight, weight])
    result = linprog(
        objective,
        A_eq=sparse.hstack([sparse.vstack(projections), -slack, slack], format="csr"),
        b_eq=np.concatenate(rhs),
        bounds=(0, None),
        method="highs",
    )
    if result.x is None:
        return np.zeros(shape)
    return np.clip(np.asarray(result.x[:cells], dtype=np.float64), 0.0, None).reshape(shape)


def round_table(table: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Integral counts summing to round(total): floors, plus one for the cells with the largest
    remainders (ties to the lower index)."""
    return largest_remainders(table.ravel(), round(float(table.sum()))).reshape(table.shape)


def release_fourier(
    session: Session,
    plan: FourierPlan,
    *,
    alpha: float = 0.05,
    rng: Rng | None = None,
    progress: Progress | None = None,
) -> ContingencyTables:
    """Charge the plan, measure the Fourier coefficients, and release consistent, non-negative,
    integral tables with per-cell intervals (``progress`` hears of each stage)."""
    check_probability("release_fourier", "alpha", alpha, open_low=True, open_high=True)
    source = rng if rng is not None else session.rng
    maximal = _maximal(plan.cliques)
    exact = exact_marginals(
        session,
        plan.domain,
        plan.supports[1:],
        plan.event,
        description=f"Fourier contingency tables {[list(c) for c in plan.cliques]}",
    )
    noisy: dict[Clique, npt.NDArray[np.int64]] = {}
    for support, home in zip(plan.supports, plan.homes, strict=True):
        block = _coefficients(exact[home], home, support, plan.domain)
        sigmas = plan.sigmas(support)
        noisy[support] = np.array(
            [
                int(Gaussian(s).release_integers(np.array([v]), source)[0])
                for v, s in zip(block.ravel(), sigmas, strict=True)
            ],
            dtype=np.int64,
        ).reshape(block.shape)
    del exact
    report(progress, f"{sum(b.size for b in noisy.values())} Fourier coefficients measured", 0.3)
    values = {c: _noisy_marginal(plan, c, noisy) for c in plan.cliques}
    sds = {c: np.sqrt(plan.cell_variance(c)) for c in plan.cliques}
    used = _used(plan.domain, plan.cliques)
    table = round_table(_nonnegative_table(plan, used, {c: values[c] for c in maximal}, sds))
    report(progress, "non-negative integral table found", 0.9)
    z = NormalDist().inv_cdf(1 - alpha / 2)
    tables = {}
    for clique in plan.cliques:
        summed = table.sum(axis=tuple(i for i, n in enumerate(used) if n not in clique))
        kept = [n for n in used if n in clique]
        counts = np.transpose(summed, [kept.index(n) for n in clique]).astype(np.int64)
        tables[clique] = tidy_table(plan.domain, clique, counts, values[clique], z * sds[clique])
    return ContingencyTables(tables, int(table.sum()), alpha)
