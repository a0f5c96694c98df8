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
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

import dpcurator as dpc
from dpcurator.accounting import PrivacyFilter, ZCDPAccountant
from dpcurator.core.measures import ZCDP
from dpcurator.errors import DPError
from dpcurator.synth.aim import aim
from dpcurator.synth.marginals import tabulate
from dpcurator.synth.mst import independent, mst
from dpcurator.synth.mwem import mwem

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "aim_benchmark_hd_datasets"
DELTA = 1e-9
METHODS = ("independent", "mst", "aim", "mwem")


def rho_for(epsilon: float, delta: float = DELTA) -> float:
    """The ρ whose standard zCDP conversion at δ is ε (Bun & Steinke 2016, Prop. 1.3)."""
    log = math.log(1 / delta)
    return (math.sqrt(epsilon + log) - math.sqrt(log)) ** 2


def _cpu_seconds() -> float:
    """User and system CPU time of this process so far (every thread)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_one(dataset: str, method: str, epsilon: float) -> dict[str, object]:
    """One run in this process: the row of the table."""
    sizes = json.loads((DATA / f"{dataset}-domain.json").read_text())
    frame = pd.read_csv(DATA / f"{dataset}.csv")
    columns = {c: {"type": "int", "keys": list(range(n))} for c, n in sizes.items()}
    meta = dpc.Metadata.from_dict({"table": dataset, "columns": columns})
    rho = rho_for(epsilon)
    start, cpu_start = time.perf_counter(), _cpu_seconds()
    row: dict[str, object] = {"dataset": dataset, "method": method, "epsilon": epsilon}
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
    seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu_start
    real = result.domain.encode(frame)
    errors = []
    for clique in itertools.combinations(result.domain.names, 2):
        if result.domain.cells(clique) > 10_000:
            continue
        x = tabulate(real, result.domain, clique)
        y = tabulate(result.codes, result.domain, clique)
        errors.append(0.5 * float(np.abs(x / x.sum() - y / max(y.sum(), 1)).sum()))
    row.update(
        tvd2=round(float(np.mean(errors)), 4),
        seconds=round(seconds, 1),
        cpu_seconds=round(cpu, 1),
        peak_gb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        charge=str(float(session.spent().rho if method != "mwem" else session.spent().epsilon)),  # type: ignore[union-attr]
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["adult", "nltcs", "salary", "titanic"])
    parser.add_argument("--epsilons", nargs="+", type=float, default=[0.1, 1.0, 10.0])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--one", nargs=3, metavar=("DATASET", "METHOD", "EPSILON"))
    args = parser.parse_args()
    if args.one:  # the synthesizers' progress (one line a round) goes to stderr
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        logging.getLogger("dpcurator.synth").setLevel(logging.INFO)
        print(json.dumps(run_one(args.one[0], args.one[1], float(args.one[2]))))
        return
    rows = []
    for dataset, epsilon, method in itertools.product(args.datasets, args.epsilons, args.methods):
        done = subprocess.run(
            [sys.executable, __file__, "--one", dataset, method, str(epsilon)],
            capture_output=True,
            text=True,
            check=False,
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        row = (
            json.loads(lines[-1])
            if lines
            else {
                "dataset": dataset,
                "method": method,
                "epsilon": epsilon,
                "refused": f"process failed: {done.stderr.strip().splitlines()[-1:]}",
            }
        )
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(pd.DataFrame(rows).to_string(index=False))


if __name__ == "__main__":
    main()
