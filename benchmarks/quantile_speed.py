"""Quantile speed on DuckDB next to grouped counts (issue 26 item 1; docs/sql.md's table).

``PYTHONPATH=src python benchmarks/quantile_speed.py [N ...]`` (default 10^6 and 10^7) opens
``query.py``'s table (N(50, 30^2) clamped to [0, 100], 1,000 public groups) at row level and
prints milliseconds per release at ε = 1: the best of 5 after a warm-up for the median and the
grouped counts (unfiltered: from the cube; filtered: a full pass), one release for the grouped
median, with the time of each engine pass (of that best run) and the CPU time of the process
(every DuckDB thread included; on a shared machine the steadier number). ``--grouped-rows``
caps the sizes the slow grouped median runs at (default 10^6).
"""

from __future__ import annotations

import argparse
import time

from query_data import generate, metadata

import dpcurator as dpc

QUERIES = {
    "median": "SELECT MEDIAN(value) AS m FROM t",
    "grouped count": "SELECT g, COUNT(*) AS n FROM t GROUP BY g",
    "grouped count, filtered": "SELECT g, COUNT(*) AS n FROM t WHERE value > 10 GROUP BY g",
}
GROUPED = "SELECT g, MEDIAN(value) AS m FROM t GROUP BY g"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", type=int, nargs="*", default=[10**6, 10**7])
    parser.add_argument("--grouped-rows", type=int, default=10**6)
    args = parser.parse_args()
    print("| N | query | ms | CPU ms | engine passes (ms) |\n|---|---|---|---|---|")
    for rows in args.sizes:
        session = dpc.Session.from_data(
            generate(rows), metadata=metadata(False), budget=dpc.Budget(10**9)
        )
        backend = session._backend
        compute, passes = backend._compute, []  # type: ignore[attr-defined]

        def timed(*plan: object, compute: object = compute, passes: list[int] = passes) -> object:
            start = time.perf_counter()
            result = compute(*plan)  # type: ignore[operator]
            passes.append(round((time.perf_counter() - start) * 1000))
            return result

        backend._compute = timed  # type: ignore[attr-defined]
        for name, sql in QUERIES.items():
            session.sql(sql, epsilon=1.0)
            best = (float("inf"), 0.0, [0])
            for _ in range(5):
                passes.clear()
                start, cpu = time.perf_counter(), time.process_time()
                session.sql(sql, epsilon=1.0)
                elapsed = time.perf_counter() - start
                best = min(best, (elapsed, time.process_time() - cpu, list(passes)))
            wall, used, timed = best
            print(f"| {rows:.0e} | {name} | {wall * 1000:.1f} | {used * 1000:.0f} | {timed} |")
        if rows <= args.grouped_rows:
            passes.clear()
            start, cpu = time.perf_counter(), time.process_time()
            session.sql(GROUPED, epsilon=1.0)
            wall, used = time.perf_counter() - start, time.process_time() - cpu
            ms = f"{wall * 1000:.0f} | {used * 1000:.0f}"
            print(f"| {rows:.0e} | grouped median | {ms} | {passes} |")
        session.close()


if __name__ == "__main__":
    main()
