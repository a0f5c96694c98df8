"""DP chi-square tests: goodness of fit and independence over public categories.

The release is the histogram (or the r×c contingency table) of the rows over PUBLIC categories with
discrete Laplace noise at the whole ε (or Gaussian at ρ, :mod:`.core`): one row falls in one cell,
so the L1 sensitivity is ``count_l1(cells)`` of the unit given (one row added or removed by default:
1). Rows outside the categories (and missing values) fall in no cell. The statistic is Pearson's
with the noise variance v added to each cell's denominator, Σ (o − e)² / (max(e, 1) + v): where the
noise dominates a cell it weighs the cell less, which is where the power of the plain statistic goes
(Gaboardi, Lim, Rogers & Vadhan 2016; Rogers & Kifer 2017 project the noise out instead). The null
distribution is simulated: goodness of fit — multinomial(ñ, p₀) plus fresh noise; independence — a
parametric bootstrap at the product of the noisy table's normalised, non-negative margins plus fresh
noise (Gaboardi et al. 2016, Ferrando, Wang & Sheldon 2022).
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
    check_categories,
    codes,
    multinomial,
    noise_draws,
    p_value,
    release_counts,
    setup,
)
from dpcurator.query.privacy_unit import PrivacyUnit
from dpcurator.random import Rng

MONTE_CARLO = "Monte Carlo null of sampling and noise (Gaboardi et al. 2016)"


def _statistic(table: FloatArray, expected: FloatArray, noise: Noise, dims: int) -> FloatArray:
    """Pearson's statistic with the noise variance in each denominator (last ``dims`` axes)."""
    axes = tuple(range(table.ndim - dims, table.ndim))
    spread = np.maximum(expected, 1.0) + noise.variance
    return np.asarray(np.sum((table - expected) ** 2 / spread, axis=axes))


def _total(table: FloatArray, dims: int) -> FloatArray:
    """The noisy number of rows of each table (the last ``dims`` axes summed), at least 1."""
    axes = tuple(range(table.ndim - dims, table.ndim))
    return np.asarray(np.maximum(table.sum(axis=axes), 1.0))


def goodness_of_fit_from_table(
    table: FloatArray, noise: Noise, p0: FloatArray, plan: Setup
) -> tuple[float, float]:
    """(χ², p) of H0: cell probabilities ``p0``, from a released histogram."""
    statistic = float(_statistic(table, _total(table, 1) * p0, noise, 1))
    drawn = multinomial(plan.rng, int(np.rint(_total(table, 1))), p0, plan.simulations)
    simulated = drawn + noise_draws(plan.rng, noise, drawn.shape)
    null = _statistic(simulated, _total(simulated, 1)[:, None] * p0, noise, 1)
    return statistic, p_value(statistic, null)


def goodness_of_fit_test(
    data: object,
    categories: object,
    probabilities: object,
    *,
    epsilon: float | None = None,
    rho: float | None = None,
    unit: PrivacyUnit | None = None,
    simulations: int = SIMULATIONS,
    rng: Rng | None = None,
) -> HypothesisTestResult:
    """ε-DP chi-square goodness-of-fit test of H0: P(row = categories[i]) = probabilities[i]
    (``categories`` and ``probabilities`` public; module docstring)."""
    owner = "goodness_of_fit_test"
    cats = check_categories(owner, "categories", categories)
    p0 = np.asarray(probabilities, dtype=np.float64).reshape(-1)
    if p0.size != len(cats) or not (np.all(np.isfinite(p0)) and np.all(p0 > 0)):
        raise fail(owner, "probabilities", f"{len(cats)} finite values > 0", probabilities)
    p0 = p0 / p0.sum()
    plan = setup(owner, epsilon, rho, unit, simulations, rng)
    coded = codes(owner, ("data", "categories"), data, cats)
    table, noise = release_counts(plan, np.bincount(coded[coded >= 0], minlength=len(cats)))
    return goodness_of_fit_result(table, noise, p0, plan)


def goodness_of_fit_result(
    table: FloatArray, noise: Noise, p0: FloatArray, plan: Setup
) -> HypothesisTestResult:
    """The goodness-of-fit result from a released histogram (post-processing:
    :func:`goodness_of_fit_test` and the query layer's ``CHI2``)."""
    statistic, p = goodness_of_fit_from_table(table, noise, p0, plan)
    return HypothesisTestResult(
        "chi-square goodness of fit", statistic, p, plan.cost, MONTE_CARLO,
        "the category probabilities are the given ones",
        {"counts": as_tuple(table)}, {"counts": noise.scale}, None, plan.simulations,
    )  # fmt: skip


def _independence_expected(tables: FloatArray) -> FloatArray:
    """ñ·π_row·π_col from each table's margins (clipped at 0; uniform if a margin is all 0)."""
    margins = []
    for axis in (-1, -2):
        margin = np.maximum(tables.sum(axis=axis), 0.0)
        margin = np.where(margin.sum(-1, keepdims=True) > 0, margin, 1.0)
        margins.append(margin / margin.sum(-1, keepdims=True))
    pi_row, pi_col = margins
    total = _total(tables, 2)
    return np.asarray(total[..., None, None] * pi_row[..., :, None] * pi_col[..., None, :])


def independence_from_table(table: FloatArray, noise: Noise, plan: Setup) -> tuple[float, float]:
    """(χ², p) of H0: rows ⊥ columns, from a released r×c table."""
    r, c = table.shape
    expected = _independence_expected(table)
    statistic = float(_statistic(table, expected, noise, 2))
    cells = expected.reshape(-1) / expected.sum()
    drawn = multinomial(plan.rng, int(np.rint(_total(table, 2))), cells, plan.simulations)
    simulated = (drawn + noise_draws(plan.rng, noise, drawn.shape)).reshape(-1, r, c)
    null = _statistic(simulated, _independence_expected(simulated), noise, 2)
    return statistic, p_value(statistic, null)


def independence_test(
    rows: object,
    columns: object,
    row_categories: object,
    column_categories: object,
    *,
    epsilon: float | None = None,
    rho: float | None = None,
    unit: PrivacyUnit | None = None,
    simulations: int = SIMULATIONS,
    rng: Rng | None = None,
) -> HypothesisTestResult:
    """ε-DP chi-square test of independence of two categorical columns (public categories;
    module docstring)."""
    owner = "independence_test"
    row_cats = check_categories(owner, "row_categories", row_categories)
    col_cats = check_categories(owner, "column_categories", column_categories)
    plan = setup(owner, epsilon, rho, unit, simulations, rng)
    row_codes = codes(owner, ("rows", "row_categories"), rows, row_cats)
    col_codes = codes(owner, ("columns", "column_categories"), columns, col_cats)
    if row_codes.size != col_codes.size:
        raise fail(owner, "columns", f"one value per row ({row_codes.size})", col_codes.size)
    r, c = len(row_cats), len(col_cats)
    inside = (row_codes >= 0) & (col_codes >= 0)
    counts = np.bincount(row_codes[inside] * c + col_codes[inside], minlength=r * c)
    table, noise = release_counts(plan, counts.reshape(r, c))
    return independence_result(table, noise, plan)


def independence_result(table: FloatArray, noise: Noise, plan: Setup) -> HypothesisTestResult:
    """The independence test's result from a released r×c table (post-processing:
    :func:`independence_test` and the query layer's ``CHI2``)."""
    statistic, p = independence_from_table(table, noise, plan)
    return HypothesisTestResult(
        "chi-square independence", statistic, p, plan.cost,
        "parametric bootstrap at the noisy margins (Gaboardi et al. 2016)",
        "the row and column categories are independent",
        {"table (row-major)": as_tuple(table)}, {"table (row-major)": noise.scale}, None,
        plan.simulations,
    )  # fmt: skip


__all__ = [
    "goodness_of_fit_from_table",
    "goodness_of_fit_result",
    "goodness_of_fit_test",
    "independence_from_table",
    "independence_result",
    "independence_test",
]
