"""The HTTP API against a real uvicorn server: auth, isolation, queries, refusals, bad input,
replay, idempotent retries, batch releases, and no overspend under 200 concurrent requests."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import httpx
import pytest

from dpcurator.core.measures import ApproxDP
from dpcurator.service.app import create_app
from dpcurator.service.auth import Identity
from dpcurator.service.operations import CuratorService
from dpcurator.service.refusals import RefusalLimiter
from dpcurator.service.server import build_service
from tests.service_fixtures import (
    PEOPLE_METADATA,
    ThreadServer,
    add_analyst,
    add_people_dataset,
    cheap_hasher,
    fresh_postgres_url,
    postgres_server,
    write_people,
)

__all__ = ["postgres_server"]

GROUPED = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"
PROBLEM = "application/problem+json"


@dataclass
class Kit:
    """A running server with one owner, two analysts (alice has a grant, bob too) and a dataset."""

    service: CuratorService
    server: ThreadServer
    owner: httpx.Client
    alice: httpx.Client
    bob: httpx.Client
    alice_id: str
    alice_token_id: str


def _kit(ledger_url: str, tmp_path: Path, *, alice_epsilon: float = 1.0) -> Iterator[Kit]:
    service = build_service(ledger_url, hasher=cheap_hasher(), max_failures=5, data_root=tmp_path)
    _, owner_token = service.create_principal("owner", "owner")
    csv = write_people(tmp_path / "people.csv")
    with ThreadServer(create_app(service, max_body=64 * 1024)) as server:
        owner = server.client(owner_token.token)
        add_people_dataset(owner, csv)
        tokens = {
            name: add_analyst(owner, name, eps)
            for name, eps in (("alice", alice_epsilon), ("bob", 1.0))
        }
        yield Kit(
            service,
            server,
            owner,
            server.client(tokens["alice"]["token"]),
            server.client(tokens["bob"]["token"]),
            tokens["alice"]["principal"]["id"],
            tokens["alice"]["token_id"],
        )
    service.close()


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    """A server with a SQLite ledger."""
    yield from _kit(f"sqlite:///{tmp_path / 'ledger.sqlite3'}", tmp_path)


def _spent(kit: Kit) -> ApproxDP:
    return kit.service.ledger.charged_total("people")


def _assert_problem(response: httpx.Response, status: int, slug: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["type"] == f"urn:dpcurator:problem:{slug}"
    assert body["status"] == status
    assert body["detail"]


def test_query_releases_values_cis_cost_and_remaining(kit: Kit) -> None:
    response = kit.alice.post("/v1/datasets/people/queries", json={"sql": GROUPED, "epsilon": 0.25})
    assert response.status_code == 200, response.text
    body = response.json()
    rows = body["release"]["rows"]
    assert [r["group"]["sex"] for r in rows] == ["F", "M"]
    for row in rows:
        cell = row["values"]["n"]
        assert cell["ci_low"] <= cell["value"] <= cell["ci_high"]
        assert abs(cell["value"] - 1000) < 200
    assert body["cost"]["epsilon_exact"] == "1/4"
    assert body["remaining"]["remaining"]["epsilon_exact"] == "3/4"
    assert _spent(kit) == ApproxDP(Fraction(1, 4), 0)
    history = kit.alice.get("/v1/datasets/people/queries").json()
    assert [h["sql"] for h in history] == [GROUPED]
    assert history[0]["result"]["rows"] == rows


def test_estimate_charges_nothing(kit: Kit) -> None:
    response = kit.alice.post(
        "/v1/datasets/people/queries:estimate",
        json={"sql": "SELECT COUNT(*) AS n FROM people", "epsilon": 0.5},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["cost"]["epsilon_exact"] == "1/2"
    assert body["fits"] is True
    assert body["estimate"]["ci_halfwidths"]["n"] > 0
    assert _spent(kit) == ApproxDP(0, 0)


def test_over_budget_is_refused_charges_nothing_and_is_audited(kit: Kit) -> None:
    response = kit.alice.post("/v1/datasets/people/queries", json={"sql": GROUPED, "epsilon": 2})
    _assert_problem(response, 409, "budget-exceeded")
    assert response.json()["remaining"]["epsilon_exact"] == "1"
    assert _spent(kit) == ApproxDP(0, 0)
    assert kit.alice.get("/v1/datasets/people/queries").json() == []
    actions = [e["action"] for e in kit.owner.get("/v1/audit").json()]
    assert "query_refused" in actions


@pytest.mark.parametrize(
    ("body", "status", "slug"),
    [
        ({"sql": GROUPED, "epsilon": 0}, 422, "invalid-request"),
        ({"sql": GROUPED, "epsilon": -1}, 422, "invalid-request"),
        ({"sql": GROUPED, "epsilon": 0.5, "delta": 1.5}, 422, "invalid-request"),
        ({"sql": GROUPED}, 422, "invalid-request"),
        ({"sql": GROUPED, "epsilon": 0.5, "extra": 1}, 422, "invalid-request"),
        ({"sql": "SELECT * FROM people", "epsilon": 0.5}, 422, "unsupported-query"),
        ({"sql": "DROP TABLE people", "epsilon": 0.5}, 422, "unsupported-query"),
        ({"sql": "SELECT COUNT(*) FROM other", "epsilon": 0.5}, 422, "unsupported-query"),
    ],
)
def test_bad_queries_are_problems_and_charge_nothing(
    kit: Kit, body: dict[str, object], status: int, slug: str
) -> None:
    response = kit.alice.post("/v1/datasets/people/queries", json=body)
    _assert_problem(response, status, slug)
    assert _spent(kit) == ApproxDP(0, 0)
    assert kit.service.ledger.history() == []


@pytest.mark.parametrize(
    "raw",
    [
        b'{"sql": "SELECT COUNT(*) AS n FROM people", "epsilon": NaN}',
        b'{"sql": "SELECT COUNT(*) AS n FROM people", "epsilon": Infinity}',
    ],
)
def test_nan_and_infinite_epsilon_are_refused(kit: Kit, raw: bytes) -> None:
    response = kit.alice.post(
        "/v1/datasets/people/queries", content=raw, headers={"Content-Type": "application/json"}
    )
    _assert_problem(response, 422, "invalid-request")
    assert _spent(kit) == ApproxDP(0, 0)


def test_malformed_json_huge_body_and_unknown_dataset(kit: Kit) -> None:
    malformed = kit.alice.post(
        "/v1/datasets/people/queries",
        content=b'{"sql": "SELECT',
        headers={"Content-Type": "application/json"},
    )
    _assert_problem(malformed, 400, "malformed-json")
    huge = kit.alice.post(
        "/v1/datasets/people/queries",
        content=json.dumps({"sql": "x" * 100_000, "epsilon": 1}).encode(),
        headers={"Content-Type": "application/json"},
    )
    _assert_problem(huge, 413, "body-too-large")
    unknown = kit.alice.post("/v1/datasets/nope/queries", json={"sql": GROUPED, "epsilon": 0.5})
    _assert_problem(unknown, 404, "not-found")
    assert kit.service.ledger.history() == []


def test_authentication_roles_and_isolation(kit: Kit) -> None:
    anonymous = kit.server.client()
    _assert_problem(anonymous.get("/v1/datasets"), 401, "unauthorized")
    _assert_problem(
        anonymous.post("/v1/datasets/people/queries", json={"sql": GROUPED, "epsilon": 1}),
        401,
        "unauthorized",
    )
    assert anonymous.get("/v1/datasets").headers["www-authenticate"] == "Bearer"
    for path in ("/v1/analysts", "/v1/audit", "/v1/ledger"):
        _assert_problem(kit.alice.get(path), 403, "forbidden")
    _assert_problem(
        kit.alice.put(f"/v1/analysts/{kit.alice_id}/grants/people", json={"epsilon": 99}),
        403,
        "forbidden",
    )
    kit.alice.post("/v1/datasets/people/queries", json={"sql": GROUPED, "epsilon": 0.25})
    # Bob sees neither Alice's history nor her budget.
    assert kit.bob.get("/v1/datasets/people/queries").json() == []
    assert kit.bob.get("/v1/datasets/people/budget").json()["spent"]["epsilon"] == 0
    # An analyst without a grant does not even learn that the dataset exists.
    carol = kit.owner.post("/v1/analysts", json={"name": "carol"}).json()
    carol_client = kit.server.client(carol["token"])
    assert carol_client.get("/v1/datasets").json() == []
    _assert_problem(carol_client.get("/v1/datasets/people"), 404, "not-found")
    schema = kit.alice.get("/v1/datasets/people").json()
    assert schema["schema"]["columns"]["sex"]["keys"] == ["F", "M"]
    assert schema["cap"] is None
    _assert_stream_ownership(kit)


def _assert_stream_ownership(kit: Kit) -> None:
    """A stream is written (events, paid estimates) only by the owner who created it; other
    owners read it (403 on writes); analysts, even granted the dataset, do not learn it exists
    (404, as an unknown id); nothing a refused caller sends is ingested or spent."""
    _, issued = kit.service.create_principal("second owner", "owner")
    other_owner = kit.server.client(issued.token)
    body = {"kind": "density", "epsilon": 1, "universe": 1000, "output_epsilon": 0.5}
    created = kit.owner.post("/v1/datasets/people/streams", json={**body, "outputs": 2})
    assert created.status_code == 201, created.text
    path = f"/v1/streams/{created.json()['id']}"
    for caller, status, slug in ((kit.alice, 404, "not-found"), (other_owner, 403, "forbidden")):
        _assert_problem(caller.post(f"{path}/events", json={"values": [1, 2, 3]}), status, slug)
        _assert_problem(caller.post(f"{path}/estimates"), status, slug)
    _assert_problem(kit.alice.get(path), 404, "not-found")
    _assert_problem(kit.alice.get("/v1/streams/no-such-stream"), 404, "not-found")
    assert other_owner.get(path).json()["latest"] is None  # owners read every stream
    assert kit.owner.post(f"{path}/events", json={"values": [4, 5]}).status_code == 200
    estimate = kit.owner.post(f"{path}/estimates")
    assert estimate.status_code == 200, estimate.text
    assert estimate.json()["latest"]["outputs_used"] == 1  # the refused callers used none


def test_revoked_and_expired_tokens_are_refused(kit: Kit) -> None:
    assert kit.alice.get("/v1/me").status_code == 200  # now cached
    assert kit.owner.delete(f"/v1/tokens/{kit.alice_token_id}").status_code == 204
    _assert_problem(kit.alice.get("/v1/me"), 401, "unauthorized")
    issued = kit.owner.post("/v1/analysts", json={"name": "dave", "expires_in": 0.5}).json()
    dave = kit.server.client(issued["token"])
    assert dave.get("/v1/me").status_code == 200
    time.sleep(0.6)  # the token expires after 0.5 s
    _assert_problem(dave.get("/v1/me"), 401, "unauthorized")


def test_failed_sign_ins_are_rate_limited(kit: Kit) -> None:
    intruder = kit.server.client("dpc_AAAAAAAAAAAA_wrong")
    for _ in range(5):
        _assert_problem(intruder.get("/v1/me"), 401, "unauthorized")
    limited = intruder.get("/v1/me")
    _assert_problem(limited, 429, "rate-limited")
    assert int(limited.headers["retry-after"]) >= 1
    # A valid token from the same address is still answered: failures never lock anyone out.
    assert kit.alice.get("/v1/me").status_code == 200


def test_replay_answers_from_history_at_no_cost(kit: Kit) -> None:
    first = kit.alice.post("/v1/datasets/people/queries", json={"sql": GROUPED, "epsilon": 0.25})
    # Disabled by default: asking again is charged again.
    second = kit.alice.post("/v1/datasets/people/queries", json={"sql": GROUPED, "epsilon": 0.25})
    assert second.json()["replayed"] is False
    assert _spent(kit) == ApproxDP(Fraction(1, 2), 0)
    patched = kit.owner.patch("/v1/datasets/people", json={"replay_enabled": True})
    assert patched.status_code == 200
    spaced = "SELECT  sex, COUNT(*) AS n\nFROM people GROUP BY sex;"
    third = kit.alice.post("/v1/datasets/people/queries", json={"sql": spaced, "epsilon": 0.25})
    assert third.json()["replayed"] is True
    assert third.json()["cost"]["epsilon"] == 0
    assert third.json()["release"] == second.json()["release"]
    assert first.json()["release"] != {}
    assert _spent(kit) == ApproxDP(Fraction(1, 2), 0)
    # Another analyst asking the same question pays for it.
    bob = kit.bob.post("/v1/datasets/people/queries", json={"sql": GROUPED, "epsilon": 0.25})
    assert bob.json()["replayed"] is False
    assert _spent(kit) == ApproxDP(Fraction(3, 4), 0)


def test_idempotent_retry_returns_the_first_answer_once_charged(kit: Kit) -> None:
    body = {"sql": GROUPED, "epsilon": 0.25}
    headers = {"Idempotency-Key": "retry-1"}
    first = kit.alice.post("/v1/datasets/people/queries", json=body, headers=headers)
    again = kit.alice.post("/v1/datasets/people/queries", json=body, headers=headers)
    assert first.status_code == again.status_code == 200
    assert again.json()["release"] == first.json()["release"]
    assert again.json()["charge_id"] == first.json()["charge_id"]
    assert _spent(kit) == ApproxDP(Fraction(1, 4), 0)
    other = kit.alice.post(
        "/v1/datasets/people/queries", json={**body, "epsilon": 0.5}, headers=headers
    )
    _assert_problem(other, 409, "conflict")


def test_batch_release_is_charged_once_and_read_for_free(kit: Kit) -> None:
    batch = {
        "name": "census tables",
        "queries": [
            {"sql": GROUPED, "epsilon": 0.5},
            {"sql": "SELECT region, AVG(income) AS m FROM people GROUP BY region", "epsilon": 1},
        ],
    }
    _assert_problem(kit.alice.post("/v1/datasets/people/releases", json=batch), 403, "forbidden")
    created = kit.owner.post("/v1/datasets/people/releases", json=batch)
    assert created.status_code == 201, created.text
    release = created.json()
    assert len(release["results"]) == 2
    assert _spent(kit) == ApproxDP(Fraction(3, 2), 0)
    read = kit.alice.get(f"/v1/releases/{release['id']}")
    assert read.json()["results"] == release["results"]
    assert [r["id"] for r in kit.bob.get("/v1/datasets/people/releases").json()] == [release["id"]]
    assert _spent(kit) == ApproxDP(Fraction(3, 2), 0)
    alice_budget = kit.alice.get("/v1/datasets/people/budget").json()
    assert alice_budget["spent"]["epsilon"] == 0


def test_openapi_is_published(kit: Kit) -> None:
    spec = kit.server.client().get("/v1/openapi.json").json()
    assert "/v1/datasets/{dataset_id}/queries:estimate" in spec["paths"]
    console = kit.server.client().get("/console/")
    assert console.status_code == 200
    assert "dpcurator" in console.text
    assert "default-src 'self'" in console.headers["content-security-policy"]


def _hammer(kit: Kit, requests: int) -> list[int]:
    def one(_: int) -> int:
        response = kit.alice.post(
            "/v1/datasets/people/queries",
            json={"sql": "SELECT COUNT(*) AS n FROM people", "epsilon": 0.125},
        )
        return response.status_code

    with ThreadPoolExecutor(max_workers=50) as pool:
        return list(pool.map(one, range(requests)))


def _check_no_overspend(kit: Kit) -> None:
    kit.service.refusals = RefusalLimiter(burst=1_000)  # every refusal reaches the ledger
    statuses = _hammer(kit, 200)
    assert statuses.count(200) == 10
    assert statuses.count(409) == 190
    assert _spent(kit) == ApproxDP(Fraction(5, 4), 0)
    assert kit.service.ledger.count_charges("people") == 10
    released = [c for c in kit.service.ledger.history(limit=1000) if c.status == "released"]
    assert len(released) == 10


@pytest.mark.slow
def test_200_concurrent_requests_never_overspend_sqlite(tmp_path: Path) -> None:
    for kit in _kit(f"sqlite:///{tmp_path / 'ledger.sqlite3'}", tmp_path, alice_epsilon=1.25):
        _check_no_overspend(kit)


@pytest.mark.slow
@pytest.mark.postgres
def test_200_concurrent_requests_never_overspend_postgres(
    tmp_path: Path, postgres_server: str
) -> None:
    url = fresh_postgres_url(postgres_server)
    for kit in _kit(url, tmp_path, alice_epsilon=1.25):
        _check_no_overspend(kit)


def test_keep_alive_connections_are_closed_now_and_then(kit: Kit) -> None:
    """Every 100th response on a connection says ``Connection: close`` (so clients of a
    multi-worker server reconnect and spread over the workers); the client then reconnects."""
    with kit.server.client() as fresh:
        closing = [
            i for i in range(1, 251) if fresh.get("/v1/health").headers.get("connection") == "close"
        ]
    assert closing == [100, 200]


def test_registered_datasets_are_opened_at_start_up(tmp_path: Path) -> None:
    """A restarted server opens every registered dataset before it serves (its private copy
    answers even once the source file is gone); one it cannot open is refused, charged nothing,
    and the others are served."""
    ledger_url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    first = build_service(ledger_url, hasher=cheap_hasher(), data_root=tmp_path)
    owner, _ = first.create_principal("owner", "owner")
    who = Identity(owner.id, owner.name, owner.role, "test")
    for name in ("people", "gone"):
        csv = write_people(tmp_path / f"{name}.csv")
        first.register_dataset(
            who,
            name,
            name=name,
            source={"path": str(csv)},
            metadata_doc=PEOPLE_METADATA,
            cap=ApproxDP(10, 0),
            replay_enabled=False,
        )
    analyst, issued = first.create_principal("ann", "analyst")
    for name in ("people", "gone"):
        first.ledger.set_grant(analyst.id, name, ApproxDP(1, 0), by=owner.id)
    first.close()
    (tmp_path / "gone.csv").unlink()

    restarted = build_service(ledger_url, hasher=cheap_hasher(), data_root=tmp_path)
    with ThreadServer(create_app(restarted), lifespan="on") as server:
        (tmp_path / "people.csv").unlink()  # after start-up: the opened copy still answers
        client = server.client(issued.token)
        body = {"sql": GROUPED, "epsilon": 0.5}
        assert client.post("/v1/datasets/people/queries", json=body).status_code == 200
        refused = client.post("/v1/datasets/gone/queries", json=body)
        _assert_problem(refused, 502, "engine-error")
        assert restarted.ledger.charged_total("gone") == ApproxDP(0, 0)
    restarted.close()
