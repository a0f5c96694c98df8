"""Clipping bias reports: a DP share of the rows clamping changed, as a field of the release."""

from __future__ import annotations

import numpy as np
import pytest

from dpcurator.core.measures import ZCDP, PureDP
from dpcurator.estimators import dp_mle_sufficient, linear_regression, logistic_regression
from dpcurator.random import SeededRng

#: Share of N(0, 2²) beyond ±1 on each side.
SIDE = 0.3085


def test_mean_estimator_reports_heavy_clipping() -> None:
    x = np.random.default_rng(1).normal(0, 2, 20_000)
    out = dp_mle_sufficient(
        "gaussian", x, epsilon=1.0, lower=-1, upper=1, clipping_share=0.2, rng=SeededRng(1)
    )
    report = out.clipping
    assert report is not None
    assert report.below == pytest.approx(SIDE, abs=0.01)
    assert report.above == pytest.approx(SIDE, abs=0.01)
    assert report.below <= report.below_high < SIDE + 0.02
    assert report.flagged()
    down, up = report.mean_shift(1.0)
    assert down >= SIDE
    assert up >= SIDE
    assert out.cost == PureDP(1)  # the report's share is inside the budget


def test_no_clipping_is_not_flagged_and_the_report_is_opt_in() -> None:
    x = np.random.default_rng(2).uniform(-0.9, 0.9, 20_000)
    out = dp_mle_sufficient(
        "gaussian", x, epsilon=1.0, lower=-1, upper=1, clipping_share=0.2, rng=SeededRng(2)
    )
    assert out.clipping is not None
    assert not out.clipping.flagged(0.01)
    assert dp_mle_sufficient("gaussian", x, epsilon=1.0, lower=-1, upper=1).clipping is None


def test_regressions_report_clamped_rows() -> None:
    gen = np.random.default_rng(3)
    X = gen.normal(0, 2, (20_000, 2))
    y = X[:, 0] + gen.normal(0, 0.1, 20_000)
    linear = linear_regression(
        X, y, rho=0.5, x_lower=-1, x_upper=1, y_lower=-50, y_upper=50, clipping_share=0.2,
        rng=SeededRng(3),
    )  # fmt: skip
    either = 1 - (1 - SIDE) ** 2  # a row is flagged below when any of its 2 columns is
    assert linear.clipping is not None
    assert linear.clipping.below == pytest.approx(either, abs=0.02)
    assert linear.cost == ZCDP(0.5)
    logistic = logistic_regression(
        X, (y > 0).astype(float), epsilon=1.0, x_lower=-1, x_upper=1, coef_lower=-5,
        coef_upper=5, clipping_share=0.2, rng=SeededRng(4),
    )  # fmt: skip
    assert logistic.clipping is not None
    assert logistic.clipping.above == pytest.approx(either, abs=0.02)
