"""Wald tests of H0: coefficient = 0 for DP fits (issue 27 item 2, part 3;
:mod:`dpcurator.estimators.wald`): dual to the released noise-and-sampling interval, absent where
it would mislead, reported per term by SQL ``REGRESS`` / ``LOGISTIC``, and of level <= α under
the noise at n ∈ {100, 10^4} and ε ∈ {0.1, 1} (with power at an alternative, and against a
bootstrap that leaves the noise out)."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import dpcurator as dpc
from dpcurator.core.measures import PureDP
from dpcurator.estimators import Covers, Estimate, regression, wald_test
from dpcurator.estimators.logistic import logistic_regression
from dpcurator.estimators.regression import linear_regression
from dpcurator.estimators.release import FloatArray
from dpcurator.query.fit.linear import zcdp_for
from dpcurator.random import SeededRng
from tests.test_estimators_hypothesis_tests import rate_above

LEVEL = 0.05
#: The declared level of the test-of-the-test (the seeded rejection counts are binomial tests of
#: "rate <= LEVEL" at this alpha; its power: the noise-free variant below is caught).
CHECK_ALPHA = 0.01


def _estimate(low: list[float], high: list[float], **options: object) -> Estimate:
    value = (np.array(low) + np.array(high)) / 2
    fields = {"covers": Covers.NOISE_AND_SAMPLING, "at_bound": None} | options
    return Estimate(
        value, np.array(low), np.array(high), fields["covers"], LEVEL, PureDP(1), "fit",  # type: ignore[arg-type]
        at_bound=fields["at_bound"],  # type: ignore[arg-type]
    )  # fmt: skip


def test_p_is_at_most_alpha_exactly_when_the_interval_excludes_zero() -> None:
    wald = wald_test(_estimate([-1.0, 0.01, -3.0, -1.0], [1.0, 2.0, -0.001, 0.0]))
    assert wald is not None
    np.testing.assert_allclose(wald.p_value, [1.0, LEVEL, LEVEL, LEVEL], atol=0.04)
    assert list(wald.p_value <= LEVEL + 1e-12) == [False, True, True, True]
    assert wald.p_value[1] < LEVEL < wald.p_value[0]


def test_no_test_where_the_interval_cannot_carry_one() -> None:
    clamped = wald_test(_estimate([-1.0, 0.5], [1.0, 2.0], at_bound=np.array([False, True])))
    assert clamped is not None
    assert np.isfinite(clamped.p_value[0])
    assert np.isnan(clamped.p_value[1])
    assert wald_test(_estimate([0.5], [2.0], covers=Covers.NOISE)) is None
    nr = Estimate(None, None, None, None, LEVEL, PureDP(1), "fit")
    assert wald_test(nr) is None


def test_regress_reports_a_p_value_per_term() -> None:
    gen = np.random.default_rng(0)
    x = gen.uniform(0, 10, 3000)
    frame = pd.DataFrame({"x": x, "y": np.clip(2 + 0.5 * x + gen.normal(0, 1, 3000), 0, 10)})
    frame["z"] = gen.uniform(0, 10, 3000)
    columns = {name: {"type": "float", "lower": 0, "upper": 10} for name in ("x", "y", "z")}
    meta = dpc.Metadata.from_dict({"table": "t", "columns": columns})
    budget = dpc.Budget(4.0, 1e-5)
    with dpc.Session.from_data(frame, metadata=meta, budget=budget, rng=SeededRng(2)) as s:
        table = s.sql("SELECT REGRESS(y, x, z) FROM t", epsilon=2.0, delta=1e-6).to_pandas()
    p = dict(zip(table["term"], table["p_value"], strict=True))
    assert p["x"] < 1e-6  # a slope of 0.5 at n = 3000
    assert 0 < p["z"] <= 1


def _linear_p(n: int, eps: float, slope: float, gen: np.random.Generator, seed: int) -> float:
    x = gen.uniform(-1, 1, n)
    y = np.clip(slope * x + gen.normal(0, 0.5, n), -2, 2)
    rho = float(zcdp_for(Fraction(eps), 1e-6))  # what REGRESS runs at (ε, δ = 1e-6)
    fit = linear_regression(
        x[:, None], y, rho=rho, x_lower=[-1], x_upper=[1], y_lower=-2, y_upper=2,
        rng=SeededRng(seed),
    )  # fmt: skip
    wald = wald_test(fit)
    return 1.0 if wald is None else float(np.nan_to_num(wald.p_value[1], nan=1.0))


def _logistic_p(n: int, eps: float, slope: float, gen: np.random.Generator, seed: int) -> float:
    x = gen.uniform(-1, 1, n)
    y = (gen.random(n) < 1 / (1 + np.exp(-slope * x))).astype(float)
    fit = logistic_regression(
        x[:, None], y, epsilon=eps, x_lower=[-1], x_upper=[1], coef_lower=-10, coef_upper=10,
        rng=SeededRng(seed),
    )  # fmt: skip
    wald = wald_test(fit)
    return 1.0 if wald is None else float(np.nan_to_num(wald.p_value[1], nan=1.0))


#: model -> (run, repetitions a setting, alternative slope at n = 10^4 where power is checked)
MODELS = {"linear": (_linear_p, 60, 0.4), "logistic": (_logistic_p, 20, 0.4)}


def _at_most_level(hits: int, reps: int) -> bool:
    return bool(stats.binomtest(hits, reps, LEVEL, alternative="greater").pvalue > CHECK_ALPHA)


def _rejections(run: Callable[..., float], n: int, eps: float, slope: float, reps: int) -> int:
    gen = np.random.default_rng(9)
    return sum(run(n, eps, slope, gen, 100 + i) <= LEVEL for i in range(reps))


@pytest.mark.statistical
@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(MODELS))
def test_type_one_error_and_power_over_n_and_epsilon(model: str) -> None:
    """H0 slope = 0 at n ∈ {100, 10^4}, ε ∈ {0.1, 1}: the rejection rate at α = 0.05 is not
    significantly above α (a one-sided binomial test at CHECK_ALPHA, per setting and pooled);
    power > 0.3 at the alternative at n = 10^4 (at the suite's ALPHA)."""
    run, reps, slope = MODELS[model]
    total = 0
    for n in (100, 10_000):
        for eps in (0.1, 1.0):
            hits = _rejections(run, n, eps, 0.0, reps)
            assert _at_most_level(hits, reps), (n, eps, hits)
            total += hits
    assert _at_most_level(total, 4 * reps), total  # pooled: more power
    for eps in (0.1, 1.0):
        assert rate_above(_rejections(run, 10_000, eps, slope, reps), reps, 0.3), eps


def _noise_free(mechanism: object, scale: object, values: object, rng: object) -> FloatArray:
    return np.asarray(values, np.float64)


@pytest.mark.statistical
def test_the_type_one_check_catches_a_bootstrap_that_leaves_the_noise_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same check at n = 10^4, ε = 0.1 rejects a variant whose bootstrap leaves the privacy
    noise out (the release keeps its noise): that test is anti-conservative, and detected."""
    monkeypatch.setattr(regression, "noisy", _noise_free)
    reps = 20
    hits = _rejections(_linear_p, 10_000, 0.1, 0.0, reps)
    assert not _at_most_level(hits, reps), hits


def test_the_interval_ends_are_order_statistics_that_cover_at_least_one_minus_alpha() -> None:
    """Ends k and B + 1 - k, k = floor((B + 1) α / 2), of the B pivots: a draw exchangeable with
    them falls outside with probability 2k / (B + 1) <= α (interpolated quantiles: > α)."""
    scaling = regression.Scaling.of(1, ([-1.0], [1.0]), (-1.0, 1.0), True)
    pivots = np.random.default_rng(3).normal(size=(400, 2))
    low, high = regression._interval(np.zeros(2), pivots, np.eye(2), scaling, LEVEL)
    ordered = np.sort(pivots[:, 1])
    assert (low[1], high[1]) == (-ordered[390], -ordered[9])  # k = floor(401 * 0.025) = 10


def test_no_test_where_the_released_design_is_not_above_its_noise() -> None:
    """At n = 100, ε = 0.1 (σ of the Gram noise about 125) the released Σu² is not significantly
    positive: the fit has its interval but reports no Wald test; at n = 10^4 it does."""
    gen = np.random.default_rng(4)
    rho = float(zcdp_for(Fraction(0.1), 1e-6))
    for n, testable in ((100, False), (10_000, True)):
        x = gen.uniform(-1, 1, n)
        y = gen.normal(0, 0.5, n)
        fit = linear_regression(
            x[:, None], y, rho=rho, x_lower=[-1], x_upper=[1], y_lower=-2, y_upper=2,
            rng=SeededRng(7),
        )  # fmt: skip
        assert fit.replied
        assert fit.testable is testable
        wald = wald_test(fit)
        assert wald is not None
        assert bool(np.all(np.isfinite(wald.p_value))) is testable
