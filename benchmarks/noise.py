"""Throughput of dpcurator's exact noise samplers, next to numpy's float samplers and OpenDP's.

Run ``python benchmarks/noise.py`` (or ``make bench``); ``--quick`` for a smaller run. Prints:

1. the grid (issue 26): million draws per CPU-second of ``discrete_laplace`` and
   ``discrete_gaussian`` at scales {0.5, 1, 10, 1000, 10^6} and batch sizes {1, 1000, 10^6}, with
   numpy's float ``laplace`` / ``normal`` at the same batch sizes in the same process (best of
   ``--runs`` timings of about 10^6 draws each; 2·10^4 calls for batch size 1). CPU time, not wall
   time, so that a loaded machine distorts less (it still slows both sides);
2. a table of samples per second (wall and CPU) of single calls producing 10^6 samples (10^5 with
   ``--quick``), with OpenDP;
3. with ``--large``, single calls for 10^6 and 10^7 samples: samples per second of CPU time and the
   peak of the memory they allocate (tracemalloc), which shows that large calls draw in blocks of
   bounded size (:mod:`dpcurator.random.samplers.chunks`).

* dpcurator: exact integer samplers (Canonne, Kamath & Steinke 2020) fed by a ChaCha20 CSPRNG.
* numpy: ``numpy.random.default_rng().laplace`` / ``.normal`` — textbook floating-point noise from
  a non-cryptographic PCG64 generator. Fast, but NOT safe for differential privacy (Mironov 2012);
  shown only as a speed reference.
* OpenDP 0.16.0 (floating-point-safe samplers, Rust): installed on first use into a separate
  virtualenv ``.bench-venv/`` at the repository root and timed there in a subprocess, so it never
  mixes with the project's environment. ``--no-opendp`` skips it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import time
import tracemalloc
from collections.abc import Callable
from functools import partial

import numpy as np
from peers import ensure_peer_venv

from dpcurator.random import SecureRng, bernoulli_exp, discrete_gaussian, discrete_laplace

OPENDP_VERSION = "0.16.0"  # pinned in peers.PEER_REQUIREMENTS

# Runs inside .bench-venv: argv = [n, runs]; prints {"label": [seconds per run, ...]} as JSON.
OPENDP_SNIPPET = r"""
import json, sys, time
import opendp.prelude as dp

dp.enable_features("contrib")
n, runs = int(sys.argv[1]), int(sys.argv[2])

def space(T, metric):
    atom = dp.atom_domain(T=T, nan=False) if T is float else dp.atom_domain(T=T)
    return dp.vector_domain(atom), metric(T=T)

cases = {
    "laplace, float vector (FP-safe)": (dp.m.make_laplace, float, dp.l1_distance, [0.0] * n),
    "laplace, int vector (discrete)": (dp.m.make_laplace, int, dp.l1_distance, [0] * n),
    "gaussian, float vector (FP-safe)": (dp.m.make_gaussian, float, dp.l2_distance, [0.0] * n),
    "gaussian, int vector (discrete)": (dp.m.make_gaussian, int, dp.l2_distance, [0] * n),
}
out = {}
for label, (make, T, metric, data) in cases.items():
    try:
        meas = make(*space(T, metric), scale=10.0)
        meas(data[:10])
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            meas(data)
            times.append(time.perf_counter() - start)
        out[label] = times
    except Exception as exc:  # report, keep going
        out[label] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def time_runs(function: Callable[[], object], runs: int) -> tuple[float, float]:
    """Median wall-clock and CPU seconds of ``runs`` calls (after one warm-up call)."""
    function()
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(runs):
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        function()
        wall.append(time.perf_counter() - start_wall)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


GRID_SCALES: tuple[float, ...] = (0.5, 1, 10, 1000, 1e6)
GRID_BATCHES: tuple[int, ...] = (1, 1000, 10**6)


def draws_per_cpu_second(draw: Callable[[int], object], batch: int, runs: int) -> float:
    """Best of ``runs`` rates (draws per CPU-second) of repeated ``draw(batch)`` calls totalling
    about 10^6 draws (2·10^4 calls for batch size 1), after one warm-up call."""
    calls = max(1, 10**6 // batch) if batch > 1 else 20_000
    draw(batch)
    best = math.inf
    for _ in range(runs):
        start = time.process_time()
        for _ in range(calls):
            draw(batch)
        best = min(best, time.process_time() - start)
    return calls * batch / max(best, 1e-9)


def grid(runs: int, scales: tuple[float, ...] = GRID_SCALES) -> list[str]:
    """Markdown rows of the issue-26 grid: M draws per CPU-second by sampler, scale and batch."""
    rng = SecureRng()
    numpy_rng = np.random.default_rng()
    header = " | ".join(f"batch {b:,}" for b in GRID_BATCHES)
    rows = [f"| sampler | scale | {header} |", "|---|---:|" + "---:|" * len(GRID_BATCHES)]
    samplers: list[tuple[str, Callable[[float], Callable[[int], object]]]] = [
        ("dpcurator discrete_laplace (exact)", lambda s: partial(discrete_laplace, rng, s)),
        ("numpy laplace (float, NOT DP-safe)", lambda s: partial(numpy_rng.laplace, 0.0, s)),
        ("dpcurator discrete_gaussian (exact)", lambda s: partial(discrete_gaussian, rng, s)),
        ("numpy normal (float, NOT DP-safe)", lambda s: partial(numpy_rng.normal, 0.0, s)),
    ]
    for name, make in samplers:
        for scale in scales:
            rates = [draws_per_cpu_second(make(scale), b, runs) / 1e6 for b in GRID_BATCHES]
            cells = " | ".join(f"{r:,.2f}" for r in rates)
            rows.append(f"| {name} | {scale:g} | {cells} |")
    return rows


def bench_python(n: int, runs: int, quick: bool) -> list[tuple[str, str, float | None, str]]:
    """Rows (library, sampler, samples/s by wall clock, note) measured in this process."""
    rng = SecureRng()
    numpy_rng = np.random.default_rng()
    gammas = np.arange(n, dtype=np.int64) % 200  # γ = k/10 for k = 0..199
    exact: list[tuple[str, Callable[[], object]]] = [
        ("discrete_laplace(scale=10)", lambda: discrete_laplace(rng, 10, n)),
        ("discrete_gaussian(sigma=10)", lambda: discrete_gaussian(rng, 10, n)),
        ("bernoulli_exp(1/2)", lambda: bernoulli_exp(rng, 1, 2, n)),
    ]
    if not quick:
        exact += [
            ("discrete_laplace(scale=1e-3)", lambda: discrete_laplace(rng, 1e-3, n)),
            ("discrete_laplace(scale=1e9)", lambda: discrete_laplace(rng, 1e9, n)),
            ("discrete_gaussian(sigma=0.5)", lambda: discrete_gaussian(rng, 0.5, n)),
            ("discrete_gaussian(sigma=1e9)", lambda: discrete_gaussian(rng, 1e9, n)),
            ("bernoulli_exp(array of γ in [0, 20))", lambda: bernoulli_exp(rng, gammas, 10)),
        ]
    cases = [("dpcurator", name, function, "exact") for name, function in exact]
    unsafe = "float, NOT DP-safe"
    cases += [
        ("numpy", "default_rng().laplace(0, 10)", lambda: numpy_rng.laplace(0, 10, n), unsafe),
        ("numpy", "default_rng().normal(0, 10)", lambda: numpy_rng.normal(0, 10, n), unsafe),
    ]
    rows: list[tuple[str, str, float | None, str]] = []
    for library, name, function, note in cases:
        wall, cpu = time_runs(function, runs)
        rows.append((library, name, n / wall, f"{note}; CPU time: {rate_text(n / cpu)}/s"))
    return rows


def large_calls(runs: int) -> list[str]:
    """Markdown rows (sampler, samples, CPU samples/s, peak MB allocated) of single calls for
    10^6 and 10^7 samples (median CPU time of ``runs`` calls; peak of the last call)."""
    rng = SecureRng()
    rows = []
    for n in (10**6, 10**7):
        cases: list[tuple[str, Callable[[], object]]] = [
            ("discrete_laplace(scale=10)", partial(discrete_laplace, rng, 10, n)),
            ("discrete_gaussian(sigma=10)", partial(discrete_gaussian, rng, 10, n)),
        ]
        for name, function in cases:
            _, cpu = time_runs(function, runs)
            tracemalloc.start()
            function()
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            rows.append(f"| {name} | {n:.0e} | {rate_text(n / cpu)} | {peak / 2**20:,.0f} |")
    return rows


def rate_text(rate: float | None) -> str:
    """A rate as "12.34 M" or "56.7 k"."""
    if rate is None:
        return "n/a"
    return f"{rate / 1e6:,.2f} M" if rate >= 1e6 else f"{rate / 1e3:,.1f} k"


def bench_opendp(n: int, runs: int) -> list[tuple[str, str, float | None, str]]:
    """Rows measured by running OPENDP_SNIPPET in .bench-venv (timed calls include converting the
    Python list to and from OpenDP's Rust vectors, as any Python caller pays)."""
    try:
        python = ensure_peer_venv()
        done = subprocess.run(
            [str(python), "-c", OPENDP_SNIPPET, str(n), str(runs)],
            capture_output=True,
            text=True,
            check=True,
            timeout=3600,
        )
        results = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        return [("opendp", f"(unavailable: {type(exc).__name__})", None, str(exc)[:80])]
    rows: list[tuple[str, str, float | None, str]] = []
    for label, value in results.items():
        if isinstance(value, list):
            note = f"median of {len(value)} runs; includes list conversion"
            rows.append(("opendp " + OPENDP_VERSION, label, n / statistics.median(value), note))
        else:
            rows.append(("opendp " + OPENDP_VERSION, label, None, value[:80]))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="10^5 samples per call, 3 runs")
    parser.add_argument("--runs", type=int, default=None, help="runs per sampler (median)")
    parser.add_argument("--no-opendp", action="store_true", help="skip the OpenDP comparison")
    parser.add_argument("--large", action="store_true", help="also time 10^6 and 10^7 calls")
    parser.add_argument("--grid-only", action="store_true", help="print only the grid table")
    args = parser.parse_args(argv)
    n = 10**5 if args.quick else 10**6
    runs = args.runs or (3 if args.quick else 7)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"Million draws per CPU-second, best of {min(runs, 3)} (Python "
        f"{platform.python_version()}, numpy {np.__version__}, {platform.machine()}, load average "
        f"{load:.1f} on {os.cpu_count()} CPUs)\n"
    )
    print("\n".join(grid(min(runs, 3), GRID_SCALES[:3] if args.quick else GRID_SCALES)))
    if args.grid_only:
        return
    print()

    rows = bench_python(n, runs, args.quick)
    if not args.no_opendp:
        rows += bench_opendp(n, min(runs, 3))  # OpenDP takes ~10-80 s per 10^6 samples

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"Samples per second, median of {runs} runs of {n:,} samples each "
        f"(Python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
        f"load average {load:.1f} on {os.cpu_count()} CPUs)\n"
    )
    print("| library | sampler | samples/s | note |")
    print("|---|---|---:|---|")
    for library, name, rate, note in rows:
        print(f"| {library} | {name} | {rate_text(rate)} | {note} |")
    if args.large:
        print("\n| sampler | samples per call | samples/s (CPU) | peak allocated (MB) |")
        print("|---|---:|---:|---:|")
        print("\n".join(large_calls(3)))


if __name__ == "__main__":
    main()
