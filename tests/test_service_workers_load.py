"""A multi-process server keeps its workers under CPU saturation (issue 24, item 8).

uvicorn's supervisor pings each worker and kills one that does not answer within its health-check
timeout; with uvicorn's 5 s default a saturated machine had workers killed and restarted in a
loop. The server now sets the timeout deliberately (``WORKER_HEALTHCHECK_TIMEOUT``, 60 s; the
serve option ``--worker-healthcheck-timeout``). The load test runs a server with a deliberately
small timeout of 2 s, while busy loops load every core: a worker that gets no CPU for 1 s
(stopped with SIGSTOP: what a saturated machine does to it) is still the same process after any
pending ping has had its 2 s, and answers; a worker starved past the timeout is replaced within
4.5 s, which proves that the supervisor uses the configured timeout (with the setting reverted
to uvicorn's 5 s default, nothing is replaced in 4.5 s and the test fails). Together with the
default's own check, a worker starved for less than a minute is kept.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from dpcurator.cli.main import _parser
from dpcurator.service.server import WORKER_HEALTHCHECK_TIMEOUT
from tests.service_fixtures import PEOPLE_METADATA, LiveServer, write_people

HEALTHCHECK = 2  # seconds: the deliberately small --worker-healthcheck-timeout of the test
KEPT_STARVED = 1.0  # a starvation the timeout must tolerate
REPLACED_WITHIN = 4.5  # below uvicorn's 5 s default: only the configured 2 s can replace in time
#: A busy loop at the lowest priority: it takes every idle cycle of a core, and a resumed worker
#: still gets the CPU to answer its ping (at normal priority, with the suite's other process also
#: busy, a worker resumed after 1 s could miss a 2 s ping and was replaced in a fresh-clone run).
BUSY = (
    "import os, time\nos.nice(19)\nend = time.monotonic() + {seconds}\n"
    "while time.monotonic() < end:\n    pass\n"
)


def _workers(server: LiveServer) -> set[int]:
    """The PIDs of the server's worker processes (not multiprocessing's resource tracker)."""
    assert server.process is not None
    children = subprocess.run(
        ["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True, check=False
    ).stdout.split()
    workers = set()
    for pid in map(int, children):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if b"spawn_main" in command:
            workers.add(pid)
    return workers


def _watch(server: LiveServer, seconds: float, *, until_new: set[int] | None = None) -> set[int]:
    """Every worker PID seen while polling for ``seconds`` (or until one not in ``until_new``
    appears)."""
    seen: set[int] = set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        seen |= _workers(server)
        if until_new is not None and seen - until_new:
            break
        time.sleep(0.1)  # polling the process table, not waiting for a result
    return seen


def test_the_default_health_check_timeout_is_deliberate() -> None:
    # Every request's work is bounded, so a minute of silence is a hang, not load; and the
    # command line's default is that constant (it passes None through to it).
    assert WORKER_HEALTHCHECK_TIMEOUT >= 60
    args = _parser().parse_args(["serve"])
    assert args.worker_healthcheck_timeout is None
    small = _parser().parse_args(["serve", "--worker-healthcheck-timeout", "2"])
    assert small.worker_healthcheck_timeout == 2


@pytest.mark.slow
def test_starved_workers_are_kept_within_the_health_check_timeout(tmp_path: Path) -> None:
    csv = write_people(tmp_path / "people.csv", 200)
    meta = tmp_path / "people.json"
    meta.write_text(json.dumps(PEOPLE_METADATA), encoding="utf-8")
    args = ["--data", str(csv), "--metadata", str(meta), "--workers", "2"]
    args += ["--worker-healthcheck-timeout", str(HEALTHCHECK)]
    server = LiveServer([*args, "--ledger", f"sqlite:///{tmp_path / 'ledger.sqlite3'}"])
    busy: list[subprocess.Popen[bytes]] = []
    starved = 0
    try:
        server.start(within=180)  # two workers' imports: minutes on a saturated machine
        deadline = time.monotonic() + 60
        while len(before := _workers(server)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)  # polling: the second worker may still be starting
        assert len(before) == 2
        starved = min(before)
        load = KEPT_STARVED + HEALTHCHECK + REPLACED_WITHIN + 1
        code = BUSY.format(seconds=load)
        busy = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(os.cpu_count() or 2)]
        # 1. Starved for less than the timeout: kept, once any ping sent meanwhile has timed out.
        os.kill(starved, signal.SIGSTOP)
        seen = _watch(server, KEPT_STARVED)
        os.kill(starved, signal.SIGCONT)
        seen |= _watch(server, HEALTHCHECK + 0.5)
        assert seen == before, f"workers replaced: {sorted(seen - before)} new"
        for _ in range(6):  # both workers answer (connections spread over them)
            assert httpx.get(f"{server.url}/v1/health", timeout=30).status_code == 200
        # 2. Starved past the timeout: replaced, so the supervisor uses the configured timeout.
        os.kill(starved, signal.SIGSTOP)
        seen = _watch(server, REPLACED_WITHIN, until_new=before)
        assert seen - before, f"no worker replaced within {REPLACED_WITHIN} s"
    finally:
        with contextlib.suppress(ProcessLookupError):  # gone once the supervisor killed it
            if starved:
                os.kill(starved, signal.SIGCONT)
        for process in busy:
            if process.poll() is None:
                process.kill()
            process.wait()
        server.stop()
