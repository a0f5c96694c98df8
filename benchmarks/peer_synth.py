"""Synthetic-data peers for ``benchmarks/synth.py --peers``: one (dataset, method, ε) per process.

Runs inside the synthesizer peers' virtualenv ``.synth-venv/`` (SmartNoise Synth pins mbi < 2,
opacus and torch, so it has its own;
``.venv/bin/python benchmarks/synth.py --setup-peers`` creates it, and ``--peers`` on first use).
Methods:

- ``smartnoise-mwem``, ``smartnoise-mst``, ``smartnoise-aim``: SmartNoise Synth's synthesizers
  (``snsynth.Synthesizer.create``). The columns' domains are the public ``X-domain.json`` sizes: a
  label transformer per column is fitted on the public codes ``0 .. size-1``, never on the data, so
  no preprocessing budget is spent and no category is learnt from the data.
- ``mbi-mst``, ``mbi-aim``: the reference scripts ``mechanisms/mst.py`` and ``mechanisms/aim.py``
  of a private-pgm checkout (``--mbi-repo PATH``; the ``mbi`` package on PyPI does not ship them),
  run as their ``__main__`` does (AIM: 2-way workload of at most 10^4 cells, default parameters),
  on the checkout's own ``src/mbi`` (the version the scripts are written for; PyPI's mbi 1.1.0
  rejects MST's compressed columns). Nothing of theirs is copied here: the scripts are imported.

Prints one JSON row: ``tvd2`` (``synth_tvd.mean_tvd2``, the measure ``synth.py`` uses for our
rows), wall and CPU seconds, peak RSS. ``--time-limit MINUTES`` stops a run with ``stopped``
("stopped at N min", no TVD) instead of letting it hang.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
from synth_tvd import mean_tvd2

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "aim_benchmark_hd_datasets"
DELTA = 1e-9
SMARTNOISE = ("smartnoise-mwem", "smartnoise-mst", "smartnoise-aim")
MBI = ("mbi-mst", "mbi-aim")
METHODS = SMARTNOISE + MBI


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _smartnoise(
    name: str, frame: pd.DataFrame, sizes: dict[str, int], epsilon: float
) -> pd.DataFrame:
    from snsynth import Synthesizer  # type: ignore[import-not-found]  # noqa: PLC0415
    from snsynth.transform import (  # type: ignore[import-not-found]  # noqa: PLC0415
        LabelTransformer,
        TableTransformer,
    )

    public = pd.DataFrame(
        {c: [i % n for i in range(max(sizes.values()))] for c, n in sizes.items()}
    )
    transformer = TableTransformer([LabelTransformer(nullable=False) for _ in sizes])
    transformer.fit(public, epsilon=0.0)
    kwargs = {} if name == "mwem" else {"delta": DELTA}
    synthesizer = Synthesizer.create(name, epsilon=epsilon, **kwargs)
    synthesizer.fit(frame, transformer=transformer, preprocessor_eps=0.0)
    return pd.DataFrame(synthesizer.sample(len(frame)), columns=list(sizes))


def _mbi_reference(name: str, dataset: str, epsilon: float, repo: Path) -> pd.DataFrame:
    sys.path[:0] = [str(repo / "mechanisms"), str(repo / "src")]  # the scripts' own mbi
    from mbi import Dataset  # type: ignore[import-untyped]  # noqa: PLC0415 (the path above)

    data = Dataset.load(str(DATA / f"{dataset}.csv"), str(DATA / f"{dataset}-domain.json"))
    if name == "mst":
        synthetic = importlib.import_module("mst").MST(data, epsilon, DELTA)
    else:
        aim = importlib.import_module("aim")
        params = aim.default_params()
        workload = [
            (clique, 1.0)
            for clique in itertools.combinations(data.domain, params["degree"])
            if data.domain.size(clique) <= params["max_cells"]
        ]
        mechanism = aim.AIM(
            epsilon, DELTA, max_model_size=params["max_model_size"], max_iters=params["max_iters"]
        )
        _, synthetic = mechanism.run(data, workload)
    frame: pd.DataFrame = synthetic.df
    return frame


def _measure(row: dict[str, object], start: float, cpu_start: float) -> dict[str, object]:
    """``row`` with the run's wall and CPU seconds and the process's peak RSS so far."""
    row.update(
        seconds=round(time.perf_counter() - start, 1),
        cpu_seconds=round(_cpu_seconds() - cpu_start, 1),
        peak_gb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
    )
    return row


def _stop_after(minutes: float, row: dict[str, object], start: float, cpu_start: float) -> None:
    """A watchdog thread: after ``minutes``, print the row as stopped and end the process. A
    thread, not SIGALRM: a signal waits for the main thread to leave XLA, which can take minutes."""

    def stop() -> None:
        stopped = {**row, "stopped": f"stopped at {minutes:g} min"}
        print(json.dumps(_measure(stopped, start, cpu_start)), file=sys.__stdout__, flush=True)
        os._exit(0)

    threading.Timer(minutes * 60, stop).start()


def run_one(
    dataset: str, method: str, epsilon: float, time_limit: float | None, mbi_repo: Path | None
) -> dict[str, object]:
    """One run in this process: the row of the table."""
    sizes: dict[str, int] = json.loads((DATA / f"{dataset}-domain.json").read_text())
    frame = pd.read_csv(DATA / f"{dataset}.csv")[list(sizes)]
    row: dict[str, object] = {"dataset": dataset, "method": method, "epsilon": epsilon}
    if method in MBI and (mbi_repo is None or not (mbi_repo / "mechanisms").is_dir()):
        row["refused"] = f"skipped: no private-pgm checkout (--mbi-repo {mbi_repo})"
        return row
    start, cpu_start = time.perf_counter(), _cpu_seconds()
    if time_limit:
        _stop_after(time_limit, row, start, cpu_start)
    with contextlib.redirect_stdout(sys.stderr):  # the peers print progress
        engine, name = method.split("-", 1)
        if engine == "smartnoise":
            synthetic = _smartnoise(name, frame, sizes, epsilon)
        else:
            assert mbi_repo is not None
            synthetic = _mbi_reference(name, dataset, epsilon, mbi_repo)
    _measure(row, start, cpu_start)
    real = {c: frame[c].to_numpy(np.int64) for c in sizes}
    codes = {c: synthetic[c].to_numpy(np.int64) for c in sizes}
    row["tvd2"] = round(mean_tvd2(real, codes, sizes), 4)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("method", choices=METHODS)
    parser.add_argument("epsilon", type=float)
    parser.add_argument("--time-limit", type=float, help="minutes")
    parser.add_argument("--mbi-repo", type=Path, help="a private-pgm checkout")
    args = parser.parse_args()
    row = run_one(args.dataset, args.method, args.epsilon, args.time_limit, args.mbi_repo)
    print(json.dumps(row), flush=True)
    os._exit(0)  # the watchdog's timer thread must not keep the process alive


if __name__ == "__main__":
    main()
