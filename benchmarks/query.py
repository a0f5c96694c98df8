"""Query benchmark: raw DuckDB SQL versus dpcurator releases versus peer DP libraries, in one run.

Data: N rows, ``value ~ N(50, 30^2)`` clamped to [0, 100], 1,000 public groups ``g``, ~10 rows per
person ``uid``. Rows: count, sum, mean, median, grouped count, grouped sum, and a user-level
bounded grouped sum (each person keeps at most 5 groups and 2 rows per group), without and with a
filter. Columns (seconds, minimum over repeats):

* raw DuckDB SQL — what an analyst writes without privacy (for the bounded rows: the same
  bounding and clamping written by hand in DuckDB SQL);
* dpcurator on DuckDB and on Polars — a complete release through ``Session.sql``: parse, plan,
  exact aggregates in the engine, exact noise, confidence intervals;
* OpenDP's Polars plugin and diffprivlib — run in their own virtualenv (``peers.py``) on the same
  data written to Parquet.

The raw baseline queries a native table of an in-memory DuckDB connection; dpcurator's DuckDB
backend opens that same table and, as it does by default, copies it once into a private table
with precomputed columns (public metadata only): the fixed-point column of ``value``, the key
codes of ``g``. The time of this one-off step is printed per session and is not part of any
query's time. In the user-level session, the first unfiltered bounded query (the warm-up run of
its row) also stores which rows the bounding keeps (one sort of the table), which its timed runs
then read; the filtered bounded query cannot use it and bounds each person's rows itself.
``python benchmarks/query.py`` runs 10^6 and 10^7 rows; ``--full`` adds 10^8; ``--queries NAME...``
runs only those rows and ``--no-open`` skips the open table. The peak memory of
the process is printed per size. A second table (``open_table.py``; ``--open-only`` prints just
it) compares loading the same data from Parquet in raw DuckDB with opening it in dpcurator, row
and user level: seconds and peak resident memory, each in its own process.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from open_table import OPEN_HEADER, open_rows
from peers import run_peer_script
from query_data import MAX_GROUPS, MAX_ROWS, generate, metadata

import dpcurator as dpc

EPSILON = 1.0


@dataclass(frozen=True)
class Query:
    """A benchmark row: the dpcurator SQL, the raw SQL, and whether persons are bounded."""

    name: str
    sql: str
    raw_sql: str
    user_level: bool = False


# The bounding as one would write it by hand: one sort of each person's rows serves both limits
# (a row's place in its group = its row number minus the rank of its group); writing it with two
# windows partitioned differently (by person; by person and group) sorts twice and is ~1.7x slower.
_HAND_BOUNDED = """
SELECT g, SUM(least(greatest(value, 0.0), 100.0)) FROM (
  SELECT g, value,
    DENSE_RANK() OVER w AS gr,
    ROW_NUMBER() OVER (PARTITION BY uid ORDER BY gh, g, rh) - RANK() OVER w AS rn
  FROM (SELECT uid, g, value, hash(uid, g, 7) AS gh, hash(uid, value, 7) AS rh FROM t{where})
  WINDOW w AS (PARTITION BY uid ORDER BY gh, g)
) WHERE gr <= {groups} AND rn < {rows} GROUP BY g
"""

QUERIES = [
    Query("count", "SELECT COUNT(*) AS n FROM t", "SELECT count(*) FROM t"),
    Query("sum", "SELECT SUM(value) AS s FROM t", "SELECT sum(value) FROM t"),
    Query("mean", "SELECT AVG(value) AS m FROM t", "SELECT avg(value) FROM t"),
    Query("median", "SELECT MEDIAN(value) AS m FROM t", "SELECT median(value) FROM t"),
    Query(
        "grouped count",
        "SELECT g, COUNT(*) AS n FROM t GROUP BY g",
        "SELECT g, count(*) FROM t GROUP BY g",
    ),
    Query(
        "grouped sum",
        "SELECT g, SUM(value) AS s FROM t GROUP BY g",
        "SELECT g, sum(value) FROM t GROUP BY g",
    ),
    Query(
        "bounded grouped sum",
        "SELECT g, SUM(value) AS s FROM t GROUP BY g",
        _HAND_BOUNDED.format(where="", groups=MAX_GROUPS, rows=MAX_ROWS),
        user_level=True,
    ),
    # A filter changes which rows each person has, so this one is bounded by the query itself.
    Query(
        "bounded grouped sum, filtered",
        "SELECT g, SUM(value) AS s FROM t WHERE value > 10 GROUP BY g",
        _HAND_BOUNDED.format(where=" WHERE value > 10", groups=MAX_GROUPS, rows=MAX_ROWS),
        user_level=True,
    ),
]


def seconds(run: Callable[[], object], repeats: int) -> float:
    """Minimum wall time over at least ``repeats`` runs (after one warm-up run); quick queries
    are repeated until about a second has been spent on them (at most 100 runs)."""
    run()
    best, spent, runs = float("inf"), 0.0, 0
    while runs < repeats or (spent < 1.0 and runs < 100):
        start = time.perf_counter()
        run()
        elapsed = time.perf_counter() - start
        best, spent, runs = min(best, elapsed), spent + elapsed, runs + 1
    return best


def session(source: object, engine: str, user_level: bool) -> dpc.Session:
    """A row-level or user-level session (budget large enough for every query)."""
    return dpc.Session.from_data(
        source, metadata=metadata(user_level), budget=dpc.Budget(10**9), engine=engine
    )


def peer_times(table: pa.Table, repeats: int, skip: bool) -> dict[str, float | str]:
    """Peer libraries' times on the same data, from their own virtualenv."""
    if skip:
        return {}
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "data.parquet"
        pq.write_table(table, path)
        results = run_peer_script("peer_queries.py", str(path), str(repeats))
    return {key: value for key, value in results.items() if isinstance(value, float | str)}


UNITS = {False: "row-level", True: "user-level"}


def row(
    rows: int,
    query: Query,
    *,
    connection: duckdb.DuckDBPyConnection,
    engines: dict[str, dpc.Session],
    peers: dict[str, float | str],
    columns: list[str],
    repeats: int,
) -> str:
    """One line of the table: the raw query, each dpcurator engine, the peers' figures."""
    times: dict[str, float | str | None] = {
        "raw DuckDB SQL": seconds(lambda: connection.execute(query.raw_sql).fetchall(), repeats)
    }
    for name, ours in engines.items():
        times[name] = seconds(partial(ours.sql, query.sql, epsilon=EPSILON), repeats)
    for library in ("OpenDP Polars", "diffprivlib"):
        times[library] = peers.get(f"{library}|{query.name}")
    ratio = times["dpcurator DuckDB"] / times["raw DuckDB SQL"]  # type: ignore[operator]
    cells = [cell(times.get(column)) for column in columns]
    return f"| {rows:.0e} | {query.name} | {' | '.join(cells)} | {ratio:.2f} |"


def cell(value: float | str | None) -> str:
    if value is None:
        return "n/a"
    return value[:40] if isinstance(value, str) else f"{value:.3f}"


def main() -> None:
    """Run the benchmark and print the markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also run N = 10^8")
    parser.add_argument("--sizes", type=int, nargs="*", help="override the row counts")
    parser.add_argument("--no-polars", action="store_true", help="skip dpcurator on Polars")
    parser.add_argument("--no-peers", action="store_true", help="skip OpenDP and diffprivlib")
    parser.add_argument("--open-only", action="store_true", help="print only the open table")
    parser.add_argument("--no-open", action="store_true", help="skip the open table")
    parser.add_argument(
        "--queries", nargs="*", metavar="NAME", help="only these rows (e.g. 'grouped count')"
    )
    args = parser.parse_args()
    sizes = args.sizes or ([10**6, 10**7] + ([10**8] if args.full else []))
    queries = [q for q in QUERIES if not args.queries or q.name in args.queries]
    print("" if args.no_open else OPEN_HEADER)
    for rows in [] if args.no_open else sizes:
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "data.parquet"
            pq.write_table(generate(rows), path)
            print("\n".join(open_rows(rows, path)), flush=True)
    if args.open_only:
        return
    print()
    columns = ["raw DuckDB SQL", "dpcurator DuckDB"]
    columns += [] if args.no_polars else ["dpcurator Polars"]
    columns += [] if args.no_peers else ["OpenDP Polars", "diffprivlib"]
    print("| N | query | " + " | ".join(columns) + " | dpcurator DuckDB / raw |")
    print("|---|---|" + "---|" * (len(columns) + 1))
    for rows in sizes:
        table = generate(rows)
        repeats = 5 if rows <= 10**6 else (3 if rows <= 10**7 else 1)
        peers = peer_times(table, repeats, args.no_peers)
        # The raw table and dpcurator's private copy (with its precomputed columns) share one
        # DuckDB, capped so that the whole process stays below 8 GB at 10^8 rows; one dpcurator
        # DuckDB session is open at a time (as for an analyst who holds one of the two tables).
        connection = duckdb.connect(config={"memory_limit": "6GB"})
        connection.register("generated", table)
        connection.execute("CREATE TABLE t AS SELECT * FROM generated")
        connection.unregister("generated")
        polars = {} if args.no_polars else {unit: session(table, "polars", unit) for unit in UNITS}
        del table
        for user_level, unit in UNITS.items():
            if not any(query.user_level == user_level for query in queries):
                continue
            opened = time.perf_counter()
            ours = session(connection, "duckdb", user_level)
            opened = time.perf_counter() - opened
            print(
                f"| {rows:.0e} | dpcurator DuckDB open, {unit} (precompute, once): {opened:.2f} s |"
            )
            engines = {"dpcurator DuckDB": ours} | (
                {"dpcurator Polars": polars[user_level]} if polars else {}
            )
            for query in [q for q in queries if q.user_level == user_level]:
                line = row(
                    rows,
                    query,
                    connection=connection,
                    engines=engines,
                    peers=peers,
                    columns=columns,
                    repeats=repeats,
                )
                print(line, flush=True)
            ours.close()
        for frame_session in polars.values():
            frame_session.close()
        connection.close()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(f"| {rows:.0e} | peak memory of this process: {peak:.1f} GB |", flush=True)


if __name__ == "__main__":
    main()
