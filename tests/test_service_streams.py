"""Issue 16 in the service, over HTTP on a real uvicorn server: sparse vector (one charge, the
neighbour rule), private streams (charged at creation, persisted across a restart, pan-private
state without raw events on disk) and a local-model randomized-response survey."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from dpcurator.core.measures import ApproxDP
from dpcurator.random import SeededRng
from dpcurator.random import rng as rng_module
from dpcurator.service.client import CuratorClient
from dpcurator.streams import ContinualSum
from dpcurator.streams import tree as tree_module
from tests.service_kit import Kit, people_kit

ALL = "SELECT COUNT(*) AS n FROM people"
NONE = "SELECT COUNT(*) AS n FROM people WHERE age < 0"


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    with people_kit(tmp_path) as made:
        yield made


def _spent(kit: Kit) -> ApproxDP:
    return kit.service.ledger.charged_total("people")


# -- sparse vector ------------------------------------------------------------------------------


def test_sparse_vector_flags_above_threshold_and_charges_epsilon_once(kit: Kit) -> None:
    # Exact answers 0, 2000, 0, 2000, 2000 against T = 1000: Δ = 1, so the noise (scales 2/ε·c
    # and 4/ε·c grid steps) is negligible next to the gap of 1000.
    body = {"queries": [NONE, ALL, NONE, ALL, ALL], "threshold": 1000, "c": 2, "epsilon": 0.5}
    response = kit.alice.post("/v1/datasets/people/sparse-vector", json=body)
    assert response.status_code == 200, response.text
    out = response.json()
    assert out["release"] == {"above": [False, True, False, True, None], "positives": 2}
    # Hand computation: c runs of AboveThreshold at ε/c each compose to ε, charged once.
    assert out["cost"]["epsilon_exact"] == "1/2"
    assert out["remaining"]["remaining"]["epsilon_exact"] == "1/2"
    assert _spent(kit) == ApproxDP(Fraction(1, 2), 0)
    history = kit.alice.get("/v1/datasets/people/queries").json()
    assert [h["kind"] for h in history] == ["sparse_vector"]


def test_sparse_vector_refusals_are_free(kit: Kit) -> None:
    grouped = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"
    cases = [
        ({"queries": [ALL, grouped], "threshold": 5, "epsilon": 0.5}, "unsupported-query"),
        ({"queries": [ALL], "threshold": 5, "c": 2, "epsilon": 0.5}, "invalid-parameter"),
        ({"queries": [ALL], "threshold": 5, "epsilon": 2}, "budget-exceeded"),
    ]
    for body, slug in cases:
        response = kit.alice.post("/v1/datasets/people/sparse-vector", json=body)
        assert response.status_code in (409, 422), response.text
        assert response.json()["type"].endswith(slug)
    assert _spent(kit) == ApproxDP(0, 0)


def test_sparse_vector_neighbours_differ_only_in_noisy_flags(tmp_path: Path) -> None:
    # D (2000 people) and D minus one person: the count of everyone sits right at the threshold.
    body = {
        "queries": [NONE, ALL, NONE],
        "threshold": 2000,
        "c": 1,
        "epsilon": 0.5,
    }
    seen = []
    for rows in (2000, 1999):
        folder = tmp_path / str(rows)
        folder.mkdir()
        with people_kit(folder, rows=rows) as kit:
            response = kit.alice.post("/v1/datasets/people/sparse-vector", json=body)
            out = response.json()
            seen.append(
                (
                    response.status_code,
                    sorted(out),
                    sorted(out["release"]),
                    len(out["release"]["above"]),
                    out["cost"],
                    out["remaining"],
                )
            )
    assert seen[0] == seen[1]
    assert seen[0][0] == 200


# -- streams ------------------------------------------------------------------------------------


def test_count_stream_is_charged_at_creation_and_releases_with_ci(
    kit: Kit, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seeded: an unseeded 95% check fails ~5% of runs (coverage is test_streams_tree.py's job).
    monkeypatch.setattr(tree_module, "default_rng", lambda: SeededRng(7))
    refused = kit.alice.post(
        "/v1/datasets/people/streams", json={"kind": "count", "epsilon": 1, "horizon": 1000}
    )
    assert refused.status_code == 403
    created = kit.owner.post(
        "/v1/datasets/people/streams", json={"kind": "count", "epsilon": 1, "horizon": 1000}
    )
    assert created.status_code == 201, created.text
    stream = created.json()
    assert stream["cost"]["epsilon_exact"] == "1"
    assert _spent(kit) == ApproxDP(1, 0)
    for _ in range(3):
        posted = kit.owner.post(f"/v1/streams/{stream['id']}/events", json={"values": [1] * 100})
        assert posted.status_code == 200, posted.text
    latest = kit.owner.get(f"/v1/streams/{stream['id']}").json()["latest"]
    assert latest["time"] == 300
    assert latest["ci_low"] <= latest["value"] <= latest["ci_high"]
    assert latest["ci_low"] <= 300 <= latest["ci_high"]  # the 95% CI (seen fixed: alpha 0.05)
    too_many = kit.owner.post(f"/v1/streams/{stream['id']}/events", json={"values": [1] * 701})
    assert too_many.status_code == 422
    assert kit.owner.get(f"/v1/streams/{stream['id']}").json()["latest"]["time"] == 300
    assert _spent(kit) == ApproxDP(1, 0)  # ingesting and reading cost nothing more


def test_streams_survive_a_restart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restarted server continues both trees where they stopped: its release at t = 500
    (= 256 + 128 + 64 + 32 + 16 + 4, so it reads nodes, anchors and totals stored before the
    restart) is exactly that of one uninterrupted tree fed the same batches with the same noise,
    with the public interval, and nothing is charged again. (Coverage at a declared α is
    tests/test_streams_tree.py's job: an unseeded 95% check here failed ~5% of runs.)"""
    served = SeededRng(11)
    monkeypatch.setattr(tree_module, "default_rng", lambda: served)
    with people_kit(tmp_path) as kit:
        tokens = kit.tokens
        count = kit.owner.post(
            "/v1/datasets/people/streams", json={"kind": "count", "epsilon": 1, "horizon": 4096}
        ).json()
        total = kit.owner.post(
            "/v1/datasets/people/streams",
            json={"kind": "sum", "epsilon": 1, "horizon": 4096, "lower": 0, "upper": 10},
        ).json()
        kit.owner.post(f"/v1/streams/{count['id']}/events", json={"values": [1] * 300})
        kit.owner.post(f"/v1/streams/{total['id']}/events", json={"values": [5.0] * 300})
        before = kit.owner.get(f"/v1/streams/{count['id']}").json()["latest"]
    with people_kit(tmp_path, tokens=tokens) as kit:
        assert kit.owner.get(f"/v1/streams/{count['id']}").json()["latest"] == before
        kit.owner.post(f"/v1/streams/{count['id']}/events", json={"values": [1] * 200})
        kit.owner.post(f"/v1/streams/{total['id']}/events", json={"values": [5.0] * 200})
        after = kit.owner.get(f"/v1/streams/{count['id']}").json()["latest"]
        summed = kit.owner.get(f"/v1/streams/{total['id']}").json()["latest"]
        assert _spent(kit) == ApproxDP(2, 0)
    replay = SeededRng(11)  # the same noise draws, in the same order, without a restart
    counter, summer = ContinualSum.counter(1, 4096), ContinualSum(1, 4096, 0, 10)
    counter.update([1] * 300, rng=replay)
    summer.update([5.0] * 300, rng=replay)
    for latest, tree, values in ((after, counter, [1] * 200), (summed, summer, [5.0] * 200)):
        value = float(tree.update(values, rng=replay)[-1])
        half = tree.ci_halfwidth(alpha=latest["alpha"])
        assert latest == {"time": 500, "value": value, "ci_low": value - half,
                          "ci_high": value + half, "alpha": 0.05}  # fmt: skip


def test_pan_private_stream_keeps_no_raw_event_on_disk(
    kit: Kit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seeded (every draw of the server: the bits, the coins, the output noise): the unseeded
    # 95% check below failed ~5% of runs (issue 24 item 9). Coverage at a declared α is
    # tests/test_streams_pan_private.py's job; here one seeded run, alpha 0.05.
    monkeypatch.setattr(rng_module, "_DEFAULT", SeededRng(24))
    created = kit.owner.post(
        "/v1/datasets/people/streams",
        json={
            "kind": "density",
            "epsilon": 1,
            "universe": 2_000_000,
            "output_epsilon": 0.5,
            "outputs": 2,
        },
    )
    assert created.status_code == 201, created.text
    stream_id = created.json()["id"]
    assert _spent(kit) == ApproxDP(2, 0)  # ε + outputs · output_epsilon
    users = list(range(1_357_000, 1_357_500))  # 7 digits: no timestamp holds such a run
    posted = kit.owner.post(f"/v1/streams/{stream_id}/events", json={"values": users})
    assert posted.status_code == 200, posted.text
    assert posted.json()["latest"] is None
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("ledger.sqlite3*"))
    for user in users:
        assert str(user).encode() not in stored
        assert user.to_bytes(8, "little") not in stored
    for _ in range(2):
        estimate = kit.owner.post(f"/v1/streams/{stream_id}/estimates")
        assert estimate.status_code == 200, estimate.text
    latest = estimate.json()["latest"]
    assert 0 <= latest["ci_low"] <= 500 / 2_000_000 <= latest["ci_high"] <= 1
    assert 0 <= latest["value"] <= 1
    assert latest["outputs_used"] == 2
    assert kit.owner.post(f"/v1/streams/{stream_id}/estimates").status_code == 409
    assert _spent(kit) == ApproxDP(2, 0)


# -- local-model survey -------------------------------------------------------------------------


def test_survey_estimates_from_client_randomised_reports(kit: Kit) -> None:
    created = kit.owner.post(
        "/v1/surveys",
        json={"name": "q1", "categories": ["yes", "no", "maybe", "never"], "epsilon": 2},
    )
    assert created.status_code == 201, created.text
    survey_id = created.json()["id"]
    truth = {"yes": 0.6, "no": 0.3, "maybe": 0.1, "never": 0.0}
    answers = [c for c, share in truth.items() for _ in range(int(share * 4000))]
    with CuratorClient(kit.server.url, kit.tokens[1]) as client:
        sent = client.answer_survey(survey_id, answers, rng=SeededRng(7))
    assert sent == {"accepted": 4000, "reports": 4000}
    out = kit.alice.get(f"/v1/surveys/{survey_id}/estimates").json()
    assert out["reports"] == 4000
    # Seeded (deterministic); each interval is a 95% CI (alpha 0.05).
    for row in out["rows"]:
        assert row["ci_low"] <= truth[row["category"]] <= row["ci_high"], row
        # A share's interval lies in [0, 1] (the unclipped one of "never" went below 0).
        assert 0 <= row["ci_low"] <= row["estimate"] <= row["ci_high"] <= 1, row
    assert _spent(kit) == ApproxDP(0, 0)
    bad = kit.alice.post(f"/v1/surveys/{survey_id}/responses", json={"reports": [4]})
    assert bad.status_code == 422
