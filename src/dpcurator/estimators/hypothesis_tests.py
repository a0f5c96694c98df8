"""DP hypothesis tests whose p-values are valid under the privacy noise.

A classical test applied to noisy statistics is not valid: the noise adds variance the reference
distribution ignores, so the type-I error exceeds its nominal level (more so at small n or ε).
The tests here release the statistics once with exact noise and compute the p-value by Monte
Carlo from a null distribution that simulates BOTH the sampling of the data and the privacy noise
of the released scale (Gaboardi, Lim, Rogers & Vadhan 2016, "Differentially private chi-squared
hypothesis testing"; Rogers & Kifer 2017; the parametric bootstrap of Ferrando, Wang & Sheldon
2022 for the difference of means). The p-value is (1 + #{T* >= T}) / (1 + M) over M simulated
statistics T*, the usual Monte Carlo p-value.

**Privacy guarantee**: ε-DP for add/remove of one row (one row per person); only the noisy
statistics touch the data, and the statistic, the simulated null and the p-value are
post-processing of them and of public inputs (categories, bounds, probabilities, M).

* :func:`goodness_of_fit_test` and :func:`independence_test` release the histogram (or the r×c
  contingency table) of the rows over PUBLIC categories with discrete Laplace noise of scale 1/ε
  per cell: one row changes one cell by 1 (L1 sensitivity 1). Rows outside the categories (and
  missing values) fall in no cell. The null is H0: p = p0 (goodness of fit), with the noisy total
  ñ as the number of rows; or H0: row ⊥ column (independence), with the cell probabilities the
  product of the noisy table's normalised, non-negative margins (a parametric bootstrap under H0).
  The statistic is Pearson's chi-square of the noisy table (expected counts floored at 1).
* :func:`difference_of_means_test` releases, per group, (n, Σu, Σu²) of the values clamped to
  public [lower, upper] and rescaled to u ∈ [-1, 1] (NaN -> the midpoint), with discrete Laplace
  noise: one row changes one group's three statistics by at most 1 each (L1 sensitivity 3). The
  statistic is Welch's t with the noise variance added to the denominator; the null simulates the
  group sums as normal at the pooled mean and each group's variance, plus fresh noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcurator._validation import check_int, check_positive, fail
from dpcurator.core.measures import PureDP
from dpcurator.core.numbers import to_fraction
from dpcurator.estimators.release import (
    FloatArray,
    as_float_array,
    check_bounds,
    clamp_fill,
    noisy,
    standard_normals,
)
from dpcurator.mechanisms import Laplace
from dpcurator.random import Rng, default_rng

IntArray = npt.NDArray[np.int64]

#: Default number of Monte Carlo draws of the null distribution.
SIMULATIONS = 999

#: Upper limit on rows × draws simulated at once (memory of one chunk).
_CHUNK_DRAWS = 2_000_000


@dataclass(frozen=True)
class HypothesisTestResult:
    """The outcome of a DP test.

    Attributes:
        statistic: the test statistic computed from the noisy release.
        p_value: the Monte Carlo p-value under the noise-aware null distribution.
        cost: the privacy cost of the release.
        method: the test and its paper.
        released: the noisy statistics the test used (a DP release, safe to publish): the noisy
            cells for the table tests; (n, mean, variance) of each group for the means test.
        simulations: the number M of draws of the null distribution.
    """

    statistic: float
    p_value: float
    cost: PureDP
    method: str
    released: FloatArray
    simulations: int

    def rejects(self, alpha: float) -> bool:
        """True when the p-value is at most ``alpha`` (the test's declared level)."""
        return self.p_value <= alpha


def _codes(
    owner: str, names: tuple[str, str], data: object, categories: object
) -> tuple[IntArray, int]:
    """Each row's index in the public ``categories`` (-1 outside them), and their number.

    ``names`` are the parameter names of the data and of its categories (for errors).
    """
    name, categories_name = names
    cats = list(categories)  # type: ignore[call-overload]
    if len(cats) < 2 or len(set(cats)) != len(cats):
        raise fail(owner, categories_name, "at least 2 distinct public values", categories)
    raw = data.to_numpy() if hasattr(data, "to_numpy") else np.asarray(data, dtype=object)
    values = np.asarray(raw, dtype=object)
    if values.ndim != 1:
        raise fail(owner, name, "1-dimensional", values.shape)
    codes = pd.Index(cats, dtype=object).get_indexer(values).astype(np.int64)
    return codes, len(cats)


def _uniforms(rng: Rng, size: int) -> FloatArray:
    """Uniform floats on [0, 1) with 53 random bits (for simulations, not for privacy noise)."""
    return (rng.uint64(size) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def multinomial_draws(rng: Rng, n: int, probabilities: FloatArray, draws: int) -> IntArray:
    """``draws`` × k exact multinomial(n, p) counts, by n categorical draws each (O(n·draws))."""
    k = probabilities.size
    cumulative = np.cumsum(probabilities / probabilities.sum())
    out = np.zeros((draws, k), np.int64)
    per_chunk = max(1, _CHUNK_DRAWS // max(n, 1))
    for start in range(0, draws, per_chunk):
        size = min(per_chunk, draws - start)
        cells = np.minimum(np.searchsorted(cumulative, _uniforms(rng, n * size), "right"), k - 1)
        rows = np.repeat(np.arange(size), n)
        out[start : start + size] = np.bincount(rows * k + cells, minlength=size * k).reshape(
            size, k
        )
    return out


def _p_value(observed: float, simulated: FloatArray) -> float:
    return float((1 + np.count_nonzero(simulated >= observed)) / (1 + simulated.size))


def _chi_square(table: FloatArray, expected: FloatArray, dims: int) -> FloatArray:
    """Pearson's statistic over the last ``dims`` axes (expected counts floored at 1: finite)."""
    axes = tuple(range(table.ndim - dims, table.ndim))
    return np.asarray(np.sum((table - expected) ** 2 / np.maximum(expected, 1.0), axis=axes))


def _setup(owner: str, epsilon: float, simulations: int) -> tuple[Laplace, PureDP, int]:
    eps = to_fraction(check_positive(owner, "epsilon", epsilon))
    draws = check_int(owner, "simulations", simulations, minimum=1)
    return Laplace.for_epsilon(eps, 1), PureDP(eps), draws


def _total(table: FloatArray, dims: int) -> FloatArray:
    """The noisy number of rows of each table (the last ``dims`` axes summed), at least 1."""
    return np.asarray(np.maximum(table.sum(axis=tuple(range(table.ndim - dims, table.ndim))), 1.0))


def goodness_of_fit_test(
    data: object,
    categories: object,
    probabilities: object,
    *,
    epsilon: float,
    simulations: int = SIMULATIONS,
    rng: Rng | None = None,
) -> HypothesisTestResult:
    """ε-DP chi-square goodness-of-fit test of H0: P(row = categories[i]) = probabilities[i].

    ``data`` is a column (numpy, pandas or Polars); ``categories`` and ``probabilities`` are
    public. The p-value is valid under the noise (module docstring; Gaboardi et al. 2016).
    """
    owner = "goodness_of_fit_test"
    codes, k = _codes(owner, ("data", "categories"), data, categories)
    p0 = as_float_array(owner, "probabilities", probabilities, ndim=1)
    if p0.size != k or not (np.all(np.isfinite(p0)) and np.all(p0 > 0)):
        raise fail(owner, "probabilities", f"{k} finite values > 0", probabilities)
    p0 = p0 / p0.sum()
    mech, cost, draws = _setup(owner, epsilon, simulations)
    source = rng or default_rng()
    counts = np.bincount(codes[codes >= 0], minlength=k)
    table = mech.release_integers(counts, source).astype(np.float64)
    statistic = float(_chi_square(table, _total(table, 1) * p0, 1))
    rows = int(_total(table, 1))
    drawn = multinomial_draws(source, rows, p0, draws)
    noise = mech.release_integers(np.zeros((draws, k), np.int64), source)
    simulated = (drawn + noise).astype(np.float64)
    null = _chi_square(simulated, _total(simulated, 1)[:, None] * p0, 1)
    return HypothesisTestResult(
        statistic, _p_value(statistic, null), cost,
        "DP chi-square goodness of fit, Monte Carlo null (Gaboardi et al. 2016)", table, draws,
    )  # fmt: skip


def _independence_expected(tables: FloatArray) -> FloatArray:
    """ñ·π_row·π_col from each table's margins (clipped at 0; uniform if a margin is all 0)."""
    margins = []
    for axis in (-1, -2):
        margin = np.maximum(tables.sum(axis=axis), 0.0)
        margin = np.where(margin.sum(-1, keepdims=True) > 0, margin, 1.0)
        margins.append(margin / margin.sum(-1, keepdims=True))
    pi_row, pi_col = margins
    return np.asarray(
        _total(tables, 2)[..., None, None] * pi_row[..., :, None] * pi_col[..., None, :]
    )


def independence_test(
    rows: object,
    columns: object,
    row_categories: object,
    column_categories: object,
    *,
    epsilon: float,
    simulations: int = SIMULATIONS,
    rng: Rng | None = None,
) -> HypothesisTestResult:
    """ε-DP chi-square test of independence of two categorical columns (public categories).

    The released contingency table is noisy; the null distribution is a parametric bootstrap
    under independence at the noisy margins, with fresh noise (Gaboardi et al. 2016, Rogers &
    Kifer 2017), so the p-value accounts for the noise (module docstring).
    """
    owner = "independence_test"
    row_codes, r = _codes(owner, ("rows", "row_categories"), rows, row_categories)
    col_codes, c = _codes(owner, ("columns", "column_categories"), columns, column_categories)
    if row_codes.size != col_codes.size:
        raise fail(owner, "columns", f"one value per row ({row_codes.size})", col_codes.size)
    mech, cost, draws = _setup(owner, epsilon, simulations)
    source = rng or default_rng()
    inside = (row_codes >= 0) & (col_codes >= 0)
    counts = np.bincount(row_codes[inside] * c + col_codes[inside], minlength=r * c)
    table = mech.release_integers(counts.reshape(r, c), source).astype(np.float64)
    expected = _independence_expected(table)
    statistic = float(_chi_square(table, expected, 2))
    cells = expected.reshape(-1) / expected.sum()
    simulated = multinomial_draws(source, int(_total(table, 2)), cells, draws)
    simulated = simulated + mech.release_integers(np.zeros((draws, r * c), np.int64), source)
    tables = simulated.astype(np.float64).reshape(draws, r, c)
    null = _chi_square(tables, _independence_expected(tables), 2)
    return HypothesisTestResult(
        statistic, _p_value(statistic, null), cost,
        "DP chi-square independence test, parametric bootstrap null (Gaboardi et al. 2016)",
        table, draws,
    )  # fmt: skip


def _welch(stats: FloatArray, noise_var: float) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(t, mean, variance) per group from noisy (n, Σu, Σu²) rows of shape (..., 2, 3).

    The noise of the group mean, Var(Σu)/n² + mean²·Var(n)/n² (first order), joins the
    sampling variance in the denominator.
    """
    n = np.maximum(stats[..., 0], 2.0)
    mean = np.clip(stats[..., 1] / n, -1.0, 1.0)
    var = np.clip(stats[..., 2] / n - mean**2, 0.0, 1.0)
    spread = var / n + noise_var * (1 + mean**2) / n**2
    t = (mean[..., 0] - mean[..., 1]) / np.sqrt(spread[..., 0] + spread[..., 1])
    return np.asarray(t, np.float64), mean, var


def difference_of_means_test(
    first: object,
    second: object,
    *,
    epsilon: float,
    lower: float,
    upper: float,
    simulations: int = SIMULATIONS,
    rng: Rng | None = None,
) -> HypothesisTestResult:
    """ε-DP two-sided test of H0: equal means of two samples of values in public [lower, upper].

    Values are clamped to the bounds (NaN -> their midpoint); the statistic is Welch's t with the
    noise variance included and the p-value comes from a parametric bootstrap of sampling and
    noise (module docstring; Ferrando, Wang & Sheldon 2022). ``released`` holds the noisy
    (n, mean, variance) of each group in data units.
    """
    owner = "difference_of_means_test"
    low, high = check_bounds(owner, lower, upper)
    eps = to_fraction(check_positive(owner, "epsilon", epsilon))
    draws = check_int(owner, "simulations", simulations, minimum=1)
    mid, half = (low + high) / 2, (high - low) / 2
    exact = []
    for name, sample in (("first", first), ("second", second)):
        u = (clamp_fill(as_float_array(owner, name, sample, ndim=1), low, high, mid) - mid) / half
        exact.append([float(u.size), float(u.sum()), float((u * u).sum())])
    mech = Laplace.for_epsilon_floats(eps, 3, 6)
    source = rng or default_rng()
    stats = noisy(mech, mech.scale, np.array(exact), source).reshape(2, 3)
    noise_var = 2 * float(mech.scale) ** 2
    t, mean, var = _welch(stats, noise_var)
    n = np.maximum(np.rint(stats[:, 0]), 2.0)
    pooled = float(np.clip(np.sum(mean * n) / n.sum(), -1.0, 1.0))
    sums = n * pooled + np.sqrt(n * var) * standard_normals(source, 2 * draws).reshape(draws, 2)
    squares = np.broadcast_to(n * (var + pooled**2), (draws, 2))
    simulated = np.stack([np.broadcast_to(n, (draws, 2)), sums, squares], axis=-1)
    simulated = simulated + noisy(mech, mech.scale, np.zeros(draws * 6), source).reshape(
        draws, 2, 3
    )
    null, _, _ = _welch(simulated, noise_var)
    released = np.column_stack([stats[:, 0], mid + half * mean, half**2 * var]).reshape(-1)
    return HypothesisTestResult(
        float(t), _p_value(abs(float(t)), np.abs(null)), PureDP(eps),
        "DP difference of means (Welch t with noise), parametric bootstrap null", released, draws,
    )  # fmt: skip


__all__ = [
    "SIMULATIONS",
    "HypothesisTestResult",
    "difference_of_means_test",
    "goodness_of_fit_test",
    "independence_test",
    "multinomial_draws",
]
