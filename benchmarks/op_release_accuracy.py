"""Coefficient RMSE of objective-perturbation logistic regression (issue 29, item 4).

A seeded synthetic logistic dataset (10^4 rows, 3 features uniform on [-1, 1], true
coefficients (0.5, 1, -1, 0.5)); RMSE over the coefficients and ``REPS`` releases of the DP
estimate against the non-private MLE, at ε = 1 with δ = 1e-6 and at pure ε = 1.

    .venv/bin/python benchmarks/op_release_accuracy.py
"""

from __future__ import annotations

import time

import numpy as np

from dpcurator.estimators import logistic_regression
from dpcurator.estimators.logistic import ridge_logistic
from dpcurator.random import SeededRng

REPS = 40


def main() -> None:
    gen = np.random.default_rng(2024)
    n, truth = 10_000, np.array([0.5, 1.0, -1.0, 0.5])
    X = gen.uniform(-1, 1, size=(n, 3))
    design = np.column_stack([np.ones(n), X])
    y = (gen.uniform(size=n) < 1 / (1 + np.exp(-design @ truth))).astype(float)
    mle = ridge_logistic(design, y, ridge=1e-12)
    for delta in (1e-6, 0.0):
        start = time.perf_counter()
        errors, widths = [], []
        for rep in range(REPS):
            out = logistic_regression(
                X, y, epsilon=1.0, delta=delta, x_lower=-1, x_upper=1, rng=SeededRng(rep)
            )
            errors.append(np.asarray(out.value) - mle)
            widths.append(np.asarray(out.ci_high) - np.asarray(out.ci_low))
        rmse = float(np.sqrt(np.mean(np.square(errors))))
        width = float(np.mean(widths))
        seconds = (time.perf_counter() - start) / REPS
        print(
            f"delta={delta:g}: RMSE vs MLE {rmse:.4f}, mean CI width {width:.4f}, {seconds:.2f} s"
        )


if __name__ == "__main__":
    main()
