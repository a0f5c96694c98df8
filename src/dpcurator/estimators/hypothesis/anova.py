"""DP one-way ANOVA: H0 that k groups of bounded values share one mean.

The release is the noisy moments of :mod:`.moments` over the k groups (ε-DP for the unit given;
sensitivities ``count_l1(k)`` × the per-row bounds). The statistic is the heteroscedastic
(Welch 1951) between-group statistic with each group's mean weighted by the inverse of its
variance *including the noise*, W = Σ w_j (m_j − m̄)², w_j = 1 / (s_j²/n_j + Var(noise of m_j)),
m̄ = Σ w_j m_j / Σ w_j: groups the noise blurs count less, so small groups cannot drive a
rejection. Its p-value comes from the parametric bootstrap of sampling and noise under H0 (every
group at the common mean m̄, its released variance and size; Ferrando, Wang & Sheldon 2022;
Swanberg, Globus-Harris, Griffith, Ritz, Groce & Bray 2019 for DP ANOVA).
"""

from __future__ import annotations

import numpy as np

from dpcurator._validation import fail
from dpcurator.estimators.hypothesis.core import (
    SIMULATIONS,
    FloatArray,
    HypothesisTestResult,
    Setup,
    bounds,
    clamped_columns,
    p_value,
    setup,
)
from dpcurator.estimators.hypothesis.means import BOOTSTRAP
from dpcurator.estimators.hypothesis.moments import (
    Moments,
    release_moments,
    simulate_moments,
    sizes,
)
from dpcurator.query.privacy_unit import PrivacyUnit
from dpcurator.random import Rng


def _between(moments: Moments) -> tuple[FloatArray, FloatArray]:
    """(W, m̄) of each release (leading axes kept)."""
    _, mean, _, mean_var = moments.summary()
    weights = 1.0 / mean_var
    centre = np.sum(weights * mean, axis=-1) / np.sum(weights, axis=-1)
    statistic = np.sum(weights * (mean - centre[..., None]) ** 2, axis=-1)
    return np.asarray(statistic), np.asarray(centre)


def anova_from_moments(moments: Moments, plan: Setup) -> tuple[float, float]:
    """(W, p) of H0: equal means, from released moments of k groups (post-processing)."""
    statistic, centre = _between(moments)
    _, _, var, _ = moments.summary()
    n = sizes(moments.counts)
    common = np.full(n.size, float(centre))
    simulated = simulate_moments(moments, n, common, var, plan)
    null, _ = _between(simulated)
    return float(statistic), p_value(float(statistic), null)


def one_way_anova(
    *samples: object,
    lower: float,
    upper: float,
    epsilon: float | None = None,
    rho: float | None = None,
    unit: PrivacyUnit | None = None,
    simulations: int = SIMULATIONS,
    rng: Rng | None = None,
) -> HypothesisTestResult:
    """ε-DP one-way ANOVA of H0: the k >= 2 ``samples`` (values in public [lower, upper],
    clamped, NaN -> midpoint) have equal means (module docstring). ``extra`` reports the
    classical F of the noisy moments for reference (its F table is not valid under noise)."""
    owner = "one_way_anova"
    if len(samples) < 2:
        raise fail(owner, "samples", "at least 2 groups", len(samples))
    low, high = bounds(owner, lower, upper)
    plan = setup(owner, epsilon, rho, unit, simulations, rng)
    groups = clamped_columns(
        owner, ((f"samples[{j}]", s) for j, s in enumerate(samples)), low, high
    )
    moments = release_moments(plan, groups, low, high)
    return anova_result(moments, plan)


def anova_result(moments: Moments, plan: Setup) -> HypothesisTestResult:
    """The ANOVA's result from released moments of k groups (post-processing:
    :func:`one_way_anova` and the query layer's ``ANOVA``)."""
    statistic, p = anova_from_moments(moments, plan)
    n, mean, var, _ = moments.summary()
    k, total = n.size, float(n.sum())
    grand = float(np.sum(n * mean) / total)
    between = float(np.sum(n * (mean - grand) ** 2)) / (k - 1)
    within = float(np.sum((n - 1) * var)) / max(total - k, 1.0)
    return HypothesisTestResult(
        "one-way ANOVA", statistic, p, plan.cost,
        f"inverse-variance (Welch) between-group statistic with the noise, {BOOTSTRAP}",
        f"all {k} group means are equal", moments.released(), moments.noise_scales(),
        None, plan.simulations, {"classical F of the noisy moments": between / within},
    )  # fmt: skip


__all__ = ["anova_from_moments", "anova_result", "one_way_anova"]
