"""Exact-aggregate query benchmark: raw DuckDB SQL versus dpcurator plans on DuckDB and Polars.

Data: N rows, ``value ~ N(50, 30^2)`` clamped to [0, 100], 1,000 groups, ~10 rows per person.
Prints one markdown table of seconds (minimum over repeats) per (N, query) row and implementation
column, and the ratio dpcurator DuckDB / baseline. Run ``python benchmarks/query.py`` (10^6 and
10^7 rows) or ``--full`` (adds 10^8; ``--no-polars`` keeps memory under 8 GB there).

Fairness: the raw baseline and the dpcurator DuckDB backend query the SAME native table of one
in-memory DuckDB connection. The raw SQL is what an analyst writes without privacy; for the
bounded row, the baseline is the same contribution bounding (hash-ordered DENSE_RANK /
ROW_NUMBER, as DuckDB's fast ``rn < k`` form) plus the clamp, written by hand.

To add a column, add a function ``(query, data) -> callable or None`` to ``COLUMNS``; to add a row,
add a :class:`Query` to ``QUERIES``. A column returns None where it has no implementation.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from dpcurator.query.backends import Backend, open_backend
from dpcurator.query.ir import (
    AggregatePlan,
    Col,
    ContributionBound,
    ExactAggregate,
    GroupColumn,
)

GROUPS = 1_000
ROWS_PER_PERSON = 10
MAX_GROUPS, MAX_ROWS = 5, 2  # the user-level bound of the bounded query
SEED = 7


@dataclass
class Data:
    """One generated table, opened on every engine once."""

    rows: int
    connection: duckdb.DuckDBPyConnection
    backends: dict[str, Backend]


@dataclass(frozen=True)
class Query:
    """A benchmark row: a dpcurator plan and the raw DuckDB SQL computing the same thing."""

    name: str
    plan: AggregatePlan
    raw_sql: str


def generate(rows: int) -> pa.Table:
    """The benchmark table (value, group g, person uid)."""
    rng = np.random.default_rng(2024)
    value = np.clip(rng.normal(50.0, 30.0, rows), 0.0, 100.0)
    return pa.table(
        {
            "value": value,
            "g": rng.integers(0, GROUPS, rows),
            "uid": rng.integers(0, max(rows // ROWS_PER_PERSON, 1), rows),
        }
    )


_SUM = ExactAggregate("s", "sum", Col("value"), 0.0, 100.0, 0.0)
_BY_G = (GroupColumn("g", Col("g")),)
_HAND_BOUNDED = f"""
SELECT g, SUM(least(greatest(value, 0.0), 100.0)) FROM (
  SELECT *,
    DENSE_RANK() OVER (PARTITION BY uid ORDER BY gh, g) AS gr,
    ROW_NUMBER() OVER (PARTITION BY uid, g ORDER BY rh) - 1 AS rn
  FROM (SELECT uid, g, value, hash(uid, g, {SEED}) AS gh, hash(uid, value, {SEED}) AS rh FROM t)
) WHERE gr <= {MAX_GROUPS} AND rn < {MAX_ROWS} GROUP BY g
"""

QUERIES = [
    Query("count", AggregatePlan("t", (ExactAggregate("n", "count"),)), "SELECT count(*) FROM t"),
    Query("sum", AggregatePlan("t", (_SUM,)), "SELECT sum(value) FROM t"),
    Query(
        "grouped count",
        AggregatePlan("t", (ExactAggregate("n", "count"),), group_by=_BY_G),
        "SELECT g, count(*) FROM t GROUP BY g",
    ),
    Query(
        "grouped sum",
        AggregatePlan("t", (_SUM,), group_by=_BY_G),
        "SELECT g, sum(value) FROM t GROUP BY g",
    ),
    Query(
        f"bounded grouped sum (m={MAX_GROUPS}, k={MAX_ROWS})",
        AggregatePlan(
            "t", (_SUM,), group_by=_BY_G, bound=ContributionBound("uid", MAX_GROUPS, MAX_ROWS, SEED)
        ),
        _HAND_BOUNDED,  # raw DuckDB has no privacy: the bounding written by hand is the baseline
    ),
]


def _raw(query: Query, data: Data) -> Callable[[], object]:
    return lambda: data.connection.execute(query.raw_sql).fetchall()


def _plan_on(engine: str) -> Callable[[Query, Data], Callable[[], object]]:
    def column(query: Query, data: Data) -> Callable[[], object]:
        return lambda: data.backends[engine].compute(query.plan)

    return column


COLUMNS: dict[str, Callable[[Query, Data], Callable[[], object] | None]] = {
    "raw DuckDB SQL (bounded row: by hand)": _raw,
    "dpcurator DuckDB": _plan_on("duckdb"),
    "dpcurator Polars": _plan_on("polars"),
}


def seconds(run: Callable[[], object], repeats: int) -> float:
    """Minimum wall time of ``repeats`` runs."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    """Run the benchmark and print the markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also run N = 10^8")
    parser.add_argument("--sizes", type=int, nargs="*", help="override the row counts")
    parser.add_argument("--no-polars", action="store_true", help="skip the Polars column")
    args = parser.parse_args()
    sizes = args.sizes or ([10**6, 10**7] + ([10**8] if args.full else []))
    columns = {k: v for k, v in COLUMNS.items() if not (args.no_polars and "Polars" in k)}
    print("| N | query | " + " | ".join(columns) + " | DuckDB ratio |")
    print("|---|---|" + "---|" * (len(columns) + 1))
    for rows in sizes:
        table = generate(rows)
        connection = duckdb.connect(config={"memory_limit": "5GB"})  # the run stays < 8 GB
        connection.register("generated", table)
        connection.execute("CREATE TABLE t AS SELECT * FROM generated")
        connection.unregister("generated")
        backends = {"duckdb": open_backend(connection, table="t", engine="duckdb")}
        if not args.no_polars:
            backends["polars"] = open_backend(table, table="t", engine="polars")
        del table
        data = Data(rows, connection, backends)
        repeats = 5 if rows <= 10**6 else (3 if rows <= 10**7 else 1)
        for query in QUERIES:
            times = []
            for make in columns.values():
                run = make(query, data)
                times.append(None if run is None else seconds(run, repeats))
            cells = ["n/a" if value is None else f"{value:.3f}" for value in times]
            ratio = "n/a" if None in times[:2] else f"{times[1] / times[0]:.2f}"  # type: ignore[operator]
            print(
                f"| {rows:.0e} | {query.name} | " + " | ".join([*cells, ratio]) + " |", flush=True
            )
        for backend in backends.values():
            backend.close()
        connection.close()


if __name__ == "__main__":
    main()
