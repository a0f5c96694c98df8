"""A server killed anywhere inside a keyed batch of stream events (issue 24, item 2).

A real ``dpcurator serve`` process (:mod:`tests.crash_serve`) SIGKILLs itself before or after
each write transaction of ``POST /v1/streams/{id}/events`` in turn; the batch is then retried
with the same ``Idempotency-Key`` on another server over the same ledger. Whatever the crash
point, the stream must have ingested the batch exactly once (its clock counts 5 events, not 0
or 10) and the ledger must hold exactly one record of the key, released with the answer that a
further retry replays. Claims the dead server left are aged past their lease first (as time
would), so a retry is never refused for a claim nobody renews.

Before ingestion and its record were one transaction, the crash after the ingestion committed
(``after:2``) left the record claimed and the retry ingested the batch a second time.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select, update

from dpcurator.service.models import Charge, utcnow
from tests._service_helpers import ledger_url  # noqa: F401  (a fixture)
from tests.service_fixtures import (
    PEOPLE_METADATA,
    LiveServer,
    postgres_server,  # noqa: F401  (a fixture)
    write_people,
)
from tests.service_kit import people_kit

BATCH = {"values": [1, 0, 1, 1, 0]}


def _post(url: str, token: str, path: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{url}{path}",
        json=BATCH,
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": key},
        timeout=60,
    )


@pytest.mark.slow
def test_a_crash_anywhere_in_a_keyed_batch_ingests_it_once(
    tmp_path: Path,
    ledger_url: str,  # noqa: F811
) -> None:
    csv = write_people(tmp_path / "people.csv", 300)
    meta = tmp_path / "people.json"
    meta.write_text(json.dumps(PEOPLE_METADATA), encoding="utf-8")
    args = ["--data", str(csv), "--metadata", str(meta), "--ledger", ledger_url]
    token = ""
    crashes: list[str] = []
    number = 0
    finished = False
    while not finished:
        number += 1
        for phase in ("before", "after"):
            point = f"{phase}:{number}"
            env = {"DPCURATOR_TEST_CRASH": point}
            server = LiveServer(args, env=env, module="tests.crash_serve")
            try:
                server.start(wait_lines=0 if token else 1)
                if not token:
                    token = server.first_lines[0].removeprefix("owner token: ")
                created = httpx.post(
                    f"{server.url}/v1/datasets/people/streams",
                    json={"kind": "count", "epsilon": 1, "horizon": 1000},
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=60,
                )
                assert created.status_code == 201, created.text
                path = f"/v1/streams/{created.json()['id']}/events"
                key = f"batch-{point}"
                try:
                    first = _post(server.url, token, path, key)
                except httpx.TransportError:  # the server died at the crash point
                    assert server.process is not None
                    assert server.process.wait(timeout=30) < 0
                    crashes.append(point)
                else:  # fewer write transactions than the crash point: the last scenario
                    assert first.status_code == 200, first.text
                    finished = True
                    break
            finally:
                server.kill()
                server.stop()
            _check_retry(tmp_path, ledger_url, token, path, key=key, point=point)
    assert crashes[:2] == ["before:1", "after:1"], crashes


def _check_retry(root: Path, url: str, token: str, path: str, *, key: str, point: str) -> None:
    """Retry the batch on an in-process server over the same ledger: exactly once, one record."""
    with people_kit(root, url=url, tokens=(token, token)) as kit:
        ledger = kit.service.ledger
        with ledger._transaction(write=True) as s:  # the dead server's leases run out
            s.execute(
                update(Charge)
                .where(Charge.status == "reserved")
                .values(claimed_at=utcnow() - timedelta(days=1))
            )
        retried = kit.owner.post(path, json=BATCH, headers={"Idempotency-Key": key})
        assert retried.status_code == 200, (point, retried.text)
        stream = kit.owner.get(path.removesuffix("/events")).json()
        assert stream["latest"]["time"] == len(BATCH["values"]), (point, stream["latest"])
        again = kit.owner.post(path, json=BATCH, headers={"Idempotency-Key": key})
        assert again.status_code == 200, (point, again.text)
        assert again.json()["replayed"] is True
        assert again.json()["latest"] == retried.json()["latest"]
        with ledger._transaction(write=False) as s:
            records = s.scalars(select(Charge).where(Charge.request_key == key)).all()
        assert [(c.kind, c.status, c.epsilon) for c in records] == [("events", "released", "0")]
