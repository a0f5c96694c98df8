"""The PMW curator mode in the service (dpcurator.service.stores.pmw), over HTTP on a real uvicorn
server: one charge to the dataset's cap when it opens, free queries, free public refusals, state
persisted across a restart, concurrent queries serialised (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from dpcurator.accounting import Budget
from dpcurator.interactive import PrivateMultiplicativeWeights
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from dpcurator.service.client import CuratorClient
from tests._service_helpers import ledger_url
from tests.service_fixtures import PEOPLE_METADATA, postgres_server
from tests.service_kit import Kit, people_kit

__all__ = ["ledger_url", "postgres_server"]

ROWS = 2000
FEMALE_NORTH = "SELECT COUNT(*) FROM people WHERE sex = 'F' AND region = 'north'"


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    with people_kit(tmp_path, rows=ROWS) as made:
        yield made


def _open(owner: httpx.Client, **extra: Any) -> dict[str, Any]:
    body = {"epsilon": 10, "threshold": 40, "max_updates": 5, "columns": ["sex", "region"]}
    response = owner.post("/v1/datasets/people/pmw", json={**body, **extra})
    assert response.status_code == 201, response.text
    opened: dict[str, Any] = response.json()
    return opened


def _spent(owner: httpx.Client) -> float:
    spent: float = owner.get("/v1/datasets/people").json()["cap"]["spent"]["epsilon"]
    return spent


def _truth(sex: str, region: str) -> int:
    """The exact count in :func:`write_people`'s table (sex alternates; region every 3 rows)."""
    regions = ["north", "south", "east", "west"]
    return sum(1 for i in range(ROWS) if "FM"[i % 2] == sex and regions[(i // 3) % 4] == region)


#: Declared alpha of the accuracy check: the error bound fails with at most this probability.
ALPHA = 1e-3


def test_open_charges_the_cap_once_and_queries_are_free(kit: Kit, tmp_path: Path) -> None:
    opened = _open(kit.owner, max_updates=10)
    assert opened["cost"]["epsilon_exact"] == "10"
    assert opened["updates_left"] == 10
    assert _spent(kit.owner) == 10.0
    grant_before = kit.alice.get("/v1/datasets/people/budget").json()
    answers = []
    for sex in ("F", "M"):
        for region in ("north", "south", "east", "west"):
            sql = f"SELECT COUNT(*) FROM people WHERE sex = '{sex}' AND region = '{region}'"
            reply = kit.alice.post(f"/v1/pmw/{opened['id']}/queries", json={"sql": sql})
            assert reply.status_code == 200, reply.text
            answers.append((reply.json(), _truth(sex, region)))
    assert [a["queries_answered"] for a, _ in answers] == list(range(1, 9))
    assert {a["source"] for a, _ in answers} <= {"synthetic", "update"}
    # the library's bound for the same parameters fails with probability at most ALPHA
    local = Session.from_data(
        pd.read_csv(tmp_path / "people.csv"),
        metadata=Metadata.from_dict(PEOPLE_METADATA),
        budget=Budget(10),
    )
    bound = PrivateMultiplicativeWeights(
        local, ["sex", "region"], epsilon=10, max_updates=10, threshold=40
    ).error_bound(8, ALPHA)
    assert all(abs(a["value"] - truth) <= bound for a, truth in answers), (bound, answers)
    assert _spent(kit.owner) == 10.0
    assert kit.alice.get("/v1/datasets/people/budget").json() == grant_before
    where = {"sex": "F", "region": ["north", "south"]}
    reply = kit.alice.post(f"/v1/pmw/{opened['id']}/queries", json={"where": where})
    assert reply.status_code == 200, reply.text
    mode = kit.alice.get(f"/v1/pmw/{opened['id']}").json()
    assert mode["queries_answered"] == 9
    assert "state" not in mode


def test_refusals_are_free_and_before_any_charge(kit: Kit) -> None:
    base = {"epsilon": 1, "threshold": 40, "max_updates": 5}
    binned = kit.owner.post("/v1/datasets/people/pmw", json={**base, "columns": ["age", "sex"]})
    assert binned.status_code == 422
    assert "['age'] have no public keys" in binned.json()["detail"]
    assert kit.alice.post("/v1/datasets/people/pmw", json=base).status_code == 403
    assert _spent(kit.owner) == 0.0
    mode = _open(kit.owner)["id"]
    path = f"/v1/pmw/{mode}/queries"
    refused = [
        {"sql": "SELECT COUNT(*) FROM people WHERE sex = 'F' OR region = 'north'"},
        {"sql": "SELECT SUM(income) FROM people"},
        {"sql": "SELECT COUNT(*) FROM people WHERE age = 3"},  # not a column of the mode
        {"where": {"sex": "X"}},
        {"sql": FEMALE_NORTH, "where": {"sex": "F"}},
        {},
    ]
    for body in refused:
        reply = kit.alice.post(path, json=body)
        assert reply.status_code == 422, (body, reply.text)
    assert kit.alice.get(f"/v1/pmw/{mode}").json()["queries_answered"] == 0
    assert kit.alice.post("/v1/pmw/pmw_nope/queries", json={"sql": FEMALE_NORTH}).status_code == 404


def _ask_until_exhausted(client: httpx.Client, mode: str, limit: int = 60) -> list[Any]:
    """Ask FEMALE_NORTH until the mode's updates are used (at most ``limit`` times), then twice
    more; each outcome is the answer's source or the refusal's status."""
    outcomes: list[Any] = []
    for _ in range(limit):
        reply = client.post(f"/v1/pmw/{mode}/queries", json={"sql": FEMALE_NORTH})
        outcomes.append(reply.json()["source"] if reply.status_code == 200 else reply.status_code)
        if len(outcomes) >= 2 and reply.status_code == 200 and reply.json()["updates_left"] == 0:
            break
    for _ in range(2):
        reply = client.post(f"/v1/pmw/{mode}/queries", json={"sql": FEMALE_NORTH})
        outcomes.append(reply.json()["source"] if reply.status_code == 200 else reply.status_code)
    return outcomes


def test_exhausted_mode_refuses_or_answers_synthetic_only(kit: Kit) -> None:
    """A threshold far below the noise: about every other query is an update (ε = 1 leaves the
    sparse vector noise of scale ~44 rows); once both are used, the owner's rule applies."""
    for rule in ("refuse", "synthetic"):
        mode = _open(kit.owner, epsilon=1, threshold=1e-3, max_updates=2, when_exhausted=rule)
        outcomes = _ask_until_exhausted(kit.alice, mode["id"])
        assert outcomes[:-2].count("update") == 2, outcomes
        assert set(outcomes[:-2]) <= {"update", "synthetic"}
        assert outcomes[-2:] == ([409, 409] if rule == "refuse" else ["synthetic-only"] * 2)
    assert _spent(kit.owner) == 2.0


def test_state_survives_a_restart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    with people_kit(tmp_path, url=url, rows=ROWS) as first:
        opened = _open(
            first.owner, epsilon=1, threshold=1e-3, max_updates=2, when_exhausted="synthetic"
        )
        mode = opened["id"]
        _ask_until_exhausted(first.alice, mode)
        client = CuratorClient(first.server.url, first.tokens[1])
        before = [client.ask_pmw(mode, where={"sex": s}) for s in ("F", "M")]
        counters = client.pmw(mode)
        client.close()
        tokens = first.tokens
    with people_kit(tmp_path, url=url, tokens=tokens) as second:
        client = CuratorClient(second.server.url, tokens[1])
        assert client.pmw(mode) == counters
        after = [client.ask_pmw(mode, where={"sex": s}) for s in ("F", "M")]
        client.close()
    assert counters["updates_left"] == 0
    # the synthetic distribution and the noisy size came back exactly
    assert [a["value"] for a in after] == [b["value"] for b in before]
    assert [a["source"] for a in after] == ["synthetic-only"] * 2


def test_concurrent_queries_never_spend_an_update_twice(ledger_url: str, tmp_path: Path) -> None:
    with people_kit(tmp_path, url=ledger_url, rows=ROWS) as kit:
        updates = 4
        mode = _open(kit.owner, epsilon=1, threshold=1e-3, max_updates=updates)["id"]
        clients = [kit.server.client(kit.tokens[1]) for _ in range(8)]

        def ask(i: int) -> int | str:
            reply = clients[i % 8].post(f"/v1/pmw/{mode}/queries", json={"sql": FEMALE_NORTH})
            return str(reply.json()["source"]) if reply.status_code == 200 else reply.status_code

        with ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(ask, range(40)))
        stored = kit.alice.get(f"/v1/pmw/{mode}").json()
    assert outcomes.count("update") == stored["updates_used"] == updates
    assert set(outcomes) <= {"update", "synthetic", 409}
    assert stored["queries_answered"] == outcomes.count("update") + outcomes.count("synthetic")


def test_answers_are_free_entries_of_the_askers_history(kit: Kit) -> None:
    """Every PMW answer is a ledger history entry (kind ``pmw-answer``, cost 0, the question and
    the released value and source) of the analyst who asked; the cap is charged only at opening."""
    opened = _open(kit.owner)
    where = {"sex": "M", "region": ["east"]}
    replies = [
        kit.alice.post(f"/v1/pmw/{opened['id']}/queries", json=body).json()
        for body in ({"sql": FEMALE_NORTH}, {"where": where})
    ]
    entries = kit.alice.get("/v1/datasets/people/queries").json()
    answers = [e for e in entries if e["kind"] == "pmw-answer"][::-1]  # oldest first
    assert [e["sql"] for e in answers] == [FEMALE_NORTH, json.dumps({"where": where})]
    for entry, reply in zip(answers, replies, strict=True):
        assert entry["cost"]["epsilon_exact"] == "0"
        assert entry["status"] == "released"
        assert entry["result"] == {
            "pmw_id": opened["id"],
            "value": reply["value"],
            "source": reply["source"],
        }
    owner_view = kit.owner.get("/v1/datasets/people/queries").json()
    assert sum(e["kind"] == "pmw-answer" for e in owner_view) == 2
    assert _spent(kit.owner) == 10.0


def test_threshold_and_updates_left_out_come_from_public_inputs(kit: Kit) -> None:
    """The mode's c and T are the library's defaults for the same public inputs (2 columns:
    c = 2; T from ε, c and the expected queries), whatever the data."""
    response = kit.owner.post(
        "/v1/datasets/people/pmw",
        json={"epsilon": 2, "queries": 500, "columns": ["sex", "region"]},
    )
    assert response.status_code == 201, response.text
    params = response.json()["params"]
    other = pd.DataFrame({"age": [30], "sex": ["M"], "region": ["east"], "income": [1.0]})
    local = PrivateMultiplicativeWeights(
        Session.from_data(other, metadata=Metadata.from_dict(PEOPLE_METADATA), budget=Budget(2)),
        ["sex", "region"],
        epsilon=2,
        queries=500,
    )
    assert params["max_updates"] == local.max_updates == 2
    assert params["threshold"] == local.threshold
    assert _spent(kit.owner) == pytest.approx(2)
