"""Null and alternative data generators for the DP hypothesis tests (shared by the tests of
``dpcurator.estimators.hypothesis`` and ``benchmarks/hypothesis.py``).

Each case draws a data set of size n (per group) with numpy's generator (test data, not privacy
noise), runs the DP test and the matching public test (scipy.stats) on it, and returns both
p-values. ``effect`` = 0 is the null; the effect sizes are Cohen's (d for means, w for tables,
h for proportions)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from dpcurator.estimators import hypothesis as ht
from dpcurator.random import SeededRng

LOWER, UPPER, SD = 0.0, 10.0, 1.5
EDGES = np.arange(1.0, 10.0)
NAN = float("nan")


def _normal(rng: np.random.Generator, mean: float, n: int, sd: float = SD) -> np.ndarray:
    return np.clip(rng.normal(mean, sd, n), LOWER, UPPER)


def _budget(amount: float, *, rho: bool) -> dict[str, float]:
    """The test's budget keyword: ``rho`` (zCDP) or ``epsilon``."""
    return {"rho": amount} if rho else {"epsilon": amount}


@dataclass(frozen=True)
class Case:
    """One test: ``run(n, effect, budget, seed, simulations, public=True, rho=False)``
    -> (DP p-value, public p-value, NaN when ``public`` is false); the budget is ε, or ρ when
    ``rho``."""

    name: str
    run: Callable[..., tuple[float, float]]


def _one_sample(
    n: int, effect: float, eps: float, seed: int, m: int, *, public: bool = True, rho: bool = False
) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    x = _normal(rng, 5.0 + effect * SD, n)
    dp = ht.one_sample_t_test(
        x,
        mean=5.0,
        lower=LOWER,
        upper=UPPER,
        **_budget(eps, rho=rho),
        simulations=m,
        rng=SeededRng(seed),
    )
    return dp.p_value, float(stats.ttest_1samp(x, 5.0).pvalue) if public else NAN


def _paired(
    n: int, effect: float, eps: float, seed: int, m: int, *, public: bool = True, rho: bool = False
) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    x = _normal(rng, 5.0, n)
    y = np.clip(x + rng.normal(-effect * SD, SD, n), LOWER, UPPER)
    dp = ht.paired_t_test(
        x, y, lower=LOWER, upper=UPPER, max_difference=5.0, **_budget(eps, rho=rho), simulations=m,
        rng=SeededRng(seed),
    )  # fmt: skip
    return dp.p_value, float(stats.ttest_rel(x, y).pvalue) if public else NAN


def _welch(
    n: int, effect: float, eps: float, seed: int, m: int, *, public: bool = True, rho: bool = False
) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    x, y = _normal(rng, 5.0 + effect * SD, n), _normal(rng, 5.0, n, 1.2 * SD)
    dp = ht.welch_t_test(
        x, y, lower=LOWER, upper=UPPER, **_budget(eps, rho=rho), simulations=m, rng=SeededRng(seed)
    )
    return dp.p_value, float(stats.ttest_ind(x, y, equal_var=False).pvalue) if public else NAN


def _anova(
    n: int, effect: float, eps: float, seed: int, m: int, *, public: bool = True, rho: bool = False
) -> tuple[float, float]:
    """Three groups; effect is Cohen's f (means at −f√(3/2)σ, 0, +f√(3/2)σ)."""
    rng = np.random.default_rng(seed)
    shift = effect * SD * np.sqrt(1.5)
    groups = [_normal(rng, 5.0 + s, n) for s in (-shift, 0.0, shift)]
    dp = ht.one_way_anova(
        *groups,
        lower=LOWER,
        upper=UPPER,
        **_budget(eps, rho=rho),
        simulations=m,
        rng=SeededRng(seed),
    )
    return dp.p_value, float(stats.f_oneway(*groups).pvalue) if public else NAN


def _proportions(
    n: int, effect: float, eps: float, seed: int, m: int, *, public: bool = True, rho: bool = False
) -> tuple[float, float]:
    """Rates 0.3 against the rate at Cohen's h = effect."""
    rng = np.random.default_rng(seed)
    other = float(np.sin(np.arcsin(np.sqrt(0.3)) + effect / 2) ** 2)
    x, y = rng.random(n) < other, rng.random(n) < 0.3
    dp = ht.two_proportion_z_test(x, y, **_budget(eps, rho=rho), simulations=m, rng=SeededRng(seed))
    table = np.array([[x.sum(), n - x.sum()], [y.sum(), n - y.sum()]])
    return dp.p_value, float(
        stats.chi2_contingency(table, correction=False).pvalue
    ) if public else NAN


P0 = np.array([0.4, 0.3, 0.2, 0.1])
CATEGORIES = ["a", "b", "c", "d"]


def _shifted(p: np.ndarray, w: float) -> np.ndarray:
    """Probabilities at Cohen's w from ``p`` (a contrast scaled to the effect)."""
    contrast = np.array([1.0, -1.0, 1.0, -1.0])[: p.size] * p
    contrast -= p * contrast.sum() / p.sum()
    size = np.sqrt(np.sum(contrast**2 / p))
    return np.asarray(p + w * contrast / size)


def _goodness(
    n: int, effect: float, eps: float, seed: int, m: int, *, public: bool = True, rho: bool = False
) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    truth = _shifted(P0, effect)
    data = rng.choice(CATEGORIES, size=n, p=truth / truth.sum())
    dp = ht.goodness_of_fit_test(
        data, CATEGORIES, P0, **_budget(eps, rho=rho), simulations=m, rng=SeededRng(seed)
    )
    counts = np.array([(data == c).sum() for c in CATEGORIES])
    return dp.p_value, float(stats.chisquare(counts, n * P0).pvalue) if public else NAN


def _independence(
    n: int, effect: float, eps: float, seed: int, m: int, *, public: bool = True, rho: bool = False
) -> tuple[float, float]:
    """A 2×2 table with margins 0.5/0.4 and Cohen's w = effect (φ for 2×2)."""
    rng = np.random.default_rng(seed)
    pr, pc = 0.5, 0.4
    cov = effect * np.sqrt(pr * (1 - pr) * pc * (1 - pc))
    cells = np.array([pr * pc + cov, pr * (1 - pc) - cov, (1 - pr) * pc - cov])
    cells = np.append(cells, 1 - cells.sum())
    drawn = rng.choice(4, size=n, p=cells)
    rows, cols = drawn // 2, drawn % 2
    dp = ht.independence_test(
        rows, cols, [0, 1], [0, 1], **_budget(eps, rho=rho), simulations=m, rng=SeededRng(seed)
    )
    table = np.bincount(drawn, minlength=4).reshape(2, 2)
    return dp.p_value, float(
        stats.chi2_contingency(table, correction=False).pvalue
    ) if public else NAN


def _ks(
    n: int, effect: float, eps: float, seed: int, m: int, *, public: bool = True, rho: bool = False
) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    x, y = _normal(rng, 5.0 + effect * SD, n), _normal(rng, 5.0, n)
    dp = ht.ks_test(x, y, edges=EDGES, **_budget(eps, rho=rho), simulations=m, rng=SeededRng(seed))
    return dp.p_value, float(stats.ks_2samp(x, y).pvalue) if public else NAN


CASES = {
    case.name: case
    for case in [
        Case("one_sample_t_test", _one_sample),
        Case("paired_t_test", _paired),
        Case("welch_t_test", _welch),
        Case("one_way_anova", _anova),
        Case("two_proportion_z_test", _proportions),
        Case("goodness_of_fit_test", _goodness),
        Case("independence_test", _independence),
        Case("ks_test", _ks),
    ]
}
