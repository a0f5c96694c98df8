"""DP hypothesis tests (dpcurator.estimators.hypothesis) against the public tests: power and
the sample-size ratio at ε = 1 (issue 27 item 2).

Run ``python benchmarks/hypothesis.py`` (``--quick`` for fewer repetitions). At α = 0.05:

* **t-test** (two-sample, Welch): groups of n rows each, N(5 + dσ, σ) and N(5, σ) with σ = 1.5,
  clamped to the public bounds [0, 10] (half-width 5 = 3.3σ: bounds a data owner would declare
  without looking), Cohen's d ∈ {0.2, 0.5, 0.8}.
* **χ² goodness of fit**: n rows over 4 categories, H0 p₀ = (0.4, 0.3, 0.2, 0.1), the truth at
  Cohen's w ∈ {0.1, 0.3} from p₀.
* **χ² independence** (what SQL ``CHI2(a, b)`` runs): n rows in a 3×2 table with margins
  (0.2, 0.3, 0.5) × (0.4, 0.6), the truth at Cohen's w ∈ {0.1, 0.3} from independence (a
  contrast with zero margins).

For each effect: n_pub, the smallest n at which the public test (Welch t, Pearson χ²) has power
0.8 (exact: noncentral t and χ² laws); the power of both tests at n_pub (the public test's by
simulation on the same data); and the sample-size ratio n_DP / n_pub, where n_DP is the smallest
n on the grid n_pub × (1, 1.1, 1.25, 1.5, 1.75, 2, 2.5, 3, 4, 5, 6, 8) whose simulated DP power
reaches 0.8 (the anchor: generic DP tests need 5–6× the public test's data at ε = 1, Kazan et
al. 2023; DPrivStats reports the same range). Each power is the share of R seeded data sets
rejected (R = 400, 100 with ``--quick``; standard error ≤ 0.025), the DP p-values with M = 199
Monte Carlo draws of the noise-aware null. ``--only TEXT`` runs the rows whose test name contains
TEXT (e.g. ``--only independence``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

from dpcurator.estimators import hypothesis as ht
from dpcurator.random import SeededRng

ALPHA = 0.05
TARGET = 0.8
EPSILON = 1.0
SIMULATIONS = 199
SD, LOWER, UPPER = 1.5, 0.0, 10.0
P0 = np.array([0.4, 0.3, 0.2, 0.1])
CATEGORIES = ["a", "b", "c", "d"]
ROWS_P, COLS_P = np.array([0.2, 0.3, 0.5]), np.array([0.4, 0.6])
MULTIPLIERS = (1.0, 1.1, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)


def t_public_n(d: float) -> int:
    """Smallest n per group at which Welch's (here Student's: equal variances) t has power 0.8."""
    for n in range(4, 100_000):
        df = 2 * n - 2
        critical = stats.t.ppf(1 - ALPHA / 2, df)
        shift = d * np.sqrt(n / 2)
        power = stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift)
        if power >= TARGET:
            return n
    raise AssertionError("unreachable")


def chi_public_n(w: float) -> int:
    """Smallest n at which Pearson's χ² (3 degrees of freedom) has power 0.8."""
    critical = stats.chi2.ppf(1 - ALPHA, P0.size - 1)
    for n in range(4, 1_000_000):
        if stats.ncx2.sf(critical, P0.size - 1, n * w * w) >= TARGET:
            return n
    raise AssertionError("unreachable")


def shifted(w: float) -> np.ndarray:
    """Category probabilities at Cohen's w from P0 (a contrast scaled to the effect)."""
    contrast = np.array([1.0, -1.0, 1.0, -1.0]) * P0
    contrast -= P0 * contrast.sum()
    return np.asarray(P0 + w * contrast / np.sqrt(np.sum(contrast**2 / P0)))


def t_trial(n: int, d: float, seed: int) -> tuple[bool, bool]:
    """(DP rejects, public rejects) on one seeded data set."""
    rng = np.random.default_rng(seed)
    x = np.clip(rng.normal(5.0 + d * SD, SD, n), LOWER, UPPER)
    y = np.clip(rng.normal(5.0, SD, n), LOWER, UPPER)
    dp = ht.welch_t_test(
        x, y, lower=LOWER, upper=UPPER, epsilon=EPSILON, simulations=SIMULATIONS,
        rng=SeededRng(seed),
    )  # fmt: skip
    return dp.p_value <= ALPHA, bool(stats.ttest_ind(x, y, equal_var=False).pvalue <= ALPHA)


def chi_trial(n: int, w: float, seed: int) -> tuple[bool, bool]:
    rng = np.random.default_rng(seed)
    data = rng.choice(len(CATEGORIES), size=n, p=shifted(w))
    dp = ht.goodness_of_fit_test(
        data, range(len(CATEGORIES)), P0, epsilon=EPSILON, simulations=SIMULATIONS,
        rng=SeededRng(seed),
    )  # fmt: skip
    counts = np.bincount(data, minlength=len(CATEGORIES))
    return dp.p_value <= ALPHA, bool(stats.chisquare(counts, n * P0).pvalue <= ALPHA)


def independence_public_n(w: float) -> int:
    """Smallest n at which Pearson's χ² of independence (2 degrees of freedom) has power 0.8."""
    dof = (ROWS_P.size - 1) * (COLS_P.size - 1)
    critical = stats.chi2.ppf(1 - ALPHA, dof)
    for n in range(4, 1_000_000):
        if stats.ncx2.sf(critical, dof, n * w * w) >= TARGET:
            return n
    raise AssertionError("unreachable")


def dependent(w: float) -> np.ndarray:
    """Cell probabilities of the 3×2 table at Cohen's w from independence: the product of the
    margins plus a contrast with zero margins, scaled so that Σ c² / p₀ = w²."""
    p0 = np.outer(ROWS_P, COLS_P)
    contrast = np.outer([1.0, 1.0, -2.0], [1.0, -1.0])  # every row and column sums to 0
    return np.asarray(p0 + w * contrast / np.sqrt(np.sum(contrast**2 / p0)))


def independence_trial(n: int, w: float, seed: int) -> tuple[bool, bool]:
    rng = np.random.default_rng(seed)
    cells = rng.choice(ROWS_P.size * COLS_P.size, size=n, p=dependent(w).reshape(-1))
    rows, cols = cells // COLS_P.size, cells % COLS_P.size
    dp = ht.independence_test(
        rows, cols, range(ROWS_P.size), range(COLS_P.size), epsilon=EPSILON,
        simulations=SIMULATIONS, rng=SeededRng(seed),
    )  # fmt: skip
    table = np.bincount(cells, minlength=ROWS_P.size * COLS_P.size).reshape(ROWS_P.size, -1)
    public = stats.chi2_contingency(np.maximum(table, 0.5), correction=False).pvalue
    return dp.p_value <= ALPHA, bool(public <= ALPHA)


def power(trial: object, n: int, effect: float, repeats: int) -> tuple[float, float]:
    """(DP power, public power) over ``repeats`` seeded data sets."""
    results = [trial(n, effect, 1_000_003 * i + n) for i in range(repeats)]  # type: ignore[operator]
    dp, public = zip(*results, strict=True)
    return float(np.mean(dp)), float(np.mean(public))


def ratio(trial: object, n_public: int, effect: float, repeats: int) -> tuple[float, int]:
    """(n_DP / n_pub, n_DP): the first grid point whose DP power reaches TARGET."""
    for multiplier in MULTIPLIERS:
        n = int(np.ceil(multiplier * n_public))
        if power(trial, n, effect, repeats)[0] >= TARGET:
            return n / n_public, n
    return float("inf"), -1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 repetitions instead of 400")
    parser.add_argument("--only", default="", help="run the rows whose test name contains this")
    args = parser.parse_args()
    repeats = 100 if args.quick else 400
    rows = [("t-test (Welch)", "d", d, t_trial, t_public_n(d)) for d in (0.2, 0.5, 0.8)]
    rows += [("χ² goodness of fit", "w", w, chi_trial, chi_public_n(w)) for w in (0.1, 0.3)]
    rows += [
        ("χ² independence", "w", w, independence_trial, independence_public_n(w))
        for w in (0.1, 0.3)
    ]
    rows = [row for row in rows if args.only in row[0]]
    print(f"ε = {EPSILON}, α = {ALPHA}, target power {TARGET}, R = {repeats}, M = {SIMULATIONS}")
    print()
    print("| test | effect | n_pub | public power at n_pub | DP power at n_pub | n_DP | "
          "n_DP / n_pub | time |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for test, symbol, effect, trial, n_public in rows:
        start = time.perf_counter()
        dp, public = power(trial, n_public, effect, repeats)
        factor, n_dp = ratio(trial, n_public, effect, repeats)
        elapsed = time.perf_counter() - start
        print(
            f"| {test} | {symbol} = {effect} | {n_public} | {public:.2f} | {dp:.2f} | {n_dp} | "
            f"{factor:.2f} | {elapsed:.0f} s |",
            flush=True,
        )


if __name__ == "__main__":
    main()
