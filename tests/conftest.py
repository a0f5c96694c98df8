"""Shared test configuration.

Real public datasets live in ``../shared/data`` beside the repository (see its README files);
``DPCURATOR_SHARED_DATA`` overrides the location.
"""

from __future__ import annotations

import os
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
