"""The "open" table of ``query.py``: loading a table in raw DuckDB versus opening it in dpcurator.

Each measurement runs in its own process (``python open_table.py KIND PARQUET``) so that its peak
resident memory is its own: the process imports everything, then times one load of the Parquet
file and prints JSON ``{"seconds": ..., "cpu_seconds": ..., "peak_gb": ...}`` (wall time, and the
CPU time of all the process's threads, which a machine loaded by other work inflates less).
Kinds:

* ``raw`` — ``CREATE TABLE t AS SELECT * FROM read_parquet(...)`` in a fresh DuckDB;
* ``row-level`` / ``user-level`` — ``Session.from_data(parquet, metadata)`` on the DuckDB engine
  with its default ``precompute=True``: the private copy with its fixed-point and key-code
  columns (in the file's order), and the cube of a row-level table (a user-level table's
  bounding columns are computed later, by the first query that reads them).

Peak memory is the process's maximum resident set size (``ru_maxrss``), imports included (the
same interpreter and libraries for every kind).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import duckdb
from query_data import metadata

from dpcurator import Budget, Session

KINDS = ("raw", "row-level", "user-level")


def measure(kind: str, parquet: str) -> dict[str, float]:
    """Load ``parquet`` once as ``kind`` (in this process) and return wall and CPU seconds and
    peak GB (everything is imported before the clocks start)."""
    start, cpu = time.perf_counter(), time.process_time()
    if kind == "raw":
        connection = duckdb.connect()
        connection.execute("CREATE TABLE t AS SELECT * FROM read_parquet($path)", {"path": parquet})
    else:
        session = Session.from_data(
            parquet, metadata=metadata(kind == "user-level"), budget=Budget(1.0)
        )
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    if kind != "raw":
        session.close()
    return {"seconds": elapsed, "cpu_seconds": cpu, "peak_gb": peak}


def open_rows(rows: int, parquet: Path) -> list[str]:
    """The markdown rows of the open table for one size (one child process per kind)."""
    results = {}
    for kind in KINDS:
        child = subprocess.run(
            [sys.executable, __file__, kind, str(parquet)],
            check=True,
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent,
        )
        results[kind] = json.loads(child.stdout.splitlines()[-1])
    raw = results["raw"]
    return [
        f"| {rows:.0e} | {kind} | {r['seconds']:.2f} | {r['cpu_seconds']:.2f} | "
        f"{r['peak_gb']:.2f} | {r['seconds'] / raw['seconds']:.2f} | "
        f"{r['cpu_seconds'] / raw['cpu_seconds']:.2f} | {r['peak_gb'] / raw['peak_gb']:.2f} |"
        for kind, r in results.items()
    ]


OPEN_HEADER = (
    "| N | open | seconds | CPU seconds | peak RSS (GB) | time / raw | CPU / raw | memory / raw |"
    "\n" + "|---" * 8 + "|"
)

if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], sys.argv[2])))
