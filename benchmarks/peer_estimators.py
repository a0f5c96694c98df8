"""Peer estimates on the estimator benchmark's data (runs inside ``.bench-venv``).

Usage: peer_estimators.py DATA.npz EPSILON — prints one JSON object mapping "library|task" to a
list of releases, one per data set of the file (or to an error string):

* diffprivlib (IBM): LinearRegression (bounds_X, bounds_y), LogisticRegression (data_norm), median.
* OpenDP 0.16 (Polars plugin): median over 1,025 candidates between the bounds.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import numpy as np
import opendp.prelude as dp
import polars as pl
from diffprivlib import models, tools


def collect(run: Callable[[int], object], reps: int) -> object:
    try:
        return [run(i) for i in range(reps)]
    except Exception as exc:  # report the peer's refusal instead of crashing the table
        return f"error: {str(exc).strip().splitlines()[0][:120]}"


def opendp_median(x: np.ndarray, epsilon: float, bounds: tuple[float, float]) -> float:
    dp.enable_features("contrib")
    context = dp.Context.compositor(
        data=pl.LazyFrame({"x": x}),
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=epsilon),
        split_evenly_over=1,
        margins=[dp.polars.Margin(by=[], max_length=x.size)],
    )
    candidates = list(np.linspace(bounds[0], bounds[1], 1025))
    query = context.query().select(pl.col("x").dp.median(candidates=candidates))
    return float(query.release().collect().item())


def main() -> None:
    data = np.load(sys.argv[1])
    eps = float(sys.argv[2])
    lin_b, log_b, med_b = data["lin_bounds"], data["log_bounds"], data["med_bounds"]
    reps = data["lin_X"].shape[0]

    def linear(i: int) -> list[float]:
        fit = models.LinearRegression(
            epsilon=eps, bounds_X=(lin_b[0], lin_b[1]), bounds_y=(lin_b[2], lin_b[3])
        ).fit(data["lin_X"][i], data["lin_y"][i])
        return [float(fit.intercept_), *map(float, fit.coef_)]

    def logistic(i: int) -> list[float]:
        X = data["log_X"][i]
        norm = float(np.sqrt(X.shape[1]) * np.max(np.abs(log_b)))
        fit = models.LogisticRegression(epsilon=eps, data_norm=norm).fit(X, data["log_y"][i])
        return [float(fit.intercept_[0]), *map(float, fit.coef_[0])]

    bounds = (float(med_b[0]), float(med_b[1]))
    out = {
        "diffprivlib|linear": collect(linear, reps),
        "diffprivlib|logistic": collect(logistic, reps),
        "diffprivlib|median": collect(
            lambda i: float(tools.median(data["med_x"][i], epsilon=eps, bounds=bounds)), reps
        ),
        "opendp|median": collect(lambda i: opendp_median(data["med_x"][i], eps, bounds), reps),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
