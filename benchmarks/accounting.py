"""Accounting benchmark: mean (1-α) CI half-width per answer of k queries at a total (ε=1, δ=1e-6).

Workload: k queries on the UCI adult table, alternating COUNT(*) and AVG(age) (age in [17, 90],
one row per person). Two accountings of the same total budget:

* basic: discrete Laplace, ε/k per query (basic composition, PrivacyFilter);
* concentrated: discrete Gaussian, ρ/k per query with ρ the zCDP part of a
  :class:`~dpcurator.accounting.ConcentratedFilter` on (1, 1e-6) with ``pure_share=0`` (every
  query charged by its ρ; the filter admits exactly the k events).

A mean splits its query's share equally between its noisy count and noisy centred sum; its
half-width is (h_S + |m|·h_N) / n with m the centred mean (first order). Half-widths are the
mechanisms' exact ones (Laplace.ci_halfwidth, Gaussian.ci_halfwidth). The planning overhead is the
time to build one query's mechanisms and reserve its event in the filter.

NOTE: this measures the accounting with the library's mechanisms directly; the query layer's
``noise="gaussian"`` (issue 18 §1) is not wired yet.

Run: ``.venv/bin/python benchmarks/accounting.py``
"""

from __future__ import annotations

import time
from fractions import Fraction
from pathlib import Path

import pandas as pd

from dpcurator.accounting import Budget, ConcentratedFilter, PrivacyFilter, PureEvent
from dpcurator.mechanisms import Gaussian, Laplace

ADULT = Path("/work/shared/data/adult_uci/adult.data")
ALPHA = 0.05
BUDGET = Budget(1, Fraction(1, 10**6))
LOWER, UPPER = 17, 90


def _workload() -> tuple[int, float]:
    ages = pd.read_csv(ADULT, header=None, usecols=[0]).iloc[:, 0]
    return len(ages), float(ages.mean()) - (LOWER + UPPER) / 2


def _basic(k: int, n: int, m: float) -> tuple[float, float]:
    flt = PrivacyFilter(BUDGET)
    share = BUDGET.epsilon / k
    widths, start = [], time.perf_counter()
    for i in range(k):
        flt.reserve(PureEvent(share)).commit()
        if i % 2 == 0:
            widths.append(Laplace.for_epsilon(share, 1).ci_halfwidth(ALPHA))
        else:
            count = Laplace.for_epsilon(share / 2, 1).ci_halfwidth(ALPHA)
            total = Laplace.for_epsilon(share / 2, (UPPER - LOWER) / 2).ci_halfwidth(ALPHA)
            widths.append((total + abs(m) * count) / n)
    return sum(widths) / k, (time.perf_counter() - start) / k


def _concentrated(k: int, n: int, m: float) -> tuple[float, float]:
    flt = ConcentratedFilter(BUDGET, pure_share=0)
    share = flt.limits.rho / k
    widths, start = [], time.perf_counter()
    for i in range(k):
        if i % 2 == 0:
            mech = Gaussian.for_rho(share, 1)
            flt.reserve(mech.event(1)).commit()
            widths.append(mech.ci_halfwidth(ALPHA))
        else:
            count = Gaussian.for_rho(share / 2, 1)
            total = Gaussian.for_rho(share / 2, Fraction(UPPER - LOWER, 2))
            flt.reserve(count.event(1)).commit()
            flt.reserve(total.event(Fraction(UPPER - LOWER, 2))).commit()
            widths.append((total.ci_halfwidth(ALPHA) + abs(m) * count.ci_halfwidth(ALPHA)) / n)
    return sum(widths) / k, (time.perf_counter() - start) / k


def main() -> None:
    n, m = _workload()
    print(f"adult: n = {n}, total budget (ε = 1, δ = 1e-6), {1 - ALPHA:.0%} CIs")
    print(f"{'queries':>8} {'basic CI':>12} {'zCDP CI':>12} {'ratio':>7} {'ms/query':>9}")
    for k in (10, 100, 1_000):
        basic, _ = _basic(k, n, m)
        concentrated, seconds = _concentrated(k, n, m)
        print(
            f"{k:>8} {basic:>12.4g} {concentrated:>12.4g} {basic / concentrated:>7.2f} "
            f"{seconds * 1e3:>9.3f}"
        )


if __name__ == "__main__":
    main()
