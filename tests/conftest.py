"""Shared test configuration.

Real public datasets live in ``../shared/data`` beside the repository (see its README files);
``DPCURATOR_SHARED_DATA`` overrides the location.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.spark_cluster import SparkCluster, start_cluster
from tests.xdist_groups import ModuleGroupScheduling, check_marks

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("DPCURATOR_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of real public datasets used by tests and benchmarks."""
    if not SHARED_DATA.is_dir():
        pytest.fail(f"Shared datasets not found at {SHARED_DATA}; set DPCURATOR_SHARED_DATA.")
    return SHARED_DATA


@pytest.fixture
def cli_environment_cleared(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``DPCURATOR_TOKEN`` / ``DPCURATOR_URL`` from the caller's shell reaches the CLI."""
    monkeypatch.delenv("DPCURATOR_TOKEN", raising=False)
    monkeypatch.delenv("DPCURATOR_URL", raising=False)


@pytest.fixture(autouse=True)
def _collect_spark_sockets(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a Spark test, collect the py4j gateway connections it dropped, here, quietly.

    py4j opens a connection per calling thread and drops some without closing them; left to the
    garbage collector they warn (unclosed socket) inside whichever later test happens to collect
    them, which the suite's warnings-as-errors turns into that test's failure. Only Spark tests
    are collected this way, so a socket leaked by any other test still fails where it leaks.
    The standalone cluster's tests (marker ``spark_cluster``) are not: their Spark drivers run in
    other processes, the test process opens no py4j connection, and a collection after each of
    them (about a second on the suite's heap) would only hide a leak of their own.
    """
    yield
    node = request.node
    if node.get_closest_marker("spark_cluster"):
        return
    if node.get_closest_marker("spark") or "spark" in request.fixturenames:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator[SparkCluster]:
    """One standalone Spark cluster (master, two workers, Connect server) for the test session
    (:mod:`tests.spark_cluster`). Defined here, once: a fixture imported into two test modules
    is two fixtures, and each would start its own cluster."""
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and "JAVA_HOME" not in os.environ:
        pytest.fail("Java 17 is needed for the Spark cluster tests (see scripts/).")
    root = Path(tempfile.mkdtemp(prefix="dpcurator-spark-cluster-")).resolve()
    cluster = start_cluster(root)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadgroup`` that keeps each ``xdist_group`` on one worker (see
    :mod:`tests.xdist_groups`); any other mode is xdist's own."""
    if config.getvalue("dist") == "loadgroup":
        return ModuleGroupScheduling(config, log)
    return None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules holding a ``slow`` test first, each module's tests together and in their order.

    Under ``pytest -n 2 --dist loadgroup`` xdist hands out the ``xdist_group`` groups first
    (largest first), then single tests in this order as each worker runs low: the long tests
    start early and the run ends on short ones, so the two workers finish close together.
    """
    check_marks(config.rootpath, items)
    heavy = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in heavy)
