"""Honest errors when the ledger fails (issue 24 §5): 503 with ``Retry-After`` and a problem type
of its own, one log line when an outage starts and one when it ends, and nothing charged by the
refused requests.

PostgreSQL: the ledger's own throwaway cluster is stopped in the middle of the test and started
again. SQLite: the database is made full (``PRAGMA max_page_count`` pinned to its current size on
every connection of the server's pool: SQLite's own SQLITE_FULL, as on a full disk), then freed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event

from dpcurator.service.ledger import Ledger
from tests.service_fixtures import StoppablePostgres, fresh_postgres_url
from tests.service_kit import Kit, people_kit

QUERY = {"sql": "SELECT COUNT(*) AS n FROM people", "epsilon": 0.01}
PROBLEM = "urn:dpcurator:problem:ledger-unavailable"
REFUSED = 20
LEDGER_LOG = "dpcurator.service.ledger"


@pytest.fixture
def cluster() -> Iterator[StoppablePostgres]:
    made = StoppablePostgres()
    made.start()
    try:
        yield made
    finally:
        made.close()


def _charges(url: str) -> int:
    ledger = Ledger(url)
    try:
        return len(ledger.history())
    finally:
        ledger.close()


def _assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert int(response.headers["retry-after"]) > 0
    body = response.json()
    assert body["type"] == PROBLEM
    assert body["status"] == 503


def _lines(caplog: pytest.LogCaptureFixture, words: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LEDGER_LOG and words in r.getMessage()]


def _no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


def _recover(kit: Kit) -> httpx.Response:
    """Queries until one is answered (a connection broken by the outage may fail one first)."""
    for _ in range(5):
        response = kit.alice.post("/v1/datasets/people/queries", json=QUERY)
        if response.status_code != 503:
            return response
    return response


def test_postgres_down_is_503_logged_once_and_charges_nothing(
    tmp_path: Path, cluster: StoppablePostgres, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    url = fresh_postgres_url(cluster.url)
    with people_kit(tmp_path, url=url) as kit:
        assert kit.alice.post("/v1/datasets/people/queries", json=QUERY).status_code == 200
        cluster.stop()
        for _ in range(REFUSED):
            _assert_unavailable(kit.alice.post("/v1/datasets/people/queries", json=QUERY))
        _assert_unavailable(kit.owner.get("/v1/datasets"))
        assert len(_lines(caplog, "ledger unavailable")) == 1
        _no_traceback(caplog)
        cluster.start()
        assert _recover(kit).status_code == 200
        assert len(_lines(caplog, "ledger available again")) == 1
        assert len(_lines(caplog, "ledger unavailable")) == 1
        _no_traceback(caplog)
    assert _charges(url) == 2  # the query before the outage and the one after


_FULL: dict[int, Any] = {}  # engine id -> its "connect" listener


def _set_full(engine: Any, full: bool) -> None:
    """Make every new connection of ``engine`` unable to grow the database (``PRAGMA
    max_page_count`` = its page count: SQLITE_FULL as on a full disk), or able again; the pool
    is emptied so that every later request uses such a connection."""

    def pin(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        pages = cursor.execute("PRAGMA page_count").fetchone()[0]
        cursor.execute(f"PRAGMA max_page_count = {pages}")
        cursor.close()

    if id(engine) in _FULL:
        event.remove(engine, "connect", _FULL.pop(id(engine)))
    if full:
        _FULL[id(engine)] = pin
        event.listen(engine, "connect", pin)
    engine.dispose()


def test_sqlite_full_disk_is_503_and_the_budget_is_unchanged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    with people_kit(tmp_path) as kit:
        url = kit.service.ledger.url
        engine = kit.service.ledger._engine
        assert kit.alice.post("/v1/datasets/people/queries", json=QUERY).status_code == 200
        _set_full(engine, True)  # no page may be added
        statuses = [
            kit.alice.post("/v1/datasets/people/queries", json=QUERY).status_code
            for _ in range(200)
        ]
        # Rows fit in the pages' free space until one needs a new page; from then on every
        # write is refused.
        first = statuses.index(503)
        assert set(statuses[:first]) == {200}
        assert set(statuses[first:]) == {503}
        _assert_unavailable(kit.alice.post("/v1/datasets/people/queries", json=QUERY))
        spent = kit.alice.get("/v1/datasets/people/budget").json()["spent"]
        assert len(_lines(caplog, "ledger unavailable")) == 1
        _no_traceback(caplog)
        _set_full(engine, False)  # space again
        after = kit.alice.get("/v1/datasets/people/budget").json()["spent"]
        assert after == spent
        assert _recover(kit).status_code == 200
        assert len(_lines(caplog, "ledger available again")) == 1
        history = kit.alice.get("/v1/datasets/people/queries").json()
    # Every charge is recorded: the one before, those answered while space lasted, at most one
    # whose reservation fitted but whose release did not (charged, never answered), the one after.
    answered = 1 + first + 1
    assert answered <= len(history) <= answered + 1
    assert _charges(url) == len(history)
