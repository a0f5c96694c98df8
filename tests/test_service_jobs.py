"""Long releases as background jobs (issue 24, item 4; :mod:`dpcurator.service.jobs`).

Two curator services share one SQLite ledger, as two workers of ``serve --workers 2`` do: a fit
or sparse vector answered 202 on one is polled on the other. The job thread is joined (no
sleeps); its progress is held at a known block by a gate on :func:`dpcurator.core.progress.report`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pytest

from dpcurator.cli import main
from dpcurator.core import progress
from dpcurator.errors import ENGINE_FAILURE_MESSAGE
from dpcurator.service import jobs
from dpcurator.service.app import create_app
from dpcurator.service.client import CuratorClient
from dpcurator.service.operations import CuratorService
from dpcurator.service.server import build_service
from tests.neighbour_queries import demo_frame, demo_metadata
from tests.service_fixtures import (
    LiveServer,
    ThreadServer,
    cheap_hasher,
    fresh_postgres_url,
    postgres_server,
)

__all__ = ["postgres_server"]

DATASET = "people"
FITS = f"/v1/datasets/{DATASET}/fits"
SPARSE = f"/v1/datasets/{DATASET}/sparse-vector"
LOGISTIC = {"model": "logistic", "response": "employed", "predictors": ["age"], "epsilon": 0.5,
            "coef_bound": 5, "method": "sample_and_aggregate"}  # fmt: skip
ASYNC = {"Prefer": "respond-async"}


@dataclass
class Workers:
    """Two services (``a`` and ``b``) on one ledger; clients of alice and bob (analysts) and of
    the owner, on either worker."""

    a: CuratorService
    b: CuratorService
    clients: dict[str, httpx.Client]
    url: str
    tokens: dict[str, str]


def _register(owner: httpx.Client, csv: Path) -> dict[str, str]:
    created = owner.post(
        "/v1/datasets",
        json={
            "id": DATASET,
            "source": {"path": str(csv)},
            "metadata": demo_metadata().to_dict(),
            "cap_epsilon": 1e6,
            "cap_delta": 0.5,
            "accounting": "basic",
        },
    )
    assert created.status_code == 201, created.text
    tokens = {}
    for name in ("alice", "bob"):
        analyst = owner.post("/v1/analysts", json={"name": name}).json()
        grant = owner.put(
            f"/v1/analysts/{analyst['principal']['id']}/grants/{DATASET}",
            json={"epsilon": 1000, "delta": 0.5, "accounting": "basic"},
        )
        assert grant.status_code == 200, grant.text
        tokens[name] = analyst["token"]
    return tokens


@contextmanager
def two_workers(root: Path, url: str | None = None) -> Iterator[Workers]:
    """Two services on one ledger (default: a SQLite file under ``root``) serving the demo
    table, with an owner, alice and bob."""
    csv = root / "people.csv"
    demo_frame().to_csv(csv, index=False)
    url = url or f"sqlite:///{root / 'ledger.sqlite3'}"
    a = build_service(url, hasher=cheap_hasher(), data_root=root)
    b = build_service(url, hasher=cheap_hasher(), data_root=root)
    _, owner = a.create_principal("owner", "owner")
    try:
        with ThreadServer(create_app(a)) as one, ThreadServer(create_app(b)) as two:
            tokens = _register(one.client(owner.token), csv)
            clients = {"owner": one.client(owner.token), "owner_b": two.client(owner.token)}
            for name, token in tokens.items():
                clients[name] = one.client(token)
                clients[f"{name}_b"] = two.client(token)
            yield Workers(a, b, clients, one.url, tokens)
    finally:
        a.close()
        b.close()


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    with two_workers(tmp_path_factory.mktemp("jobs")) as both:
        yield both


@pytest.fixture(autouse=True)
def _eager_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs, "PROGRESS_SECONDS", 0.0)


def _finish(job_id: str) -> None:
    """Wait for the job's thread (in this process) to end."""
    for thread in threading.enumerate():
        if thread.name == f"job-{job_id}":
            thread.join(timeout=60)
            assert not thread.is_alive()


def _spent(client: httpx.Client) -> float:
    spent = client.get(f"/v1/datasets/{DATASET}/budget").json()["spent"]
    return float(Fraction(spent["epsilon_exact"]))


class Gate:
    """Holds a block-based fit at block ``at`` of ``total`` until :meth:`open` (replaces
    progress.report)."""

    def __init__(self, at: int, total: int) -> None:
        self.at, self.total = at, total
        self.reached = threading.Event()
        self.release = threading.Event()
        self._report = progress.report

    def __call__(self, done: int, total: int) -> None:
        self._report(done, total)
        if (done, total) == (self.at, self.total):
            self.reached.set()
            assert self.release.wait(60)

    def open(self) -> None:
        self.release.set()


def test_prefer_respond_async_is_read_as_rfc_7240_says() -> None:
    assert jobs.prefers_async("respond-async")
    assert jobs.prefers_async("wait=5, Respond-Async")
    assert jobs.prefers_async("return=minimal; foo=bar, respond-async; x=1")
    assert not jobs.prefers_async("return=minimal")
    assert not jobs.prefers_async("respond-asyncish")
    assert not jobs.prefers_async(None)


def test_a_long_fit_runs_as_a_job_whose_result_is_the_synchronous_body(
    workers: Workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forced by its public number of blocks: 202 + Location, charged once; the poll's result
    is what the synchronous route answers (same fields, cost, request and charge)."""
    alice = workers.clients["alice"]
    monkeypatch.setattr(jobs, "ASYNC_FIT_BLOCKS", 60)
    sync = alice.post(FITS, json={**LOGISTIC, "blocks": 59})
    assert sync.status_code == 200, sync.text
    before = _spent(alice)
    accepted = alice.post(FITS, json={**LOGISTIC, "blocks": 60})
    assert accepted.status_code == 202, accepted.text
    job = accepted.json()
    assert accepted.headers["location"] == f"/v1/jobs/{job['id']}" == job["location"]
    assert "preference-applied" not in accepted.headers  # forced, not asked
    assert job["status"] in ("queued", "running")
    assert job["charged"]
    assert job["result"] is None
    assert _spent(alice) == pytest.approx(before + 0.5)  # reserved before the 202
    _finish(job["id"])
    polled = alice.get(job["location"]).json()
    assert polled["status"] == "done"
    assert polled["progress"] == {"done": 1.0, "message": "done"}
    result = polled["result"]
    assert set(result) == set(sync.json())
    assert result["charge_id"] == job["charge_id"]
    assert result["cost"] == job["cost"]
    assert result["request"] == sync.json()["request"].replace("blocks=59", "blocks=60")
    assert set(result["fit"]) == set(sync.json()["fit"])
    assert _spent(alice) == pytest.approx(before + 0.5)
    listed = alice.get("/v1/jobs").json()
    assert [j for j in listed if j["id"] == job["id"]] == [polled]


def test_progress_increases_and_a_job_started_on_one_worker_is_polled_on_the_other(
    workers: Workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(at=50, total=100)
    monkeypatch.setattr(progress, "report", gate)
    accepted = workers.clients["alice"].post(FITS, json={**LOGISTIC, "blocks": 100}, headers=ASYNC)
    assert accepted.status_code == 202, accepted.text
    assert accepted.headers["preference-applied"] == "respond-async"
    job_id = accepted.json()["id"]
    try:
        assert gate.reached.wait(60)
        held = workers.clients["alice_b"].get(f"/v1/jobs/{job_id}").json()  # the other worker
        assert held["status"] == "running"
        assert held["progress"] == {
            "done": pytest.approx(0.05 + 0.9 * 0.5),
            "message": "block 50 of 100",
        }
    finally:
        gate.open()
    _finish(job_id)
    done = workers.clients["alice_b"].get(f"/v1/jobs/{job_id}").json()
    assert done["status"] == "done"
    assert done["progress"]["done"] == 1.0
    assert done == workers.clients["alice"].get(f"/v1/jobs/{job_id}").json()


@pytest.mark.slow
def test_jobs_on_a_postgresql_ledger(postgres_server: str, tmp_path: Path) -> None:
    """The same life on PostgreSQL: 202 on one worker, polled and listed on the other."""
    with two_workers(tmp_path, fresh_postgres_url(postgres_server)) as both:
        before = _spent(both.clients["alice"])
        body = {**LOGISTIC, "blocks": 30}
        accepted = both.clients["alice"].post(FITS, json=body, headers=ASYNC)
        assert accepted.status_code == 202, accepted.text
        _finish(accepted.json()["id"])
        done = both.clients["alice_b"].get(accepted.headers["location"]).json()
        assert done["status"] == "done"
        assert done["result"]["charge_id"] == done["charge_id"]
        assert [j["id"] for j in both.clients["alice_b"].get("/v1/jobs").json()] == [done["id"]]
        assert both.clients["bob_b"].get(accepted.headers["location"]).status_code == 404
        assert _spent(both.clients["alice"]) == pytest.approx(before + 0.5)


def test_only_its_creator_and_owners_see_a_job(workers: Workers) -> None:
    accepted = workers.clients["alice"].post(FITS, json={**LOGISTIC, "blocks": 20}, headers=ASYNC)
    job_id = accepted.json()["id"]
    _finish(job_id)
    for bob in (workers.clients["bob"], workers.clients["bob_b"]):
        refused = bob.get(f"/v1/jobs/{job_id}")
        assert refused.status_code == 404
        assert refused.json()["detail"] == f"No job with id {job_id!r}."
        assert bob.get("/v1/jobs/job_unknown").json()["detail"] == "No job with id 'job_unknown'."
        assert job_id not in {j["id"] for j in bob.get("/v1/jobs").json()}
    assert workers.clients["owner_b"].get(f"/v1/jobs/{job_id}").json()["status"] == "done"
    assert httpx.get(f"{workers.clients['alice'].base_url}/v1/jobs/{job_id}").status_code == 401


def test_an_async_submission_with_an_idempotency_key_is_one_job_and_one_charge(
    workers: Workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(at=10, total=40)
    monkeypatch.setattr(progress, "report", gate)
    alice, alice_b = workers.clients["alice"], workers.clients["alice_b"]
    body, key = {**LOGISTIC, "blocks": 40}, {**ASYNC, "Idempotency-Key": "fit-once"}
    before = _spent(alice)
    first = alice.post(FITS, json=body, headers=key)
    assert first.status_code == 202, first.text
    job_id = first.json()["id"]
    try:
        assert gate.reached.wait(60)
        running = alice_b.post(FITS, json=body, headers=key)  # while it runs, on the other worker
        assert running.status_code == 202
        assert running.json()["id"] == job_id
        other = alice.post(FITS, json={**body, "epsilon": 0.25}, headers=key)
        assert other.status_code == 409
        assert "already used" in other.json()["detail"]
    finally:
        gate.open()
    _finish(job_id)
    again = alice_b.post(FITS, json=body, headers=key)
    assert again.status_code == 202
    assert again.json()["id"] == job_id
    assert again.json()["status"] == "done"
    assert _spent(alice) == pytest.approx(before + 0.5)


def test_a_keyed_retry_resumes_a_job_whose_server_stopped_and_releases_it_once(
    workers: Workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker b sees worker a's claim as lapsed (a lease of 0 s): the job is failed
    (interrupted, charged); a retry with the key on b takes the charge over and finishes the
    same job; a's late completion is refused (one release), and ε was charged once."""
    gate = Gate(at=10, total=40)
    monkeypatch.setattr(progress, "report", gate)
    alice, alice_b = workers.clients["alice"], workers.clients["alice_b"]
    body, key = {**LOGISTIC, "blocks": 40}, {**ASYNC, "Idempotency-Key": "fit-resumed"}
    before = _spent(alice)
    job_id = alice.post(FITS, json=body, headers=key).json()["id"]
    try:
        assert gate.reached.wait(60)
        monkeypatch.setattr(workers.b.ledger, "lease_seconds", 0.0)
        stopped = alice_b.get(f"/v1/jobs/{job_id}").json()
        assert stopped["status"] == "failed"
        assert stopped["error"]["reason"] == "interrupted"
        assert stopped["charged"]
        resumed = alice_b.post(FITS, json=body, headers=key)
        assert resumed.status_code == 202, resumed.text
        assert resumed.json()["id"] == job_id
        assert resumed.json()["status"] in ("queued", "running")
    finally:
        gate.open()
    _finish(job_id)
    done = alice.get(f"/v1/jobs/{job_id}").json()
    assert done["status"] == "done"
    assert done["error"] is None
    assert workers.a.ledger.charge(done["charge_id"]).claimed_by == workers.b.ledger.boot_id
    assert _spent(alice) == pytest.approx(before + 0.5)


def test_a_refusal_is_answered_at_once_and_free(workers: Workers) -> None:
    alice = workers.clients["alice"]
    before, listed = _spent(alice), len(alice.get("/v1/jobs").json())
    refused = alice.post(
        FITS, json={**LOGISTIC, "predictors": ["nope"], "blocks": 5000}, headers=ASYNC
    )
    assert refused.status_code == 422
    assert "nope" in refused.json()["detail"]
    assert _spent(alice) == before
    assert len(alice.get("/v1/jobs").json()) == listed


def test_a_job_failing_after_its_charge_ends_failed_and_charged(
    workers: Workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(done: int, total: int) -> None:
        raise RuntimeError("the engine broke")

    monkeypatch.setattr(progress, "report", broken)
    alice = workers.clients["alice"]
    before = _spent(alice)
    accepted = alice.post(FITS, json={**LOGISTIC, "blocks": 30}, headers=ASYNC)
    assert accepted.status_code == 202, accepted.text
    _finish(accepted.json()["id"])
    failed = workers.clients["alice_b"].get(accepted.json()["location"]).json()
    assert failed["status"] == "failed"
    assert failed["result"] is None
    assert failed["error"] == {
        "reason": "engine-failure",
        "detail": ENGINE_FAILURE_MESSAGE,
        "charged": True,
    }
    assert failed["charged"]
    assert _spent(alice) == pytest.approx(before + 0.5)
    assert workers.a.ledger.charge(failed["charge_id"]).status == "failed"


def test_a_sparse_vector_of_many_queries_runs_as_a_job(
    workers: Workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs, "ASYNC_SPARSE_QUERIES", 3)
    alice = workers.clients["alice"]
    queries = [f"SELECT COUNT(*) FROM people WHERE age > {a}" for a in (20, 40, 60)]
    body = {"queries": queries, "threshold": 100, "epsilon": 0.5}
    sync = alice.post(SPARSE, json={**body, "queries": queries[:2]})
    assert sync.status_code == 200, sync.text
    accepted = alice.post(SPARSE, json=body)
    assert accepted.status_code == 202, accepted.text
    _finish(accepted.json()["id"])
    result = workers.clients["alice_b"].get(accepted.json()["location"]).json()["result"]
    assert set(result) == set(sync.json())
    assert len(result["release"]["above"]) == 3
    assert result["charge_id"] == accepted.json()["charge_id"]


def test_the_client_and_the_cli_poll_a_job_and_show_its_progress(
    workers: Workers, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[dict[str, Any]] = []
    with CuratorClient(workers.url, workers.tokens["alice"]) as client:
        answer = client.fit(
            DATASET, "logistic", "employed", ["age"], epsilon=0.5, coef_bound=5,
            method="sample_and_aggregate", blocks=20, background=True, progress=seen.append,
        )  # fmt: skip
        assert seen[0]["id"] == seen[-1]["id"]
        assert seen[-1]["status"] == "done"
        assert answer == seen[-1]["result"]
        assert answer == client.job(seen[-1]["id"])["result"]
        assert set(answer) == {"charge_id", "dataset_id", "request", "replayed", "cost",
                               "remaining", "fit"}  # fmt: skip
        queued = client.fit(
            DATASET, "logistic", "employed", ["age"], epsilon=0.5, coef_bound=5, blocks=20,
            method="sample_and_aggregate", background=True, wait=False,
        )  # fmt: skip
        _finish(queued["id"])
        assert client.wait_job(queued["id"])["charge_id"] == queued["charge_id"]
    args = ["fit", "--url", workers.url, "--token", workers.tokens["alice"], "--dataset", DATASET]
    args += ["--model", "logistic", "--epsilon", "0.5", "--coef-bound", "5", "--blocks", "20"]
    args += ["--method", "sample_and_aggregate", "--background", "employed", "age"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "FIT logistic_regression" in out
    assert "100% done" in err
    assert err.startswith("\rjob_")


def test_the_openapi_document_describes_jobs_and_the_202_answers(workers: Workers) -> None:
    spec = httpx.get(f"{workers.url}/v1/openapi.json").json()
    poll = spec["paths"]["/v1/jobs/{job_id}"]["get"]["responses"]
    assert {"200", "401", "404", "503"} <= set(poll)
    assert "application/problem+json" in poll["404"]["content"]
    assert "200" in spec["paths"]["/v1/jobs"]["get"]["responses"]
    for path in (FITS.replace(DATASET, "{dataset_id}"), SPARSE.replace(DATASET, "{dataset_id}")):
        post = spec["paths"][path]["post"]
        assert "Location" in post["responses"]["202"]["headers"]
        assert {"409", "422", "502"} <= set(post["responses"])
        assert "prefer" in {p["name"].lower() for p in post["parameters"]}


@pytest.mark.slow
def test_a_job_whose_server_is_killed_ends_failed_and_its_charge_stands(tmp_path: Path) -> None:
    """SIGKILL the server computing a job; a server on the same ledger reports the job failed
    (interrupted, charged) once the claim lapsed, and the charge is still in the budget."""
    csv, meta = tmp_path / "people.csv", tmp_path / "people.json"
    demo_frame().to_csv(csv, index=False)
    meta.write_text(json.dumps(demo_metadata().to_dict()), encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    args = ["--data", str(csv), "--metadata", str(meta), "--ledger", url, "--cap-epsilon", "100"]
    dying = LiveServer(args).start(wait_lines=2)
    try:
        owner = dying.first_lines[0].removeprefix("owner token: ")
        with httpx.Client(base_url=dying.url, headers={"Authorization": f"Bearer {owner}"}) as o:
            analyst = o.post("/v1/analysts", json={"name": "carol"}).json()
            o.put(
                f"/v1/analysts/{analyst['principal']['id']}/grants/{DATASET}",
                json={"epsilon": 10},
            ).raise_for_status()
        auth = {"Authorization": f"Bearer {analyst['token']}"}
        body = {**LOGISTIC, "blocks": jobs.ASYNC_FIT_BLOCKS}  # forced async
        accepted = httpx.post(f"{dying.url}{FITS}", json=body, headers=auth, timeout=60)
        assert accepted.status_code == 202, accepted.text
    finally:
        dying.kill()
        dying.stop()
    job: dict[str, Any] = accepted.json()
    survivor = build_service(url, hasher=cheap_hasher(), data_root=tmp_path)
    survivor.ledger.lease_seconds = 0.0  # the dead server's claim has lapsed
    try:
        with ThreadServer(create_app(survivor)) as server:
            client = server.client(analyst["token"])
            failed = client.get(job["location"]).json()
            assert failed["status"] == "failed"
            assert failed["charged"]
            assert failed["error"]["reason"] == "interrupted"
            assert failed["cost"] == job["cost"]
            assert _spent(client) == pytest.approx(0.5)  # the charge stands
            assert survivor.ledger.charge(job["charge_id"]).status == "reserved"
    finally:
        survivor.close()
