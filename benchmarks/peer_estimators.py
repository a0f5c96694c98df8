"""Peer estimates on the estimator benchmark's data (runs inside ``.bench-venv``).

Usage: peer_estimators.py DATA.npz EPSILON — prints one JSON object mapping "library|task" to a
list of releases, one per data set of the file (or to an error string):

* diffprivlib (IBM): LinearRegression (bounds_X, bounds_y), LogisticRegression (data_norm), median.
* OpenDP 0.16 (Polars plugin): median over 1,025 candidates between the bounds.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from diffprivlib import models, tools
from peer_opendp import collect, opendp_statistic


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
        "opendp|median": collect(
            lambda i: opendp_statistic(data["med_x"][i], eps, bounds, "median"), reps
        ),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
