"""DP two-proportion z-test: H0 that two groups have the same rate of successes.

The release is the 2×2 table (successes, failures) × (first, second) of the rows: one row falls in
exactly one cell, so the four counts get discrete Laplace noise with L1 sensitivity ``count_l1(4)``
at the whole ε (or Gaussian noise at ρ, :mod:`.core`). Values equal to 1 (or True) are successes,
values equal to 0 failures; any other value falls in no cell. The statistic is the pooled z with the
noise variance of each rate in its standard error; the p-value comes from the parametric bootstrap
under H0 (both groups binomial at the pooled rate and their released sizes, plus fresh noise of the
public law: Ferrando, Wang & Sheldon 2022; Awan & Slavković 2018 for DP tests of binomial data).
"""

from __future__ import annotations

import numpy as np

from dpcurator.estimators.hypothesis.core import (
    SIMULATIONS,
    FloatArray,
    HypothesisTestResult,
    Noise,
    Setup,
    as_tuple,
    binomial,
    clipped_cells,
    codes,
    noise_draws,
    release_counts,
    setup,
)
from dpcurator.estimators.hypothesis.means import BOOTSTRAP, check_alternative, oriented_p_value
from dpcurator.query.privacy_unit import PrivacyUnit
from dpcurator.random import Rng

#: Pooled-variance floor (a release with no successes or no failures).
_FLOOR = 1e-12


def _z(table: FloatArray, noise: Noise) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(z, rates, sizes) of noisy tables (..., 2 groups, 2 cells: successes, failures)."""
    cells, n = clipped_cells(table)
    rates = cells[..., 0] / n
    pooled = np.clip(cells[..., 0].sum(axis=-1) / n.sum(axis=-1), 0.0, 1.0)
    spread = pooled * (1 - pooled) * (1 / n[..., 0] + 1 / n[..., 1])
    inverse_squares = 1 / n[..., 0] ** 2 + 1 / n[..., 1] ** 2
    blur = ((1 - pooled) ** 2 + pooled**2) * noise.variance * inverse_squares
    z = (rates[..., 0] - rates[..., 1]) / np.sqrt(np.maximum(spread + blur, _FLOOR))
    return np.asarray(z), rates, n


def two_proportion_from_table(
    table: FloatArray, noise: Noise, plan: Setup, alternative: str = "two-sided"
) -> tuple[float, float]:
    """(z, p) from a released 2×2 table (rows: groups; columns: successes, failures)."""
    z, _, n = _z(table, noise)
    cells = np.maximum(table, 0.0)
    pooled = float(np.clip(cells[:, 0].sum() / max(cells.sum(), 1.0), 0.0, 1.0))
    sizes = np.rint(n)
    successes = binomial(plan.rng, sizes, pooled, plan.simulations)
    simulated = np.stack([successes, sizes - successes], axis=-1)
    simulated = simulated + noise_draws(plan.rng, noise, simulated.shape)
    null, _, _ = _z(simulated, noise)
    return float(z), oriented_p_value(float(z), null, alternative)


def two_proportion_z_test(
    first: object,
    second: object,
    *,
    epsilon: float | None = None,
    rho: float | None = None,
    alternative: str = "two-sided",
    unit: PrivacyUnit | None = None,
    simulations: int = SIMULATIONS,
    rng: Rng | None = None,
) -> HypothesisTestResult:
    """ε-DP test of H0: P(success) is the same in ``first`` and ``second`` (0/1 values; module
    docstring). The estimate is rate(first) − rate(second)."""
    owner = "two_proportion_z_test"
    side = check_alternative(owner, alternative)
    plan = setup(owner, epsilon, rho, unit, simulations, rng)
    counts = []
    for name, sample in (("first", first), ("second", second)):
        coded = codes(owner, (name, ""), sample, [1, 0])
        counts.append([int(np.count_nonzero(coded == 0)), int(np.count_nonzero(coded == 1))])
    table, noise = release_counts(plan, np.array(counts, np.int64))
    return two_proportion_result(table, noise, plan, side)


def two_proportion_result(
    table: FloatArray, noise: Noise, plan: Setup, alternative: str
) -> HypothesisTestResult:
    """The test's result from a released 2×2 table (rows: groups; columns: successes,
    failures; post-processing: :func:`two_proportion_z_test` and the query layer's
    ``PROPTEST``). The estimate is rate(first) − rate(second)."""
    z, p = two_proportion_from_table(table, noise, plan, alternative)
    _, rates, _ = _z(table, noise)
    return HypothesisTestResult(
        "two-proportion z", z, p, plan.cost, f"pooled z with the noise, {BOOTSTRAP}",
        f"equal success rates ({alternative})",
        {"successes": as_tuple(table[:, 0]), "failures": as_tuple(table[:, 1]),
         "rate": as_tuple(rates)},
        {"successes": noise.scale, "failures": noise.scale},
        float(rates[0] - rates[1]), plan.simulations,
    )  # fmt: skip


__all__ = [
    "two_proportion_from_table",
    "two_proportion_result",
    "two_proportion_z_test",
]
