"""The measurements private multiplicative weights keeps, its multiplicative-weights steps and
its default threshold.

An update of :class:`~dpcurator.interactive.PrivateMultiplicativeWeights` releases one noisy
vector at the round's ε. Two shapes are measured; which one is a function of the query alone
(public):

* :class:`MarginalMeasurement`: when the query counts ONE cell of the marginal on some columns
  (``COUNT(*) WHERE a = u AND b = v``: the cell ``(u, v)`` of the ``a × b`` marginal), the whole
  marginal is released with discrete Laplace noise. Its cells partition the histogram, so a
  person moves it by at most the histogram's L1 sensitivity Δ: one Laplace vector at scale Δ/ε
  is ε-DP (Dwork, McSherry, Nissim & Smith 2006), the price of the single cell. The answer is
  the noisy cell, and the rest of the marginal informs the distribution for free. This is how
  MWEM measures (Hardt, Ligett & McSherry 2012), and it lets one update fix every cell of a
  marginal instead of one.
* :class:`QueryMeasurement`: any other linear query is released alone, as in Hardt & Rothblum
  (2010).

The step for a measured query ``q`` with noisy answer ``y`` is the multiplicative-weights
update ``p_i <- p_i exp(q_i (y - n q(p)) / (2n)) / Z`` (Hardt & Rothblum 2010; the learning
rate ``1/(2n)`` of MWEM), with the exponent clipped to [-1, 1] for a single query. A marginal's
cells are disjoint queries, so their steps commute and are applied at once. Everything here is
post-processing of released values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcurator.interactive.linear import Weights
from dpcurator.mechanisms import AboveThreshold

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class QueryMeasurement:
    """A single linear query's noisy answer: its non-zero ``cells`` and their ``weights``."""

    cells: npt.NDArray[np.intp]
    weights: Weights
    value: float


@dataclass(frozen=True)
class MarginalMeasurement:
    """The noisy marginal (shape: the sizes of ``axes``) on the domain axes ``axes``."""

    axes: tuple[int, ...]
    noisy: Array


Measurement = QueryMeasurement | MarginalMeasurement


def marginal_cell(
    weights: Weights, shape: tuple[int, ...], max_cells: int
) -> tuple[tuple[int, ...], int] | None:
    """``(axes, cell)`` when ``weights`` is the 0/1 indicator of the single cell ``cell`` (flat,
    row-major) of the marginal on ``axes`` and that marginal has at most ``max_cells`` cells;
    else None. A function of the query only."""
    table = weights.reshape(shape)
    axes = tuple(
        axis
        for axis in range(len(shape))
        if not np.array_equal(table, np.broadcast_to(table.take([0], axis=axis), shape))
    )
    marginal = table[tuple(slice(None) if a in axes else 0 for a in range(len(shape)))]
    if int(np.prod([shape[a] for a in axes])) > max_cells:
        return None
    ones = np.flatnonzero(marginal == 1.0)
    if ones.size != 1 or np.count_nonzero(marginal) != 1:
        return None
    return axes, int(ones[0])


def project(distribution: Array, shape: tuple[int, ...], axes: tuple[int, ...]) -> Array:
    """The marginal of the (flat) ``distribution`` on ``axes``, in ``axes`` order."""
    others = tuple(a for a in range(len(shape)) if a not in axes)
    return np.asarray(distribution.reshape(shape).sum(axis=others), dtype=np.float64)


def step(distribution: Array, shape: tuple[int, ...], measured: Measurement, size: float) -> None:
    """One multiplicative-weights step of the (flat) ``distribution`` towards ``measured``, in
    place, renormalised; ``size`` is the noisy row count ``n``."""
    if isinstance(measured, QueryMeasurement):
        before = distribution[measured.cells]
        exponent = (measured.value - size * float(measured.weights @ before)) / (2 * size)
        after = before * np.exp(min(max(exponent, -1.0), 1.0) * measured.weights)
        distribution[measured.cells] = after
        distribution /= 1.0 + float(after.sum()) - float(before.sum())
        return
    current = project(distribution, shape, measured.axes)
    exponents = (measured.noisy - size * current) / (2 * size)
    view = [shape[a] if a in measured.axes else 1 for a in range(len(shape))]
    # a common shift cancels in the normalisation: it keeps exp from overflowing
    factor = np.exp(exponents - exponents.max()).reshape(view)
    table = distribution.reshape(shape)
    table *= factor
    distribution /= float(distribution.sum())


def pack(measurements: list[Measurement]) -> dict[str, npt.NDArray[np.generic]]:
    """The measurements as flat arrays (for :func:`numpy.savez`), in order; :func:`unpack`."""
    queries = [m for m in measurements if isinstance(m, QueryMeasurement)]
    marginals = [m for m in measurements if isinstance(m, MarginalMeasurement)]
    return {
        "marginal": np.array([isinstance(m, MarginalMeasurement) for m in measurements], bool),
        "cells": np.concatenate([np.zeros(0, dtype=np.intp), *(m.cells for m in queries)]),
        "weights": np.concatenate([np.zeros(0), *(m.weights for m in queries)]),
        "lengths": np.array([m.cells.size for m in queries], dtype=np.int64),
        "values": np.array([m.value for m in queries], dtype=np.float64),
        "axes": np.array([a for m in marginals for a in m.axes], dtype=np.int64),
        "axis_counts": np.array([len(m.axes) for m in marginals], dtype=np.int64),
        "noisy": np.concatenate([np.zeros(0), *(m.noisy.reshape(-1) for m in marginals)]),
    }


def unpack(saved: Mapping[str, Any], shape: tuple[int, ...]) -> list[Measurement]:
    """The measurements :func:`pack` wrote (``saved``: the loaded arrays, by name; state saved
    before marginal updates existed has single queries only)."""
    if "marginal" not in saved:
        empty = np.zeros(0, dtype=np.int64)
        flags = np.zeros(len(saved["values"]), dtype=bool)
        saved = {**saved, "marginal": flags, "axes": empty, "axis_counts": empty, "noisy": empty}
    get = saved.__getitem__
    bounds = np.cumsum(get("lengths"))[:-1]
    cells = np.split(get("cells").astype(np.intp), bounds)
    weights = np.split(get("weights").astype(np.float64), bounds)
    queries = iter(
        QueryMeasurement(c, w, float(v))
        for c, w, v in zip(cells, weights, get("values"), strict=False)
    )
    axis_bounds = np.cumsum(get("axis_counts"))[:-1]
    parts = np.split(get("axes"), axis_bounds) if get("axis_counts").size else []
    all_axes = [tuple(int(a) for a in part) for part in parts]
    sizes = [int(np.prod([shape[a] for a in axes])) for axes in all_axes]
    noisy = np.split(get("noisy").astype(np.float64), np.cumsum(sizes)[:-1])
    marginals = iter(
        MarginalMeasurement(axes, values.reshape([shape[a] for a in axes]))
        for axes, values in zip(all_axes, noisy, strict=False)
    )
    return [next(marginals) if flag else next(queries) for flag in get("marginal")]


def default_threshold(epsilon: Fraction, sensitivity: int, queries: int, updates: int) -> float:
    """``T = b ln(2k/c)`` (at least ``b``), ``b`` the sparse vector's query-noise scale: on
    ``k`` queries the synthetic distribution answers well, noise alone then sets off about
    ``(k/2) exp(-T/b) = c/4`` updates, a quarter of the ``c`` paid for. Public inputs only."""
    probe = AboveThreshold(epsilon, sensitivity, 0)
    scale = math.ldexp(float(probe.query_scale), probe.grid)
    return scale * max(math.log(2 * queries / updates), 1.0)
