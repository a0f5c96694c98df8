"""Synthetic-data benchmark: dpcurator MST / AIM / MWEM and the independent-marginals baseline.

Data: the AIM benchmark tables in ``../shared/data/aim_benchmark_hd_datasets/`` (integer codes,
sizes in ``X-domain.json``, declared as public keys). Each run: (ε, δ = 1e-9) converted to ρ-zCDP
by ρ = (sqrt(ε + log(1/δ)) - sqrt(log(1/δ)))² (so ρ + 2·sqrt(ρ·log(1/δ)) = ε), a DuckDB session
with a zCDP filter, the synthesizer, then the mean total variation distance over all 2-way
marginals of at most 10^4 cells (real vs synthetic), the wall time, the CPU time of all the
process's threads (on a loaded machine the wall time overstates the work) and the peak resident
memory.
MWEM runs under pure ε (its full domain must fit; adult's does not and is refused, free).

Each (dataset, method, ε) runs in its own process, so peak memory is that run's:
``python benchmarks/synth.py --datasets adult --epsilons 1``; ``--methods`` picks methods.
``--repeats N`` runs each of our rows N times and reports the mean TVD and its standard error
(on titanic's 1,304 rows at ε = 0.1 one run's TVD varies by ±0.05).

Peers (``--peers``, or ``--peers smartnoise-mst mbi-aim`` for some): SmartNoise Synth's MWEM, MST
and AIM and mbi's reference MST and AIM scripts, each run by ``peer_synth.py`` in the virtualenv
``.synth-venv/`` (SmartNoise pins mbi < 2, opacus and torch; the reference scripts need the JAX of
their time), scored by the same ``synth_tvd.mean_tvd2``. ``.venv/bin/python benchmarks/synth.py
--setup-peers`` creates that virtualenv (idempotent; ``--peers`` does it too, on first use). mbi's
scripts are not on PyPI: ``--mbi-repo PATH`` names a private-pgm checkout, without it their rows
say why they were skipped. ``--time-limit MINUTES`` (default 60) stops a peer run and reports
"stopped at N min". Example: ``.venv/bin/python benchmarks/synth.py --datasets titanic adult
--epsilons 1 --peers --mbi-repo ../private-pgm``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from peer_synth import METHODS as PEER_METHODS
from peers import ROOT, ensure_venv
from synth_tvd import mean_tvd2

import dpcurator as dpc
from dpcurator.accounting import PrivacyFilter, ZCDPAccountant
from dpcurator.core.measures import ZCDP
from dpcurator.errors import DPError
from dpcurator.synth.aim import aim
from dpcurator.synth.mst import independent, mst
from dpcurator.synth.mwem import mwem

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "aim_benchmark_hd_datasets"
DELTA = 1e-9
METHODS = ("independent", "mst", "aim", "mwem")
SYNTH_PEER_VENV = ROOT / ".synth-venv"
SYNTH_PEER_REQUIREMENTS = (
    "smartnoise-synth==1.0.8",
    "mbi==1.1.0",
    # mbi's reference scripts (private-pgm, Aug 2025) fail under JAX >= 0.8 (tracers are no
    # longer chex.Numeric); SmartNoise's mbi 1.1.0 runs on these too
    "jax==0.7.0",
    "jaxlib==0.7.0",
    "chex==0.1.90",
    "optax==0.2.5",
    "matplotlib==3.11.2",  # imported by mbi's mechanisms/cdp2adp.py
)


def rho_for(epsilon: float, delta: float = DELTA) -> float:
    """The ρ whose standard zCDP conversion at δ is ε (Bun & Steinke 2016, Prop. 1.3)."""
    log = math.log(1 / delta)
    return (math.sqrt(epsilon + log) - math.sqrt(log)) ** 2


def _cpu_seconds() -> float:
    """User and system CPU time of this process so far (every thread)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_one(dataset: str, method: str, epsilon: float, repeats: int = 1) -> dict[str, object]:
    """``repeats`` runs in this process: the row of the table (TVD, wall and CPU time: means
    over the runs; with repeats > 1 the runs' TVDs and their standard error too)."""
    sizes = json.loads((DATA / f"{dataset}-domain.json").read_text())
    frame = pd.read_csv(DATA / f"{dataset}.csv")
    columns = {c: {"type": "int", "keys": list(range(n))} for c, n in sizes.items()}
    meta = dpc.Metadata.from_dict({"table": dataset, "columns": columns})
    rho = rho_for(epsilon)
    row: dict[str, object] = {"dataset": dataset, "method": method, "epsilon": epsilon}
    tvds, walls, cpus = [], [], []
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), _cpu_seconds()
        try:
            if method == "mwem":
                session = dpc.Session.from_data(frame, metadata=meta, budget=dpc.Budget(epsilon))
                result = mwem(session, epsilon=epsilon)
            else:
                budget = PrivacyFilter(ZCDP(rho), ZCDPAccountant())
                session = dpc.Session.from_data(frame, metadata=meta, budget_filter=budget)
                synthesizer = {"independent": independent, "mst": mst, "aim": aim}[method]
                result = synthesizer(session, rho=rho)
        except DPError as refused:
            row["refused"] = str(refused)[:120]
            return row
        walls.append(time.perf_counter() - start)
        cpus.append(_cpu_seconds() - cpu_start)
        real = result.domain.encode(frame)
        tvds.append(mean_tvd2(real, result.codes, result.domain.config()))
    row.update(
        tvd2=round(statistics.fmean(tvds), 4),
        seconds=round(statistics.fmean(walls), 1),
        cpu_seconds=round(statistics.fmean(cpus), 1),
        peak_gb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        charge=str(float(session.spent().rho if method != "mwem" else session.spent().epsilon)),  # type: ignore[union-attr]
    )
    if repeats > 1:
        row["tvd2_se"] = round(statistics.stdev(tvds) / math.sqrt(repeats), 4)
        row["tvd2_runs"] = [round(t, 3) for t in tvds]
    return row


def _run_row(
    command: list[str], dataset: str, method: str, epsilon: float, timeout: float | None
) -> dict[str, object]:
    """Run one row's process and return the JSON row it prints last (or why there is none)."""
    row: dict[str, object] = {"dataset": dataset, "method": method, "epsilon": epsilon}
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired as late:
        row["stopped"] = f"killed after {late.timeout / 60:g} min"
        return row
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if lines:
        parsed: dict[str, object] = json.loads(lines[-1])
        return parsed
    code = done.returncode  # a negative one is a signal: -9 is the kernel's out-of-memory kill
    why = f"killed by signal {-code}" if code < 0 else f"exit {code}"
    row["refused"] = f"process failed ({why}): {done.stderr.strip().splitlines()[-1:]}"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["adult", "nltcs", "salary", "titanic"])
    parser.add_argument("--epsilons", nargs="+", type=float, default=[0.1, 1.0, 10.0])
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS)
    parser.add_argument("--peers", nargs="*", choices=PEER_METHODS, help="all when none named")
    parser.add_argument("--mbi-repo", type=Path, help="a private-pgm checkout (mbi's scripts)")
    parser.add_argument("--time-limit", type=float, default=60.0, help="minutes, per peer run")
    parser.add_argument("--setup-peers", action="store_true", help="create .synth-venv and exit")
    parser.add_argument("--one", nargs=3, metavar=("DATASET", "METHOD", "EPSILON"))
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs of each of our rows (mean and its error)"
    )
    args = parser.parse_args()
    if args.setup_peers:
        print(ensure_venv(SYNTH_PEER_VENV, SYNTH_PEER_REQUIREMENTS))
        return
    if args.one:  # the synthesizers' progress (one line a round) goes to stderr
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        logging.getLogger("dpcurator.synth").setLevel(logging.INFO)
        print(json.dumps(run_one(args.one[0], args.one[1], float(args.one[2]), args.repeats)))
        return
    peers = list(PEER_METHODS) if args.peers == [] else (args.peers or [])
    python = ensure_venv(SYNTH_PEER_VENV, SYNTH_PEER_REQUIREMENTS) if peers else None
    rows = []
    for dataset, epsilon in itertools.product(args.datasets, args.epsilons):
        for method in [*args.methods, *peers]:
            if method in METHODS:
                command = [sys.executable, __file__, "--one", dataset, method, str(epsilon)]
                command += ["--repeats", str(args.repeats)]
                timeout = None
            else:
                command = [str(python), str(Path(__file__).with_name("peer_synth.py"))]
                command += [dataset, method, str(epsilon), "--time-limit", str(args.time_limit)]
                command += ["--mbi-repo", str(args.mbi_repo)] if args.mbi_repo else []
                timeout = (args.time_limit + 5) * 60  # the run's own alarm comes first
            row = _run_row(command, dataset, method, epsilon, timeout)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(pd.DataFrame(rows).to_string(index=False))


if __name__ == "__main__":
    main()
