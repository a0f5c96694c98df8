"""The cost of a batch of a pan-private stream is bounded (issue 24, item 4).

Pan-privacy forbids a write whose extent depends on which users appeared (the module docstring
of :mod:`dpcurator.service.stores.streams`), so every batch rewrites the whole persisted state.
Its cost is bounded two ways: the state's bytes are capped (``MAX_STREAM_STATE_BYTES``, refused
free and before the charge, naming the parameters, their values and the limit), and the work in
memory is the batch's, not the universe's (an incidence stream's update read and wrote every
counter: 0.7 s a batch at 2,000,000 users; tracemalloc sees that as a 48 MB peak).
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dpcurator.core.measures import ApproxDP
from dpcurator.query.plan.limits import MAX_STREAM_STATE_BYTES
from dpcurator.random import SeededRng
from dpcurator.service.models import Stream
from dpcurator.streams import PanPrivateIncidence
from tests.service_kit import Kit, people_kit

STREAMS = "/v1/datasets/people/streams"


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    with people_kit(tmp_path, rows=200) as made:
        yield made


def _free(kit: Kit) -> bool:
    with kit.service.ledger._transaction(write=False) as s:
        streams = s.query(Stream).count()
    return kit.service.ledger.charged_total("people") == ApproxDP(0, 0) and streams == 0


@pytest.mark.parametrize(
    ("extra", "given", "size"),
    [
        # two bytes a counter: 4,000,000 bytes
        (
            {"kind": "incidence", "universe": 2_000_000, "modulus": 65_536},
            "universe=2,000,000 and modulus=65,536",
            "4,000,000",
        ),
        # a sample's ids cost 8 bytes a user: 500,000 · (8 + 1/8) bytes
        (
            {"kind": "density", "universe": 10**12, "sample_size": 500_000},
            "universe=1,000,000,000,000 and sample_size=500,000",
            "4,062,500",
        ),
    ],
)
def test_a_stream_state_over_the_byte_limit_is_refused_free(
    kit: Kit, extra: dict[str, object], given: str, size: str
) -> None:
    assert MAX_STREAM_STATE_BYTES == 1_000_000  # about 0.15 s a batch (docs/sql.md)
    body = {"epsilon": 1, "output_epsilon": 1, **extra}
    refused = kit.owner.post(STREAMS, json=body)
    assert refused.status_code == 422, refused.text
    detail = refused.json()["detail"]
    assert given in detail, detail
    assert f"state of {size} bytes" in detail, detail
    assert "MAX_STREAM_STATE_BYTES = 1,000,000" in detail
    assert "sample_size at most" in detail
    assert "PanPrivate" not in detail  # no internal class name
    assert _free(kit)


def test_a_state_at_the_byte_limit_is_accepted(kit: Kit) -> None:
    body = {"kind": "incidence", "epsilon": 1, "output_epsilon": 1, "universe": 1_000_000,
            "modulus": 256}  # fmt: skip
    created = kit.owner.post(STREAMS, json=body)
    assert created.status_code == 201, created.text
    posted = kit.owner.post(f"/v1/streams/{created.json()['id']}/events", json={"values": [1, 2]})
    assert posted.status_code == 200, posted.text


def test_an_incidence_update_works_in_the_batch_not_the_universe() -> None:
    """The same counters as adding the batch's counts to every counter mod m, with a peak of
    memory far below one pass over 2,000,000 counters (8 bytes each in memory)."""
    state = PanPrivateIncidence(1, 2_000_000, 256, rng=SeededRng(5))
    before = state.counters.copy()
    batch = [5, 5, 7, 1_999_999, 5, 3_000_000, -1]  # repeats count; ids outside are ignored
    tracemalloc.start()
    try:
        state.observe(batch)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100_000, peak  # was 48 MB: a count, a sum and a remainder for every counter
    added = np.zeros_like(before)
    added[[5, 7, 1_999_999]] = [3, 1, 1]
    assert np.array_equal(state.counters, (before + added) % 256)
