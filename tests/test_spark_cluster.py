"""The Spark engine on a real standalone cluster (a master and two workers on loopback), through
a classic driver (``SparkSession.builder.master("spark://...")``) and through Spark Connect
(``SparkSession.builder.remote("sc://...")``), gives exactly the in-memory oracle's results.

The cases (:mod:`tests.spark_cluster_driver`) are a representative subset of the engine
conformance plans, contribution bounding beyond the bounds, the totality edge values under ANSI
mode on and off, neighbouring tables under adversarial plans and user-level Session releases
with a seeded RNG (equal exact aggregates and equal randomness give equal releases). A Connect
client runs them all; a classic driver those that depend on the work being split between the
workers' executors (:data:`tests.spark_cluster_driver.CLASSIC`; local Spark checks the others on
the same classic engine path). Each mode's driver runs once, in its own process (see
:mod:`tests.spark_cluster`).
"""

from __future__ import annotations

import pytest

from dpcurator.errors import ENGINE_FAILURE_MESSAGE
from tests import spark_cluster_driver as driver
from tests.conformance_cases import load_tables
from tests.conftest import SHARED_DATA
from tests.spark_cluster import CLASSIC_APP, CONNECT_APP, SparkCluster, run_drivers

pytestmark = [
    pytest.mark.spark,
    pytest.mark.spark_cluster,
    pytest.mark.slow,
    pytest.mark.xdist_group("spark_cluster"),  # one cluster per run: its tests share a worker
]
MODES = ("classic", "connect")


@pytest.fixture(scope="session")
def oracle() -> dict[str, object]:
    """Every case's outcome on the in-memory oracle."""
    return driver.outcomes(driver.memory_engine(), load_tables(SHARED_DATA))


@pytest.fixture(scope="session")
def on_cluster(
    spark_cluster: SparkCluster,
) -> dict[str, dict[str, object]]:
    """Every case's outcome through each kind of driver (each run once, on first use)."""
    return run_drivers(spark_cluster, MODES)  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("mode", "case"), [(mode, case) for mode in MODES for case in driver.case_ids(mode)]
)
def test_matches_oracle(
    mode: str, case: str, on_cluster: dict[str, dict[str, object]], oracle: dict[str, object]
) -> None:
    assert on_cluster[mode][case] == oracle[case]


@pytest.mark.parametrize("mode", MODES)
def test_engine_text_stays_on_the_cluster_side(
    mode: str, on_cluster: dict[str, dict[str, object]]
) -> None:
    """A row that makes Spark raise (its message quoting the value) gives the analyst the one
    constant text, also when the error comes back over Spark Connect's gRPC."""
    assert on_cluster[mode][driver.FAILURE] == ("BackendError", ENGINE_FAILURE_MESSAGE)


def test_jobs_ran_on_the_cluster(
    spark_cluster: SparkCluster,
    on_cluster: dict[str, dict[str, object]],
) -> None:
    """Both workers are registered, the classic driver was an application of this master (now
    finished) and the Connect server is one (still running), each with executors on the
    workers' cores."""
    state = spark_cluster.master_state()
    workers = state["workers"]
    assert isinstance(workers, list)
    assert [w["state"] for w in workers] == ["ALIVE"] * 2
    completed = state["completedapps"]
    active = state["activeapps"]
    assert isinstance(completed, list)
    assert isinstance(active, list)
    assert [app["name"] for app in completed] == [CLASSIC_APP]
    assert [app["name"] for app in active] == [CONNECT_APP]
    assert all(app["cores"] > 0 for app in [*completed, *active])
