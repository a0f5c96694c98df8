"""Latency of one release through ``dpcurator serve --engine spark`` versus the library on Spark,
on the same standalone cluster and the same small table (the 5,000-row demo table).

The cluster is the tests' (``tests/spark_cluster.py``: a master and two workers on loopback, no
Connect server). The library is this process, a classic driver of the master, releasing with
``Session.from_data(path, engine="spark")``; the service is a ``dpcurator serve --engine spark``
process, another classic driver of the same master, queried over HTTP on loopback (owner token,
SQLite ledger). Each application gets one 1-core executor on each worker. Columns: seconds per
release, the median and the minimum of ``--repeats`` timed runs after one warm-up run each.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' cluster
import dpcurator as dpc
from tests.spark_cluster import SparkCluster, free_port, start_cluster

QUERIES = {
    "count": "SELECT COUNT(*) AS n FROM people",
    "sum": "SELECT SUM(age) AS s FROM people",
    "grouped count": "SELECT region, COUNT(*) AS n FROM people GROUP BY region",
}
EPSILON = 0.1
APP_CONF = {
    "spark.cores.max": "2",
    "spark.executor.cores": "1",
    "spark.executor.memory": "1g",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
}


def timed(run: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median and minimum seconds of ``repeats`` runs after a warm-up run."""
    run()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times), min(times)


def library(master: str) -> tuple[dict[str, Callable[[], object]], Callable[[], None]]:
    """A release per query through a Session of this process on the cluster, and the stop of
    its SparkSession (its executors must end before the cluster)."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 (optional dependency)

    builder = SparkSession.builder.master(master).appName("dpcurator-benchmark-library")
    for key, value in APP_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    session = dpc.Session.from_data(
        str(dpc.demo_path("people.csv")),
        metadata=dpc.Metadata.from_yaml(dpc.demo_path("people.yaml")),
        engine="spark",
        budget=dpc.Budget(epsilon=1_000.0),
    )
    releases = {
        name: (lambda sql=sql: session.sql(sql, epsilon=EPSILON)) for name, sql in QUERIES.items()
    }
    return releases, spark.stop


def start_service(cluster: SparkCluster, root: Path) -> tuple[subprocess.Popen[str], httpx.Client]:
    """``dpcurator serve --engine spark`` on the demo table; its process and an owner client."""
    port = free_port()
    conf = [arg for key, value in APP_CONF.items() for arg in ("--spark-conf", f"{key}={value}")]
    command = [
        sys.executable, "-m", "dpcurator.cli", "serve", "--port", str(port),
        "--engine", "spark", "--spark-master", cluster.master_url, *conf,
        "--data", str(dpc.demo_path("people.csv")), "--dataset-id", "people",
        "--metadata", str(dpc.demo_path("people.yaml")), "--cap-epsilon", "1000",
        "--ledger", f"sqlite:///{root / 'ledger.sqlite3'}",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=cluster.env()
    )
    assert process.stdout is not None
    token = process.stdout.readline().strip().removeprefix("owner token: ")
    process.stdout.readline()  # the URL, printed once it answers
    headers = {"Authorization": f"Bearer {token}"}
    return process, httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=600)


def main() -> None:
    """Start the cluster, time each query both ways and print the markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per cell")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        cluster = start_cluster(root / "cluster", connect=False)
        process = None
        stop_library: Callable[[], None] = lambda: None  # noqa: E731
        try:
            releases, stop_library = library(cluster.master_url)
            process, client = start_service(cluster, root)

            def through_service(sql: str) -> object:
                answer = client.post(
                    "/v1/datasets/people/queries", json={"sql": sql, "epsilon": EPSILON}
                )
                answer.raise_for_status()
                return answer.json()

            print(
                "| query | library on Spark (median / min s) | service on Spark (median / min s) |"
            )
            print("|---|---|---|")
            for name, sql in QUERIES.items():
                lib = timed(releases[name], args.repeats)
                served = timed(lambda sql=sql: through_service(sql), args.repeats)
                print(
                    f"| {name} | {lib[0]:.2f} / {lib[1]:.2f} | {served[0]:.2f} / {served[1]:.2f} |"
                )
            client.close()
        finally:
            stop_library()
            if process is not None:
                process.terminate()
                process.wait(timeout=60)
            cluster.stop()


if __name__ == "__main__":
    main()
