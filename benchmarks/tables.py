"""Contingency-table benchmark: every 1- and 2-way table, made consistent by mbi's graphical model
(``plan_marginals``) or by Barak et al.'s Fourier method (``plan_fourier``), at equal ρ.

Data: the AIM benchmark tables in ``../shared/data/aim_benchmark_hd_datasets/`` whose full domain
fits the Fourier method's linear program: nltcs (16 binary columns, 65,536 cells, 136 tables) and
titanic without Age and Fare (7 columns, 30,618 cells, 28 tables). ε ∈ {0.1, 1, 10} with
δ = 1e-9 converted to ρ as in ``synth.py``. Rows per (dataset, ε):

* ``raw``: the noisy marginals as measured for mbi (no consistency; negative cells clipped to 0
  before normalising), read from the mbi release's ``noisy`` column;
* ``mbi``: the released integral counts of ``release_marginals`` (mbi inference, then records);
* ``fourier-noisy``: the Fourier method's consistent unrounded values (clipped like ``raw``);
* ``fourier``: its released integral counts (LP, then rounding).

Columns: mean TVD of the 2-way tables (½·Σ|p - q| of the normalised true and released table),
the RMSE of a 2-way cell in counts, the largest disagreement (in counts) between a 2-way table's
margin and the 1-way table of the same column (0 means consistent), wall time and peak memory of
the release (its own process). ``--repeats`` averages that many runs.

``.venv/bin/python benchmarks/tables.py`` (about 5 min); ``--datasets nltcs --epsilons 1``.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
import pandas as pd
from synth import DATA, rho_for

import dpcurator as dpc
from dpcurator.accounting import PrivacyFilter, ZCDPAccountant
from dpcurator.core.measures import ZCDP
from dpcurator.synth.fourier import plan_fourier, release_fourier
from dpcurator.synth.marginals import ContingencyTables, plan_marginals, release_marginals

DATASETS = {
    "nltcs": None,
    "titanic": ["Survived", "Pclass", "Sex", "SibSp", "Parch", "Embarked", "Cabin"],
}
METHODS = ("mbi", "fourier")


def _session(dataset: str, rho: float) -> tuple[dpc.Session, pd.DataFrame]:
    sizes = json.loads((DATA / f"{dataset}-domain.json").read_text())
    keep = DATASETS[dataset] or list(sizes)
    frame = pd.read_csv(DATA / f"{dataset}.csv")[keep]
    columns = {c: {"type": "int", "keys": list(range(sizes[c]))} for c in keep}
    meta = dpc.Metadata.from_dict({"table": dataset, "columns": columns})
    budget = PrivacyFilter(ZCDP(rho), ZCDPAccountant())
    return dpc.Session.from_data(frame, metadata=meta, budget_filter=budget), frame


def _scores(tables: ContingencyTables, frame: pd.DataFrame, field: str) -> dict[str, float]:
    """Mean 2-way TVD, 2-way cell RMSE and the largest margin disagreement of one field."""
    tvds, squares, gaps = [], [], [0.0]
    for clique, table in tables.tables.items():
        if len(clique) != 2:
            continue
        truth = frame.groupby(list(clique)).size()
        index = pd.MultiIndex.from_frame(table[list(clique)])
        exact = truth.reindex(index, fill_value=0).to_numpy(np.float64)
        values = table[field].to_numpy(np.float64)
        squares.extend((values - exact) ** 2)
        released = np.clip(values, 0, None)
        p, q = exact / exact.sum(), released / max(released.sum(), 1e-12)
        tvds.append(0.5 * float(np.abs(p - q).sum()))
        for column in clique:
            margin = table.groupby(column)[field].sum()
            one = tables.table(column).set_index(column)[field]
            gaps.append(float(np.abs(margin.reindex(one.index).to_numpy() - one.to_numpy()).max()))
    return {
        "tvd2": statistics.fmean(tvds),
        "rmse2": math.sqrt(statistics.fmean(squares)),
        "max_gap": max(gaps),
    }


def run_one(dataset: str, method: str, epsilon: float, repeats: int) -> list[dict[str, object]]:
    """``repeats`` releases in this process; one row per released field (means over runs)."""
    rho = rho_for(epsilon)
    fields = {
        "mbi": {"raw": "noisy", "mbi": "count"},
        "fourier": {"fourier-noisy": "noisy", "fourier": "count"},
    }[method]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in fields}
    walls = []
    for _ in range(repeats):
        session, frame = _session(dataset, rho)
        start = time.perf_counter()
        if method == "mbi":
            tables = release_marginals(session, plan_marginals(session, 2, rho=rho))
        else:
            tables = release_fourier(session, plan_fourier(session, 2, rho=rho))
        walls.append(time.perf_counter() - start)
        for name, field in fields.items():
            runs[name].append(_scores(tables, frame, field))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    rows = []
    for name, scores in runs.items():
        row: dict[str, object] = {"dataset": dataset, "method": name, "epsilon": epsilon}
        for key in ("tvd2", "rmse2", "max_gap"):
            row[key] = round(statistics.fmean(s[key] for s in scores), 4)
        row.update(seconds=round(statistics.fmean(walls), 1), peak_gb=round(peak, 2))
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--epsilons", nargs="+", type=float, default=[0.1, 1.0, 10.0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--one", nargs=3, metavar=("DATASET", "METHOD", "EPSILON"))
    args = parser.parse_args()
    if args.one:
        dataset, method, epsilon = args.one
        for row in run_one(dataset, method, float(epsilon), args.repeats):
            print(json.dumps(row), flush=True)
        return
    rows = []
    for dataset in args.datasets:
        for epsilon in args.epsilons:
            for method in METHODS:
                command = [sys.executable, __file__, "--one", dataset, method, str(epsilon)]
                command += ["--repeats", str(args.repeats)]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                for line in done.stdout.splitlines():
                    if line.startswith("{"):
                        rows.append(json.loads(line))
                        print(line, flush=True)
    print(pd.DataFrame(rows).to_string(index=False))


if __name__ == "__main__":
    main()
