"""Fixtures shared by the backend tests: one local SparkSession per test run.

Import the fixture into a test module (``from tests.backends_fixtures import spark``); the
session is started on first use only, so runs that deselect ``-m "not spark"`` never start a JVM.
A module importing it is in the ``xdist_group`` "spark_local" (its module-level ``pytestmark``), so
that ``pytest -n 2 --dist loadgroup`` runs all of them on one worker: one JVM start and one warm-up
(class loading, first code generation) per run, not one per worker.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.spark_cluster import JAVA_OPTIONS


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A local[2] SparkSession with the UI off and few shuffle partitions (stopped at the end).

    Its JVM gets the cluster daemons' options (:data:`tests.spark_cluster.JAVA_OPTIONS`: the
    client compiler only, the serial collector): the tests' many small one-off queries are
    mostly class loading and code generation, which the optimising compiler's background
    threads only slow down on a busy 2-core machine (about half the Spark tests' time there).
    """
    pyspark_sql = pytest.importorskip("pyspark.sql")
    session = (
        pyspark_sql.SparkSession.builder.master("local[2]")
        .appName("dpcurator-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.extraJavaOptions", JAVA_OPTIONS)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
