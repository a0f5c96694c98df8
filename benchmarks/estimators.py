"""Efficiency of the DP MLE and of DP linear regression, and the Longley certified check.

Run ``python benchmarks/estimators.py`` (``--quick`` for n <= 10^5 and fewer repetitions).

* **Efficiency** (Dwork & Smith 2009, Theorem 9): for each n in 10^3..10^7 and ε in {0.1, 1},
  the mean squared error of the DP estimate over repeated simulated data sets, divided by the
  mean squared error of the non-private estimate on the same data sets (statsmodels' OLS / the
  closed-form MLE; numpy's least squares when statsmodels is not installed, which computes the
  same OLS). The ratio should fall towards 1 as n grows. Rows: DP MLE of a Gaussian mean (block
  bias-corrected sample-and-aggregate, and noisy sufficient statistics), DP MLE of a Poisson rate
  (sample-and-aggregate), and the slope of an AdaSSP linear regression at ρ = ε²/2 (the zCDP
  level implied by ε-DP). Sample-and-aggregate clamped to the public box has a noise variance
  2Λ₁²n/(k²ε²σ²) times the non-private one (555·n^-0.2/ε² for the Gaussian rows: 35 at n = 10^6,
  ε = 1); once k allows it (a public rule of k, ε and the dimension) the widened winsorised mean
  takes over and the ratio drops towards 1 (Gaussian at ε = 1 from n ≈ 5.4·10^5, at ε = 0.1 from
  n ≈ 2.7·10^7; the one-parameter Poisson from n ≈ 1.7·10^5 and 8.5·10^6).
* **Longley** (NIST StRD): digits of agreement (the log relative error, NIST's LRE) of the
  coefficients with the certified values, for the exact core (the same solver on noise-free
  sufficient statistics) and for DP releases at large ρ. The Gram matrix is released on the
  grid 2^-30 of its noise scale with exact unbounded integer noise (estimators/noisy_wide.py), so
  its entries (up to n) never leave the grid's range: the digits grow with ρ (6 at about 1e22,
  7 or more at 1e24 on Longley's 16 rows; before, the int64 grid capped ρ near 2e18).
* **Versus peers** (``--peers``; diffprivlib and OpenDP run in ``.bench-venv``, ``peers.py``):
  on the same simulated data sets, at EQUAL guarantees, the RMSE of the coefficients against the
  true ones for linear regression and logistic regression, and the mean absolute error of the
  median against the sample median. The ``guarantee`` column says which: logistic regression
  (ours: objective perturbation, the default) and the medians (ours: the binned exponential
  mechanism of the query layer and the smooth-sensitivity median) are ε-DP on both sides;
  dpcurator's linear regression is AdaSSP under zCDP, which has no pure-ε form, so both sides of
  that row are held to (ε, δ = 10^-6)-DP: ours at the largest ρ whose exact conversion
  (Canonne, Kamath & Steinke 2020, Proposition 12; ``largest_rho``) gives (ε, 10^-6), and
  diffprivlib's ε-DP, which implies (ε, δ)-DP for every δ (so diffprivlib's side holds a
  stronger guarantee, never a weaker one). OpenDP 0.16's only regression is a one-feature
  Theil-Sen, not run on these two-feature data.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Iterable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from peers import run_peer_script
from quantile_peers import quantile_rows

from dpcurator.accounting.concentrated import largest_rho
from dpcurator.estimators import (
    dp_mle,
    dp_mle_sufficient,
    dp_quantile,
    linear_regression,
    logistic_regression,
    smooth_median,
)
from dpcurator.estimators.regression import Scaling, fit_from_gram
from dpcurator.random import SeededRng

try:
    import statsmodels.api as sm  # type: ignore[import-untyped]
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
        return np.asarray(sm.OLS(y, design).fit().params, dtype=np.float64)
    solution: np.ndarray = np.linalg.lstsq(design, y, rcond=None)[0]
    return solution


def efficiency_rows(sizes: list[int], epsilons: list[float], reps: int) -> list[str]:
    gen, rng = np.random.default_rng(2024), SeededRng(2024)
    rows = []
    for n in sizes:
        for eps in epsilons:
            errors: dict[str, list[tuple[float, float]]] = {}
            runs = 3 if n >= 10**7 else max(3, reps if n < 10**6 else reps // 4)
            for _ in range(runs):
                x = gen.normal(1.0, 2.0, n)
                plain = float(x.mean())
                blocks = dp_mle(
                    "gaussian", x, epsilon=eps, lower=[-10, 0.01], upper=[10, 10], rng=rng
                )
                suff = dp_mle_sufficient("gaussian", x, epsilon=eps, lower=-10, upper=10, rng=rng)
                assert blocks.value is not None  # sample-and-aggregate always replies
                errors.setdefault("Gaussian mean, sample-and-aggregate", []).append(
                    ((float(blocks.value[0]) - 1.0) ** 2, (plain - 1.0) ** 2)
                )
                if suff.value is not None:
                    errors.setdefault("Gaussian mean, noisy sufficient stats", []).append(
                        ((float(suff.value[0]) - 1.0) ** 2, (plain - 1.0) ** 2)
                    )
                counts = gen.poisson(3.0, n).astype(float)
                pois = dp_mle("poisson", counts, epsilon=eps, lower=[0], upper=[20], rng=rng)
                assert pois.value is not None
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
    for rho in (1e6, 1e10, 1e14, 1e18, 1e22, 1e24):
        out = linear_regression(
            X, y, rho=rho, x_lower=x_bounds[0], x_upper=x_bounds[1], y_lower=y_bounds[0],
            y_upper=y_bounds[1], rng=SeededRng(7),
        )  # fmt: skip
        rows.append(f"| DP AdaSSP | {rho:.0e} | {'NR' if out.value is None else lre(out.value)} |")
    return rows


LINEAR_TRUTH = np.array([1.0, 2.0, -1.0])
LOGISTIC_TRUTH = np.array([-0.5, 1.0, -0.8])

#: The δ at which the linear-regression row holds both sides (module docstring).
PEER_DELTA = Fraction(1, 10**6)

#: The guarantee each task's row holds on both sides (module docstring).
GUARANTEE = {
    "linear": "(ε={eps}, δ=1e-6)-DP",
    "logistic": "ε={eps}-DP",
    "median": "ε={eps}-DP",
}


def peer_data(n: int, reps: int) -> dict[str, np.ndarray]:
    """The simulated data sets every library sees, with their public bounds."""
    gen = np.random.default_rng(2025)
    lin_X = gen.uniform(-1, 1, (reps, n, 2))
    log_X = gen.uniform(-2, 2, (reps, n, 2))
    eta = LOGISTIC_TRUTH[0] + log_X @ LOGISTIC_TRUTH[1:]
    return {
        "lin_X": lin_X,
        "lin_y": LINEAR_TRUTH[0] + lin_X @ LINEAR_TRUTH[1:] + gen.normal(0, 0.5, (reps, n)),
        "lin_bounds": np.array([-1.0, 1.0, -5.0, 7.0]),
        "log_X": log_X,
        "log_y": (gen.random((reps, n)) < 1 / (1 + np.exp(-eta))).astype(float),
        "log_bounds": np.array([-2.0, 2.0]),
        "med_x": gen.normal(0, 1, (reps, n)),
        "med_bounds": np.array([-4.0, 4.0]),
    }


def our_releases(data: dict[str, np.ndarray], eps: float) -> dict[str, list[object]]:
    rng, reps = SeededRng(2025), data["lin_X"].shape[0]
    rho = largest_rho(Fraction(eps), PEER_DELTA)  # (ε, δ)-DP, as diffprivlib's ε-DP implies
    lin_b, med_low, med_high = data["lin_bounds"], *data["med_bounds"]
    out: dict[str, list[object]] = {}
    for i in range(reps):
        linear = linear_regression(
            data["lin_X"][i], data["lin_y"][i], rho=float(rho), x_lower=lin_b[0],
            x_upper=lin_b[1], y_lower=lin_b[2], y_upper=lin_b[3], rng=rng,
        )  # fmt: skip
        logistic = logistic_regression(
            data["log_X"][i], data["log_y"][i], epsilon=eps, x_lower=-2, x_upper=2,
            coef_lower=-5, coef_upper=5, rng=rng,
        )  # fmt: skip
        x = data["med_x"][i]
        smooth = smooth_median(x, epsilon=eps, lower=med_low, upper=med_high, rng=rng)
        for key, value in [
            ("dpcurator|linear", None if linear.value is None else list(linear.value)),
            ("dpcurator|logistic", list(logistic.value) if logistic.value is not None else None),
            ("dpcurator|median", dp_quantile(x, 0.5, eps, lower=med_low, upper=med_high, rng=rng)),
            ("dpcurator smooth|median", None if smooth.value is None else float(smooth.value)),
        ]:
            out.setdefault(key, []).append(value)
    return out


def peer_error(task: str, releases: object, data: dict[str, np.ndarray]) -> str:
    """Coefficient RMSE / median MAE of a list of releases (NR counted apart), or the error."""
    if not isinstance(releases, list):
        return str(releases)
    kept = [(i, r) for i, r in enumerate(releases) if r is not None]
    if task == "median":
        truth = np.median(data["med_x"], axis=1)
        value = np.mean([abs(float(r) - truth[i]) for i, r in kept])
    else:
        target = LINEAR_TRUTH if task == "linear" else LOGISTIC_TRUTH
        value = math.sqrt(np.mean([(np.asarray(r) - target) ** 2 for _, r in kept]))
    missing = len(releases) - len(kept)
    return f"{value:.4g}" + (f" ({missing} NR)" if missing else "")


def peer_rows(n: int, epsilons: list[float], reps: int) -> list[str]:
    data = peer_data(n, reps)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "estimators.npz"
        arrays: dict[str, Any] = dict(data)
        np.savez(path, **arrays)
        for eps in epsilons:
            results: dict[str, object] = dict(our_releases(data, eps))
            results.update(run_peer_script("peer_estimators.py", str(path), str(eps)))
            for key in sorted(results, key=lambda k: (k.split("|")[1], k)):
                library, task = key.split("|")
                error = peer_error(task, results[key], data)
                guarantee = GUARANTEE[task].format(eps=eps)
                rows.append(
                    f"| {task} | {library} | {guarantee} | 10^{round(math.log10(n))} | {error} |"
                )
    return rows


def _print_table(header: str, rows: Iterable[str]) -> None:
    """A Markdown table: ``header``, its separator line, then ``rows``."""
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for row in rows:
        print(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n <= 10^5, fewer repetitions")
    parser.add_argument("--peers", action="store_true", help="only the versus-peers table")
    parser.add_argument("--quantiles", action="store_true", help="only the quantile table")
    args = parser.parse_args()
    if args.quantiles:
        _print_table(
            "| quantile | library | ε | MAE (n = 10^4) |",
            quantile_rows(10**4, [0.1, 1.0], 20 if args.quick else 200),
        )
        return
    if args.peers:
        _print_table(
            "| task | library | guarantee (both sides) | n | error (coef RMSE; median MAE) |",
            peer_rows(10**4, [0.1, 1.0], 10 if args.quick else 50),
        )
        return
    sizes = [10**3, 10**4, 10**5] if args.quick else [10**3, 10**4, 10**5, 10**6, 10**7]
    reps = 10 if args.quick else 40
    start = time.perf_counter()
    _print_table(
        "| estimator | n | ε | DP MSE | non-private MSE | ratio | replies |",
        efficiency_rows(sizes, [0.1, 1.0], reps),
    )
    print()
    _print_table("| Longley (NIST StRD) | ρ | min digits vs certified (LRE) |", longley_rows())
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
