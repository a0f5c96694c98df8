"""Pieces of the operator's stress harness (``benchmarks/service_stress.py``): a real
``dpcurator serve`` subprocess (its own process group, so a SIGKILL takes the supervisor and its
workers at once), a throwaway PostgreSQL cluster that can be stopped and started again, the
people table, and the ledger invariants read straight from the ledger database with exact
arithmetic (:class:`fractions.Fraction`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dpcurator.service.ledger import Ledger  # noqa: E402
from dpcurator.service.ledger.budgets import cost_of  # noqa: E402
from tests.service_fixtures import (  # noqa: E402
    PEOPLE_METADATA,
    StoppablePostgres,
    free_port,
    fresh_postgres_url,
    write_people,
)

__all__ = [
    "PEOPLE_METADATA",
    "PROBLEM",
    "REPO",
    "Server",
    "StoppablePostgres",
    "Tally",
    "add_analysts",
    "client",
    "fresh_postgres_url",
    "ledger_invariants",
    "owner_client",
    "people_files",
    "row",
    "verdict",
]

PROBLEM = "application/problem+json"


def people_files(root: Path, rows: int = 2000) -> tuple[Path, Path]:
    """The people CSV and its metadata (JSON) under ``root``."""
    csv = write_people(root / "people.csv", rows)
    meta = root / "people.json"
    meta.write_text(json.dumps(PEOPLE_METADATA), encoding="utf-8")
    return csv, meta


class Server:
    """``dpcurator serve`` on a free loopback port in a new session; stderr goes to a log file
    (read back to count outage lines and tracebacks). ``start`` returns once /v1/health answers;
    on a fresh ledger the owner's token is read from the first line of stdout."""

    def __init__(self, root: Path, ledger: str, *, workers: int = 2, cap: int = 1000) -> None:
        self.root = root
        self.ledger = ledger
        self.csv, self.meta = people_files(root)
        self.args = ["--data", str(self.csv), "--metadata", str(self.meta)]
        self.args += ["--dataset-id", "people", "--cap-epsilon", str(cap), "--cap-delta", "0.5"]
        self.args += ["--workers", str(workers), "--ledger", ledger]
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / "server.log"
        self.process: subprocess.Popen[str] | None = None
        self.owner_token: str | None = None
        self.starts = 0

    def start(self, timeout: float = 180) -> float:
        """Start (or restart) the server; the seconds until /v1/health answered."""
        began = time.monotonic()
        command = [sys.executable, "-m", "dpcurator.cli", "serve", "--host", "127.0.0.1"]
        command += ["--port", str(self.port), *self.args]
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        with open(self.log, "a", encoding="utf-8") as log:
            self.process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
                start_new_session=True,
            )
        assert self.process.stdout is not None
        if self.starts == 0:
            first = self.process.stdout.readline().strip()
            if not first.startswith("owner token: "):
                raise RuntimeError(f"the server said {first!r}; see {self.log}")
            self.owner_token = first.removeprefix("owner token: ")
        self.starts += 1
        while time.monotonic() - began < timeout:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}; see {self.log}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/v1/health", timeout=2).status_code == 200:
                    return time.monotonic() - began
            time.sleep(0.05)
        raise RuntimeError("server did not start")

    def workers(self) -> list[int]:
        """The PIDs of the worker processes (children running multiprocessing's spawn_main)."""
        if self.process is None:
            return []
        out = subprocess.run(
            ["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True, check=False
        ).stdout.split()
        pids = []
        for pid in map(int, out):
            with contextlib.suppress(OSError):
                if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    pids.append(pid)
        return sorted(pids)

    def kill(self) -> None:
        """SIGKILL the whole process group (supervisor and workers), as a crash would."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.kill()

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def owner_client(server: Server) -> httpx.Client:
    return client(server, server.owner_token or "")


def client(server: Server, token: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=server.url, headers=headers, timeout=120)


def add_analysts(server: Server, count: int, epsilon: float) -> list[dict[str, str]]:
    """``count`` analysts granted (``epsilon``, 10^-3) on people under basic composition (so the
    exact sums of their charges are what the grant bounds): id and token of each."""
    made = []
    with owner_client(server) as owner:
        for i in range(count):
            issued = owner.post("/v1/analysts", json={"name": f"stress{i}"})
            issued.raise_for_status()
            body = issued.json()
            analyst_id = body["principal"]["id"]
            grant = {"epsilon": epsilon, "delta": 1e-3, "accounting": "basic"}
            granted = owner.put(f"/v1/analysts/{analyst_id}/grants/people", json=grant)
            granted.raise_for_status()
            made.append({"id": analyst_id, "token": body["token"]})
    return made


@dataclass
class Tally:
    """What the clients saw: statuses, 2xx charge ids, non-problem error bodies."""

    statuses: Counter[int] = field(default_factory=Counter)
    by_route: Counter[tuple[str, int]] = field(default_factory=Counter)
    charge_ids: set[int] = field(default_factory=set)
    bad_errors: list[str] = field(default_factory=list)
    transport_errors: int = 0

    def add(self, route: str, response: httpx.Response) -> None:
        code = response.status_code
        self.statuses[code] += 1
        self.by_route[(route, code)] += 1
        if code >= 400 and not response.headers.get("content-type", "").startswith(PROBLEM):
            self.bad_errors.append(f"{route} {code} {response.text[:120]}")
        if 200 <= code < 300:
            with contextlib.suppress(ValueError, AttributeError):
                charge = response.json().get("charge_id")
                if isinstance(charge, int):
                    self.charge_ids.add(charge)

    def server_errors(self) -> int:
        return sum(n for code, n in self.statuses.items() if code >= 500 and code != 503)


def ledger_invariants(url: str, answered: set[int]) -> dict[str, Any]:
    """Read the ledger: exact per-analyst sums of live charges against each grant, the dataset's
    sum against its cap, the grant/dataset running totals against those sums, and which answered
    charge ids are missing (or not ``released``)."""
    ledger = Ledger(url)
    try:
        charges = ledger.history(limit=10**9)
        grants = ledger.grants()
        datasets = ledger.datasets()
    finally:
        ledger.close()
    live = [c for c in charges if c.status != "cancelled"]
    sums: dict[tuple[str, str], tuple[Fraction, Fraction]] = {}
    totals: dict[str, tuple[Fraction, Fraction]] = {}
    for charge in live:
        cost = cost_of(charge.epsilon, charge.delta)
        key = (charge.principal_id, charge.dataset_id)
        eps, delta = sums.get(key, (Fraction(0), Fraction(0)))
        sums[key] = (eps + cost.epsilon, delta + cost.delta)
        eps, delta = totals.get(charge.dataset_id, (Fraction(0), Fraction(0)))
        totals[charge.dataset_id] = (eps + cost.epsilon, delta + cost.delta)
    overspent = []
    drift = []
    zero = (Fraction(0), Fraction(0))
    for grant in grants:
        spent = sums.get((grant.principal_id, grant.dataset_id), zero)
        budget = (Fraction(grant.budget_epsilon), Fraction(grant.budget_delta))
        if spent[0] > budget[0] or spent[1] > budget[1]:
            overspent.append(f"{grant.principal_id}: spent {_pair(spent)} > grant {_pair(budget)}")
        if (Fraction(grant.spent_epsilon), Fraction(grant.spent_delta)) != spent:
            drift.append(
                f"{grant.principal_id}: running total ε {grant.spent_epsilon} ≠ sum {_pair(spent)}"
            )
    for dataset in datasets:
        total = totals.get(dataset.id, zero)
        cap = (Fraction(dataset.cap_epsilon), Fraction(dataset.cap_delta))
        if total[0] > cap[0] or total[1] > cap[1]:
            overspent.append(f"dataset {dataset.id}: spent {_pair(total)} > cap {_pair(cap)}")
        if (Fraction(dataset.spent_epsilon), Fraction(dataset.spent_delta)) != total:
            drift.append(
                f"dataset {dataset.id}: running total ε {dataset.spent_epsilon}"
                f" ≠ sum {_pair(total)}"
            )
    by_id = {c.id: c for c in charges}
    lost = sorted(i for i in answered if i not in by_id)
    unreleased = sorted(i for i in answered if i in by_id and by_id[i].status != "released")
    return {
        "charges": len(charges),
        "reserved": sum(1 for c in charges if c.status == "reserved"),
        "overspent": overspent,
        "drift": drift,
        "lost": lost,
        "unreleased": unreleased,
        "charges_by_key": Counter(
            (c.principal_id, c.request_key)
            for c in live
            if c.request_key is not None and c.kind != "replay"
        ),
    }


def _pair(cost: tuple[Fraction, Fraction]) -> str:
    return f"(ε {cost[0]}, δ {cost[1]})"


def row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def verdict(ok: bool) -> str:
    return "pass" if ok else "**FAIL**"
