"""Efficiency of the DP MLE and of DP linear regression, and the Longley certified check.

Run ``python benchmarks/estimators.py`` (``--quick`` for n <= 10^5 and fewer repetitions).

* **Efficiency** (Dwork & Smith 2009, Theorem 9): for each n in 10^3..10^6 and ε in {0.1, 1},
  the mean squared error of the DP estimate over repeated simulated data sets, divided by the
  mean squared error of the non-private estimate on the same data sets (statsmodels' OLS / the
  closed-form MLE; numpy's least squares when statsmodels is not installed, which computes the
  same OLS). The ratio should fall towards 1 as n grows. Rows: DP MLE of a Gaussian mean (block
  bias-corrected sample-and-aggregate, and noisy sufficient statistics), DP MLE of a Poisson rate
  (sample-and-aggregate), and the slope of an AdaSSP linear regression at ρ = ε²/2 (the zCDP
  level implied by ε-DP).
* **Longley** (NIST StRD): digits of agreement (the log relative error, NIST's LRE) of the
  coefficients with the certified values, for the exact core (the same solver on noise-free
  sufficient statistics) and for DP releases at large ρ. A float release is on a grid 2^-30 of
  its noise scale with 2^52 steps, so a statistic can only be about 2^21 noise scales large: the
  largest ρ is limited by n, and so is the DP release's precision.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd

from dpcurator.estimators import dp_mle, dp_mle_sufficient, linear_regression
from dpcurator.estimators.regression import Scaling, fit_from_gram
from dpcurator.random import SeededRng

try:
    import statsmodels.api as sm
except ImportError:  # the same OLS by numpy
    sm = None

LONGLEY_CERTIFIED = np.array([
    -3482258.634595818, 15.06187227137329, -0.03581917929259102, -2.020229803816825,
    -1.033226867173592, -0.05110410565358071, 1829.151464613552,
])  # fmt: skip

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "statsmodels_builtin"


def ols(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-private OLS with an intercept (statsmodels when available)."""
    design = np.column_stack([np.ones(len(y)), X])
    if sm is not None:
        return np.asarray(sm.OLS(y, design).fit().params)
    return np.linalg.lstsq(design, y, rcond=None)[0]


def efficiency_rows(sizes: list[int], epsilons: list[float], reps: int) -> list[str]:
    gen, rng = np.random.default_rng(2024), SeededRng(2024)
    rows = []
    for n in sizes:
        for eps in epsilons:
            errors: dict[str, list[tuple[float, float]]] = {}
            runs = max(3, reps if n < 10**6 else reps // 4)
            for _ in range(runs):
                x = gen.normal(1.0, 2.0, n)
                plain = float(x.mean())
                blocks = dp_mle(
                    "gaussian", x, epsilon=eps, lower=[-10, 0.01], upper=[10, 10], rng=rng
                )
                suff = dp_mle_sufficient("gaussian", x, epsilon=eps, lower=-10, upper=10, rng=rng)
                errors.setdefault("Gaussian mean, sample-and-aggregate", []).append(
                    ((float(blocks.value[0]) - 1.0) ** 2, (plain - 1.0) ** 2)
                )
                if suff.value is not None:
                    errors.setdefault("Gaussian mean, noisy sufficient stats", []).append(
                        ((float(suff.value[0]) - 1.0) ** 2, (plain - 1.0) ** 2)
                    )
                counts = gen.poisson(3.0, n).astype(float)
                pois = dp_mle("poisson", counts, epsilon=eps, lower=[0], upper=[20], rng=rng)
                errors.setdefault("Poisson rate, sample-and-aggregate", []).append(
                    ((float(pois.value[0]) - 3.0) ** 2, (float(counts.mean()) - 3.0) ** 2)
                )
                X = gen.uniform(-1, 1, (n, 2))
                y = 1.0 + 2.0 * X[:, 0] - X[:, 1] + gen.normal(0, 0.5, n)
                fit = linear_regression(
                    X, y, rho=eps**2 / 2, x_lower=-1, x_upper=1, y_lower=-5, y_upper=7, rng=rng
                )
                if fit.value is not None:
                    errors.setdefault("regression slope (AdaSSP, ρ = ε²/2)", []).append(
                        ((float(fit.value[1]) - 2.0) ** 2, (float(ols(X, y)[1]) - 2.0) ** 2)
                    )
            for name, pairs in errors.items():
                dp_mse = float(np.mean([a for a, _ in pairs]))
                base = float(np.mean([b for _, b in pairs]))
                rows.append(
                    f"| {name} | 10^{round(math.log10(n))} | {eps} | {dp_mse:.3g} | "
                    f"{base:.3g} | {dp_mse / base:.3g} | {len(pairs)}/{runs} |"
                )
    return rows


def lre(estimate: np.ndarray) -> str:
    digits = -np.log10(np.abs(estimate - LONGLEY_CERTIFIED) / np.abs(LONGLEY_CERTIFIED))
    return f"{float(np.min(np.minimum(digits, 15))):.1f}"


def longley_rows() -> list[str]:
    frame = pd.read_csv(SHARED / "longley.csv")
    X, y = frame.drop(columns="TOTEMP").to_numpy(), frame["TOTEMP"].to_numpy()
    x_bounds, y_bounds = (X.min(0) - 1, X.max(0) + 1), (y.min() - 1, y.max() + 1)
    scaling = Scaling.of(X.shape[1], x_bounds, y_bounds, True)
    z = scaling.rows(X, y)
    core = scaling.original(fit_from_gram(z.T @ z, scaling, 0.0))
    rows = [f"| exact core (noise-free sufficient statistics) | - | {lre(core)} |"]
    rows.append(
        f"| non-private OLS ({'statsmodels' if sm else 'numpy lstsq'}) | - | {lre(ols(X, y))} |"
    )
    for rho in (1e6, 1e8, 1e10):
        out = linear_regression(
            X, y, rho=rho, x_lower=x_bounds[0], x_upper=x_bounds[1], y_lower=y_bounds[0],
            y_upper=y_bounds[1], rng=SeededRng(7),
        )  # fmt: skip
        rows.append(f"| DP AdaSSP | {rho:.0e} | {'NR' if out.value is None else lre(out.value)} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n <= 10^5, fewer repetitions")
    args = parser.parse_args()
    sizes = [10**3, 10**4, 10**5] if args.quick else [10**3, 10**4, 10**5, 10**6]
    reps = 10 if args.quick else 40
    start = time.perf_counter()
    print("| estimator | n | ε | DP MSE | non-private MSE | ratio | replies |")
    print("|---|---|---|---|---|---|---|")
    for row in efficiency_rows(sizes, [0.1, 1.0], reps):
        print(row)
    print("\n| Longley (NIST StRD) | ρ | min digits vs certified (LRE) |")
    print("|---|---|---|")
    for row in longley_rows():
        print(row)
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
