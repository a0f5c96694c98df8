"""Wald tests of H0: coefficient = 0 for DP fits (issue 27 item 2, part 3;
:mod:`dpcurator.estimators.wald`): dual to the released noise-and-sampling interval, absent where
it would mislead, reported per term by SQL ``REGRESS`` / ``LOGISTIC``, and of level <= α under
the noise at n ∈ {100, 10^4} and ε ∈ {0.1, 1} (with power at an alternative)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.core.measures import PureDP
from dpcurator.estimators import Covers, Estimate, wald_test
from dpcurator.estimators.logistic import logistic_regression
from dpcurator.estimators.regression import linear_regression
from dpcurator.query.fit.linear import zcdp_for
from dpcurator.random import SeededRng
from tests.test_estimators_hypothesis_tests import rate_above, rate_at_most

LEVEL = 0.05
TOLERANCE = 0.03


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
MODELS = {"linear": (_linear_p, 40, 0.4), "logistic": (_logistic_p, 20, 0.4)}


@pytest.mark.statistical
@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(MODELS))
def test_type_one_error_and_power_over_n_and_epsilon(model: str) -> None:
    """H0 slope = 0 at n ∈ {100, 10^4}, ε ∈ {0.1, 1}: rejections at α = 0.05 <= α + TOLERANCE (a
    one-sided binomial test at the suite's ALPHA); power > 0.3 at the alternative at n = 10^4."""
    run, reps, slope = MODELS[model]
    gen = np.random.default_rng(9)
    total = 0
    for n in (100, 10_000):
        for eps in (0.1, 1.0):
            hits = sum(run(n, eps, 0.0, gen, 100 + i) <= LEVEL for i in range(reps))
            assert rate_at_most(hits, reps, LEVEL + TOLERANCE), (n, eps, hits)
            total += hits
    assert rate_at_most(total, 4 * reps, LEVEL + TOLERANCE), total  # pooled: more power
    for eps in (0.1, 1.0):
        power = sum(run(10_000, eps, slope, gen, 500 + i) <= LEVEL for i in range(reps))
        assert rate_above(power, reps, 0.3), (eps, power)
