"""A statistician's first week on UCI Adult, rerun in one command: medians with their
intervals, logistic and linear fits (how often a coefficient lies outside its own interval, and
whether the public box binds), the rank error of the median intervals against the exact
medians, and the CLI's cost per call against a running demo server.

``python benchmarks/adult_workflow.py [--seed 0] [--fits 8] [--cli-calls 5]``

The exact statistics are computed here from the raw file only to grade the releases (a
benchmark's oracle); the releases themselves come from public metadata and the budget.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synth_adult import load, metadata

from dpcurator import Budget, Metadata, Session
from dpcurator.random import SeededRng


def _table(header: list[str], rows: list[list[Any]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")
    print()


def _frame_and_metadata() -> tuple[pd.DataFrame, Metadata]:
    frame = load()
    frame["high_income"] = (frame["income"] == ">50K").astype(int)
    described = metadata(frame.drop(columns=["high_income"]), plain=False).to_dict()
    described["columns"]["high_income"] = {"type": "int", "lower": 0, "upper": 1}  # type: ignore[index]
    return frame, Metadata.from_dict(described)


def medians(frame: pd.DataFrame, meta: Metadata, seed: int) -> None:
    """MEDIAN(age) by sex at ε = 1 and by race at ε = 0.3: the release, its interval, the exact
    median, and the interval's width in ranks of the group."""
    rows = []
    for by, epsilon in (("sex", 1.0), ("race", 0.3)):
        session = Session.from_data(
            frame, metadata=meta, budget=Budget(epsilon=10), rng=SeededRng(seed)
        )
        release = session.sql(
            f"SELECT {by}, MEDIAN(age) AS m FROM adult GROUP BY {by}", epsilon=epsilon
        )
        table = release.to_pandas()
        for _, got in table.iterrows():
            ages = np.sort(frame.loc[frame[by] == got[by], "age"].to_numpy())
            low, high = got["m_ci_low"], got["m_ci_high"]
            # the interval in ranks: how many of the group's values it spans (ties included)
            ranks = int(np.searchsorted(ages, high, "right") - np.searchsorted(ages, low, "left"))
            interval = f"[{low:g}, {high:g}]"
            exact = float(np.median(ages))
            rows.append([by, got[by], epsilon, len(ages), got["m"], interval, exact, ranks])
    _table(["by", "group", "ε", "n", "median", "CI", "exact", "values in CI"], rows)


def fits(frame: pd.DataFrame, meta: Metadata, seed: int, count: int) -> None:
    """``count`` logistic (ε = 0.5) and linear (ε = 0.5, δ = 1e-7) fits: coefficients outside
    their own interval (must be 0) and coefficients at the public box."""
    rows = []
    for model, sql, delta in (
        ("logistic", "SELECT LOGISTIC(high_income, age, hours-per-week) FROM adult", 0.0),
        ("linear", "SELECT REGRESS(hours-per-week, age, high_income) FROM adult", 1e-7),
    ):
        outside = at_box = terms = 0
        for i in range(count):
            session = Session.from_data(
                frame, metadata=meta, budget=Budget(epsilon=10, delta=1e-6),
                rng=SeededRng(seed + i),
            )  # fmt: skip
            quoted = sql.replace("hours-per-week", '"hours-per-week"')
            table = session.sql(quoted, epsilon=0.5, delta=delta)
            out = table.to_pandas()
            terms += len(out)
            low, high = out["coefficient_ci_low"], out["coefficient_ci_high"]
            outside += int(((out["coefficient"] < low) | (out["coefficient"] > high)).sum())
            if "at_box_bound" in out:
                at_box += int(out["at_box_bound"].sum())
        rows.append([model, count, terms, outside, at_box])
    _table(["model", "fits", "coefficients", "outside own CI", "at box bound"], rows)


def cli_costs(calls: int) -> None:
    """User+system CPU and wall seconds per CLI call against ``dpcurator serve --demo``."""
    exe = Path(sys.executable).with_name("dpcurator")
    port = 8765
    server = subprocess.Popen(
        [str(exe), "serve", "--demo", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        token = ""
        assert server.stdout is not None
        for line in server.stdout:
            if line.startswith("analyst token:"):
                token = line.split(":", 1)[1].strip()
            if "http://" in line:  # the server answers
                break
        env = os.environ | {"DPCURATOR_URL": f"http://127.0.0.1:{port}", "DPCURATOR_TOKEN": token}
        rows = []
        for name, args in (
            ("budget", ["budget", "--dataset", "demo"]),
            ("history", ["history", "--limit", "5"]),
            ("query", ["query", "--dataset", "demo", "--epsilon", "0.01",
                       "SELECT COUNT(*) AS n FROM people"]),
        ):  # fmt: skip
            cpu, wall = [], []
            for _ in range(calls):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                subprocess.run([str(exe), *args], env=env, check=True, capture_output=True)
                wall.append(time.perf_counter() - start)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            rows.append([name, calls, f"{np.median(cpu):.3f}", f"{np.median(wall):.3f}"])
        _table(["CLI call", "calls", "median CPU s", "median wall s"], rows)
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fits", type=int, default=8)
    parser.add_argument("--cli-calls", type=int, default=5)
    args = parser.parse_args()
    frame, meta = _frame_and_metadata()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n")
    medians(frame, meta, args.seed)
    fits(frame, meta, args.seed, args.fits)
    cli_costs(args.cli_calls)


if __name__ == "__main__":
    main()
