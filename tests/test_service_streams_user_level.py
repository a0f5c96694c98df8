"""User-level count streams in the service (max_events_per_person): the cap across batches and a
restart, refusals decided from the stream's public parameters."""

from __future__ import annotations

from pathlib import Path

from tests.service_kit import people_kit


def test_user_level_stream_caps_each_person_across_batches_and_a_restart(tmp_path: Path) -> None:
    # ε = 99 over 4 levels: noise of scale 8/99 count units, non-zero with probability ~1e-5
    body = {"kind": "count", "epsilon": 99, "horizon": 8, "max_events_per_person": 2}
    with people_kit(tmp_path) as first:
        created = first.owner.post("/v1/datasets/people/streams", json=body)
        assert created.status_code == 201, created.text
        assert created.json()["params"]["max_events_per_person"] == 2
        path = f"/v1/streams/{created.json()['id']}/events"
        reply = first.owner.post(path, json={"values": [1, 1, 1], "persons": [1, 1, 1]})
        assert reply.status_code == 200, reply.text
        assert round(reply.json()["latest"]["value"]) == 2
        for bad in ({"values": [1]}, {"values": [1, 1], "persons": [1]}):
            assert first.owner.post(path, json=bad).status_code == 422
        event_level = {"kind": "count", "epsilon": 1, "horizon": 8}
        other = first.owner.post("/v1/datasets/people/streams", json=event_level).json()["id"]
        refused = first.owner.post(
            f"/v1/streams/{other}/events", json={"values": [1], "persons": [1]}
        )
        assert refused.status_code == 422
        tokens = first.tokens
    with people_kit(tmp_path, tokens=tokens) as second:  # a restart
        reply = second.owner.post(path, json={"values": [1, 1], "persons": [1, "b"]})
        assert reply.status_code == 200, reply.text
        assert round(reply.json()["latest"]["value"]) == 3  # person 1 stays capped after restart
        assert reply.json()["latest"]["time"] == 5
