"""Pan-private incidence streams in the service (issue 16 §3): the fraction of users seen at least
k times, charged ε + outputs · output_epsilon at creation, only the ε-DP counters on disk; and a
count stream's per-event releases of a batch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dpcurator.core.measures import ApproxDP
from dpcurator.random import SeededRng
from dpcurator.random import rng as rng_module
from tests.service_kit import Kit, people_kit

UNIVERSE = 1_000_000  # a 1 MB state (modulus 4: a byte a user), MAX_STREAM_STATE_BYTES


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    with people_kit(tmp_path) as made:
        yield made


def _create(kit: Kit, **extra: object) -> tuple[int, dict[str, object]]:
    body = {"kind": "incidence", "epsilon": 1, "universe": UNIVERSE, "output_epsilon": 0.5}
    response = kit.owner.post("/v1/datasets/people/streams", json={**body, **extra})
    return response.status_code, response.json()


def test_incidence_stream_estimates_at_least_k_and_keeps_no_raw_event(
    kit: Kit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seeded (every draw of the server): the 95% checks below are one run at alpha 0.05;
    # coverage at a declared alpha is tests/test_streams_pan_private.py's job (issue 24 item 9).
    monkeypatch.setattr(rng_module, "_DEFAULT", SeededRng(24))
    status, stream = _create(kit, modulus=4, outputs=2)
    assert status == 201, stream
    assert kit.service.ledger.charged_total("people") == ApproxDP(2, 0)
    twice = list(range(857_000, 857_500))
    once = list(range(968_000, 968_500))
    posted = kit.owner.post(f"/v1/streams/{stream['id']}/events", json={"values": twice + once})
    assert posted.status_code == 200, posted.text
    kit.owner.post(f"/v1/streams/{stream['id']}/events", json={"values": twice})
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("ledger.sqlite3*"))
    for user in twice + once:  # as a JSON list would hold them (a timestamp's microseconds
        for text in (f"{user},", f"{user}]", f"{user}\n"):  # may hold the digits alone)
            assert text.encode() not in stored
        assert user.to_bytes(8, "little") not in stored
    estimates = f"/v1/streams/{stream['id']}/estimates"
    for refused in ("", "?at_least=4", "?at_least=0"):
        assert kit.owner.post(estimates + refused).status_code == 422, refused
    for k, truth in ((2, 500 / UNIVERSE), (1, 1000 / UNIVERSE)):
        response = kit.owner.post(f"{estimates}?at_least={k}")
        assert response.status_code == 200, response.text
        latest = response.json()["latest"]
        assert latest["at_least"] == k
        assert latest["ci_low"] <= truth <= latest["ci_high"]  # 95% intervals (alpha 0.05)
    assert latest["outputs_used"] == 2
    assert kit.owner.post(f"{estimates}?at_least=2").status_code == 409
    assert kit.service.ledger.charged_total("people") == ApproxDP(2, 0)


def test_incidence_parameters_are_refused_free(kit: Kit) -> None:
    assert _create(kit)[0] == 422  # no modulus
    assert _create(kit, modulus=1)[0] == 422
    density = {"kind": "density", "epsilon": 1, "universe": 10, "output_epsilon": 1, "modulus": 4}
    assert kit.owner.post("/v1/datasets/people/streams", json=density).status_code == 422
    assert kit.service.ledger.charged_total("people") == ApproxDP(0, 0)


def test_count_stream_releases_after_every_event_of_a_batch(kit: Kit) -> None:
    """per_event=true returns the running count after each event of the batch (all part of the
    one ε-DP tree release), the last one equal to the stream's latest value."""
    created = kit.owner.post(
        "/v1/datasets/people/streams", json={"kind": "count", "epsilon": 1, "horizon": 64}
    ).json()
    events = f"/v1/streams/{created['id']}/events"
    kit.owner.post(events, json={"values": [1, 0, 1]})
    posted = kit.owner.post(f"{events}?per_event=true", json={"values": [1, 1, 0, 1]}).json()
    assert len(posted["releases"]) == 4
    assert posted["releases"][-1] == posted["latest"]["value"]
    assert posted["latest"]["time"] == 7
    assert "releases" not in kit.owner.post(events, json={"values": [1]}).json()
    assert kit.service.ledger.charged_total("people") == ApproxDP(1, 0)
