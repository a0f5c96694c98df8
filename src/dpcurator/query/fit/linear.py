"""Linear regression by sufficient statistics the ENGINE computes: the plan of
``Session.fit("linear_regression")`` and of ``REGRESS`` (:mod:`dpcurator.query.fit.core`).

Each column is clamped to its public bounds (NULL -> its fill) and rescaled to [-1, 1] inside the
plan; the Gram matrix Σ z zᵀ of z = (1, u, v) is one ungrouped :class:`~dpcurator.query.ir.
AggregatePlan` of a COUNT and one fixed-point SUM per upper-triangle entry, so DuckDB or Spark add
up the products and only (d + 2)(d + 3)/2 numbers leave the engine.

**Privacy guarantee**: AdaSSP (Wang 2018) on those statistics is ρ-zCDP: each entry a row adds
lies in [-1, 1] (the aggregate clamps it), which is what the sensitivities of
:func:`~dpcurator.estimators.regression.regression_from_gram` need, multiplied by the rows in
which neighbours differ (the privacy unit's ``rows_changed``). The ρ is the largest whose (ε, δ)
conversion (Canonne, Kamath & Steinke 2020) fits the requested (ε, δ) (:func:`zcdp_for`), so the
fit is (ε, δ)-DP, which is what is charged.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from typing import Final

import numpy as np

from dpcurator._validation import check_probability, fail
from dpcurator.core.measures import ZCDP, ApproxDP
from dpcurator.estimators.regression import Scaling, regression_from_gram
from dpcurator.estimators.release import Estimate
from dpcurator.query import ir
from dpcurator.query.fit.columns import OWNER, numeric_columns, scaled_column
from dpcurator.query.fit.rows import FitPlan
from dpcurator.query.schema import Metadata
from dpcurator.random import Rng

#: Fixed-point grid 2^k of the Gram entries (each in [-1, 1]): rounding moves an entry by at
#: most 2^-31 per row, far below the noise, and 2^63 grid units hold 8·10^9 rows.
GRAM_GRID_EXPONENT: Final = -30
#: Share of ρ paying for AdaSSP's ridge (the regression library's default).
EIGEN_SHARE: Final = Fraction(1, 10)


def zcdp_for(epsilon: Fraction, delta: float) -> Fraction:
    """The largest ρ (to 2^-40 relative) whose (ε, δ) conversion is at most (ε, δ)."""
    low, high = 0.0, float(epsilon)  # ρ <= ε always: ε(ρ) >= ρ
    for _ in range(60):
        middle = (low + high) / 2
        if ZCDP(middle).to_approx(delta).epsilon <= epsilon:
            low = middle
        else:
            high = middle
    return Fraction(low)


def plan_linear(
    metadata: Metadata,
    y: str,
    *,
    x: tuple[str, ...],
    epsilon: Fraction,
    delta: float,
    fit_intercept: bool,
) -> FitPlan:
    """The plan of ``linear_regression``: AdaSSP on the Gram matrix the engine sums (see the
    module docstring); refusals (no feature, δ outside (0, 1), ε too small for a positive ρ)
    are free."""
    if not x:
        raise fail(OWNER, "x", "at least one feature column", list(x))
    check_probability(OWNER, "delta", delta, open_low=True, open_high=True)
    metas = numeric_columns(metadata, (*x, y))
    scaling = Scaling.of(
        len(x),
        ([m.lower for m in metas[:-1]], [m.upper for m in metas[:-1]]),
        (metas[-1].lower, metas[-1].upper),
        fit_intercept,
        OWNER,
    )
    rho = zcdp_for(epsilon, delta)
    if rho <= 0:
        raise fail(OWNER, "epsilon", f"large enough for a positive zCDP ρ at δ = {delta}", epsilon)
    x_mid, x_half, y_mid, y_half = scaling.centres()
    mids, halves = [*x_mid.tolist(), y_mid], [*x_half.tolist(), y_half]
    scaled = [scaled_column(m, mid, half) for m, mid, half in zip(metas, mids, halves, strict=True)]
    z: list[ir.Expr | None] = [None, *scaled]  # None: the constant 1 of the intercept
    aggregates = [ir.ExactAggregate("n", "count")]
    for i in range(len(z)):
        for j in range(max(i, 1), len(z)):
            left, right = z[i], z[j]
            assert right is not None  # j >= 1
            value = right if left is None else ir.BinOp("*", left, right)
            aggregates.append(
                ir.ExactAggregate(f"g_{i}_{j}", "sum", value, -1.0, 1.0, 0.0, GRAM_GRID_EXPONENT)
            )
    bound = replace(metadata.contribution_bound, max_groups=1)
    exact = ir.AggregatePlan(metadata.table, tuple(aggregates), bound=bound)
    rows = metadata.unit.rows_changed
    cost = ApproxDP(epsilon, delta)

    def finish(result: ir.ExactResult, alpha: float, rng: Rng) -> Estimate:
        values = result.groups.get((), {})
        size = len(z)
        gram = np.zeros((size, size))
        gram[0, 0] = float(values.get("n", 0))  # type: ignore[arg-type]
        unit = math.ldexp(1.0, GRAM_GRID_EXPONENT)
        for i in range(size):
            for j in range(max(i, 1), size):
                gram[i, j] = gram[j, i] = unit * float(values.get(f"g_{i}_{j}", 0))  # type: ignore[arg-type]
        release = regression_from_gram(
            gram, scaling, rho=rho, eigen_share=EIGEN_SHARE, alpha=alpha, rng=rng,
            rows_per_person=rows,
        )  # fmt: skip
        return replace(release, cost=cost)

    terms = ("intercept", *x) if fit_intercept else x
    statistic, sensitivity = "the Gram matrix of the scaled rows", float(rows * len(z))
    return FitPlan("linear_regression", (*x, y), cost, exact, finish, terms, statistic, sensitivity)
