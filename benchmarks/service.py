"""Service throughput: concurrent client PROCESSES against a real uvicorn server subprocess.

A 10^6-row table with the demo dataset's columns (Parquet; the demo metadata with row-level
privacy: each row is one person, so no contribution bounding by ``pid``), a mix of 20 small
grouped queries, 8 client processes on loopback (``benchmarks/service_client.py``: light
imports, the window opens once all are ready), with the SQLite ledger
and, if the PostgreSQL 15 binaries are installed, a throwaway PostgreSQL ledger (fsync on).
Each ledger is run with the service's exact-result cache (``--result-cache``) off and on (every
release is charged and noised either way). Both serve a loaded DuckDB copy, for which the
service keeps exact results in either mode (it cannot change): the mix repeats 20 plans, so
after warm-up the window measures HTTP, the ledger, planning lookups and noise, not the engine
(``benchmarks/query.py`` measures the engine).

The clients share the machine's two cores with the server, so by default they are a load
generator in the manner of ``wrk``: keep-alive HTTP/1.1 written on a plain socket
(``--client socket``, ~0.1 ms of CPU per request); ``--client httpx`` (~1.3 ms per request, a
quarter of the machine at 200 queries/s) and ``--client stdlib`` (``http.client``) measure the
server behind a typical Python client.

Reports sustained answered queries/s and p50/p99 latency over the measured window (after a
warm-up), the share of the machine's CPU time that was busy meanwhile (on Linux; server,
database and clients together: far below 100% means requests queue on a lock, as they did on
the ledgers' locks before the reservation became one statement), and asserts zero overspend:
the ledger total equals the exact sum of the costs of the answered queries, fits the dataset
cap, and no analyst spent more than its grant.

    .venv/bin/python benchmarks/service.py [--rows 1000000] [--seconds 20] [--clients 8]
        [--ledgers sqlite,postgresql] [--caches off,on] [--budget-delta 1e-6]

``--budget-delta`` gives the cap and the grants that δ: with δ > 0 they are concentrated (the
default accounting), so every reservation replays events through the budgets' filters
(:mod:`dpcurator.service.ledger.accounts`) instead of the basic fast paths.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from service_client import CLIENTS, EPSILON, QUERIES  # noqa: E402

from dpcurator.core.measures import ApproxDP  # noqa: E402
from dpcurator.service.auth import Identity  # noqa: E402
from dpcurator.service.ledger import Ledger  # noqa: E402
from dpcurator.service.ledger.budgets import grant_budget  # noqa: E402
from dpcurator.service.server import (  # noqa: E402
    DEFAULT_THREADS,
    DEMO_DIR,
    build_service,
    read_metadata,
)
from dpcurator.service.server import serve as serve_api  # noqa: E402
from tests.service_fixtures import (  # noqa: E402
    free_port,
    fresh_postgres_url,
    postgres_available,
    throwaway_postgres,
)

GRANT = 1000
CAP = 100_000


def write_data(path: Path, rows: int) -> Path:
    """A synthetic table with the demo dataset's columns (same generator as the demo data)."""
    generator = np.random.default_rng(20240601)
    education = ["primary", "secondary", "bachelor", "master", "doctorate"]
    age = generator.integers(18, 91, rows)
    level = generator.choice(5, rows, p=[0.15, 0.4, 0.28, 0.14, 0.03])
    income = np.exp(generator.normal(9.6 + 0.25 * level + 0.01 * (age - 18), 0.6))
    employed = generator.random(rows) < np.where(age < 66, 0.8, 0.15)
    hours = np.where(employed, np.clip(generator.normal(38, 8, rows), 1, 80), 0).round()
    hours[generator.random(rows) < 0.05] = np.nan
    frame = pd.DataFrame(
        {
            "pid": np.arange(1, rows + 1),
            "age": age,
            "sex": generator.choice(["F", "M"], rows),
            "region": generator.choice(["North", "East", "South", "West"], rows),
            "education": np.array(education)[level],
            "income": np.minimum(np.round(income, 2), 400000.0),
            "employed": employed,
            "hours": hours,
        }
    )
    frame.to_parquet(path)
    return path


def row_level_metadata() -> dict[str, Any]:
    """The demo metadata, with each row as one person (no ``pid`` bounding)."""
    metadata = read_metadata(DEMO_DIR / "people.yaml")
    for key in ("person_column", "max_rows_per_person", "max_groups_per_person"):
        metadata.pop(key, None)
    metadata["columns"].pop("pid")
    return metadata


def _delta(args: argparse.Namespace) -> Fraction:
    """The budgets' δ (exact, from the decimal given)."""
    return Fraction(args.budget_delta)


# -- the server subprocess ------------------------------------------------------------------


def serve(args: argparse.Namespace) -> None:
    """Set up owner, dataset and analysts, print their tokens as JSON, then run uvicorn."""
    service = build_service(
        args.ledger, result_cache=args.result_cache, data_root=Path(args.data).resolve().parent
    )
    owner, _ = service.create_principal("owner", "owner")
    who = Identity(owner.id, owner.name, owner.role, "bench")
    service.register_dataset(
        who,
        "people",
        name="people",
        source={"path": args.data},
        metadata_doc=row_level_metadata(),
        cap=ApproxDP(CAP, _delta(args)),
        replay_enabled=False,
    )
    tokens = []
    for i in range(args.clients):
        analyst, issued = service.create_principal(f"bench{i}", "analyst")
        service.ledger.set_grant(analyst.id, "people", ApproxDP(GRANT, _delta(args)), by=owner.id)
        tokens.append(issued.token)
    print(json.dumps({"tokens": tokens}), flush=True)
    serve_api(
        service,
        host="127.0.0.1",
        port=args.port,
        access_log=False,
        threads=args.threads,
        switch_interval=args.switch_interval,
        workers=args.workers,
    )


@contextlib.contextmanager
def server(
    ledger: str,
    data: Path,
    clients: int,
    *,
    result_cache: bool,
    threads: int = DEFAULT_THREADS,
    switch_interval: float | None = None,
    workers: int = 1,
    budget_delta: str = "0",
) -> Iterator[Any]:
    """The benchmark server as a subprocess; yields (url, tokens)."""
    port = free_port()
    command = [sys.executable, __file__, "serve", "--ledger", ledger, "--data", str(data)]
    command += ["--port", str(port), "--clients", str(clients)]
    command += ["--result-cache"] if result_cache else []
    command += ["--threads", str(threads), "--workers", str(workers)]
    command += ["--budget-delta", budget_delta]
    command += [] if switch_interval is None else ["--switch-interval", str(switch_interval)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        tokens = json.loads(process.stdout.readline())["tokens"]
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the benchmark server did not start")
            time.sleep(0.05)
        yield url, tokens
    finally:
        process.terminate()
        process.wait(timeout=30)


CLIENT_SCRIPT = Path(__file__).resolve().parent / "service_client.py"


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) CPU ticks of the whole machine since boot (Linux ``/proc/stat``), or None."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            ticks = [int(x) for x in stat.readline().split()[1:]]
    except OSError:
        return None
    idle = ticks[3] + ticks[4]  # idle and iowait
    return sum(ticks) - idle, sum(ticks)


def _busy_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    if before is None or after is None or after[1] == before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def _drive_clients(
    args: argparse.Namespace, url: str, tokens: list[str]
) -> tuple[list[dict[str, Any]], float | None]:
    """Start one client process per token; open the window once all have imported and said
    ready (so no client is still starting up while others are measured); their results and the
    share of the machine's CPU time that was busy during the window (server, database and
    clients together: well below 100% means requests wait on a lock, not on the CPU)."""
    processes = [
        subprocess.Popen(
            [sys.executable, str(CLIENT_SCRIPT), args.client, url, token, str(i)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i, token in enumerate(tokens)
    ]
    try:
        for process in processes:
            said = process.stdout.readline().strip() if process.stdout is not None else ""
            if said != "ready":
                raise RuntimeError(f"a benchmark client did not start (it said {said!r})")
        start = time.time() + args.warmup
        window = f"{start} {start + args.seconds}\n"
        for process in processes:
            assert process.stdin is not None
            process.stdin.write(window)
            process.stdin.flush()
        time.sleep(max(0.0, start - time.time()))
        before = _cpu_ticks()
        time.sleep(max(0.0, start + args.seconds - time.time()))
        busy = _busy_share(before, _cpu_ticks())
        return [json.loads(process.communicate()[0]) for process in processes], busy
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()


def run(ledger: str, data: Path, args: argparse.Namespace, *, result_cache: bool) -> dict[str, Any]:
    """Drive one server; throughput, latency and the overspend check."""
    with server(
        ledger,
        data,
        args.clients,
        result_cache=result_cache,
        threads=args.threads,
        switch_interval=args.switch_interval,
        workers=args.workers,
        budget_delta=args.budget_delta,
    ) as (url, tokens):
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens[0]}"}) as http:
            for sql in QUERIES:  # warm up: open the dataset, every plan (and result, if cached)
                body = {"sql": sql, "epsilon": EPSILON}
                http.post("/v1/datasets/people/queries", json=body).raise_for_status()
        results, busy = _drive_clients(args, url, tokens)
    latencies = sorted(x for r in results for x in r["latencies"])
    answered = [Fraction(c) for r in results for c in r["costs"]] + [Fraction(str(EPSILON))] * len(
        QUERIES
    )
    check = Ledger(ledger)
    try:
        total = check.charged_total("people")
        assert total == ApproxDP(sum(answered, Fraction(0)), 0), "ledger != answered queries"
        assert total.fits_within(ApproxDP(CAP, _delta(args))), "the dataset cap was overspent"
        for grant in check.grants():
            spent = grant_budget(grant).spent
            assert spent.fits_within(ApproxDP(GRANT, _delta(args))), "grant overspent"
    finally:
        check.close()
    return {
        "queries": len(latencies),
        "failed": sum(r["failed"] for r in results),
        "qps": len(latencies) / args.seconds,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
        "cpu_busy": busy,
    }


def main() -> None:
    """Run the benchmark for each ledger and result-cache setting."""
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command")
    serve_parser = commands.add_parser("serve", help="(internal) the server subprocess")
    serve_parser.add_argument("--ledger", required=True)
    serve_parser.add_argument("--data", required=True)
    serve_parser.add_argument("--port", type=int, required=True)
    serve_parser.add_argument("--clients", type=int, required=True)
    serve_parser.add_argument("--result-cache", action="store_true")
    for parser_ in (parser, serve_parser):
        parser_.add_argument("--threads", type=int, default=DEFAULT_THREADS)
        parser_.add_argument("--switch-interval", type=float, default=None)
        parser_.add_argument("--workers", type=int, default=1, help="server worker processes")
        parser_.add_argument(
            "--budget-delta", default="0", help="δ of the cap and grants (> 0: concentrated)"
        )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--ledgers", default="sqlite,postgresql")
    parser.add_argument("--caches", default="off,on")
    parser.add_argument(
        "--client", choices=sorted(CLIENTS), default="socket", help="the clients' HTTP library"
    )
    args = parser.parse_args()
    if args.command == "serve":
        serve(args)
        return
    ledgers = args.ledgers.split(",")
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        data = write_data(tmp / "people.parquet", args.rows)
        postgres = None
        if "postgresql" in ledgers and postgres_available():
            postgres = stack.enter_context(throwaway_postgres(durable=True))
        print(
            f"rows={args.rows} clients={args.clients} seconds={args.seconds} "
            f"mix={len(QUERIES)} server workers={args.workers} client={args.client} "
            f"budget δ={args.budget_delta}"
        )
        print(
            "| ledger | result cache | q/s | p50 ms | p99 ms | answered | failed | overspend "
            "| CPU busy |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for name in ledgers:
            for cache in args.caches.split(","):
                if name == "sqlite":
                    url = f"sqlite:///{tmp}/ledger-{cache}.sqlite3"
                elif postgres is not None:
                    url = fresh_postgres_url(postgres)
                else:
                    print(f"| {name} | {cache} | skipped: PostgreSQL is not installed |")
                    continue
                result = run(url, data, args, result_cache=cache == "on")
                busy = result["cpu_busy"]
                print(
                    f"| {name} | {cache} | {result['qps']:.0f} | {result['p50_ms']:.1f} | "
                    f"{result['p99_ms']:.1f} | {result['queries']} | {result['failed']} | 0 | "
                    f"{'–' if busy is None else f'{100 * busy:.0f}%'} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
