"""Consistent contingency tables: noisy marginals made mutually consistent, non-negative and
integral (Barak, Chaudhuri, Dwork, Kale, McSherry & Talwar 2007, "Privacy, accuracy, and
consistency too", as described in Dwork & Smith's survey).

A release plan (:func:`plan_marginals`) is a set of marginals over columns with a public domain
(:mod:`dpcurator.synth.domain`), a measure and a budget; it is decided from public inputs only,
so its cost, noise scales and expected errors are known before anything is charged.

* **zCDP** (``rho``): each marginal gets discrete Gaussian noise (Canonne, Kamath & Steinke 2020)
  of σ_i with ρ_i = Δ₂²/(2σ_i²); the split ρ_i ∝ Δ₂·sqrt(w_i·n_i) minimises the total weighted
  variance Σ w_i·n_i·σ_i² subject to Σ ρ_i = ρ (n_i cells, weight w_i, default 1).
* **pure ε** (``epsilon``): discrete Laplace noise of scale b_i = Δ₁/ε_i; the split
  ε_i ∝ (w_i·n_i·Δ₁²)^(1/3) minimises Σ w_i·n_i·2b_i² subject to Σ ε_i = ε.

Each σ_i (b_i) is rounded up from its share, so the charge, the exact sum of the mechanisms' own
costs (one :class:`~dpcurator.accounting.ZCDPEvent` or :class:`~dpcurator.accounting.PureEvent`),
is at most the budget asked for.

Consistency (:func:`release_marginals`): mbi's graphical-model inference (McKenna et al. 2019)
fits one distribution to all noisy marginals, weighting each by 1/σ (least squares); its
marginals agree on every shared margin and are non-negative. Integral tables that still agree
exactly are the marginals of ONE set of records: N = the model's total (rounded) records drawn
from the model (:func:`dpcurator.synth._mbi.sample`: ancestral sampling, unbiased rounding
within each parent configuration), then counted. All of this is
post-processing. Each released cell also carries its raw noisy count and the (1-α) interval of
that measurement (a valid interval for the true count of the cell).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcurator._validation import check_probability, fail
from dpcurator.accounting import PureEvent, ZCDPEvent
from dpcurator.accounting.events import PrivacyEvent
from dpcurator.core.numbers import to_fraction
from dpcurator.mechanisms import Gaussian, Laplace
from dpcurator.query.plan.histogram import histogram_bins
from dpcurator.query.session import Session
from dpcurator.random import Rng
from dpcurator.synth import _mbi
from dpcurator.synth.common import Progress, report
from dpcurator.synth.domain import DEFAULT_MAX_BINS, Clique, SynthDomain
from dpcurator.synth.measure import exact_marginals

Mechanism = Gaussian | Laplace


def all_marginals(names: Sequence[str], way: int) -> tuple[Clique, ...]:
    """Every marginal over ``way`` of the columns (1: every column alone)."""
    return tuple(itertools.combinations(tuple(names), way))


def split_budget(
    total: Fraction,
    cells: Sequence[int],
    sensitivities: Sequence[float],
    *,
    zcdp: bool,
    weights: Sequence[float] | None = None,
) -> list[Fraction]:
    """Shares of ``total`` minimising the total weighted noise variance (module docstring):
    ρ_i ∝ Δ₂·sqrt(w·n) (zCDP) or ε_i ∝ (w·n·Δ₁²)^(1/3) (pure). Exact: the shares sum to total."""
    w = [1.0] * len(cells) if weights is None else list(weights)
    if zcdp:
        raw = [d * math.sqrt(wi * n) for d, wi, n in zip(sensitivities, w, cells, strict=True)]
    else:
        raw = [
            (wi * n * d * d) ** (1 / 3) for d, wi, n in zip(sensitivities, w, cells, strict=True)
        ]
    exact = [Fraction(r) for r in raw]
    norm = sum(exact, Fraction(0))
    return [total * r / norm for r in exact]


def noise_std(mechanism: Mechanism) -> float:
    """The standard deviation of one coordinate of the mechanism's integer noise (≈ σ for the
    discrete Gaussian; sqrt(2e^{-1/b})/(1-e^{-1/b}) for the discrete Laplace of scale b)."""
    if isinstance(mechanism, Gaussian):
        return float(mechanism.sigma)
    q = math.exp(-1 / float(mechanism.scale))
    return math.sqrt(2 * q) / (1 - q)


@dataclass(frozen=True)
class MarginalPlan:
    """A release plan: public, computed without data (see :func:`plan_marginals`).

    Attributes:
        domain: the public domain of the columns.
        cliques: the marginals, in order.
        mechanisms: the noise of each marginal.
        sensitivities: the L2 (zCDP) or L1 (pure) sensitivity of each marginal.
        event: the charge (exact sum of the mechanisms' costs).
    """

    domain: SynthDomain
    cliques: tuple[Clique, ...]
    mechanisms: tuple[Mechanism, ...]
    sensitivities: tuple[Fraction, ...]
    event: PrivacyEvent

    def expected_error(self, alpha: float = 0.05) -> pd.DataFrame:
        """Per marginal: cells, noise standard deviation and (1-α) CI half-width of a raw cell."""
        return pd.DataFrame(
            {
                "marginal": [" x ".join(c) for c in self.cliques],
                "cells": [self.domain.cells(c) for c in self.cliques],
                "noise_std": [noise_std(m) for m in self.mechanisms],
                "ci_halfwidth": [m.ci_halfwidth(alpha) for m in self.mechanisms],
            }
        )


def choose_cliques(
    session: Session,
    cliques: Sequence[Sequence[str]] | int,
    columns: Sequence[str] | None,
    max_bins: int,
    *,
    owner: str,
) -> tuple[SynthDomain, tuple[Clique, ...]]:
    """The public domain and the marginals of a plan: ``cliques`` as column tuples, or k for
    every marginal of at most k columns. Refused (by name) when a column has no public domain,
    a marginal is over the cell limit, or none is asked for."""
    domain = SynthDomain.from_metadata(session.metadata, columns, max_bins=max_bins)
    if isinstance(cliques, int):
        chosen = tuple(c for k in range(1, cliques + 1) for c in all_marginals(domain.names, k))
    else:
        chosen = tuple(tuple(domain.column(n).name for n in c) for c in cliques)
    if not chosen:
        raise fail(owner, "cliques", "at least one marginal", cliques)
    for clique in chosen:
        domain.check_marginal(clique)
    return domain, chosen


def plan_marginals(
    session: Session,
    cliques: Sequence[Sequence[str]] | int = 2,
    *,
    rho: object = None,
    epsilon: object = None,
    columns: Sequence[str] | None = None,
    max_bins: int = DEFAULT_MAX_BINS,
    weights: Sequence[float] | None = None,
) -> MarginalPlan:
    """The plan of a release: ``cliques`` (a list of column tuples, or k for every marginal of
    at most k columns) measured under ``rho``-zCDP or pure ``epsilon``-DP (exactly one).

    Free refusals (nothing charged): a column without public keys or bounds (by name), a
    marginal over the cell limit, a bad budget.
    """
    if (rho is None) == (epsilon is None):
        raise fail("plan_marginals", "rho", "given, or epsilon given (exactly one)", rho)
    domain, chosen = choose_cliques(session, cliques, columns, max_bins, owner="plan_marginals")
    unit = session.metadata.unit
    cells = [domain.cells(c) for c in chosen]
    zcdp = rho is not None
    budget = to_fraction(rho if zcdp else epsilon, owner="plan_marginals", name="budget")
    if budget <= 0:
        raise fail("plan_marginals", "rho" if zcdp else "epsilon", "> 0", budget)
    sens = [unit.count_l2(n) if zcdp else Fraction(unit.count_l1(n)) for n in cells]
    shares = split_budget(budget, cells, [float(s) for s in sens], zcdp=zcdp, weights=weights)
    event: PrivacyEvent
    if zcdp:
        gaussians = [Gaussian.for_rho(share, s) for share, s in zip(shares, sens, strict=True)]
        event = ZCDPEvent(sum(m.rho(s) for m, s in zip(gaussians, sens, strict=True)))
        mechanisms: tuple[Mechanism, ...] = tuple(gaussians)
    else:
        laplaces = [Laplace.for_epsilon(share, s) for share, s in zip(shares, sens, strict=True)]
        event = PureEvent(sum(m.epsilon(s) for m, s in zip(laplaces, sens, strict=True)))
        mechanisms = tuple(laplaces)
    return MarginalPlan(domain, chosen, mechanisms, tuple(sens), event)


@dataclass(frozen=True)
class ContingencyTables:
    """Released tables: per marginal, a tidy frame (one row per cell: the columns' values or
    bin labels, ``count`` consistent and integral, ``noisy`` the raw measurement, ``ci_low`` /
    ``ci_high`` its (1-α) interval)."""

    tables: dict[Clique, pd.DataFrame]
    total: int
    alpha: float

    def table(self, *columns: str) -> pd.DataFrame:
        """The table of the marginal over ``columns``."""
        return self.tables[tuple(columns)]

    def to_frame(self) -> pd.DataFrame:
        """All tables stacked, with a ``marginal`` column (other columns NA where absent)."""
        return pd.concat(
            [t.assign(marginal=" x ".join(c)) for c, t in self.tables.items()], ignore_index=True
        )

    def to_json(self) -> str:
        """``{"total": N, "alpha": α, "tables": [{"columns": [...], "rows": [...]}]}``."""
        tables = [
            {"columns": list(c), "rows": json.loads(t.to_json(orient="records"))}
            for c, t in self.tables.items()
        ]
        return json.dumps({"total": self.total, "alpha": self.alpha, "tables": tables})

    def write(self, directory: str | Path, fmt: Literal["csv", "parquet"] = "csv") -> list[Path]:
        """One file per marginal (``a__b.csv`` or ``.parquet``) in ``directory``."""
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for clique, frame in self.tables.items():
            path = folder / f"{'__'.join(clique)}.{fmt}"
            if fmt == "csv":
                frame.to_csv(path, index=False)
            else:
                frame.to_parquet(path, index=False)
            paths.append(path)
        return paths


def _labels(domain: SynthDomain, name: str) -> list[object]:
    column = domain.column(name)
    if column.keys is not None:
        return list(column.keys)
    return [b.label for b in histogram_bins(column.edges)]


def tidy_table(
    domain: SynthDomain,
    clique: Clique,
    counts: npt.NDArray[np.int64],
    noisy: npt.NDArray[np.int64] | npt.NDArray[np.float64],
    halfwidth: float | npt.NDArray[np.float64],
) -> pd.DataFrame:
    """One released table: a row per cell (labels, ``count``, ``noisy``, ``ci_low``,
    ``ci_high``); ``halfwidth`` is one number or one per cell."""
    index = pd.MultiIndex.from_product([_labels(domain, n) for n in clique], names=list(clique))
    frame = index.to_frame(index=False)
    frame["count"] = counts.ravel()
    frame["noisy"] = noisy.ravel()
    half = np.ravel(halfwidth) if isinstance(halfwidth, np.ndarray) else halfwidth
    frame["ci_low"] = noisy.ravel() - half
    frame["ci_high"] = noisy.ravel() + half
    return frame


def tabulate(
    codes: dict[str, npt.NDArray[np.int64]], domain: SynthDomain, clique: Clique
) -> npt.NDArray[np.int64]:
    """The count array of ``clique`` over records given as per-column codes."""
    shape = domain.shape(clique)
    flat = np.ravel_multi_index(tuple(codes[n] for n in clique), shape)
    return np.bincount(flat, minlength=math.prod(shape)).reshape(shape).astype(np.int64)


def release_marginals(
    session: Session,
    plan: MarginalPlan,
    *,
    alpha: float = 0.05,
    rng: Rng | None = None,
    iters: int = _mbi.DEFAULT_ITERS,
    progress: Progress | None = None,
) -> ContingencyTables:
    """Charge the plan, measure every marginal, and release consistent integral tables
    (``progress`` hears of each stage)."""
    check_probability("release_marginals", "alpha", alpha, open_low=True, open_high=True)
    source = rng if rng is not None else session.rng
    exact = exact_marginals(
        session,
        plan.domain,
        plan.cliques,
        plan.event,
        description=f"contingency tables {[list(c) for c in plan.cliques]}",
    )
    noisy = {
        c: m.release_integers(exact[c], source)
        for c, m in zip(plan.cliques, plan.mechanisms, strict=True)
    }
    del exact
    measurements = [
        _mbi.Measurement(c, noisy[c].astype(np.float64), noise_std(m))
        for c, m in zip(plan.cliques, plan.mechanisms, strict=True)
    ]
    report(progress, f"{len(measurements)} marginals measured", 0.2)
    model = _mbi.estimate(plan.domain, measurements, iters=iters)
    report(progress, "consistent model fitted", 0.9)
    total = max(round(float(model.total)), 1)
    records = _mbi.sample(_mbi.Beliefs.of(model), plan.domain, total, source, unbiased=True)
    tables = {
        c: tidy_table(
            plan.domain, c, tabulate(records, plan.domain, c), noisy[c], m.ci_halfwidth(alpha)
        )
        for c, m in zip(plan.cliques, plan.mechanisms, strict=True)
    }
    return ContingencyTables(tables, total, alpha)
