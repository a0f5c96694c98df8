"""Processes that used DuckDB exit without nanobind's "leaked ..." lines (issue 17 item 17).

DuckDB's Python module is built with nanobind, which prints ``nanobind: leaked N instances!``
(and a list of ``DuckDBPyType`` objects) at exit when objects of the module outlive the
interpreter's last collections. To a user that looks like a crash. ``serve`` moves everything
out of the collector's reach (``gc.freeze``) and must hand it back at exit. A test module must
not build a service at import: a pytest-xdist worker imports every module to collect it, and
runs only its share of the tests (so a module fixture meant to close it may never run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

import dpcurator as dpc
from tests.service_fixtures import free_port

SESSION = textwrap.dedent(
    """
    import dpcurator as dpc
    metadata = dpc.Metadata.from_yaml(dpc.demo_path("people.yaml"))
    with dpc.Session.from_data(
        dpc.demo_path("people.csv"), metadata=metadata, budget=dpc.Budget(1.0)
    ) as session:
        print(session.sql("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex", epsilon=0.5))
    """
)


TESTS = Path(__file__).resolve().parent


def _no_leak_lines(stderr: str) -> None:
    leaks = [line for line in stderr.splitlines() if "nanobind" in line or "leaked" in line]
    assert not leaks, stderr


def test_a_session_and_check_metadata_exit_cleanly() -> None:
    """A script that opens a session and releases a query, and ``dpcurator check-metadata``."""
    ran = subprocess.run(
        [sys.executable, "-c", SESSION], capture_output=True, text=True, timeout=120, check=True
    )
    assert "sex" in ran.stdout
    _no_leak_lines(ran.stderr)
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "dpcurator.cli",
            "check-metadata",
            "--data",
            str(dpc.demo_path("people.csv")),
            "--metadata",
            str(dpc.demo_path("people.yaml")),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    _no_leak_lines(checked.stderr)


def test_serve_exits_cleanly_when_interrupted() -> None:
    """``dpcurator serve --demo`` (which opens the demo table on DuckDB and freezes the heap)
    stops on Ctrl-C with no leak lines on stderr (it printed four blocks of them before)."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "dpcurator.cli", "serve", "--demo", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and server.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise AssertionError("the server did not start")
        server.send_signal(signal.SIGINT)
        _, stderr = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert "Opening 'people'" in stderr  # the steps of opening the demo table
    _no_leak_lines(stderr)


@pytest.mark.slow
def test_a_test_process_that_collects_every_module_exits_cleanly() -> None:
    """pytest collecting the whole suite but running one DuckDB test (as a pytest-xdist worker
    does when the other worker runs the rest) exits with no leak lines. It printed one block
    ("leaked 28 instances", DuckDBPyType) when tests/test_service_schemathesis.py built its
    service and app at import and closed them in a module fixture that such a worker never ran."""
    one_test = ["-k", "test_builtin_demo_dataset", "-n", "0", "-p", "no:cacheprovider"]
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", str(TESTS), "-q", *one_test],
        cwd=TESTS.parent,
        env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"},  # the runner's own
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "1 passed" in ran.stdout
    _no_leak_lines(ran.stderr)
