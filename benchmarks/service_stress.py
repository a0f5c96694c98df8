"""The operator's stress harness (issue 24): real ``dpcurator serve`` processes, each part a
table with pass/fail per invariant.

1. Concurrency: ``--workers 2`` on a SQLite and a PostgreSQL ledger, ``--requests`` concurrent
   mixed requests from several analysts and the owner (``service_stress_load``): statuses, no
   5xx, no overspend (exact sums of the ledger's charges against every grant and the cap), no
   lost charge (every 2xx charge id is a released ledger entry), no answer to a revoked token
   (API and ``dpcurator admin`` revocation), no double charge or ingestion under one
   ``Idempotency-Key``.
2. Crash: ``--kills`` SIGKILLs during load, alternately of one worker and of the whole server
   (restarted); the ledger invariants afterwards, no half-ingested stream batch, time to
   recovery (``service_stress_faults``).
3. Ledger outage: PostgreSQL stopped mid-load (503 + ``Retry-After`` + ``ledger-unavailable``,
   one log line per outage, recovery), and a full disk under the SQLite ledger (RLIMIT_FSIZE set
   on the running workers with ``prlimit``, no root needed).
4. Fuzz: schemathesis over every route with the owner's and an analyst's token (``--fuzz``
   cases in all), and the issue's hostile inputs (``service_stress_fuzz``).

    python benchmarks/service_stress.py [--quick] [--parts load,crash,outage,fuzz]
        [--requests 334] [--kills 36] [--fuzz 3000] [--ledgers sqlite,postgresql]

``--quick`` uses 120 requests, 4 kills, 400 fuzz cases and SQLite only for the concurrency and
crash parts (524 s on a 2-core machine at load average 12, where one server start took 30-70 s;
the full defaults took 1,917 s there). Exit status 1 if any invariant failed.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from service_stress_kit import StoppablePostgres, fresh_postgres_url, row, verdict
from service_stress_load import new_server, run_load

FAILED: list[str] = []


def check(name: str, ok: bool) -> str:
    if not ok:
        FAILED.append(name)
    return verdict(ok)


def load_table(results: dict[str, dict[str, Any]]) -> None:
    print("\n## 1. Concurrency (--workers 2)\n")
    names = list(results)
    print(row("figure", *names, "invariant"))
    print(row(*["---"] * (len(names) + 2)))
    codes = sorted({c for r in results.values() for c in r["tally"].statuses})
    print(row("requests", *[r["requests"] for r in results.values()], ""))
    print(row("seconds", *[f"{r['seconds']:.1f}" for r in results.values()], ""))
    for code in codes:
        print(row(f"status {code}", *[r["tally"].statuses[code] for r in results.values()], ""))
    for label, key, rule in [
        ("transport errors", None, "= 0"),
        ("5xx (other than 503)", None, "= 0"),
        ("errors not problem+json", None, "= 0"),
        ("overspent grants/caps", "overspent", "= 0"),
        ("running totals ≠ exact sums", "drift", "= 0"),
        ("answered charges lost", "lost", "= 0"),
    ]:
        values = []
        for r in results.values():
            t = r["tally"]
            if label.startswith("transport"):
                values.append(t.transport_errors)
            elif label.startswith("5xx"):
                values.append(t.server_errors())
            elif label.startswith("errors not"):
                values.append(len(t.bad_errors))
            else:
                values.append(len(r[str(key)]))
        print(row(label, *values, f"{rule}: {check(label, all(v == 0 for v in values))}"))
    print(row("answered charge ids", *[r["answered_charges"] for r in results.values()], ""))
    print(row("ledger entries", *[r["ledger_charges"] for r in results.values()], ""))
    sent = [r["revoked_sent"] for r in results.values()]
    print(row("requests after revocation", *sent, ""))
    answered = [r["revoked_answered"] for r in results.values()]
    ok = all(a == 0 for a in answered) and all(s > 0 for s in sent)
    print(row("… answered (not 401/429)", *answered, f"= 0: {check('revocation', ok)}"))
    print(row("idempotency keys (×4 copies)", *[r["duplicate_keys"] for r in results.values()], ""))
    double = [r["double_charged"] for r in results.values()]
    print(
        row("keys charged/answered twice", *double, f"= 0: {check('idempotency', not any(double))}")
    )
    events = [f"{r['events_ingested']}/{r['events_expected']}" for r in results.values()]
    ok = all(r["events_ingested"] == r["events_expected"] for r in results.values())
    print(row("stream events ingested/expected", *events, f"equal: {check('events', ok)}"))
    for name, r in results.items():
        print(f"- {name}: after revocation (token, status): {r['after_revocation']}")
        for line in r["overspent"] + r["drift"] + r["tally"].bad_errors[:5]:
            print(f"- {name}: {line}")
        if r["lost"]:
            print(f"- {name}: lost charge ids {r['lost'][:20]}")
        routes = sorted(f"{route} {code}" for (route, code), _ in r["tally"].by_route.items())
        five = [x for x in routes if x.split()[-1].startswith("5")]
        if five:
            print(f"- {name}: 5xx on {five}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a ~3-minute version")
    parser.add_argument("--parts", default="load,crash,outage,fuzz")
    parser.add_argument("--requests", type=int, default=334)
    parser.add_argument("--kills", type=int, default=36)
    parser.add_argument("--fuzz", type=int, default=3000, help="schemathesis cases in all")
    parser.add_argument("--ledgers", default="sqlite,postgresql")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.kills, args.fuzz = 120, 4, 400
        args.ledgers = "sqlite"
    parts = args.parts.split(",")
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dpc-stress-")))
        cluster = None
        if StoppablePostgres.available() and ("postgresql" in args.ledgers or "outage" in parts):
            cluster = StoppablePostgres(max_connections=300)
            stack.callback(cluster.close)
            cluster.start()
        if "load" in parts:
            results = {}
            for name in args.ledgers.split(","):
                if name == "postgresql" and cluster is None:
                    print("PostgreSQL 15 is not installed: its ledger is skipped")
                    continue
                root = tmp / f"load-{name}"
                root.mkdir()
                url = (
                    fresh_postgres_url(cluster.url)
                    if name == "postgresql" and cluster is not None
                    else f"sqlite:///{root / 'ledger.sqlite3'}"
                )
                server = new_server(root, url)
                try:
                    results[name] = run_load(server, args.requests)
                finally:
                    server.stop()
            load_table(results)
        if "crash" in parts or "outage" in parts:
            from service_stress_faults import crash_table, outage_table  # noqa: PLC0415

            if "crash" in parts:
                pg = cluster if "postgresql" in args.ledgers else None
                crash_table(tmp / "crash", args.kills, check, pg)
            if "outage" in parts:
                outage_table(tmp / "outage", cluster, check)
        if "fuzz" in parts:
            from service_stress_fuzz import fuzz_table  # noqa: PLC0415

            fuzz_table(tmp / "fuzz", args.fuzz, check)
    print(f"\n{time.monotonic() - began:.0f} s in all; failed: {', '.join(FAILED) or 'none'}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
