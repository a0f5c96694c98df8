"""Shared test configuration.

Real public datasets live in ``../shared/data`` beside the repository (see its README files);
``DPCURATOR_SHARED_DATA`` overrides the location.
"""

from __future__ import annotations

import gc
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    """
    yield
    if request.node.get_closest_marker("spark") or "spark" in request.fixturenames:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
