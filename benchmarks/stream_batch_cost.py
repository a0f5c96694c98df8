"""Per-batch cost of a pan-private stream through the HTTP service (issue 24, item 4).

Usage::

    PYTHONPATH=src:. python benchmarks/stream_batch_cost.py TRACKED KIND [BATCHES] [URL] [MODULUS]

creates a ``density`` or ``incidence`` stream tracking TRACKED users (its universe) on an
in-process server (SQLite ledger in a temporary directory unless URL is given, or is empty), posts
BATCHES batches of 100 new user ids and prints the median and maximum wall time of a batch.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.service_kit import people_kit


def main() -> None:
    tracked, kind = int(sys.argv[1]), sys.argv[2]
    batches = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    url = (sys.argv[4] or None) if len(sys.argv) > 4 else None
    modulus = int(sys.argv[5]) if len(sys.argv) > 5 else 256
    with people_kit(Path(tempfile.mkdtemp()), rows=200, url=url) as kit:
        body: dict[str, object] = {"kind": kind, "epsilon": 1, "universe": tracked,
                                   "output_epsilon": 0.5}  # fmt: skip
        if kind == "incidence":
            body["modulus"] = modulus
        start = time.perf_counter()
        made = kit.owner.post("/v1/datasets/people/streams", json=body)
        assert made.status_code == 201, made.text
        create = time.perf_counter() - start
        path = f"/v1/streams/{made.json()['id']}/events"
        times = []
        for i in range(batches):
            values = list(range(i * 100, i * 100 + 100))
            start = time.perf_counter()
            posted = kit.owner.post(path, json={"values": values})
            times.append(time.perf_counter() - start)
            assert posted.status_code == 200, posted.text
    print(
        f"{kind} tracked={tracked:,}: create {create:.2f} s; per batch of 100 events: "
        f"median {statistics.median(times):.3f} s, max {max(times):.3f} s"
    )


if __name__ == "__main__":
    main()
