"""Spark benchmark: dpcurator on a standalone Spark cluster versus raw DuckDB and dpcurator on
DuckDB, on the data and queries of ``query.py``.

The cluster is the tests' (``tests/spark_cluster.py``): a master and two workers on loopback,
started from the pip pyspark package; the driver is this process (``SparkSession.builder
.master("spark://...")``), whose application gets one executor per worker. The table is written
once to Parquet and read by the executors (``Session.from_data(spark.read.parquet(path),
engine="spark")``, nothing collected to the driver). Columns (seconds, minimum over the repeats
after a warm-up run): raw DuckDB SQL on an in-memory table, a release by dpcurator on DuckDB
(its one-off private copy not counted, see ``query.py``) and a release by dpcurator on the Spark
cluster. ``--sizes`` sets the row counts (default 10^6 and 10^7; 10^8 rows needs a machine
larger than the 2-core development one to finish in minutes).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
from query import EPSILON, QUERIES, seconds, session
from query_data import generate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' cluster
from tests.spark_cluster import start_cluster

EXECUTOR_MEMORY = "6g"  # per worker; the driver keeps its default 1 GB (nothing is collected)


def spark_session(master: str) -> object:
    """A driver of the cluster: one executor of one core on each worker."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 (optional dependency)

    spark = (
        SparkSession.builder.master(master)
        .appName("dpcurator-benchmark")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.cores", "1")
        .config("spark.executor.memory", EXECUTOR_MEMORY)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> None:
    """Start the cluster, run every size and print the markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10**6, 10**7])
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per cell (min)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        started = time.perf_counter()
        cluster = start_cluster(root / "cluster", worker_memory="7g", connect=False)
        print(f"cluster started in {time.perf_counter() - started:.1f} s: {cluster.master_url}")
        try:
            spark = spark_session(cluster.master_url)
            print("| N | query | raw DuckDB SQL | dpcurator DuckDB | dpcurator Spark cluster |")
            print("|---|---|---|---|---|")
            for rows in args.sizes:
                run_size(rows, spark, root / f"data-{rows}.parquet", args.repeats)
            spark.stop()  # type: ignore[attr-defined]
        finally:
            cluster.stop()


def fetch(connection: duckdb.DuckDBPyConnection, sql: str) -> list[tuple[object, ...]]:
    """Run raw SQL and fetch its rows."""
    return connection.execute(sql).fetchall()


def run_size(rows: int, spark: object, path: Path, repeats: int) -> None:
    """Print one line per query of ``query.py`` at ``rows`` rows."""
    table = generate(rows)
    pq.write_table(table, path)
    connection = duckdb.connect(config={"memory_limit": "6GB"})
    connection.register("generated", table)
    connection.execute("CREATE TABLE t AS SELECT * FROM generated")
    connection.unregister("generated")
    del table
    frame = spark.read.parquet(str(path))  # type: ignore[attr-defined]
    for user_level in (False, True):
        opened = time.perf_counter()
        on_spark = session(frame, "spark", user_level)
        print(f"| {rows:.0e} | open on Spark: {time.perf_counter() - opened:.2f} s |")
        on_duckdb = session(connection, "duckdb", user_level)
        for query in [q for q in QUERIES if q.user_level == user_level]:
            raw = seconds(partial(fetch, connection, query.raw_sql), repeats)
            ours = seconds(partial(on_duckdb.sql, query.sql, epsilon=EPSILON), repeats)
            cluster = seconds(partial(on_spark.sql, query.sql, epsilon=EPSILON), repeats)
            print(
                f"| {rows:.0e} | {query.name} | {raw:.3f} | {ours:.3f} | {cluster:.3f} |",
                flush=True,
            )
        on_duckdb.close()
        on_spark.close()
    connection.close()


if __name__ == "__main__":
    main()
