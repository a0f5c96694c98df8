"""``Idempotency-Key`` on every route that charges or changes state (issue 24, item 2).

For each route: concurrent requests with one key and one body (threads against a real server)
are answered once (one charge, or one ingestion); the others get 409 while the first computes
and, afterwards, a retry gets the first answer; the same key with another body is 409 and
changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from dpcurator.core.measures import ApproxDP
from tests.service_kit import Kit, people_kit

ALL = "SELECT COUNT(*) FROM people"
GROUPED = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"
CONCURRENT = 8


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    with people_kit(tmp_path, rows=500) as made:
        yield made


@dataclass(frozen=True)
class Route:
    """A route under test: who calls it (0 owner, 1 alice), its path, two different bodies, the
    status of a first answer and the field naming what it made."""

    name: str
    caller: int
    path: str
    body: dict[str, Any]
    other: dict[str, Any]
    status: int
    made: Callable[[dict[str, Any]], Any]


ROUTES = [
    Route(
        "sparse-vector",
        1,
        "/v1/datasets/people/sparse-vector",
        {"queries": [ALL, ALL], "threshold": 100, "epsilon": 0.25},
        {"queries": [ALL, ALL], "threshold": 101, "epsilon": 0.25},
        200,
        lambda out: out["charge_id"],
    ),
    Route(
        "releases",
        0,
        "/v1/datasets/people/releases",
        {"name": "tables", "queries": [{"sql": GROUPED, "epsilon": 0.5}]},
        {"name": "tables", "queries": [{"sql": GROUPED, "epsilon": 0.25}]},
        201,
        lambda out: out["id"],
    ),
    Route(
        "synthetic",
        0,
        "/v1/datasets/people/synthetic",
        {"kind": "marginals", "epsilon": 0.5, "columns": ["sex", "region"]},
        {"kind": "marginals", "epsilon": 0.5, "columns": ["sex"]},
        202,
        lambda out: out["id"],
    ),
    Route(
        "streams",
        0,
        "/v1/datasets/people/streams",
        {"kind": "count", "epsilon": 0.5, "horizon": 100},
        {"kind": "count", "epsilon": 0.5, "horizon": 200},
        201,
        lambda out: out["id"],
    ),
    Route(
        "pmw",
        0,
        "/v1/datasets/people/pmw",
        {"epsilon": 0.5, "threshold": 40, "max_updates": 2, "columns": ["sex", "region"]},
        {"epsilon": 0.5, "threshold": 41, "max_updates": 2, "columns": ["sex", "region"]},
        201,
        lambda out: out["id"],
    ),
]


def _concurrently(
    kit: Kit, token: str, path: str, body: dict[str, Any], key: str
) -> list[httpx.Response]:
    """``CONCURRENT`` requests at once, each on its own connection, all with ``key``."""
    clients = [kit.server.client(token) for _ in range(CONCURRENT)]
    try:
        with ThreadPoolExecutor(CONCURRENT) as pool:
            return list(
                pool.map(
                    lambda c: c.post(path, json=body, headers={"Idempotency-Key": key}), clients
                )
            )
    finally:
        for client in clients:
            client.close()


def _settled(kit: Kit, token: str, path: str, body: dict[str, Any], key: str) -> httpx.Response:
    """The retry after the first request finished (409 while it still runs; polled)."""
    client = kit.server.client(token)
    deadline = time.monotonic() + 60
    try:
        while True:
            again = client.post(path, json=body, headers={"Idempotency-Key": key})
            if again.status_code != 409 or time.monotonic() > deadline:
                return again
            time.sleep(0.05)
    finally:
        client.close()


def _wait_synthetic(kit: Kit, release_id: str) -> None:
    deadline = time.monotonic() + 120
    while kit.owner.get(f"/v1/synthetic/{release_id}").json()["status"] == "running":
        assert time.monotonic() < deadline, "the synthetic release did not finish"
        time.sleep(0.05)


def _spent_since(kit: Kit, before: ApproxDP) -> ApproxDP:
    now = kit.service.ledger.charged_total("people")
    return ApproxDP(now.epsilon - before.epsilon, now.delta - before.delta)


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.name)
def test_one_key_one_charge_under_concurrent_retries(kit: Kit, route: Route) -> None:
    token = kit.tokens[route.caller]
    before = kit.service.ledger.charged_total("people")
    answers = _concurrently(kit, token, route.path, route.body, "key-1")
    statuses = sorted(a.status_code for a in answers)
    assert set(statuses) <= {route.status, 409}, [a.text for a in answers]
    firsts = [a.json() for a in answers if a.status_code == route.status]
    assert firsts, statuses
    # Every success names the same thing: the first answer's.
    assert len({route.made(out) for out in firsts}) == 1
    made = route.made(firsts[0])
    if route.name == "synthetic":
        _wait_synthetic(kit, made)
    cost = _spent_since(kit, before)
    retried = _settled(kit, token, route.path, route.body, "key-1")
    assert retried.status_code == route.status, retried.text
    assert route.made(retried.json()) == made
    with kit.server.client(token) as client:
        other = client.post(route.path, json=route.other, headers={"Idempotency-Key": "key-1"})
    assert other.status_code == 409, other.text
    assert other.headers["content-type"].startswith("application/problem+json")
    assert "key-1" in other.json()["detail"]
    # One charge in all: the cost of one request, whatever the retries and the conflict did.
    assert _spent_since(kit, before) == cost
    charged = [
        c
        for c in kit.service.ledger.history(dataset_id="people", limit=1000)
        if c.request_key == "key-1"
    ]
    assert len(charged) == 1, [(c.id, c.kind, c.status) for c in charged]
    assert cost.epsilon > 0


def test_events_with_one_key_are_ingested_once(kit: Kit) -> None:
    created = kit.owner.post(
        "/v1/datasets/people/streams", json={"kind": "count", "epsilon": 1, "horizon": 1000}
    )
    assert created.status_code == 201, created.text
    path = f"/v1/streams/{created.json()['id']}/events"
    body = {"values": [1, 0, 1, 1, 0]}
    answers = _concurrently(kit, kit.tokens[0], path, body, "batch-1")
    assert {a.status_code for a in answers} <= {200, 409}, [a.text for a in answers]
    assert any(a.status_code == 200 for a in answers)
    retried = _settled(kit, kit.tokens[0], path, body, "batch-1")
    assert retried.status_code == 200, retried.text
    assert retried.json()["latest"]["time"] == 5
    # The stream's clock counts each event once: 5 events, whatever the retries.
    assert kit.owner.get(path.removesuffix("/events")).json()["latest"]["time"] == 5
    other = kit.owner.post(
        path, json={"values": [1, 1, 1, 1, 1]}, headers={"Idempotency-Key": "batch-1"}
    )
    assert other.status_code == 409, other.text
    assert kit.owner.get(path.removesuffix("/events")).json()["latest"]["time"] == 5
    # Without a key, every batch is a new one.
    again = kit.owner.post(path, json=body)
    assert again.json()["latest"]["time"] == 10


def test_a_key_is_the_callers_own(kit: Kit) -> None:
    """Two callers may use the same key: each is answered for its own request."""
    body = {"queries": [ALL], "threshold": 100, "epsilon": 0.25}
    path = "/v1/datasets/people/sparse-vector"
    first = kit.alice.post(path, json=body, headers={"Idempotency-Key": "shared"})
    second = kit.owner.post(path, json=body, headers={"Idempotency-Key": "shared"})
    assert (first.status_code, second.status_code) == (200, 200)
    assert first.json()["charge_id"] != second.json()["charge_id"]
