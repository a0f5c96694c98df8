"""DP two-sample Kolmogorov–Smirnov test on public bins.

The release is the histogram of each sample over public bins (cut points ``edges``: bin 0 holds
the values below the first edge, bin b those in [edges[b−1], edges[b]), the last those at or
above the last edge; NaN falls in no bin): one row falls in one of the 2B cells, so the counts
get discrete Laplace noise at the whole ε with L1 sensitivity ``count_l1(2B)`` of the unit given
(or Gaussian noise at ρ, :mod:`.core`).
The statistic is the KS distance between the two noisy empirical CDFs (bin counts clipped at 0),
D = √(n₁n₂/(n₁+n₂)) · max_b |F̃₁(b) − F̃₂(b)|, a rank statistic evaluated at the public cut
points. Its p-value comes from the parametric bootstrap under H0 (both samples multinomial over
the bins at the pooled noisy bin probabilities, with their released sizes, plus fresh noise;
Ferrando, Wang & Sheldon 2022; Couch, Kazan, Shi, Bray & Groce 2019 for DP rank tests).
The test has power against differences the bins can see: choose cut points (public, from domain
knowledge, never from the data) where the distributions may differ.
"""

from __future__ import annotations

import numpy as np

from dpcurator._validation import fail
from dpcurator.estimators.hypothesis.core import (
    SIMULATIONS,
    FloatArray,
    HypothesisTestResult,
    Noise,
    Setup,
    as_tuple,
    clipped_cells,
    column,
    multinomial,
    noise_draws,
    p_value,
    release_counts,
    setup,
)
from dpcurator.query.privacy_unit import PrivacyUnit
from dpcurator.random import Rng


def _distance(tables: FloatArray) -> FloatArray:
    """D of noisy tables (..., 2 samples, B bins)."""
    cells, n = clipped_cells(tables)
    cdf = np.cumsum(cells, axis=-1) / n[..., None]
    gap = np.max(np.abs(cdf[..., 0, :] - cdf[..., 1, :]), axis=-1)
    return np.asarray(gap * np.sqrt(n[..., 0] * n[..., 1] / (n[..., 0] + n[..., 1])))


def ks_from_table(table: FloatArray, noise: Noise, plan: Setup) -> tuple[float, float]:
    """(D, p) of H0: one distribution, from a released 2×B table of bin counts."""
    statistic = float(_distance(table))
    cells = np.maximum(table, 0.0)
    pooled = cells.sum(axis=0)
    sizes = np.maximum(np.rint(cells.sum(axis=1)), 1.0)
    draws = [multinomial(plan.rng, int(n), pooled, plan.simulations) for n in sizes]
    simulated = np.stack(draws, axis=1)
    simulated = simulated + noise_draws(plan.rng, noise, simulated.shape)
    return statistic, p_value(statistic, _distance(simulated))


def ks_test(
    first: object,
    second: object,
    *,
    edges: object,
    epsilon: float | None = None,
    rho: float | None = None,
    unit: PrivacyUnit | None = None,
    simulations: int = SIMULATIONS,
    rng: Rng | None = None,
) -> HypothesisTestResult:
    """ε-DP two-sample Kolmogorov–Smirnov test of H0: ``first`` and ``second`` come from one
    distribution, at the public cut points ``edges`` (increasing, finite; module docstring)."""
    owner = "ks_test"
    cuts = np.asarray(edges, dtype=np.float64).reshape(-1)
    if cuts.size < 1 or not np.all(np.isfinite(cuts)) or np.any(np.diff(cuts) <= 0):
        raise fail(owner, "edges", "at least one finite cut point, increasing", edges)
    plan = setup(owner, epsilon, rho, unit, simulations, rng)
    bins = cuts.size + 1
    counts = []
    for name, sample in (("first", first), ("second", second)):
        values = column(owner, name, sample)
        values = values[~np.isnan(values)]
        counts.append(np.bincount(np.searchsorted(cuts, values, "right"), minlength=bins))
    table, noise = release_counts(plan, np.array(counts, np.int64))
    return ks_result(table, noise, plan, ("first", "second"))


def ks_result(
    table: FloatArray, noise: Noise, plan: Setup, names: tuple[str, str]
) -> HypothesisTestResult:
    """The KS test's result from a released 2×B table of bin counts of samples called
    ``names`` (post-processing: :func:`ks_test` and the query layer's ``KS``)."""
    statistic, p = ks_from_table(table, noise, plan)
    first, second = names
    return HypothesisTestResult(
        "two-sample Kolmogorov-Smirnov (binned)", statistic, p, plan.cost,
        "parametric bootstrap at the pooled noisy bins (Ferrando, Wang & Sheldon 2022)",
        "both samples come from one distribution",
        {first: as_tuple(table[0]), second: as_tuple(table[1])},
        {first: noise.scale, second: noise.scale}, None, plan.simulations,
    )  # fmt: skip


__all__ = ["ks_from_table", "ks_result", "ks_test"]
