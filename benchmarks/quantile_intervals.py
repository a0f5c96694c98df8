"""Quantile intervals against the oracle: width, the oracle's width, their ratio and coverage.

``python benchmarks/quantile_intervals.py [--reps 100] [--oracle-reps 2000] [--datasets 60]``

For each case (data, n, ε, p, α = 0.1) the mechanism runs ``reps`` times on ONE data set; the
oracle interval is the α/2 and 1-α/2 quantiles of its released values, widened by the gap between
the order statistics x_(⌊ρ⌋) and x_(⌈ρ⌉) (ρ = p·(n - 1)), as in
tests/test_quantile_interval_oracle.py. The values' quantiles come from ``oracle-reps`` runs of
the selection alone (the same mechanism at the same ε: the value does not depend on the
interval), so that integer data's 5% and 95% points are stable. ``width`` is the median width of
the released intervals, ``error`` the median distance of the released value from the sample
quantile (over the ``oracle-reps`` runs), ``coverage`` the
share of ``datasets`` fresh data sets (one run each) whose interval holds the sample quantile
(linear interpolation). The small groups are UCI Adult's ages of the two smallest races (the
grouped MEDIAN of benchmarks/adult_workflow.py at ε = 0.3: r = 1, integers on [17, 90]).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synth_adult import load

from dpcurator.estimators.quantile_refine import DEFAULT_INTERVAL_SHARE, RefinedQuantile
from dpcurator.random import SeededRng

ALPHA = 0.1

Data = Callable[[int], np.ndarray]


def _normal(n: int) -> Data:
    return lambda seed: np.random.default_rng(seed).normal(50, 10, n)


def _ages(n: int) -> Data:
    def draw(seed: int) -> np.ndarray:
        gen = np.random.default_rng(seed)
        return np.clip(np.round(gen.gamma(4, 5, n) + 18), 18, 90)

    return draw


def _incomes(n: int) -> Data:
    """Lognormal incomes (median 50,000) under generous bounds [0, 10^6]: a density at the median
    about ten times the bounds' average."""
    return lambda seed: np.random.default_rng(seed).lognormal(np.log(50_000), 0.8, n)


def _adult(race: str) -> Data:
    frame = load()
    ages = frame.loc[frame["race"] == race, "age"].to_numpy(dtype=np.float64)
    # fresh data sets for coverage: resamples of the group (the first is the group itself)
    return lambda seed: ages if seed == 0 else np.random.default_rng(seed).choice(ages, ages.size)


def _case(
    data: Data,
    p: float,
    epsilon: float,
    bounds: tuple[float, float],
    *,
    integer: bool,
    reps: int,
    oracle_reps: int,
    datasets: int,
) -> list[str]:
    plan = RefinedQuantile.plan(p, epsilon, *bounds, alpha=ALPHA, integer=integer)
    x = data(0)
    rng = SeededRng(1)
    runs = np.array([plan.run(lambda bins: bins.counts(x), rng) for _ in range(reps)], float)
    _, lows, highs = runs.T
    # the released value alone: the same selection at the same ε, without the interval's draws
    selection = epsilon * (1 - DEFAULT_INTERVAL_SHARE)
    alone = RefinedQuantile.plan(p, selection, *bounds, integer=integer)
    values = np.array([alone.run(lambda bins: bins.counts(x), rng)[0] for _ in range(oracle_reps)])
    s = np.sort(x)
    rho = p * (len(s) - 1)
    gap = s[int(np.ceil(rho))] - s[int(np.floor(rho))]
    oracle = float(np.diff(np.quantile(values, [ALPHA / 2, 1 - ALPHA / 2]))[0] + gap)
    width = float(np.median(highs - lows))
    truth = float(np.quantile(x, p))
    hits = 0
    for seed in range(1, datasets + 1):
        y = data(seed)
        _, low, high = plan.run(lambda bins, y=y: bins.counts(y), SeededRng(1000 + seed))
        hits += bool(low <= np.quantile(y, p) <= high)
    ratio = width / oracle if oracle > 0 else float("inf") if width > 0 else 1.0
    error = float(np.median(np.abs(values - truth)))
    interval = f"[{np.median(lows):.4g}, {np.median(highs):.4g}]"
    return [
        f"{width:.4g}",
        f"{oracle:.4g}",
        f"{ratio:.2f}",
        f"{error:.3g}",
        interval,
        f"{hits}/{datasets}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--oracle-reps", type=int, default=2000)
    parser.add_argument("--datasets", type=int, default=60)
    args = parser.parse_args()
    cases: list[tuple[str, Data, float, float, tuple[float, float], bool]] = [
        ("normal n=10^4", _normal(10_000), 0.5, 1.0, (0, 100), False),
        ("normal n=10^4", _normal(10_000), 0.9, 1.0, (0, 100), False),
        ("normal n=2000", _normal(2_000), 0.25, 0.3, (0, 100), False),
        ("normal n=200", _normal(200), 0.5, 0.3, (0, 100), False),
        ("normal n=50", _normal(50), 0.5, 1.0, (0, 100), False),
        ("normal n=10^5", _normal(100_000), 0.5, 1.0, (0, 100), False),
        ("incomes n=10^4", _incomes(10_000), 0.5, 1.0, (0, 1e6), False),
        ("incomes n=1000", _incomes(1_000), 0.9, 0.3, (0, 1e6), False),
        ("ages n=10^4", _ages(10_000), 0.5, 1.0, (18, 90), True),
        ("ages n=10^4", _ages(10_000), 0.9, 1.0, (18, 90), True),
        ("ages n=200", _ages(200), 0.5, 0.3, (18, 90), True),
        ("Adult Amer-Indian-Eskimo (311)", _adult("Amer-Indian-Eskimo"), 0.5, 0.3, (17, 90), True),
        ("Adult Other (271)", _adult("Other"), 0.5, 0.3, (17, 90), True),
    ]
    header = ["data", "p", "ε", "width", "oracle", "ratio", "error", "median CI", "coverage"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, data, p, epsilon, bounds, integer in cases:
        row = _case(
            data,
            p,
            epsilon,
            bounds,
            integer=integer,
            reps=args.reps,
            oracle_reps=args.oracle_reps,
            datasets=args.datasets,
        )
        print("| " + " | ".join([name, str(p), str(epsilon), *row]) + " |", flush=True)


if __name__ == "__main__":
    main()
