"""Parts 2 and 3 of the stress harness: SIGKILLs during load, and ledger outages.

Crash: background clients send charged requests (queries, sparse vector, fits, PMW answers)
and keyed stream-event batches of :data:`BATCH` events while the harness SIGKILLs, alternately,
one worker (uvicorn's supervisor replaces it) and the whole server (process group; restarted on
the same ledger and port). Afterwards: no overspend, every answered charge is a released ledger
entry, the stream's clock is a whole number of batches between the acknowledged and the sent.

Outage: PostgreSQL stopped (``pg_ctl stop -m fast``) under load, then started; and the SQLite
ledger's disk made full by ``resource.prlimit(worker, RLIMIT_FSIZE, ...)`` on the running
workers (writes past the ledger database's current size fail as on a full disk: EFBIG, or a short
write that SQLite reports as SQLITE_FULL), then lifted."""

from __future__ import annotations

import contextlib
import os
import random
import resource
import signal
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from service_stress_kit import (
    Server,
    StoppablePostgres,
    Tally,
    add_analysts,
    client,
    fresh_postgres_url,
    ledger_invariants,
    owner_client,
    row,
)
from service_stress_load import COUNT, FIT, SPARSE

BATCH = 5
Check = Callable[[str, bool], str]


class Load:
    """Client threads sending charged requests until stopped; what they saw."""

    def __init__(self, server: Server, tokens: list[str], stream: str | None, pmw: str | None):
        self.server = server
        self.tokens = tokens
        self.stream = stream
        self.pmw = pmw
        self.tally = Tally()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.acked = 0
        self.sent = 0
        self.batches = 0
        self.threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(6)
        ]
        self.seen: list[tuple[float, httpx.Response]] = []

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=180)

    def _request(self, rng: random.Random, i: int) -> tuple[str, str, str, dict[str, Any], str]:
        """(route, token, path, body, idempotency key or "")."""
        token = self.tokens[i % len(self.tokens)]
        pick = rng.random()
        if self.stream is not None and i == 0:  # one thread owns the stream's batches
            with self.lock:
                self.batches += 1
                key = f"batch-{self.batches}"
            batch: dict[str, Any] = {"values": [1] * BATCH}
            return (
                "events",
                self.server.owner_token or "",
                f"/v1/streams/{self.stream}/events",
                batch,
                key,
            )
        if pick < 0.55:
            return (
                "query",
                token,
                "/v1/datasets/people/queries",
                {"sql": COUNT, "epsilon": 0.02},
                "",
            )
        if pick < 0.7:
            body: dict[str, Any] = {"queries": SPARSE, "threshold": 100, "c": 1, "epsilon": 0.02}
            return "sparse", token, "/v1/datasets/people/sparse-vector", body, ""
        if pick < 0.8:
            return "fit", token, "/v1/datasets/people/fits", {**FIT, "delta": 1e-6}, ""
        if self.pmw is not None:
            return "pmw", token, f"/v1/pmw/{self.pmw}/queries", {"where": {"sex": "F"}}, ""
        return "query", token, "/v1/datasets/people/queries", {"sql": COUNT, "epsilon": 0.02}, ""

    def _run(self, i: int) -> None:
        rng = random.Random(i)
        while not self.stop.is_set():
            route, token, path, body, key = self._request(rng, i)
            headers = {"Authorization": f"Bearer {token}"}
            if key:
                headers["Idempotency-Key"] = key
            if route == "events":
                with self.lock:
                    self.sent += 1
            try:
                response = httpx.post(
                    self.server.url + path, json=body, headers=headers, timeout=60
                )
            except httpx.HTTPError:
                with self.lock:
                    self.tally.transport_errors += 1
                time.sleep(0.1)
                continue
            with self.lock:
                self.tally.add(route, response)
                self.seen.append((time.monotonic(), response))
                if route == "events" and response.status_code == 200:
                    self.acked += 1


def _answering(server: Server, token: str, timeout: float = 300) -> float:
    """Seconds until a charged query is answered 200."""
    began = time.monotonic()
    with client(server, token) as http:
        while time.monotonic() - began < timeout:
            with contextlib.suppress(httpx.HTTPError):
                body = {"sql": COUNT, "epsilon": 0.001}
                if http.post("/v1/datasets/people/queries", json=body).status_code == 200:
                    return time.monotonic() - began
            time.sleep(0.05)
    return float("inf")


def _setup(server: Server, epsilon: float) -> tuple[list[str], str, str]:
    tokens = [a["token"] for a in add_analysts(server, 3, epsilon)]
    with owner_client(server) as owner:
        stream = owner.post(
            "/v1/datasets/people/streams",
            json={"kind": "count", "epsilon": 0.1, "horizon": 1_000_000},
        ).json()["id"]
        pmw = owner.post(
            "/v1/datasets/people/pmw",
            json={"epsilon": 0.5, "threshold": 40, "max_updates": 100, "columns": ["sex"]},
        ).json()["id"]
    return tokens, stream, pmw


def run_crash(root: Path, ledger: str, kills: int, seed: int = 36) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    server = Server(root, ledger, workers=2)
    server.start()
    rng = random.Random(seed)
    worker_recovery: list[float] = []
    server_recovery: list[float] = []
    try:
        tokens, stream, pmw = _setup(server, 4)
        with Load(server, tokens, stream, pmw) as load:
            for k in range(kills):
                time.sleep(rng.uniform(0.5, 2.0))
                if k % 4 != 3 and len(before := server.workers()) == 2:
                    victim = rng.choice(before)
                    killed = time.monotonic()
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(victim, signal.SIGKILL)
                    while time.monotonic() - killed < 300:  # until a replacement answers
                        now = server.workers()
                        if len(now) == 2 and victim not in now:
                            break
                        time.sleep(0.05)
                    _answering(server, tokens[0])
                    worker_recovery.append(time.monotonic() - killed)
                else:
                    killed = time.monotonic()
                    server.kill()
                    server.start()
                    _answering(server, tokens[0])
                    server_recovery.append(time.monotonic() - killed)
        with owner_client(server) as owner:
            latest = owner.get(f"/v1/streams/{stream}").json()["latest"]
        clock = 0 if latest is None else int(latest["time"])
    finally:
        server.stop()
    checks = ledger_invariants(ledger, load.tally.charge_ids)
    return {
        "tally": load.tally,
        "worker_kills": len(worker_recovery),
        "server_kills": len(server_recovery),
        "worker_recovery": worker_recovery,
        "server_recovery": server_recovery,
        "checks": checks,
        "clock": clock,
        "acked": load.acked,
        "sent": load.sent,
    }


def _seconds(values: list[float]) -> str:
    if not values:
        return "–"
    return f"{statistics.median(values):.1f} / {max(values):.1f}"


def crash_table(
    root: Path, kills: int, check: Check, cluster: StoppablePostgres | None = None
) -> None:
    ledgers = {"sqlite": f"sqlite:///{root / 'sqlite' / 'ledger.sqlite3'}"}
    if cluster is not None:
        ledgers["postgresql"] = fresh_postgres_url(cluster.url)
    share = max(1, kills // len(ledgers))
    results = {name: run_crash(root / name, url, share) for name, url in ledgers.items()}
    print(f"\n## 2. Crash ({kills} SIGKILLs in all, --workers 2)\n")
    names = list(results)
    print(row("figure", *names, "invariant"))
    print(row(*["---"] * (len(names) + 2)))
    r = results
    print(row("worker SIGKILLs", *[x["worker_kills"] for x in r.values()], ""))
    print(row("server SIGKILLs (group)", *[x["server_kills"] for x in r.values()], ""))
    print(row("requests answered", *[sum(x["tally"].statuses.values()) for x in r.values()], ""))
    for code in sorted({c for x in r.values() for c in x["tally"].statuses}):
        print(row(f"status {code}", *[x["tally"].statuses[code] for x in r.values()], ""))
    print(
        row(
            "connection errors (killed mid-request)",
            *[x["tally"].transport_errors for x in r.values()],
            "",
        )
    )
    five = [x["tally"].server_errors() for x in r.values()]
    print(row("5xx (other than 503)", *five, f"= 0: {check('crash 5xx', not any(five))}"))
    over = [len(x["checks"]["overspent"]) for x in r.values()]
    print(row("overspent grants/caps", *over, f"= 0: {check('crash overspend', not any(over))}"))
    drift = [len(x["checks"]["drift"]) for x in r.values()]
    print(
        row("running totals ≠ exact sums", *drift, f"= 0: {check('crash drift', not any(drift))}")
    )
    lost = [len(x["checks"]["lost"]) + len(x["checks"]["unreleased"]) for x in r.values()]
    print(row("answered charges lost", *lost, f"= 0: {check('crash lost', not any(lost))}"))
    print(
        row(
            "charged, never answered (reserved)", *[x["checks"]["reserved"] for x in r.values()], ""
        )
    )
    clocks = [f"{x['clock']} ({x['acked']}–{x['sent']} batches of {BATCH})" for x in r.values()]
    ok = all(
        x["clock"] % BATCH == 0 and x["acked"] * BATCH <= x["clock"] <= x["sent"] * BATCH
        for x in r.values()
    )
    print(
        row("stream events (acked–sent)", *clocks, f"whole batches: {check('crash batches', ok)}")
    )
    print(
        row(
            "recovery s, worker (median / max)",
            *[_seconds(x["worker_recovery"]) for x in r.values()],
            "",
        )
    )
    print(
        row(
            "recovery s, server restart (median / max)",
            *[_seconds(x["server_recovery"]) for x in r.values()],
            "",
        )
    )
    for name, x in r.items():
        for line in x["checks"]["overspent"] + x["checks"]["drift"] + x["tally"].bad_errors[:5]:
            print(f"- {name}: {line}")


def _unavailable(response: httpx.Response) -> bool:
    ok = response.status_code == 503 and int(response.headers.get("retry-after", "0")) > 0
    with contextlib.suppress(ValueError):
        return ok and response.json().get("type", "").endswith(":ledger-unavailable")
    return False


def _outage(
    server: Server, tokens: list[str], stop: Callable[[], None], start: Callable[[], None]
) -> dict[str, Any]:
    """Load, ``stop()`` the ledger for 6 s, ``start()`` it; what the clients saw meanwhile."""
    with Load(server, tokens, None, None) as load:
        time.sleep(3)
        down = time.monotonic()
        stop()
        time.sleep(6)
        up = time.monotonic()
        start()
        recovered = _answering(server, tokens[0])
        time.sleep(1)
    during = [resp for at, resp in load.seen if down + 1 < at < up]
    log = server.log_text()
    return {
        "during": Counter(resp.status_code for resp in during),
        "honest": sum(1 for resp in during if _unavailable(resp)),
        "bad": sum(1 for resp in during if resp.status_code >= 500 and not _unavailable(resp)),
        "recovery": recovered,
        "lines": [
            x for x in log.splitlines() if "ledger unavailable" in x or "available again" in x
        ],
        "outage_lines": log.count("ledger unavailable"),
        "again_lines": log.count("ledger available again"),
        "tracebacks": log.count("Traceback"),
        "tally": load.tally,
    }


def run_outages(root: Path, cluster: StoppablePostgres | None) -> dict[str, dict[str, Any]]:
    results = {}
    if cluster is not None:
        (root / "pg").mkdir(parents=True)
        server = Server(root / "pg", fresh_postgres_url(cluster.url), workers=2)
        server.start()
        try:
            tokens = [a["token"] for a in add_analysts(server, 3, 500)]
            results["PostgreSQL stopped"] = _outage(server, tokens, cluster.stop, cluster.start)
        finally:
            server.stop()
        results["PostgreSQL stopped"]["checks"] = ledger_invariants(
            server.ledger, results["PostgreSQL stopped"]["tally"].charge_ids
        )
    (root / "disk").mkdir(parents=True)
    db = root / "disk" / "ledger.sqlite3"
    server = Server(root / "disk", f"sqlite:///{db}", workers=2)
    server.start()

    def full() -> None:
        # One limit for every file a worker writes: the database's size (its WAL may be larger
        # after a busy spell, and a limit at the WAL's size would leave the database room).
        limit = db.stat().st_size
        for pid in server.workers():
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    def space() -> None:
        unlimited = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        for pid in server.workers():
            resource.prlimit(pid, resource.RLIMIT_FSIZE, unlimited)

    try:
        tokens = [a["token"] for a in add_analysts(server, 3, 500)]
        results["SQLite disk full (RLIMIT_FSIZE)"] = _outage(server, tokens, full, space)
    finally:
        server.stop()
    name = "SQLite disk full (RLIMIT_FSIZE)"
    results[name]["checks"] = ledger_invariants(server.ledger, results[name]["tally"].charge_ids)
    return results


def outage_table(root: Path, cluster: StoppablePostgres | None, check: Check) -> None:
    r = run_outages(root, cluster)
    print("\n## 3. Ledger outage (--workers 2)\n")
    names = list(r)
    print(row("figure", *names, "invariant"))
    print(row(*["---"] * (len(names) + 2)))
    print(
        row(
            "statuses during the outage",
            *[dict(sorted(x["during"].items())) for x in r.values()],
            "",
        )
    )
    print(row("… 503 + Retry-After + ledger-unavailable", *[x["honest"] for x in r.values()], ""))
    bad = [x["bad"] for x in r.values()]
    print(row("… other 5xx", *bad, f"= 0: {check('outage 5xx', not any(bad))}"))
    lines = [f"{x['outage_lines']} / {x['again_lines']}" for x in r.values()]
    # One line when an outage starts and one when it ends, per worker, never one per request:
    # paired, and far fewer than the refused requests (a full SQLite disk may flap: a row that
    # fits in a page's free space is written, which ends the outage, and the next that needs a
    # new page starts another).
    ok = all(
        0 < x["outage_lines"] == x["again_lines"] <= max(2, x["honest"] // 10) for x in r.values()
    )
    print(
        row(
            "log lines 'unavailable' / 'available again'",
            *lines,
            f"paired, not per request: {check('outage log', ok)}",
        )
    )
    tb = [x["tracebacks"] for x in r.values()]
    print(row("tracebacks in the log", *tb, f"= 0: {check('outage tracebacks', not any(tb))}"))
    rec = [f"{x['recovery']:.1f}" for x in r.values()]
    ok = all(x["recovery"] < 120 for x in r.values())
    print(
        row(
            "seconds to the first answer after restore",
            *rec,
            f"recovers: {check('outage recovery', ok)}",
        )
    )
    over = [len(x["checks"]["overspent"]) + len(x["checks"]["drift"]) for x in r.values()]
    print(row("overspend / drift", *over, f"= 0: {check('outage overspend', not any(over))}"))
    lost = [len(x["checks"]["lost"]) + len(x["checks"]["unreleased"]) for x in r.values()]
    print(row("answered charges lost", *lost, f"= 0: {check('outage lost', not any(lost))}"))
    for name, x in r.items():
        for line in x["lines"]:
            print(f"- {name}: {line[:160]}")
