"""Issue 27 item 1 in the service: correlated-noise streams (ρ-zCDP, ``correlated_count`` /
``correlated_sum``) and k-ary tree streams (ε-DP, ``kary_count`` / ``kary_sum``) over HTTP on a
real server: charged at creation (ρ as a zCDP event, which a basic budget refuses free), a CI
with every release, the persisted state continuing exactly like one uninterrupted library
stream, idempotency keys on creation and events, and only the creator posting events.

Every server draw is seeded (one seeded run; the 95% intervals' coverage at a declared α is
tests/test_streams_correlated.py's and tests/test_streams_kary.py's job)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from dpcurator.cli.main import main
from dpcurator.core.measures import ZCDP, ApproxDP
from dpcurator.random import SeededRng
from dpcurator.service.ledger.accounts import charge_cost
from dpcurator.service.models import Charge, Stream
from dpcurator.streams import CorrelatedContinualSum, KaryContinualSum
from dpcurator.streams import correlated as correlated_module
from dpcurator.streams import kary as kary_module
from tests.service_fixtures import PEOPLE_METADATA
from tests.service_kit import Kit, people_kit

SEED = 27
_COUNTER = itertools.count()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("correlated")


@pytest.fixture(scope="module")
def kit(root: Path) -> Iterator[Kit]:
    """One server for the module (the people kit); each test registers datasets of its own."""
    with people_kit(root) as made:
        yield made


@pytest.fixture
def names(kit: Kit, root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """Two new datasets over the people rows: one under a basic ε = 100 cap, one under a ρ = 2
    cap (concentrated accounting); every stream draw of the test comes from one seeded rng."""
    served = SeededRng(SEED)
    monkeypatch.setattr(correlated_module, "default_rng", lambda: served)
    monkeypatch.setattr(kary_module, "default_rng", lambda: served)
    made = []
    for cap in ({"cap_epsilon": 100}, {"cap_rho": 2}):
        dataset = f"set{next(_COUNTER)}"
        created = kit.owner.post(
            "/v1/datasets",
            json={
                "id": dataset,
                "source": {"path": str(root / "people.csv")},
                "metadata": PEOPLE_METADATA,
                **cap,
            },
        )
        assert created.status_code == 201, created.text
        made.append(dataset)
    return made[0], made[1]


def _create(client: httpx.Client, dataset: str, body: dict[str, Any], **headers: str) -> Any:
    return client.post(f"/v1/datasets/{dataset}/streams", json=body, headers=headers)


def _cap_spent(kit: Kit, dataset: str) -> dict[str, Any]:
    found = kit.owner.get(f"/v1/datasets/{dataset}")
    assert found.status_code == 200, found.text
    spent: dict[str, Any] = found.json()["cap"]["spent"]
    return spent


def _history(kit: Kit, dataset: str) -> list[dict[str, Any]]:
    found = kit.owner.get(f"/v1/datasets/{dataset}/queries")
    assert found.status_code == 200, found.text
    entries: list[dict[str, Any]] = found.json()
    return entries


def _post(kit: Kit, stream_id: str, values: Sequence[float], **headers: str) -> dict[str, Any]:
    posted = kit.owner.post(
        f"/v1/streams/{stream_id}/events",
        json={"values": list(values)},
        params={"per_event": "true"},
        headers=headers,
    )
    assert posted.status_code == 200, posted.text
    out: dict[str, Any] = posted.json()
    return out


def test_correlated_streams_are_charged_rho_and_release_with_ci(
    kit: Kit, names: tuple[str, str]
) -> None:
    """Two correlated streams on a ρ cap: each charged its ρ (a zCDP cost in the response, the
    cap's spend and the history); two batches each release exactly what one uninterrupted
    library stream fed the same batches with the same draws releases, with its public CI."""
    _basic, rho = names
    count = _create(kit.owner, rho, {"kind": "correlated_count", "rho": 0.5, "horizon": 1000})
    assert count.status_code == 201, count.text
    total = _create(
        kit.owner,
        rho,
        {"kind": "correlated_sum", "rho": 0.25, "lower": 0, "upper": 10, "resolution": 0.5},
    )
    assert total.status_code == 201, total.text
    assert count.json()["cost"]["rho_exact"] == "1/2"
    assert count.json()["cost"]["epsilon"] is None
    assert total.json()["params"]["horizon"] is None  # unknown horizon
    spent = _cap_spent(kit, rho)
    assert spent["rho_exact"] == "3/4"
    history = _history(kit, rho)
    assert [h["kind"] for h in history] == ["stream", "stream"]
    assert [h["cost"]["rho_exact"] for h in history] == ["1/4", "1/2"]  # not ε = δ = 0
    assert [h["cost"]["epsilon"] for h in history] == [None, None]
    with kit.service.ledger._transaction(write=False) as s:
        charges = s.scalars(select(Charge).where(Charge.dataset_id == rho)).all()
        costs = {charge_cost(c) for c in charges}
        assert costs == {ZCDP(Fraction(1, 2)), ZCDP(Fraction(1, 4))}
        assert {c.events[0]["kind"] for c in charges} == {"zcdp"}

    replay = SeededRng(SEED)  # the server's draws, in the same order, in the library
    counter = CorrelatedContinualSum.counter(Fraction(1, 2), 1000)
    summer = CorrelatedContinualSum(Fraction(1, 4), None, 0, 10, 0.5)
    for batch in ([1, 0, 1, 1] * 25, [1] * 60):
        out = _post(kit, count.json()["id"], batch)
        expected = counter.update(batch, rng=replay)
        assert out["releases"] == expected.tolist()
        half = counter.ci_halfwidth(alpha=0.05)
        value = float(expected[-1])
        assert out["latest"] == {"time": counter.time, "value": value, "ci_low": value - half,
                                 "ci_high": value + half, "alpha": 0.05}  # fmt: skip
    assert out["latest"]["ci_low"] <= 135 <= out["latest"]["ci_high"]  # truth: 75 + 60
    values = [2.5, 7.0, 12.0, -1.0] * 10  # clamped to [0, 10]
    out = _post(kit, total.json()["id"], values)
    expected = summer.update(values, rng=replay)
    assert out["releases"] == expected.tolist()
    half = summer.ci_halfwidth(alpha=0.05)
    assert out["latest"]["ci_high"] - out["latest"]["value"] == pytest.approx(half, rel=1e-12)
    assert _cap_spent(kit, rho)["rho_exact"] == "3/4"  # ingesting costs nothing


def test_kary_streams_are_charged_epsilon_and_release_with_ci(
    kit: Kit, names: tuple[str, str]
) -> None:
    """k-ary streams on the basic ε cap: charged their ε, the best branching chosen for the
    horizon unless given, each batch as the uninterrupted library stream releases it."""
    basic, _rho = names
    count = _create(kit.owner, basic, {"kind": "kary_count", "epsilon": 1, "horizon": 1000})
    assert count.status_code == 201, count.text
    total = _create(
        kit.owner,
        basic,
        {"kind": "kary_sum", "epsilon": 0.5, "horizon": 500, "lower": -5, "upper": 5,
         "branching": 4},
    )  # fmt: skip
    assert total.status_code == 201, total.text
    assert count.json()["cost"]["epsilon_exact"] == "1"
    assert total.json()["params"]["branching"] == 4
    assert count.json()["params"]["branching"] == 11  # the best k for 1000, stored
    assert kit.service.ledger.charged_total(basic) == ApproxDP(Fraction(3, 2), 0)
    replay = SeededRng(SEED)
    counter = KaryContinualSum.counter(1, 1000)
    summer = KaryContinualSum(Fraction(1, 2), 500, -5, 5, branching=4)
    assert counter.branching == 11
    for batch in ([1] * 130, [0, 1] * 20):
        out = _post(kit, count.json()["id"], batch)
        expected = counter.update(batch, rng=replay)
        assert out["releases"] == expected.tolist()
        half = counter.ci_halfwidth(alpha=0.05)
        assert out["latest"]["ci_low"] == float(expected[-1]) - half
    assert out["latest"]["time"] == 170
    assert out["latest"]["ci_low"] <= 150 <= out["latest"]["ci_high"]
    out = _post(kit, total.json()["id"], [-3.0, 4.0] * 30)
    assert out["releases"] == summer.update([-3.0, 4.0] * 30, rng=replay).tolist()
    too_many = kit.owner.post(
        f"/v1/streams/{total.json()['id']}/events", json={"values": [0] * 441}
    )
    assert too_many.status_code == 422  # past the horizon: refused, nothing ingested
    assert kit.owner.get(f"/v1/streams/{total.json()['id']}").json()["latest"]["time"] == 60


def test_state_is_stored_with_integers_as_decimal_strings(kit: Kit, names: tuple[str, str]) -> None:
    """The persisted state is the mechanism's state as JSON, exact integers as text."""
    basic, rho = names
    made = [
        _create(kit.owner, rho, {"kind": "correlated_count", "rho": 1, "horizon": 64}),
        _create(kit.owner, basic, {"kind": "kary_count", "epsilon": 1, "horizon": 64}),
    ]
    for created in made:
        _post(kit, created.json()["id"], [1] * 20)
        with kit.service.ledger._transaction(write=False) as s:
            row = s.get(Stream, created.json()["id"])
            assert row is not None
            state = json.loads(row.state)
        assert state["time"] == "20"
        for key in ("encoder", "anchor", "acc_block", "total"):
            if key in state:
                items = state[key] if isinstance(state[key], list) else [state[key]]
                assert all(isinstance(v, str) and int(v) == int(v, 10) for v in items)


def test_a_rho_stream_on_a_basic_budget_and_bad_parameters_are_refused_free(
    kit: Kit, names: tuple[str, str]
) -> None:
    """A ρ-only stream on the basic ε cap gets the ledger's refusal; parameters a kind does not
    take are refused by name; none is charged or recorded."""
    basic, rho = names
    refused = _create(kit.owner, basic, {"kind": "correlated_count", "rho": 0.5})
    assert refused.status_code == 422, refused.text
    assert refused.json()["type"].endswith("invalid-parameter")
    detail = refused.json()["detail"]
    assert "basic composition" in detail
    assert "nothing was charged" in detail
    cases = [
        (rho, {"kind": "correlated_count", "epsilon": 1}, "give rho, not epsilon"),
        (basic, {"kind": "kary_count", "rho": 1, "horizon": 10}, "give epsilon, not rho"),
        (basic, {"kind": "kary_sum", "epsilon": 1}, "needs a horizon"),
        (basic, {"kind": "count", "epsilon": 1, "horizon": 9, "branching": 2}, "branching"),
        (rho, {"kind": "correlated_count", "rho": 1, "branching": 2}, "branching"),
        (basic, {"kind": "kary_sum", "epsilon": 1, "horizon": 9, "resolution": 0.3}, "power"),
        (basic, {"kind": "sum", "rho": 1, "horizon": 9}, "give epsilon"),
        (
            rho,
            {
                "kind": "correlated_sum",
                "rho": 1,
                "lower": -1e15,
                "upper": 1e15,
                "resolution": 2**-30,
            },
            "resolution of at least 0.125",
        ),
    ]
    for dataset, body, words in cases:
        response = _create(kit.owner, dataset, body)
        assert response.status_code == 422, (body, response.text)
        assert words in response.json()["detail"], (body, response.text)
    assert kit.service.ledger.charged_total(basic) == ApproxDP(0, 0)
    assert _cap_spent(kit, rho)["rho_exact"] == "0"
    assert _history(kit, basic) == [] == _history(kit, rho)


def test_idempotency_keys_on_creation_and_events(kit: Kit, names: tuple[str, str]) -> None:
    """A retried creation returns the first stream, charged once; a retried batch replays its
    answer, ingested once; a key reused with another body is a conflict."""
    basic, rho = names
    body = {"kind": "correlated_count", "rho": 0.5, "horizon": 100}
    first = _create(kit.owner, rho, body, **{"Idempotency-Key": "make-1"})
    again = _create(kit.owner, rho, body, **{"Idempotency-Key": "make-1"})
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    assert _cap_spent(kit, rho)["rho_exact"] == "1/2"
    kary = {"kind": "kary_count", "epsilon": 1, "horizon": 100}
    made = [_create(kit.owner, basic, kary, **{"Idempotency-Key": "k"}) for _ in range(2)]
    assert made[0].json()["id"] == made[1].json()["id"]
    assert kit.service.ledger.charged_total(basic) == ApproxDP(1, 0)
    for stream_id in (first.json()["id"], made[0].json()["id"]):
        posted = [_post(kit, stream_id, [1] * 10, **{"Idempotency-Key": f"ev-{stream_id}"})
                  for _ in range(2)]  # fmt: skip
        assert [p["replayed"] for p in posted] == [False, True]
        assert posted[0]["releases"] == posted[1]["releases"]
        assert kit.owner.get(f"/v1/streams/{stream_id}").json()["latest"]["time"] == 10
    other = kit.owner.post(
        f"/v1/streams/{first.json()['id']}/events",
        json={"values": [0] * 3},
        headers={"Idempotency-Key": f"ev-{first.json()['id']}"},
    )
    assert other.status_code == 409, other.text


def test_only_the_creator_posts_events(kit: Kit, names: tuple[str, str]) -> None:
    """Another owner may read a stream but not post to it (403); an analyst sees nothing (404)."""
    basic, rho = names
    _, issued = kit.service.create_principal("owner2", "owner")
    other = kit.server.client(issued.token)
    created = [
        _create(kit.owner, rho, {"kind": "correlated_sum", "rho": 1, "horizon": 50}),
        _create(kit.owner, basic, {"kind": "kary_sum", "epsilon": 1, "horizon": 50}),
    ]
    refused = _create(kit.alice, basic, {"kind": "kary_count", "epsilon": 1, "horizon": 5})
    assert refused.status_code == 403
    for response in created:
        stream_id = response.json()["id"]
        assert other.get(f"/v1/streams/{stream_id}").status_code == 200
        posted = other.post(f"/v1/streams/{stream_id}/events", json={"values": [1]})
        assert posted.status_code == 403
        assert "Only the owner who created" in posted.json()["detail"]
        assert kit.alice.get(f"/v1/streams/{stream_id}").status_code == 404
        assert (
            kit.alice.post(f"/v1/streams/{stream_id}/events", json={"values": [1]}).status_code
            == 404
        )
        assert kit.owner.get(f"/v1/streams/{stream_id}").json()["latest"] is None


def test_the_cli_creates_posts_and_shows_the_new_kinds(
    kit: Kit, names: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``dpcurator stream``: a correlated stream on the ρ cap and a k-ary one on the ε cap,
    created, fed and shown; a ρ stream on the basic cap is one error line, charged nothing."""
    basic, rho = names
    connection = ["--url", kit.server.url, "--token", kit.tokens[0]]
    made = {}
    for dataset, cost in ((rho, ["--rho", "0.5"]), (basic, ["--epsilon", "1"])):
        kind = "correlated_count" if dataset == rho else "kary_count"
        create = ["stream", "create", *connection, "--dataset", dataset, "--kind", kind]
        assert main([*create, *cost, "--horizon", "100", "--format", "json"]) == 0
        made[kind] = json.loads(capsys.readouterr().out)
        stream_id = made[kind]["id"]
        assert main(["stream", "post", *connection, stream_id, *["1"] * 30]) == 0
        shown = capsys.readouterr().out
        assert f"id: {stream_id}" in shown
        assert "time: 30" in shown
        assert main(["stream", "show", *connection, stream_id, "--format", "json"]) == 0
        latest = json.loads(capsys.readouterr().out)["latest"]
        assert latest["ci_low"] <= 30 <= latest["ci_high"]  # seeded run, alpha 0.05
    assert made["correlated_count"]["cost"]["rho_exact"] == "1/2"
    assert made["kary_count"]["cost"]["epsilon_exact"] == "1"
    refused = ["stream", "create", *connection, "--dataset", basic]
    assert main([*refused, "--kind", "correlated_count", "--rho", "0.5"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: ")
    assert "basic composition" in error
    assert kit.service.ledger.charged_total(basic) == ApproxDP(1, 0)
