"""Part 1 of the stress harness: concurrent mixed requests against ``dpcurator serve --workers 2``.

Several analysts (each granted (ε, 10^-3) under basic composition, small enough that the load
runs some budgets dry) and the owner send ``n`` requests through a thread pool: queries,
estimates, fits, sparse-vector batches, stream events, PMW answers, a synthetic release, budget
reads, and requests with two extra tokens of one analyst, one revoked through the API
(``DELETE /v1/tokens/{id}``) and one through ``dpcurator admin revoke-token`` half-way through.
Some requests come in groups of identical copies sharing an ``Idempotency-Key``. Afterwards the
ledger is read directly (:func:`service_stress_kit.ledger_invariants`)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from service_stress_kit import (
    REPO,
    Server,
    Tally,
    add_analysts,
    client,
    ledger_invariants,
    owner_client,
)

COUNT = "SELECT COUNT(*) AS n FROM people"
QUERIES = [
    COUNT,
    "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex",
    "SELECT region, AVG(income) AS m FROM people GROUP BY region",
    "SELECT SUM(age) AS s FROM people WHERE sex = 'F'",
]
SPARSE = ["SELECT COUNT(*) FROM people", "SELECT COUNT(*) FROM people WHERE age > 200"]
FIT = {"model": "linear", "response": "income", "predictors": ["age"], "epsilon": 0.05}
BATCH = 7  # events per stream batch


@dataclass
class Request:
    route: str
    who: str  # "owner", "a0".., "api-revoked", "cli-revoked"
    method: str
    path: str
    body: dict[str, Any] | None = None
    key: str | None = None


@dataclass
class Outcome:
    tally: Tally = field(default_factory=Tally)
    revoked_answered: int = 0
    revoked_sent: int = 0
    key_ids: dict[str, set[str]] = field(default_factory=dict)
    after_revocation: Counter[tuple[str, int]] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _mix(n: int, analysts: int, stream: str, pmw: str, seed: int) -> list[Request]:
    """``n`` requests in a seeded random order (duplicate groups included in the count)."""
    rng = random.Random(seed)
    out: list[Request] = []

    def analyst() -> str:
        return f"a{rng.randrange(analysts)}"

    makers: list[tuple[float, Callable[[], Request]]] = [
        (
            28,
            lambda: Request(
                "query",
                analyst(),
                "POST",
                "/v1/datasets/people/queries",
                {"sql": rng.choice(QUERIES), "epsilon": 0.05},
            ),
        ),
        (
            8,
            lambda: Request(
                "estimate",
                analyst(),
                "POST",
                "/v1/datasets/people/queries:estimate",
                {"sql": COUNT, "epsilon": 0.05},
            ),
        ),
        (
            6,
            lambda: Request(
                "fit", analyst(), "POST", "/v1/datasets/people/fits", {**FIT, "delta": 1e-6}
            ),
        ),
        (
            2,
            lambda: Request(
                "fit-estimate",
                analyst(),
                "POST",
                "/v1/datasets/people/fits:estimate",
                {**FIT, "delta": 1e-6},
            ),
        ),
        (
            7,
            lambda: Request(
                "sparse",
                analyst(),
                "POST",
                "/v1/datasets/people/sparse-vector",
                {"queries": SPARSE, "threshold": 100, "c": 1, "epsilon": 0.05},
            ),
        ),
        (
            9,
            lambda: Request(
                "events", "owner", "POST", f"/v1/streams/{stream}/events", {"values": [1] * BATCH}
            ),
        ),
        (
            10,
            lambda: Request(
                "pmw",
                analyst(),
                "POST",
                f"/v1/pmw/{pmw}/queries",
                {"where": {"sex": rng.choice(["F", "M"])}},
            ),
        ),
        (8, lambda: Request("budget", analyst(), "GET", "/v1/datasets/people/budget")),
        (
            10,
            lambda: Request(
                "revocable",
                rng.choice(["api-revoked", "cli-revoked"]),
                "POST",
                "/v1/datasets/people/queries",
                {"sql": COUNT, "epsilon": 0.01},
            ),
        ),
    ]
    weights = [w for w, _ in makers]
    # Idempotency groups: four copies of one request with one key, per kind.
    groups: list[tuple[str, str, str, dict[str, Any]]] = [
        ("query", "a1", "/v1/datasets/people/queries", {"sql": COUNT, "epsilon": 0.05}),
        ("fit", "a2", "/v1/datasets/people/fits", {**FIT, "delta": 1e-6}),
        (
            "sparse",
            "a1",
            "/v1/datasets/people/sparse-vector",
            {"queries": SPARSE, "threshold": 100, "c": 1, "epsilon": 0.05},
        ),
        ("events", "owner", f"/v1/streams/{stream}/events", {"values": [1] * BATCH}),
        (
            "release",
            "owner",
            "/v1/datasets/people/releases",
            {"name": "dup", "queries": [{"sql": COUNT, "epsilon": 0.01}]},
        ),
        (
            "synthetic",
            "owner",
            "/v1/datasets/people/synthetic",
            {"kind": "mwem", "epsilon": 0.1, "columns": ["sex", "region"], "rows": 50},
        ),
        (
            "stream-create",
            "owner",
            "/v1/datasets/people/streams",
            {"kind": "count", "epsilon": 0.1, "horizon": 1000},
        ),
    ]
    rounds = max(1, n // 100)
    for r in range(rounds):
        for route, who, path, body in groups:
            key = f"dup-{route}-{r}"
            for _ in range(4):
                out.append(Request(f"dup-{route}", who, "POST", path, body, key))
    while len(out) < n:
        out.append(rng.choices(makers, weights)[0][1]())
    head, tail = out[: rounds * len(groups) * 4], out[rounds * len(groups) * 4 :]
    rng.shuffle(tail)
    # Spread the duplicate groups over the run, each group's copies adjacent (concurrent).
    step = max(1, len(tail) // (len(head) // 4 + 1))
    mixed: list[Request] = []
    for i in range(0, len(head), 4):
        mixed += tail[:step] + head[i : i + 4]
        tail = tail[step:]
    return mixed + tail


def _revoke_cli(ledger: str, token_id: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    command = [sys.executable, "-m", "dpcurator.cli", "admin", "--ledger", ledger]
    subprocess.run([*command, "revoke-token", token_id], check=True, env=env, capture_output=True)


def _setup(server: Server, analysts: int) -> tuple[dict[str, str], dict[str, str], str, str]:
    """Analysts a0.. (ε 2 each), two extra tokens of a0 (to revoke), a stream, a PMW mode."""
    made = add_analysts(server, analysts, 2)
    tokens = {f"a{i}": a["token"] for i, a in enumerate(made)}
    tokens["owner"] = server.owner_token or ""
    with owner_client(server) as owner:
        extra = {}
        for name in ("api-revoked", "cli-revoked"):
            issued = owner.post(f"/v1/analysts/{made[0]['id']}/tokens", json={})
            issued.raise_for_status()
            tokens[name] = issued.json()["token"]
            extra[name] = issued.json()["token_id"]
        stream = owner.post(
            "/v1/datasets/people/streams",
            json={"kind": "count", "epsilon": 0.1, "horizon": 100_000},
        ).json()["id"]
        pmw = owner.post(
            "/v1/datasets/people/pmw",
            json={"epsilon": 0.5, "threshold": 40, "max_updates": 200, "columns": ["sex"]},
        ).json()["id"]
    return tokens, extra, stream, pmw


def _after_revocation(server: Server, outcome: Outcome, tokens: dict[str, str], who: str) -> None:
    """Charged requests with a revoked token, on fresh connections (spread over the workers)."""
    for _ in range(8):
        with client(server, tokens[who]) as fresh:
            response = fresh.post(
                "/v1/datasets/people/queries", json={"sql": COUNT, "epsilon": 0.01}
            )
        outcome.tally.add("revocable", response)
        outcome.revoked_sent += 1
        outcome.revoked_answered += response.status_code not in (401, 429)
        outcome.after_revocation[(who, response.status_code)] += 1


def run_load(server: Server, n: int, *, analysts: int = 4, seed: int = 24) -> dict[str, Any]:
    """Start the mix on a started ``server``; the figures of the run."""
    tokens, extra, stream, pmw = _setup(server, analysts)
    requests = _mix(n, analysts, stream, pmw, seed)
    clients = {who: client(server, token) for who, token in tokens.items()}
    outcome = Outcome()
    revoked_at: dict[str, float] = {}
    done = Counter[str]()

    def send(request: Request) -> None:
        headers = {} if request.key is None else {"Idempotency-Key": request.key}
        began = time.monotonic()
        try:
            response = clients[request.who].request(
                request.method, request.path, json=request.body, headers=headers
            )
        except httpx.HTTPError:
            with outcome.lock:
                outcome.tally.transport_errors += 1
            return
        with outcome.lock:
            outcome.tally.add(request.route, response)
            done["all"] += 1
            if request.who in revoked_at and began > revoked_at[request.who]:
                outcome.revoked_sent += 1
                outcome.revoked_answered += response.status_code not in (401, 429)
                outcome.after_revocation[(request.who, response.status_code)] += 1
            if request.key is not None and response.status_code < 300:
                ident = str(response.json().get("charge_id") or response.json().get("id"))
                if request.route == "dup-events":
                    ident = "batch"  # the stream's clock tells whether it was ingested once
                outcome.key_ids.setdefault(request.key, set()).add(ident)

    def revoker() -> None:
        while done["all"] < len(requests) // 2:
            time.sleep(0.05)
        with owner_client(server) as owner:
            deleted = owner.delete(f"/v1/tokens/{extra['api-revoked']}")
        if deleted.status_code == 204:
            revoked_at["api-revoked"] = time.monotonic()
        _revoke_cli(server.ledger, extra["cli-revoked"])
        revoked_at["cli-revoked"] = time.monotonic()

    began = time.monotonic()
    side = threading.Thread(target=revoker)
    side.start()
    with ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(send, requests))
    side.join()
    # After both revocations: each revoked token again.
    for who in sorted(revoked_at):
        _after_revocation(server, outcome, tokens, who)
    seconds = time.monotonic() - began
    for c in clients.values():
        c.close()
    return _summary(server, outcome, len(requests), seconds, stream)


def _summary(
    server: Server, outcome: Outcome, requests: int, seconds: float, stream: str
) -> dict[str, Any]:
    """The figures of a run: what the clients saw and what the ledger holds."""
    with owner_client(server) as owner:
        clock = owner.get(f"/v1/streams/{stream}").json()["latest"]["time"]
    tally = outcome.tally
    sent_batches = tally.by_route[("events", 200)] + sum(
        1 for key in outcome.key_ids if key.startswith("dup-events")
    )
    checks = ledger_invariants(server.ledger, tally.charge_ids)
    double = sum(1 for n_ in checks["charges_by_key"].values() if n_ > 1)
    double += sum(1 for ids in outcome.key_ids.values() if len(ids) > 1)
    return {
        "requests": requests,
        "seconds": seconds,
        "tally": tally,
        "overspent": checks["overspent"],
        "drift": checks["drift"],
        "lost": checks["lost"] + checks["unreleased"],
        "answered_charges": len(tally.charge_ids),
        "ledger_charges": checks["charges"],
        "revoked_sent": outcome.revoked_sent,
        "revoked_answered": outcome.revoked_answered,
        "after_revocation": dict(outcome.after_revocation),
        "duplicate_keys": len(outcome.key_ids),
        "double_charged": double,
        "events_expected": BATCH * sent_batches,
        "events_ingested": clock,
    }


def new_server(root: Path, ledger: str) -> Server:
    server = Server(root, ledger, workers=2)
    server.start()
    return server
