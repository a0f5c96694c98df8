"""Fixtures and helpers shared by the service tests (imported by tests/test_service_*.py).

* :func:`postgres_server` — a throwaway PostgreSQL 15 cluster (session-scoped; run as user
  ``postgres`` because initdb refuses root; :func:`throwaway_postgres` outside pytest), with
  :func:`fresh_postgres_url` making one empty database per test.
* :func:`cheap_hasher` — argon2 with minimal cost so tests that issue many tokens stay fast.
* :class:`LiveServer` — ``dpcurator serve`` as a real uvicorn subprocess on a random loopback port.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx
import psycopg
import pytest
import uvicorn
from argon2 import PasswordHasher

if TYPE_CHECKING:
    from dpcurator.core.measures import ApproxDP
    from dpcurator.service.ledger import Ledger

PG_BIN = Path("/usr/lib/postgresql/15/bin")
REPO = Path(__file__).resolve().parent.parent
_DB_NUMBERS = itertools.count(1)


def cheap_hasher() -> PasswordHasher:
    """Argon2id with the smallest parameters (tests only: speed over hardness)."""
    return PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)


class CountingHasher(PasswordHasher):
    """:func:`cheap_hasher`'s parameters, counting verifications."""

    def __init__(self) -> None:
        super().__init__(time_cost=1, memory_cost=8, parallelism=1)
        self.verified = 0

    def verify(self, hash: str | bytes, password: str | bytes) -> Literal[True]:
        self.verified += 1
        return super().verify(hash, password)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_postgres(*args: str) -> subprocess.CompletedProcess[str]:
    command = list(args)
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=60)


class StoppablePostgres:
    """A throwaway PostgreSQL 15 cluster (fsync off) that a test or benchmark may stop and start
    again (an outage); ``close`` removes it."""

    def __init__(self, *, max_connections: int = 100) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="dpc-pg-"))
        self.data = self.root / "data"
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}"
        self.max_connections = max_connections
        _as_postgres(str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "--no-sync")

    @staticmethod
    def available() -> bool:
        return (PG_BIN / "initdb").exists()

    def _ctl(self, *args: str) -> None:
        _as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", *args)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        options += f" -c max_connections={self.max_connections}"
        self._ctl("-o", options, "-l", str(self.root / "log"), "start")

    def stop(self) -> None:
        self._ctl("-m", "fast", "stop")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ctl("-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def throwaway_postgres(*, durable: bool = False) -> Iterator[str]:
    """Run a throwaway PostgreSQL 15 cluster; yields its base URL (without database name).

    ``durable=False`` (tests) turns fsync off; ``durable=True`` (benchmarks) keeps PostgreSQL's
    defaults (fsync on, synchronous_commit on).
    """
    root = Path(tempfile.mkdtemp(prefix="dpc-pg-"))
    data = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    port = free_port()
    _as_postgres(
        str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"
    )
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections=200"
    if not durable:
        options += " -c fsync=off"
    _as_postgres(
        str(PG_BIN / "pg_ctl"),
        "-D",
        str(data),
        "-o",
        options,
        "-w",
        "-l",
        str(root / "log"),
        "start",
    )
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        _as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def postgres_available() -> bool:
    """Whether the PostgreSQL 15 binaries are installed."""
    return (PG_BIN / "initdb").exists()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A throwaway PostgreSQL cluster for the session (skipped without the binaries)."""
    if not postgres_available():
        pytest.skip("PostgreSQL 15 binaries are not installed")
    with throwaway_postgres() as url:
        yield url


def fresh_postgres_url(base: str) -> str:
    """Create an empty database on the throwaway cluster and return its SQLAlchemy URL."""
    name = f"ledger_{os.getpid()}_{next(_DB_NUMBERS)}"
    plain = base.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(f"{plain}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{base}/{name}"


class LiveServer:
    """``python -m dpcurator.cli serve ...`` on 127.0.0.1 in a subprocess (killable)."""

    def __init__(
        self, args: list[str], *, env: dict[str, str] | None = None, module: str = "dpcurator.cli"
    ) -> None:
        self.module = module  # run as ``python -m module serve ...`` (a test's own launcher)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = args
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[str] | None = None
        self.first_lines: list[str] = []

    def start(
        self, *, wait_lines: int = 0, serving_after_lines: bool = False, within: float = 180
    ) -> LiveServer:
        """Start the server and wait until /v1/health answers, at most ``within`` seconds
        (``serving_after_lines``: it must answer at once after the first ``wait_lines`` lines
        of stdout, without waiting). A server that exits fails at once; the wait is for its
        imports, which took 24-50 s on a loaded 2-core machine (60 s before: two starts timed
        out under load)."""
        command = [
            sys.executable,
            "-m",
            self.module,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.args,
        ]
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=self.env
        )
        assert self.process.stdout is not None
        self.first_lines = [self.process.stdout.readline().rstrip("\n") for _ in range(wait_lines)]
        if serving_after_lines:
            assert httpx.get(f"{self.url}/v1/health", timeout=5).status_code == 200
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/v1/health", timeout=1).status_code == 200:
                    return self
            time.sleep(0.05)
        raise RuntimeError("server did not start")

    def kill(self) -> None:
        """SIGKILL the server (no cleanup runs in it)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def stop(self) -> None:
        """Terminate politely, then kill."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()


PEOPLE_METADATA = {
    "table": "people",
    "columns": {
        "age": {"type": "int", "lower": 0, "upper": 100},
        "sex": {"type": "string", "keys": ["F", "M"]},
        "region": {"type": "string", "keys": ["north", "south", "east", "west"]},
        "income": {"type": "float", "lower": 0, "upper": 100000},
    },
}


def write_people(path: Path, rows: int = 2000) -> Path:
    """A deterministic CSV of ``rows`` people matching :data:`PEOPLE_METADATA`."""
    regions = ["north", "south", "east", "west"]
    lines = ["age,sex,region,income"]
    for i in range(rows):
        lines.append(
            f"{(i * 37) % 90 + 5},{'FM'[i % 2]},{regions[(i // 3) % 4]},{(i * 7919) % 90000 + 1000}"
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class ThreadServer:
    """A real uvicorn server for an in-process app, on a random loopback port, in a thread."""

    def __init__(self, app: object, *, lifespan: str = "off") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app,  # type: ignore[arg-type]
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan=lifespan,  # type: ignore[arg-type]
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.clients: list[httpx.Client] = []

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *_: object) -> None:
        for client in self.clients:
            client.close()
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def client(self, token: str | None = None) -> httpx.Client:
        """An httpx client for this server (with a Bearer token if given)."""
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        client = httpx.Client(base_url=self.url, headers=headers, timeout=60)
        self.clients.append(client)
        return client


def ledger_with_analysts(
    ledger: Ledger,
    *,
    grant: ApproxDP,
    cap: ApproxDP,
    analysts: int = 1,
    accounting: str | None = "basic",
) -> list[str]:
    """Owner ``own_1``, dataset ``d`` with global ``cap``, and analysts ``ana_0``, ``ana_1``, ...
    each granted ``grant`` on it (a ledger alone: no data source); the analysts' ids. Budgets
    are accounted by ``accounting`` (None: the ledger's default)."""
    ledger.create_principal("own_1", "owner", "owner")
    ledger.add_dataset(
        "d",
        name="d",
        source={},
        metadata_doc={},
        cap=cap,
        replay_enabled=False,
        by="own_1",
        accounting=accounting,
    )
    ids = []
    for i in range(analysts):
        ledger.create_principal(f"ana_{i}", f"analyst {i}", "analyst")
        ledger.set_grant(f"ana_{i}", "d", grant, by="own_1", accounting=accounting)
        ids.append(f"ana_{i}")
    return ids


def add_people_dataset(owner: httpx.Client, csv: Path) -> None:
    """Create the dataset ``people`` from ``csv`` (:func:`write_people`) as ``owner``, cap ε 100."""
    created = owner.post(
        "/v1/datasets",
        json={
            "id": "people",
            "source": {"path": str(csv)},
            "metadata": PEOPLE_METADATA,
            "cap_epsilon": 100,
        },
    )
    assert created.status_code == 201, created.text


def add_analyst(owner: httpx.Client, name: str, epsilon: float) -> dict[str, Any]:
    """Create the analyst ``name`` as ``owner`` with a grant of ``epsilon`` on ``people``; return
    the issued principal and token."""
    issued: dict[str, Any] = owner.post("/v1/analysts", json={"name": name}).json()
    grant = owner.put(
        f"/v1/analysts/{issued['principal']['id']}/grants/people", json={"epsilon": epsilon}
    )
    assert grant.status_code == 200, grant.text
    return issued
