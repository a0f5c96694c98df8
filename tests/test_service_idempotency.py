"""The service around a charge: what an analyst sees when a charged computation fails, one
answer per idempotency key (across servers sharing a ledger, and with replay), replay's SQL
normalisation, refusals (bounded audit, rate limit, the cap's amount hidden) and timestamps."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from fractions import Fraction
from pathlib import Path

import httpx
import pytest

from dpcurator.core.measures import ApproxDP
from dpcurator.errors import ENGINE_FAILURE_MESSAGE, BackendError
from dpcurator.query.backends import Backend
from dpcurator.query.ir import AggregatePlan, ExactResult
from dpcurator.service.auth import Identity
from dpcurator.service.errors import ConflictError
from dpcurator.service.operations import CuratorService, fingerprint, normalise_sql
from dpcurator.service.refusals import AUDITED_SQL_CHARS, REFUSAL_BURST
from dpcurator.service.server import build_service
from tests.proxy_backend import ProxyBackend
from tests.service_fixtures import PEOPLE_METADATA, cheap_hasher, write_people
from tests.test_service_api import GROUPED, Kit, _assert_problem, _kit

SECRET = "pid 4322 earns 123456"
QUERIES = "/v1/datasets/people/queries"


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    yield from _kit(f"sqlite:///{tmp_path / 'ledger.sqlite3'}", tmp_path)


class _Leaky(ProxyBackend):
    """An engine failing after the charge with a message quoting a private value."""

    def compute(self, plan: AggregatePlan) -> ExactResult:
        raise BackendError(f"Conversion Error: could not convert '{SECRET}' to INT64")


class _Gated(ProxyBackend):
    """An engine that waits for ``go`` before computing (and says when it started)."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.started = threading.Event()
        self.go = threading.Event()

    def compute(self, plan: AggregatePlan) -> ExactResult:
        self.started.set()
        assert self.go.wait(30)
        return self.inner.compute(plan)


def test_an_engine_failure_after_the_charge_shows_the_analyst_only_the_constant_text(
    kit: Kit, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = kit.service.catalog.runtime(kit.service.ledger.dataset("people"))
    runtime.backend = _Leaky(runtime.backend)
    headers = {"Idempotency-Key": "k"}
    body = {"sql": GROUPED, "epsilon": 0.25}
    failed = kit.alice.post(QUERIES, json=body, headers=headers)
    _assert_problem(failed, 502, "engine-error")
    assert failed.json()["detail"] == ENGINE_FAILURE_MESSAGE
    retried = kit.alice.post(QUERIES, json=body, headers=headers)
    _assert_problem(retried, 502, "engine-error")
    assert retried.json()["detail"] == ENGINE_FAILURE_MESSAGE
    (entry,) = kit.alice.get(QUERIES).json()
    assert (entry["status"], entry["error"]) == ("failed", ENGINE_FAILURE_MESSAGE)
    for seen in (failed, retried, kit.alice.get(QUERIES), kit.owner.get("/v1/audit")):
        assert SECRET not in seen.text
    assert kit.service.ledger.charged_total("people") == ApproxDP(Fraction(1, 4), 0)
    assert SECRET in caplog.text  # the owner's server log has the details


def _owner(service: CuratorService) -> Identity:
    owner, _ = service.create_principal("owner", "owner")
    return Identity(owner.id, owner.name, owner.role, "test")


def test_two_servers_sharing_a_ledger_answer_one_key_once(tmp_path: Path) -> None:
    """Server A is computing a keyed query when server B (another boot id, same ledger) gets a
    retry of it: B must answer 409, not run the charge again with fresh noise; once A has
    answered, B's retry returns A's answer."""
    url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    first, second = (
        build_service(url, hasher=cheap_hasher(), data_root=tmp_path),
        build_service(url, hasher=cheap_hasher(), data_root=tmp_path),
    )
    try:
        owner = _owner(first)
        first.register_dataset(
            owner,
            "people",
            name="people",
            source={"path": str(write_people(tmp_path / "people.csv"))},
            metadata_doc=PEOPLE_METADATA,
            cap=ApproxDP(10, 0),
            replay_enabled=False,
        )
        analyst, _ = first.create_principal("ann", "analyst")
        first.ledger.set_grant(analyst.id, "people", ApproxDP(1, 0), by=owner.principal_id)
        ann = Identity(analyst.id, analyst.name, analyst.role, "test")
        runtime = first.catalog.runtime(first.ledger.dataset("people"))
        gate = _Gated(runtime.backend)
        runtime.backend = gate
        question = (ann, "people", GROUPED, Fraction(1, 4), Fraction(0))
        with ThreadPoolExecutor(1) as pool:
            answered = pool.submit(first.answer, *question, request_key="k")
            assert gate.started.wait(30)
            with pytest.raises(ConflictError, match="still running"):
                second.answer(*question, request_key="k")
            gate.go.set()
            answer = answered.result(timeout=30)
        again = second.answer(*question, request_key="k")
        assert again.charge.id == answer.charge.id
        assert again.charge.result == answer.charge.result
        assert first.ledger.charged_total("people") == ApproxDP(Fraction(1, 4), 0)
    finally:
        first.close()
        second.close()


def test_retries_of_one_key_on_a_replay_enabled_dataset_get_the_one_answer(kit: Kit) -> None:
    assert kit.owner.patch("/v1/datasets/people", json={"replay_enabled": True}).status_code == 200
    body = {"sql": GROUPED, "epsilon": 0.25}
    first = kit.alice.post(QUERIES, json=body, headers={"Idempotency-Key": "once"})
    again = kit.alice.post(QUERIES, json=body, headers={"Idempotency-Key": "once"})
    assert (first.status_code, again.status_code) == (200, 200), again.text
    assert again.json()["charge_id"] == first.json()["charge_id"]

    def ask(_: int) -> httpx.Response:
        return kit.alice.post(QUERIES, json=body, headers={"Idempotency-Key": "many"})

    with ThreadPoolExecutor(max_workers=25) as pool:
        responses = list(pool.map(ask, range(50)))
    assert {r.status_code for r in responses} <= {200, 409}
    answered = [r.json() for r in responses if r.status_code == 200]
    assert answered
    assert len({a["charge_id"] for a in answered}) == 1
    assert all(a["release"] == first.json()["release"] for a in answered)
    assert kit.service.ledger.charged_total("people") == ApproxDP(Fraction(1, 4), 0)


def test_replay_normalises_whitespace_and_comments_outside_quotes_only() -> None:
    base = "SELECT COUNT(*) AS n FROM people WHERE region = 'a b'"
    assert normalise_sql("SELECT  COUNT(*) AS n\nFROM people -- note\nWHERE region = 'a b';") == (
        base
    )
    assert normalise_sql(base.replace("'a b'", "'a  b'")) != base
    assert (
        normalise_sql("SELECT 'it''s  x' /* c */ ,  \"col  1\"") == "SELECT 'it''s  x' , \"col  1\""
    )
    third = Fraction(1, 3)
    assert fingerprint("SELECT 'a  b'", third, Fraction(0)) != fingerprint(
        "SELECT 'a b'", third, Fraction(0)
    )


def test_refusals_are_rate_limited_and_audited_in_bounded_rows(kit: Kit) -> None:
    ages = ", ".join(str(i % 100) for i in range(4_000))
    long_sql = f"SELECT COUNT(*) AS n FROM people WHERE age IN ({ages})"
    assert 2 * AUDITED_SQL_CHARS < len(long_sql) <= 20_000
    statuses = []
    for _ in range(REFUSAL_BURST + 5):
        response = kit.alice.post(QUERIES, json={"sql": long_sql, "epsilon": 5})
        statuses.append(response.status_code)
    assert statuses == [409] * REFUSAL_BURST + [429] * 5
    _assert_problem(response, 429, "rate-limited")
    assert int(response.headers["retry-after"]) >= 1
    refused = [e for e in kit.owner.get("/v1/audit").json() if e["action"] == "query_refused"]
    assert len(refused) == REFUSAL_BURST
    detail = refused[0]["detail"]
    assert detail["sql"] == long_sql[:AUDITED_SQL_CHARS]
    assert (detail["sql_chars"], len(detail["sql_sha256"])) == (len(long_sql), 64)
    assert kit.service.ledger.charged_total("people") == ApproxDP(0, 0)
    # Bob is not limited by Alice's refusals.
    assert kit.bob.post(QUERIES, json={"sql": GROUPED, "epsilon": 0.25}).status_code == 200


def test_a_refusal_by_the_global_cap_hides_its_remaining_amount(kit: Kit) -> None:
    assert kit.owner.patch("/v1/datasets/people", json={"cap_epsilon": 0.5}).status_code == 200
    refused = kit.alice.post(QUERIES, json={"sql": GROUPED, "epsilon": 0.75})
    _assert_problem(refused, 409, "budget-exceeded")
    assert refused.json()["remaining"] is None
    assert "1/2" not in refused.text
    assert "0.5" not in refused.text
    owner = kit.owner.post(QUERIES, json={"sql": GROUPED, "epsilon": 0.75})
    assert owner.json()["remaining"]["epsilon_exact"] == "1/2"  # owners see the cap


def test_timestamps_are_utc_with_an_offset(kit: Kit) -> None:
    kit.alice.post(QUERIES, json={"sql": GROUPED, "epsilon": 0.25})
    (entry,) = kit.alice.get(QUERIES).json()
    for stamp in (entry["created_at"], entry["completed_at"]):
        assert datetime.fromisoformat(stamp).utcoffset() == timedelta(0)
    analysts = kit.owner.get("/v1/analysts").json()
    assert datetime.fromisoformat(analysts[0]["created_at"]).utcoffset() == timedelta(0)


def test_issued_tokens_are_audited_as_issued_by_the_owner(kit: Kit) -> None:
    owner_id = kit.owner.get("/v1/me").json()["id"]
    created = kit.owner.post("/v1/analysts", json={"name": "erin"}).json()
    erin = created["principal"]["id"]
    another = kit.owner.post(f"/v1/analysts/{erin}/tokens", json={}).json()
    issued = {
        e["detail"]["token_id"]: e
        for e in kit.owner.get("/v1/audit").json()
        if e["action"] == "token_issued"
    }
    for token_id in (created["token_id"], another["token_id"]):
        assert issued[token_id]["principal_id"] == owner_id
        assert issued[token_id]["detail"]["principal"] == erin
