"""Fixtures and helpers shared by several service, ledger and CLI test files.

* :func:`ledger_url` — a fresh ledger URL, once on SQLite and once on PostgreSQL (a fixture:
  import it, with :func:`tests.service_fixtures.postgres_server`, into the test module).
* :func:`event_request` — a ledger charge request for one privacy event.
* :func:`race` — many attempts released at once on threads, for reservation races.
* :func:`serve_people` — ``dpcurator serve`` of the people dataset as a real subprocess.
* :func:`new_analyst`, :func:`run_cli` — an analyst granted ε on people; one CLI invocation.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from dpcurator.accounting.concentrated import ConcentratedFilter
from dpcurator.accounting.events import PrivacyEvent
from dpcurator.cli import main
from dpcurator.core.measures import ZCDP, ApproxDP
from dpcurator.errors import BudgetExceededError
from dpcurator.service.ledger.accounts import basic_cost
from dpcurator.service.ledger.charges import ChargeRequest
from tests._accounting_helpers import admitted_until_refused
from tests.service_fixtures import PEOPLE_METADATA, LiveServer, fresh_postgres_url, write_people


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty ledger's URL: a SQLite file, or a fresh database on the test PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    return fresh_postgres_url(request.getfixturevalue("postgres_server"))


def event_request(analyst: str, event: PrivacyEvent, *, key: str | None = None) -> ChargeRequest:
    """A query's request to charge ``event`` to ``analyst`` on dataset ``d`` (text and
    fingerprint ``q``; ``key`` is the idempotency key)."""
    return ChargeRequest(
        principal_id=analyst,
        dataset_id="d",
        kind="query",
        query_text="q",
        fingerprint="q",
        cost=basic_cost(event),
        events=[event.to_dict()],
        request_key=key,
    )


def race(attempt: Callable[[int], object], threads: int = 40) -> list[str]:
    """Call ``attempt(0) … attempt(threads - 1)``, each on its own thread, all released together
    by a barrier; one outcome per call: ``"ok"``, or ``"refused"`` if it raised
    :class:`BudgetExceededError` (any other exception fails the thread, and the count)."""
    outcomes: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def worker(i: int) -> None:
        start.wait()
        try:
            attempt(i)
            result = "ok"
        except BudgetExceededError:
            result = "refused"
        with lock:
            outcomes.append(result)

    running = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
    return outcomes


@contextlib.contextmanager
def serve_people(root: Path, *args: str) -> Iterator[tuple[str, str]]:
    """``dpcurator serve`` of a ``people`` dataset written under ``root`` (cap ε 1000, a SQLite
    ledger there, plus ``args``), stopped on exit: its URL and the owner's token."""
    csv_path = write_people(root / "people.csv")
    meta = root / "people.json"
    meta.write_text(json.dumps(PEOPLE_METADATA), encoding="utf-8")
    files = ["--data", str(csv_path), "--metadata", str(meta)]
    ledger = ["--ledger", f"sqlite:///{root / 'l.sqlite3'}"]
    server = LiveServer([*files, *ledger, "--cap-epsilon", "1000", *args])
    server.start(wait_lines=2)
    try:
        yield server.url, server.first_lines[0].removeprefix("owner token: ")
    finally:
        server.stop()


def new_analyst(url: str, owner_token: str, epsilon: float) -> tuple[str, str, str]:
    """A new analyst granted ``epsilon`` on people: (id, name, token)."""
    name = f"ann{time.monotonic_ns()}"
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {owner_token}"}) as owner:
        issued = owner.post("/v1/analysts", json={"name": name}).json()
        analyst_id = issued["principal"]["id"]
        owner.put(
            f"/v1/analysts/{analyst_id}/grants/people", json={"epsilon": epsilon}
        ).raise_for_status()
    return analyst_id, name, issued["token"]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``dpcurator *argv`` in this process: its exit code, stdout and stderr."""
    code = main(list(argv))
    said = capsys.readouterr()
    return code, said.out, said.err


def library_admits(budget: ApproxDP | ZCDP, event: PrivacyEvent) -> int:
    """How many copies of ``event`` the library's ConcentratedFilter admits on ``budget``."""
    return admitted_until_refused(ConcentratedFilter(budget), event)
