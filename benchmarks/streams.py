"""Streams (dpcurator.streams): ingestion speed and error of the binary tree mechanism vs T.

Run ``python benchmarks/streams.py`` (``--max-exponent 7`` for T = 10^7; default 10^6). For each
T, a 0/1 stream of length T (every other event is 1) is released after every event at ε = 1:
events/s ingested (one batch), the mean and maximum absolute error over all T releases, and the
95% half-width stated for the final release. The error grows like log(T)^1.5, not like T.
Also: pan-private density and incidence (at least 2 appearances, counters mod 4) ingestion
(events/s) over a universe of 10^6 users.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dpcurator.random import SecureRng
from dpcurator.streams import ContinualSum, PanPrivateDensity, PanPrivateIncidence


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-exponent", type=int, default=6)
    args = parser.parse_args()
    rng = SecureRng()
    print(f"{'T':>10} {'events/s':>12} {'mean |err|':>11} {'max |err|':>10} {'95% CI at T':>12}")
    for exponent in range(3, args.max_exponent + 1):
        horizon = 10**exponent
        events = (np.arange(horizon) % 2).astype(np.int64)
        counter = ContinualSum.counter(epsilon=1, horizon=horizon)
        start = time.perf_counter()
        released = counter.update(events, rng)
        seconds = time.perf_counter() - start
        error = np.abs(released - np.cumsum(events))
        print(
            f"{horizon:>10} {horizon / seconds:>12.0f} {error.mean():>11.1f} "
            f"{error.max():>10.0f} {counter.ci_halfwidth(alpha=0.05):>12.1f}"
        )
    density = PanPrivateDensity(epsilon=1, universe=10**6, rng=rng)
    users = np.arange(10**6) * 7 % 10**6
    start = time.perf_counter()
    density.observe(users[: 5 * 10**5], rng)
    seconds = time.perf_counter() - start
    result = density.estimate(epsilon=1, rng=rng)
    print(
        f"pan-private density: {5 * 10**5 / seconds:.0f} events/s; estimate {result.fraction:.4f}"
        f" (truth 0.5000, 95% CI [{result.ci_low:.4f}, {result.ci_high:.4f}])"
    )
    incidence = PanPrivateIncidence(epsilon=1, universe=10**6, modulus=4, rng=rng)
    twice = np.concatenate((users[: 5 * 10**5], users[: 2 * 10**5]))  # 20% appear twice
    start = time.perf_counter()
    incidence.observe(twice)
    seconds = time.perf_counter() - start
    result = incidence.estimate_at_least(2, epsilon=1, rng=rng)
    print(
        f"pan-private incidence: {twice.size / seconds:.0f} events/s; at least 2: "
        f"{result.fraction:.4f} (truth 0.2000, 95% CI [{result.ci_low:.4f}, {result.ci_high:.4f}])"
    )


if __name__ == "__main__":
    main()
