"""DP t-tests: one-sample, paired and Welch's two-sample, with p-values valid under the noise.

Each test releases the noisy moments of :mod:`.moments` (ε-DP for the unit it is given: one row
added or removed by default) and studentises the noisy mean with a standard error that includes
the noise, t = (mean − μ₀) / √(s²/n + Var(noise of the mean)); the p-value compares t with its
parametric-bootstrap null (sampling under H0 at the released variances, plus fresh noise of the
public law; Ferrando, Wang & Sheldon 2022). Studentising by the noise as well keeps the statistic
nearly pivotal, so the simulated null is accurate even where the noise dominates (small n·ε).

``alternative`` is ``two-sided`` (|t*| >= |t|), ``greater`` (t* >= t) or ``less`` (t* <= t).
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
    clamped,
    clamped_columns,
    column,
    p_value,
    setup,
)
from dpcurator.estimators.hypothesis.moments import (
    Moments,
    release_moments,
    simulate_moments,
    sizes,
)
from dpcurator.query.privacy_unit import PrivacyUnit
from dpcurator.random import Rng

ALTERNATIVES = ("two-sided", "greater", "less")
BOOTSTRAP = "parametric bootstrap of sampling and noise (Ferrando, Wang & Sheldon 2022)"


def oriented_p_value(t: float, null: FloatArray, alternative: str) -> float:
    """The Monte Carlo p-value of ``t`` against ``null`` for the ``alternative``."""
    if alternative == "two-sided":
        return p_value(abs(t), np.abs(null))
    if alternative == "greater":
        return p_value(t, null)
    return p_value(-t, -null)


def check_alternative(owner: str, alternative: object) -> str:
    if alternative not in ALTERNATIVES:
        raise fail(owner, "alternative", "'two-sided', 'greater' or 'less'", alternative)
    return str(alternative)


# ----------------------------------------------------------------------------------------------
# Inference from released moments (post-processing: what a query layer would call)


def _one_sample_t(moments: Moments, target: float) -> FloatArray:
    _, mean, _, mean_var = moments.summary()
    return np.asarray((mean[..., 0] - target) / np.sqrt(mean_var[..., 0]))


def one_sample_from_moments(
    moments: Moments, mean: float, plan: Setup, alternative: str = "two-sided"
) -> tuple[float, float]:
    """(t, p) of H0: E[x] = ``mean`` from released moments of one group."""
    target = mean - moments.centre
    t = float(_one_sample_t(moments, target)[()])
    _, _, var, _ = moments.summary()
    simulated = simulate_moments(moments, sizes(moments.counts), np.full(1, target), var, plan)
    return t, oriented_p_value(t, _one_sample_t(simulated, target), alternative)


def _welch_t(moments: Moments) -> FloatArray:
    _, mean, _, mean_var = moments.summary()
    spread = np.sqrt(mean_var[..., 0] + mean_var[..., 1])
    return np.asarray((mean[..., 0] - mean[..., 1]) / spread)


def welch_from_moments(
    moments: Moments, plan: Setup, alternative: str = "two-sided"
) -> tuple[float, float]:
    """(t, p) of H0: equal means, from released moments of two groups. The null keeps each
    group's released variance and size and sets both means to their size-weighted pool."""
    t = float(_welch_t(moments)[()])
    _, mean, var, _ = moments.summary()
    n = sizes(moments.counts)
    pooled = float(np.sum(n * mean) / n.sum())
    simulated = simulate_moments(moments, n, np.full(2, pooled), var, plan)
    return t, oriented_p_value(t, _welch_t(simulated), alternative)


# ----------------------------------------------------------------------------------------------
# The tests on arrays


def one_sample_t_test(
    data: object,
    *,
    mean: float,
    lower: float,
    upper: float,
    epsilon: float | None = None,
    rho: float | None = None,
    alternative: str = "two-sided",
    unit: PrivacyUnit | None = None,
    simulations: int = SIMULATIONS,
    rng: Rng | None = None,
) -> HypothesisTestResult:
    """ε-DP one-sample t-test of H0: E[x] = ``mean`` for values in public [lower, upper].

    Values are clamped to the bounds (NaN -> the midpoint); ``unit`` (default: one row added or
    removed) sets the sensitivity; the p-value is valid under the noise (module docstring).

    >>> from dpcurator.random import SeededRng
    >>> result = one_sample_t_test(
    ...     [4.0, 6.5, 5.5, 7.0] * 50, mean=5.0, lower=0, upper=10, epsilon=1.0,
    ...     simulations=199, rng=SeededRng(3))
    >>> result.p_value < 0.05
    True
    """
    owner = "one_sample_t_test"
    low, high = bounds(owner, lower, upper)
    side = check_alternative(owner, alternative)
    if not low <= mean <= high:
        raise fail(owner, "mean", f"a value in the bounds [{low:g}, {high:g}]", mean)
    plan = setup(owner, epsilon, rho, unit, simulations, rng)
    values = clamped(column(owner, "data", data), low, high)
    return _one_sample("one-sample t", values, low, high, float(mean), plan, side)


def paired_t_test(
    first: object,
    second: object,
    *,
    lower: float,
    upper: float,
    epsilon: float | None = None,
    rho: float | None = None,
    difference: float = 0.0,
    max_difference: float | None = None,
    alternative: str = "two-sided",
    unit: PrivacyUnit | None = None,
    simulations: int = SIMULATIONS,
    rng: Rng | None = None,
) -> HypothesisTestResult:
    """ε-DP paired t-test of H0: E[first − second] = ``difference``.

    One row is a pair; both values lie in public [lower, upper] (clamped, NaN -> midpoint), so
    the differences lie in [−(upper − lower), upper − lower], or in the tighter public
    [−max_difference, max_difference] when given (the differences are clamped to it). It is the
    one-sample test of the differences (module docstring).
    """
    owner = "paired_t_test"
    low, high = bounds(owner, lower, upper)
    side = check_alternative(owner, alternative)
    reach = high - low if max_difference is None else float(max_difference)
    if not reach > 0 or not np.isfinite(reach):
        raise fail(owner, "max_difference", "a finite value > 0", max_difference)
    if not -reach <= difference <= reach:
        raise fail(owner, "difference", f"a value in [{-reach:g}, {reach:g}]", difference)
    plan = setup(owner, epsilon, rho, unit, simulations, rng)
    x, y = clamped_columns(owner, (("first", first), ("second", second)), low, high)
    if x.size != y.size:
        raise fail(owner, "second", f"one value per pair ({x.size})", y.size)
    diffs = clamped(x - y, -reach, reach)
    return _one_sample("paired t", diffs, -reach, reach, float(difference), plan, side)


def _one_sample(  # noqa: PLR0917 (the test's public inputs)
    test: str,
    values: FloatArray,
    lower: float,
    upper: float,
    mean: float,
    plan: Setup,
    alternative: str,
) -> HypothesisTestResult:
    moments = release_moments(plan, [values], lower, upper)
    return one_sample_result(test, moments, mean, plan, alternative)


def one_sample_result(  # noqa: PLR0917 (the test's public inputs)
    test: str, moments: Moments, mean: float, plan: Setup, alternative: str, of: str = ""
) -> HypothesisTestResult:
    """The result of the one-sample test ``test`` of H0: E[x] = ``mean`` from released moments
    of one group (post-processing: the array tests and the query layer's ``TTEST``); ``of``
    names x in H0's text."""
    t, p = one_sample_from_moments(moments, mean, plan, alternative)
    _, estimate, _, mean_var = moments.summary()
    return HypothesisTestResult(
        test, t, p, plan.cost, f"studentised noisy mean, {BOOTSTRAP}",
        f"mean{of and ' of ' + of} = {mean:g} ({alternative})", moments.released(),
        moments.noise_scales(),
        float(estimate[0] + moments.centre), plan.simulations,
        {"standard error (sampling and noise)": float(np.sqrt(mean_var[0]))},
    )  # fmt: skip


def welch_t_test(
    first: object,
    second: object,
    *,
    lower: float,
    upper: float,
    epsilon: float | None = None,
    rho: float | None = None,
    alternative: str = "two-sided",
    unit: PrivacyUnit | None = None,
    simulations: int = SIMULATIONS,
    rng: Rng | None = None,
) -> HypothesisTestResult:
    """ε-DP two-sample (Welch) t-test of H0: equal means of two independent samples of values
    in public [lower, upper] (clamped, NaN -> midpoint); the standard error includes each
    group's noise and the null is a parametric bootstrap (module docstring). The estimate is
    mean(first) − mean(second)."""
    owner = "welch_t_test"
    low, high = bounds(owner, lower, upper)
    side = check_alternative(owner, alternative)
    plan = setup(owner, epsilon, rho, unit, simulations, rng)
    groups = clamped_columns(owner, (("first", first), ("second", second)), low, high)
    moments = release_moments(plan, groups, low, high)
    return welch_result(moments, plan, side, ("first", "second"))


def welch_result(
    moments: Moments, plan: Setup, alternative: str, names: tuple[str, str]
) -> HypothesisTestResult:
    """The Welch test's result from released moments of two groups called ``names``
    (post-processing: :func:`welch_t_test` and the query layer's ``TTEST``)."""
    t, p = welch_from_moments(moments, plan, alternative)
    _, mean, _, mean_var = moments.summary()
    first, second = names
    return HypothesisTestResult(
        "two-sample t (Welch)", t, p, plan.cost, f"Welch t with the noise, {BOOTSTRAP}",
        f"mean({first}) = mean({second}) ({alternative})", moments.released(),
        moments.noise_scales(), float(mean[0] - mean[1]), plan.simulations,
        {"standard error (sampling and noise)": float(np.sqrt(mean_var.sum()))},
    )  # fmt: skip


#: The name of the two-sample test before the hypothesis package (same arguments).
difference_of_means_test = welch_t_test

__all__ = [
    "difference_of_means_test",
    "one_sample_from_moments",
    "one_sample_result",
    "one_sample_t_test",
    "paired_t_test",
    "welch_from_moments",
    "welch_result",
    "welch_t_test",
]
