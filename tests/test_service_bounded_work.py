"""Bounded work for every request, owners included (issue 24, item 4).

Each parameter that scales a request's work has a public limit (:mod:`dpcurator.query.plan.limits`),
checked before any charge: a request over it is refused free, naming the parameter, its value and
the limit. A pan-private stream's state is bounded by the users it tracks, not by its universe:
with a public sample of a huge universe it stays small on disk, and batches do not grow it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dpcurator.core.measures import ApproxDP
from dpcurator.query.plan.limits import MAX_FIT_BLOCKS, MAX_SPARSE_QUERIES, MAX_STREAM_TRACKED
from dpcurator.service.models import Stream
from tests.neighbour_queries import demo_frame
from tests.neighbour_service import DATASET, ServedTable
from tests.service_kit import Kit, people_kit

STREAMS = "/v1/datasets/people/streams"


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    with people_kit(tmp_path) as made:
        yield made


def _free(kit: Kit) -> bool:
    """Nothing was charged to the people dataset and no stream was stored."""
    with kit.service.ledger._transaction(write=False) as s:
        streams = s.query(Stream).count()
    return kit.service.ledger.charged_total("people") == ApproxDP(0, 0) and streams == 0


def test_a_fit_over_the_blocks_limit_is_refused_free() -> None:
    """Sample-and-aggregate fits one model per block (about 0.2 ms of CPU each: 100,000 blocks
    tied a worker for 29-38 s); more than MAX_FIT_BLOCKS blocks are refused before the charge."""
    body = {"model": "logistic", "response": "employed", "predictors": ["age"], "epsilon": 1.0,
            "coef_bound": 5, "method": "sample_and_aggregate", "blocks": 20_001}  # fmt: skip
    assert MAX_FIT_BLOCKS == 20_000  # about 5 CPU-s at the limit
    with ServedTable(demo_frame()) as table:
        refused = table._client.post(f"/v1/datasets/{DATASET}/fits", json=body)
        assert refused.status_code == 422, refused.text
        detail = refused.json()["detail"]
        assert "blocks" in detail, detail
        assert str(MAX_FIT_BLOCKS) in detail, detail
        assert table._service.ledger.charged_total(DATASET) == ApproxDP(0, 0)


def test_a_sparse_vector_over_the_queries_limit_is_refused_free(kit: Kit) -> None:
    """Each sparse vector query is parsed and planned (1,000 distinct queries took 14.5 s)."""
    assert MAX_SPARSE_QUERIES == 200  # about 1 CPU-s at the limit
    queries = [f"SELECT COUNT(*) FROM people WHERE age > {i}" for i in range(201)]
    body = {"queries": queries, "threshold": 10, "epsilon": 0.1}
    refused = kit.owner.post("/v1/datasets/people/sparse-vector", json=body)
    assert refused.status_code == 422, refused.text
    detail = refused.json()["detail"]
    assert "queries" in detail
    assert str(MAX_SPARSE_QUERIES) in detail
    assert str(MAX_SPARSE_QUERIES + 1) in detail  # the value received
    assert _free(kit)


@pytest.mark.parametrize("kind", ["density", "incidence"])
def test_a_stream_tracking_more_users_than_the_limit_is_refused_free(kit: Kit, kind: str) -> None:
    """A universe of 10^8 took 42 s, 3.1 GB and a 200 MB ledger row: a stream may track at most
    MAX_STREAM_TRACKED users (its universe, or a public sample of it). (A universe just over the
    limit: cheap even where the limit is missing.)"""
    assert MAX_STREAM_TRACKED == 2_000_000  # a 2-4 MB state rewritten by every batch
    universe = 3_000_000
    body = {"kind": kind, "epsilon": 1, "universe": universe, "output_epsilon": 1}
    if kind == "incidence":
        body["modulus"] = 4
    for extra in ({}, {"sample_size": MAX_STREAM_TRACKED + 1}):
        refused = kit.owner.post(STREAMS, json={**body, **extra})
        assert refused.status_code == 422, refused.text
        detail = refused.json()["detail"]
        assert f"universe={universe:,}" in detail, detail
        assert "MAX_STREAM_TRACKED" in detail
        assert f"{MAX_STREAM_TRACKED:,}" in detail
        assert "sample_size" in detail
        assert "PanPrivate" not in detail  # no internal class name
    refused = kit.owner.post(STREAMS, json={**body, "universe": 10, "sample_size": 11})
    assert refused.status_code == 422
    assert "sample_size" in refused.json()["detail"]
    assert "PanPrivate" not in refused.json()["detail"]
    assert _free(kit)


def _state_size(kit: Kit, stream_id: str) -> int:
    with kit.service.ledger._transaction(write=False) as s:
        stream = s.get(Stream, stream_id)
        assert stream is not None
        return len(stream.state)


@pytest.mark.parametrize("kind", ["density", "incidence"])
def test_a_huge_universe_with_a_public_sample_stays_small_on_disk(kit: Kit, kind: str) -> None:
    """Universe 10^12, 1,000 tracked users: the stored state is the header, the sample (8 bytes
    a user) and the counters (one byte a user at most), and batches do not grow it."""
    body = {"kind": kind, "epsilon": 1, "universe": 10**12, "output_epsilon": 1,
            "sample_size": 1_000}  # fmt: skip
    if kind == "incidence":
        body["modulus"] = 200
    created = kit.owner.post(STREAMS, json=body)
    assert created.status_code == 201, created.text
    assert created.json()["params"]["sample_size"] == 1_000
    stream_id = created.json()["id"]
    size = _state_size(kit, stream_id)
    assert size <= 1_000 * 9 + 400
    for start in (0, 10**11, 10**12 - 50_000):
        users = list(range(start, start + 50_000, 7))
        posted = kit.owner.post(f"/v1/streams/{stream_id}/events", json={"values": users})
        assert posted.status_code == 200, posted.text
        assert _state_size(kit, stream_id) == size
    released = kit.owner.post(
        f"/v1/streams/{stream_id}/estimates", params={"at_least": 1} if kind == "incidence" else {}
    )
    assert released.status_code == 200, released.text
    assert 0 <= released.json()["latest"]["value"] <= 1
