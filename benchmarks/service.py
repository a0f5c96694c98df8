"""Service throughput: 8 concurrent clients on loopback against a real uvicorn server.

A 10^6-row dataset (Parquet), small grouped queries, with the SQLite ledger and (if the
PostgreSQL 15 binaries are installed) a throwaway PostgreSQL ledger. Reports sustained queries/s
and p50/p99 latency, and asserts zero overspend (ledger total == sum of released costs <= budget).

    .venv/bin/python benchmarks/service.py [--rows 1000000] [--seconds 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from fractions import Fraction
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dpcurator.core.measures import ApproxDP  # noqa: E402
from dpcurator.service.app import create_app  # noqa: E402
from dpcurator.service.server import build_service  # noqa: E402
from tests.service_fixtures import PEOPLE_METADATA, ThreadServer, cheap_hasher  # noqa: E402

QUERIES = [
    "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex",
    "SELECT region, COUNT(*) AS n FROM people GROUP BY region",
    "SELECT region, SUM(age) AS s FROM people GROUP BY region",
]
EPSILON = 0.001


def write_data(path: Path, rows: int) -> Path:
    """A synthetic table matching PEOPLE_METADATA."""
    generator = np.random.default_rng(1)
    frame = pd.DataFrame(
        {
            "age": generator.integers(0, 100, rows),
            "sex": generator.choice(["F", "M"], rows),
            "region": generator.choice(["north", "south", "east", "west"], rows),
            "income": generator.uniform(0, 100000, rows),
        }
    )
    frame.to_parquet(path)
    return path


def run(ledger_url: str, data: Path, seconds: float, clients: int) -> dict[str, float]:
    """Drive the server for ``seconds`` and return throughput and latency figures."""
    service = build_service(ledger_url, hasher=cheap_hasher())
    _, owner = service.create_principal("owner", "owner")
    latencies: list[float] = []
    refused = 0
    lock = threading.Lock()
    with ThreadServer(create_app(service)) as server:
        admin = server.client(owner.token)
        admin.post(
            "/v1/datasets",
            json={
                "id": "people",
                "source": {"path": str(data)},
                "metadata": PEOPLE_METADATA,
                "cap_epsilon": 1000,
            },
        ).raise_for_status()
        tokens = []
        for i in range(clients):
            issued = admin.post("/v1/analysts", json={"name": f"bench{i}"}).json()
            admin.put(
                f"/v1/analysts/{issued['principal']['id']}/grants/people", json={"epsilon": 50}
            ).raise_for_status()
            tokens.append(issued["token"])
        # Warm up: open the dataset, fill the token cache.
        for token in tokens:
            with httpx.Client(headers={"Authorization": f"Bearer {token}"}) as http:
                http.get(f"{server.url}/v1/me").raise_for_status()
        stop = time.monotonic() + seconds

        def worker(index: int) -> None:
            nonlocal refused
            headers = {"Authorization": f"Bearer {tokens[index]}"}
            with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
                i = index
                while time.monotonic() < stop:
                    body = {"sql": QUERIES[i % len(QUERIES)], "epsilon": EPSILON}
                    start = time.perf_counter()
                    response = http.post("/v1/datasets/people/queries", json=body)
                    elapsed = time.perf_counter() - start
                    with lock:
                        if response.status_code == 200:
                            latencies.append(elapsed)
                        else:
                            refused += 1
                    i += 1

        began = time.monotonic()
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.monotonic() - began
    total = service.ledger.charged_total("people")
    expected = ApproxDP(Fraction(str(EPSILON)) * len(latencies), 0)
    assert total == expected, f"ledger {total} != released {expected}"
    assert total.fits_within(ApproxDP(1000, 0))
    service.catalog.close()
    service.ledger.close()
    ordered = sorted(latencies)
    return {
        "queries": len(latencies),
        "refused": refused,
        "qps": len(latencies) / wall,
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[int(0.99 * (len(ordered) - 1))],
    }


def main() -> None:
    """Run the benchmark with each available ledger."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--postgres", help="a PostgreSQL SQLAlchemy URL for the second run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = write_data(Path(tmp) / "people.parquet", args.rows)
        ledgers = {"sqlite": f"sqlite:///{tmp}/ledger.sqlite3"}
        if args.postgres:
            ledgers["postgresql"] = args.postgres
        for name, url in ledgers.items():
            result = run(url, data, args.seconds, args.clients)
            print(
                f"{name:10s} rows={args.rows} clients={args.clients} "
                f"queries={result['queries']} refused={result['refused']} "
                f"qps={result['qps']:.1f} p50={result['p50_ms']:.1f}ms "
                f"p99={result['p99_ms']:.1f}ms overspend=0"
            )


if __name__ == "__main__":
    main()
