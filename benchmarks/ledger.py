"""Ledger throughput: reservation + completion pairs per second from several threads of one
process, on SQLite and on a throwaway PostgreSQL (fsync on), and how long SQLite's write lock is
held per write (the service's one serialisation point with that ledger).

Every query of the service writes the ledger twice (:meth:`Ledger.reserve` before the engine
runs, :meth:`Ledger.complete` after), so these pairs bound the service's throughput on one
dataset whatever the engine does. The "keyed" rows give every reservation a request key, as a
client retrying with an Idempotency-Key does: that path is the transaction of several statements
through SQLAlchemy on both ledgers (the others are one statement on PostgreSQL and the raw
cursor on SQLite).

    .venv/bin/python benchmarks/ledger.py [--pairs 2000] [--threads 1,4]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dpcurator.core.measures import ApproxDP  # noqa: E402
from dpcurator.service.ledger import Ledger  # noqa: E402
from dpcurator.service.ledger import database as ledger_module  # noqa: E402
from dpcurator.service.ledger.charges import ChargeRequest  # noqa: E402
from tests.service_fixtures import (  # noqa: E402
    fresh_postgres_url,
    ledger_with_analysts,
    postgres_available,
    throwaway_postgres,
)

COST = ApproxDP(Fraction(1, 1000), 0)


@contextlib.contextmanager
def timed_write_lock() -> Iterator[list[float]]:
    """Record how long each hold of the SQLite write lock lasts (seconds)."""
    holds: list[float] = []
    original = ledger_module._WriterLock.hold

    @contextlib.contextmanager
    def hold(self: ledger_module._WriterLock) -> Iterator[None]:
        with original(self):
            began = time.perf_counter()
            try:
                yield
            finally:
                holds.append(time.perf_counter() - began)

    ledger_module._WriterLock.hold = hold  # type: ignore[method-assign]
    try:
        yield holds
    finally:
        ledger_module._WriterLock.hold = original  # type: ignore[method-assign]


def prepared(url: str) -> Ledger:
    """A ledger with one dataset and one analyst (``ana_0``), both with room for every pair."""
    ledger = Ledger(url)
    ledger_with_analysts(ledger, grant=ApproxDP(10**6, 0), cap=ApproxDP(10**6, 0))
    return ledger


def run(ledger: Ledger, pairs: int, threads: int, keyed: bool) -> float:
    """Pairs per second from ``threads`` threads sharing ``pairs`` reserve + complete pairs."""

    def work(worker: int) -> None:
        for i in range(pairs // threads):
            key = f"{worker}-{i}" if keyed else None
            request = ChargeRequest(
                principal_id="ana_0",
                dataset_id="d",
                kind="query",
                query_text="SELECT region, COUNT(*) FROM people GROUP BY region",
                fingerprint="f",
                cost=COST,
                events=[{"epsilon": "1/1000"}],
                request_key=key,
            )
            charge = ledger.reserve(request)
            ledger.complete(charge.charge_id, {"rows": [[1, 2.5]]})

    workers = [threading.Thread(target=work, args=(w,)) for w in range(threads)]
    began = time.perf_counter()
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    return (pairs // threads) * threads / (time.perf_counter() - began)


def main() -> None:
    """Print one table row per ledger, path and thread count."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--threads", default="1,4")
    args = parser.parse_args()
    print("| ledger | path | threads | pairs/s | write-lock hold mean ms | p99 ms |")
    print("|---|---|---|---|---|---|")
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        urls = {"sqlite": lambda name: f"sqlite:///{tmp / name}.sqlite3"}
        if postgres_available():
            server = stack.enter_context(throwaway_postgres(durable=True))
            urls["postgresql"] = lambda _name: fresh_postgres_url(server)
        for name, url_of in urls.items():
            for keyed in (False, True):
                for threads in (int(t) for t in args.threads.split(",")):
                    ledger = prepared(url_of(f"{keyed}-{threads}"))
                    try:
                        with timed_write_lock() as holds:
                            rate = run(ledger, args.pairs, threads, keyed)
                    finally:
                        ledger.close()
                    holds.sort()
                    mean, p99 = (
                        (
                            f"{1000 * statistics.mean(holds):.3f}",
                            f"{1000 * holds[int(0.99 * (len(holds) - 1))]:.3f}",
                        )
                        if holds
                        else ("–", "–")
                    )
                    path = "keyed" if keyed else "plain"
                    print(
                        f"| {name} | {path} | {threads} | {rate:.0f} | {mean} | {p99} |", flush=True
                    )


if __name__ == "__main__":
    main()
