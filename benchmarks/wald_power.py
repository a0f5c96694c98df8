"""Wald tests of a DP linear fit's slope against the public (statsmodels OLS) Wald test: type-I
error and power at the same data (issue 27 item 2).

Run ``python benchmarks/wald_power.py`` (``--reps R``, default 300). Each of R seeded data sets
has n rows, x ~ U(-1, 1) and y = slope·x + N(0, 0.5²) clamped to the public bounds [-2, 2]; the
DP fit is :func:`~dpcurator.estimators.regression.linear_regression` at the ρ that SQL
``REGRESS`` runs at (ε, δ = 1e-6), its test :func:`~dpcurator.estimators.wald.wald_test`; the
public test is statsmodels' OLS t-test of the slope on the same rows. A DP fit with no test (NR
or not ``testable``) counts as not rejecting. Prints, per (n, ε, slope), the share of data sets
each test rejects at α = 0.05 (slope 0: the type-I error; its standard error is at most
0.5/√R) and the seconds taken.
"""

from __future__ import annotations

import argparse
import time
from fractions import Fraction

import numpy as np
import statsmodels.api as sm

from dpcurator.estimators import wald_test
from dpcurator.estimators.regression import linear_regression
from dpcurator.query.fit.linear import zcdp_for
from dpcurator.random import SeededRng

LEVEL = 0.05


def rejections(n: int, eps: float, slope: float, reps: int) -> tuple[float, float]:
    """(DP, public) rejection rates of H0: slope = 0 over ``reps`` seeded data sets."""
    gen = np.random.default_rng(11)
    rho = float(zcdp_for(Fraction(eps), 1e-6))
    dp = public = 0
    for i in range(reps):
        x = gen.uniform(-1, 1, n)
        y = np.clip(slope * x + gen.normal(0, 0.5, n), -2, 2)
        fit = linear_regression(
            x[:, None], y, rho=rho, x_lower=[-1], x_upper=[1], y_lower=-2, y_upper=2,
            rng=SeededRng(10_000 + i),
        )  # fmt: skip
        wald = wald_test(fit)
        dp += wald is not None and bool(wald.p_value[1] <= LEVEL)  # NaN compares False
        public += bool(sm.OLS(y, sm.add_constant(x)).fit().pvalues[1] <= LEVEL)
    return dp / reps, public / reps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=300)
    reps = parser.parse_args().reps
    print("| n | ε | slope | DP Wald rejects | statsmodels rejects | time |")
    print("|---|---|---|---|---|---|")
    for n, slopes in ((100, (0.0, 0.4, 1.0)), (10_000, (0.0, 0.05, 0.2))):
        for eps in (0.1, 1.0):
            for slope in slopes:
                start = time.perf_counter()
                dp, public = rejections(n, eps, slope, reps)
                seconds = time.perf_counter() - start
                print(f"| {n} | {eps:g} | {slope:g} | {dp:.3f} | {public:.3f} | {seconds:.0f} s |")


if __name__ == "__main__":
    main()
