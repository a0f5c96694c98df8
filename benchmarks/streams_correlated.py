"""Continual counting at equal privacy: correlated noise (BLT), the k-ary tree, the binary tree.

Run ``python benchmarks/streams_correlated.py`` (``--exponents 10 16 20``, the default). For each
horizon T = 2^e and a 0/1 stream of length T released after every event:

* ρ-zCDP at ρ = 1/2 (so an ideal Gaussian of sensitivity 1 has σ² = 1): the worst-step and mean
  noise variance of the releases ("variance factor" max_t / mean_t ‖B_t‖² · max_j ‖C_j‖²) of
  :class:`~dpcurator.streams.CorrelatedContinualSum` with its horizon, and unknown horizon
  (``horizon=None``), both as the stream states them (discrete Gaussian on the integer lattice,
  rounding slack included), against the binary tree with Gaussian noise at the same ρ (σ² = L/(2ρ)
  per node, L = bit_length(T) levels) and today's :class:`~dpcurator.streams.ContinualSum`
  (discrete Laplace at ε = 1, which is ρ = ε²/2 = 1/2 zCDP);
* pure ε = 1: :class:`~dpcurator.streams.KaryContinualSum` (best k, consistent estimates) against
  the binary tree, variances in units of 1/ε²;
* the measured mean squared error of one seeded run over the T releases (empirical, for a check
  against the stated mean), the time per event of one batch, and the mechanism's state in bytes
  (and per log2 T level).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from dpcurator.random import SeededRng
from dpcurator.streams import ContinualSum, CorrelatedContinualSum, KaryContinualSum
from dpcurator.streams.kary import tree_variance_factors
from dpcurator.streams.toeplitz import coefficients


def _stated(stream: CorrelatedContinualSum, horizon: int) -> tuple[float, float]:
    """(worst, mean) over t <= T of the stated noise variance of the release at t."""
    _, b = coefficients(stream.thetas, stream.omegas, horizon)
    rows = np.cumsum(b**2)  # ‖B_t‖² for t = 1 ... T
    scale = stream.variance(horizon) / rows[-1]
    return float(rows[-1] * scale), float(rows.mean() * scale)


def _tree_stated(stream: ContinualSum, horizon: int) -> tuple[float, float]:
    p = np.exp(-1 / float(stream.mechanism.scale))
    node = 2 * p / (1 - p) ** 2
    counts = np.array([t.bit_count() for t in range(1, horizon + 1)])
    return float(counts.max() * node), float(counts.mean() * node)


def _run(stream: Any, events: np.ndarray, seed: int) -> tuple[float, float]:
    """(mean squared error over the T releases, seconds per event) of one seeded batch."""
    rng = SeededRng(seed)
    start = time.perf_counter()
    released = stream.update(events, rng)
    seconds = (time.perf_counter() - start) / events.size
    return float(((released - np.cumsum(events)) ** 2).mean()), seconds


def _row(name: str, stated: tuple[float, float], measured: tuple[float, float], state: int,
         horizon: int) -> str:  # fmt: skip
    levels = horizon.bit_length() - 1 or 1

    def fmt(value: float) -> str:
        return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"

    return (
        f"| {name} | {fmt(stated[0])} | {fmt(stated[1])} | {fmt(measured[0])} | "
        f"{measured[1] * 1e6:.1f} | {state} ({state / levels:.0f}/level) |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--exponents", type=int, nargs="*", default=[10, 16, 20])
    args = parser.parse_args()
    header = (
        "| mechanism | worst-step variance | mean variance | measured MSE | µs/event | "
        "state bytes |\n|---|---|---|---|---|---|"
    )
    for exponent in args.exponents:
        horizon = 2**exponent
        events = (np.arange(horizon) % 2).astype(np.int64)
        levels = horizon.bit_length()
        print(f"\nT = 2^{exponent}, ρ = 1/2 (zCDP)\n\n{header}")
        for name, stream in (
            ("BLT, horizon known", CorrelatedContinualSum.counter(0.5, horizon)),
            ("BLT, horizon unknown", CorrelatedContinualSum.counter(0.5, None)),
        ):
            stated = _stated(stream, horizon)
            measured = _run(stream, events, exponent)
            print(_row(name, stated, measured, stream.state_bytes(), horizon))
        popcounts = np.array([t.bit_count() for t in range(1, horizon + 1)])
        gaussian = (float(popcounts.max() * levels), float(popcounts.mean() * levels))
        print(f"| binary tree, Gaussian (σ² = L/(2ρ)) | {gaussian[0]:,.0f} | {gaussian[1]:,.0f} "
              "| – | – | – |")  # fmt: skip
        tree = ContinualSum.counter(1, horizon)
        print(_row("binary tree today (discrete Laplace, ε = 1)", _tree_stated(tree, horizon),
                   _run(tree, events, exponent), 16 * levels + 8, horizon))  # fmt: skip
        print(f"\nT = 2^{exponent}, ε = 1 (pure DP)\n\n{header}")
        kary = KaryContinualSum.counter(1, horizon)
        worst, mean = tree_variance_factors(horizon, kary.branching)
        p = np.exp(-1 / float(kary.mechanism.scale))  # exact discrete Laplace node variance
        exact = 2 * p / (1 - p) ** 2 / (2 * kary.levels**2)
        worst, mean = worst * exact, mean * exact
        print(_row(f"k-ary tree, k = {kary.branching}, consistent", (worst, mean),
                   _run(kary, events, exponent), kary.state_bytes(), horizon))  # fmt: skip
        tree = ContinualSum.counter(1, horizon)
        print(_row("binary tree today", _tree_stated(tree, horizon), _run(tree, events, exponent),
                   16 * levels + 8, horizon))  # fmt: skip


if __name__ == "__main__":
    main()
