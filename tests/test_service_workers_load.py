"""A multi-process server keeps its workers under CPU saturation (issue 24, item 8).

uvicorn's supervisor pings each worker and kills one that does not answer in time; with the 5 s
default a saturated machine had workers killed and restarted in a loop. A worker that gets no CPU
for 7 s (stopped with SIGSTOP: what a saturated machine can do to it), while busy loops load
every core, must still be the same process afterwards, and answer.
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

from dpcurator.service.server import WORKER_HEALTHCHECK_TIMEOUT
from tests.service_fixtures import PEOPLE_METADATA, LiveServer, write_people

STARVED_SECONDS = 7.0  # above uvicorn's default health-check timeout (5 s)
BUSY = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


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


@pytest.mark.slow
def test_workers_starved_of_cpu_are_kept(tmp_path: Path) -> None:
    assert STARVED_SECONDS < WORKER_HEALTHCHECK_TIMEOUT
    csv = write_people(tmp_path / "people.csv")
    meta = tmp_path / "people.json"
    meta.write_text(json.dumps(PEOPLE_METADATA), encoding="utf-8")
    args = ["--data", str(csv), "--metadata", str(meta), "--workers", "2"]
    server = LiveServer([*args, "--ledger", f"sqlite:///{tmp_path / 'ledger.sqlite3'}"])
    server.start()
    busy: list[subprocess.Popen[bytes]] = []
    try:
        deadline = time.monotonic() + 60
        while len(before := _workers(server)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)  # polling: the second worker may still be starting
        assert len(before) == 2
        starved = min(before)
        code = BUSY.format(seconds=STARVED_SECONDS + 1)
        busy = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(os.cpu_count() or 2)]
        os.kill(starved, signal.SIGSTOP)
        seen = set(before)
        try:
            until = time.monotonic() + STARVED_SECONDS
            while time.monotonic() < until:  # watch for a replacement while it is starved
                seen |= _workers(server)
                time.sleep(0.2)
        finally:
            with contextlib.suppress(ProcessLookupError):  # gone if the supervisor killed it
                os.kill(starved, signal.SIGCONT)
        for process in busy:
            process.wait(timeout=30)
        seen |= _workers(server)
        assert seen == before, f"workers replaced: {sorted(seen - before)} new"
        for _ in range(6):  # both workers answer (connections spread over them)
            assert httpx.get(f"{server.url}/v1/health", timeout=30).status_code == 200
        assert _workers(server) == before
    finally:
        for process in busy:
            if process.poll() is None:
                process.kill()
                process.wait()
        server.stop()
