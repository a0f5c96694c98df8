"""Part 4 of the stress harness: schemathesis against a live ``dpcurator serve --workers 2`` over
every operation of ``/v1/openapi.json``, with the owner's and an analyst's token (cases split
evenly over operations and tokens, derandomized), then the issue's hand-made hostile inputs.

A case fails a check when the answer is a 5xx, has a status the document does not list for the
route, a media type it does not list, or a body outside the listed schema; every error must be
``application/problem+json``. Failures are counted, not raised, so one run gives all figures."""

from __future__ import annotations

import contextlib
import json
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from service_stress_kit import PROBLEM, Server, add_analysts, row

Check = Callable[[str, bool], str]
COUNT = "SELECT COUNT(*) AS n FROM people"


def run_schemathesis(server: Server, tokens: dict[str, str], cases: int) -> dict[str, Any]:
    import schemathesis  # noqa: PLC0415
    from hypothesis import HealthCheck, given, settings  # noqa: PLC0415
    from schemathesis.checks import (  # noqa: PLC0415
        content_type_conformance,
        not_a_server_error,
        response_schema_conformance,
        status_code_conformance,
    )

    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]
    schema = schemathesis.openapi.from_url(f"{server.url}/v1/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    each = max(1, cases // (len(operations) * len(tokens)))
    sent = Counter[str]()
    statuses = Counter[int]()
    failures = Counter[tuple[str, str]]()
    not_problem = Counter[str]()
    examples: dict[tuple[str, str], str] = {}

    def run(operation: Any, label: str, who: str, headers: dict[str, str]) -> None:
        @given(case=operation.as_strategy())
        @settings(
            max_examples=each,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def fuzz(case: Any) -> None:
            try:
                response = case.call(base_url=server.url, headers=headers, timeout=60)
            except Exception as error:
                failures[("transport", label)] += 1
                examples.setdefault(("transport", label), repr(error)[:200])
                return
            sent[who] += 1
            statuses[response.status_code] += 1
            for check in checks:
                try:
                    case.validate_response(response, checks=[check])
                except Exception as error:
                    key = (check.__name__, label)
                    failures[key] += 1
                    examples.setdefault(key, str(error).splitlines()[0][:200])
            if response.status_code >= 400:
                media = response.headers.get("content-type") or ""
                if isinstance(media, list):  # schemathesis keeps every value of a header
                    media = media[0] if media else ""
                if not str(media).startswith(PROBLEM):
                    not_problem[label] += 1

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fuzz()

    for who, token in tokens.items():
        for operation in operations:
            label = f"{operation.method.upper()} {operation.path}"
            run(operation, label, who, {"Authorization": f"Bearer {token}"})
    return {
        "operations": len(operations),
        "per_operation": each,
        "sent": sent,
        "statuses": statuses,
        "failures": failures,
        "not_problem": not_problem,
        "examples": examples,
    }


def hostile_cases(alice: str, analyst: str) -> list[tuple[str, str, str, str, Any]]:
    """(label, who, method, path, body): a dict is sent as JSON, bytes/str as they are."""
    q = "/v1/datasets/people/queries"
    grant = f"/v1/analysts/{alice}/grants/people"
    big = json.dumps({"sql": COUNT + " " * (20 * 2**20), "epsilon": 0.1})
    nested = "[" * 100_000 + "]" * 100_000
    return [
        ("ρ = 1e-320 on /queries", analyst, "POST", q, {"sql": COUNT, "rho": 1e-320}),
        (
            "ρ = 1e-320 on /queries:estimate",
            analyst,
            "POST",
            q + ":estimate",
            {"sql": COUNT, "rho": 1e-320},
        ),
        ("ε = 5e-324 (subnormal)", analyst, "POST", q, {"sql": COUNT, "epsilon": 5e-324}),
        ("grant ε = 1e-300", "owner", "PUT", grant, {"epsilon": 1e-300}),
        ("grant δ = 1e-300", "owner", "PUT", grant, {"epsilon": 1, "delta": 1e-300}),
        (
            "sum stream bounds ±1e308",
            "owner",
            "POST",
            "/v1/datasets/people/streams",
            {"kind": "sum", "epsilon": 0.1, "horizon": 100, "lower": -1e308, "upper": 1e308},
        ),
        (
            "NUL in SQL text",
            analyst,
            "POST",
            q,
            {"sql": "SELECT COUNT(*) FROM people\u0000", "epsilon": 0.1},
        ),
        (
            "NUL in a dataset path id",
            analyst,
            "POST",
            "/v1/datasets/peo%00ple/queries",
            {"sql": COUNT, "epsilon": 0.1},
        ),
        ("NUL in a stream path id", "owner", "GET", "/v1/streams/str_%00x", None),
        ("NUL in a token path id", "owner", "DELETE", "/v1/tokens/ab%00cd", None),
        ("NUL in an analyst name", "owner", "POST", "/v1/analysts", {"name": "a\u0000b"}),
        ('"epsilon": true', analyst, "POST", q, {"sql": COUNT, "epsilon": True}),
        ('"epsilon": "0.1"', analyst, "POST", q, {"sql": COUNT, "epsilon": "0.1"}),
        ('"epsilon": NaN', analyst, "POST", q, f'{{"sql": "{COUNT}", "epsilon": NaN}}'),
        ('"epsilon": 1e999', analyst, "POST", q, f'{{"sql": "{COUNT}", "epsilon": 1e999}}'),
        ('"epsilon": -0.0', analyst, "POST", q, {"sql": COUNT, "epsilon": -0.0}),
        (
            "bounds ±1e308 in sparse threshold",
            analyst,
            "POST",
            "/v1/datasets/people/sparse-vector",
            {"queries": [COUNT], "threshold": 1e308, "epsilon": 0.1},
        ),
        (
            "PMW threshold 1e308",
            "owner",
            "POST",
            "/v1/datasets/people/pmw",
            {"epsilon": 0.1, "threshold": 1e308, "max_updates": 1},
        ),
        ("body of 20 MiB", analyst, "POST", q, big),
        ("JSON nested 100,000 deep", analyst, "POST", q, nested),
        ("malformed JSON", analyst, "POST", q, '{"sql": '),
        ("not UTF-8", analyst, "POST", q, b'{"sql": "\xff\xfe", "epsilon": 0.1}'),
        (
            "sparse vector, 1,000 queries",
            analyst,
            "POST",
            "/v1/datasets/people/sparse-vector",
            {
                "queries": [f"SELECT COUNT(*) FROM people WHERE age > {i}" for i in range(1000)],
                "threshold": 5,
                "epsilon": 0.1,
            },
        ),
        (
            "fit, sample_and_aggregate blocks 100,000",
            analyst,
            "POST",
            "/v1/datasets/people/fits",
            {
                "model": "linear",
                "response": "income",
                "predictors": ["age"],
                "epsilon": 0.1,
                "delta": 1e-6,
                "method": "sample_and_aggregate",
                "blocks": 100_000,
            },
        ),
        (
            "incidence stream, universe 10^8",
            "owner",
            "POST",
            "/v1/datasets/people/streams",
            {"kind": "incidence", "epsilon": 0.1, "universe": 10**8, "modulus": 4},
        ),
        (
            "events batch of 10^6",
            "owner",
            "POST",
            "/v1/streams/str_nope/events",
            {"values": [1] * 10**6},
        ),
        ("SQL of 1 MiB", analyst, "POST", q, {"sql": COUNT + " " * 2**20, "epsilon": 0.1}),
        (
            "Idempotency-Key of 10,000 chars",
            analyst,
            "POST",
            q,
            {"sql": COUNT, "epsilon": 0.1, "_key": "k" * 10_000},
        ),
    ]


def run_hostile(
    server: Server, tokens: dict[str, str], alice: str
) -> list[tuple[str, int, str, str]]:
    out = []
    for label, who, method, path, body in hostile_cases(alice, tokens["analyst"]):
        headers = {"Authorization": f"Bearer {tokens.get(who, who)}"}
        kwargs: dict[str, Any] = {}
        if isinstance(body, dict) and "_key" in body:
            headers["Idempotency-Key"] = body.pop("_key")
        if isinstance(body, dict):
            kwargs["json"] = body
        elif body is not None:
            kwargs["content"] = body.encode() if isinstance(body, str) else body
            headers["Content-Type"] = "application/json"
        began = time.monotonic()
        try:
            response = httpx.request(
                method, server.url + path, headers=headers, timeout=120, **kwargs
            )
        except httpx.HTTPError as error:
            out.append((label, 0, type(error).__name__, f"{time.monotonic() - began:.1f}"))
            continue
        kind = response.headers.get("content-type", "").split(";")[0]
        slug = ""
        with contextlib.suppress(ValueError, AttributeError):
            slug = response.json().get("type", "").rsplit(":", 1)[-1]
        out.append(
            (
                label,
                response.status_code,
                f"{kind} {slug}".strip(),
                f"{time.monotonic() - began:.1f}",
            )
        )
    return out


def fuzz_table(root: Path, cases: int, check: Check) -> None:
    root.mkdir(parents=True, exist_ok=True)
    server = Server(root, f"sqlite:///{root / 'ledger.sqlite3'}", workers=2, cap=10**6)
    server.start()
    try:
        made = add_analysts(server, 1, 10**5)
        tokens = {"owner": server.owner_token or "", "analyst": made[0]["token"]}
        hostile = run_hostile(server, tokens, made[0]["id"])
        result = run_schemathesis(server, tokens, cases)
        log = server.log_text()
    finally:
        server.stop()
    print(f"\n## 4. Fuzz (schemathesis {cases} cases asked, --workers 2)\n")
    print(row("figure", "value", "invariant"))
    print(row("---", "---", "---"))
    print(
        row(
            "operations × tokens",
            f"{result['operations']} × 2, ≤ {result['per_operation']} cases each",
            "",
        )
    )
    for who, n in result["sent"].items():
        print(row(f"requests with the {who}'s token", n, ""))
    print(row("statuses", dict(sorted(result["statuses"].items())), ""))
    failures: Counter[str] = Counter()
    for (name, _), n in result["failures"].items():
        failures[name] += n
    five = failures["not_a_server_error"]
    print(row("5xx", five, f"= 0: {check('fuzz 5xx', five == 0)}"))
    for name in (
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "transport",
    ):
        print(
            row(
                f"failed {name}",
                failures[name],
                f"= 0: {check('fuzz ' + name, failures[name] == 0)}",
            )
        )
    bad = sum(result["not_problem"].values())
    print(row("errors not problem+json", bad, f"= 0: {check('fuzz problem+json', bad == 0)}"))
    print(row("tracebacks in the server log", log.count("Traceback"), ""))
    for (name, label), n in sorted(result["failures"].items()):
        print(f"- {name} ×{n} on {label}: {result['examples'][(name, label)]}")
    print("\n### Hostile inputs\n")
    print(row("input", "status", "answer", "seconds", "invariant"))
    print(row("---", "---", "---", "---", "---"))
    for label, status, answer, seconds in hostile:
        ok = 400 <= status < 500 and answer.startswith(PROBLEM)
        print(row(label, status, answer, seconds, f"4xx problem: {check('hostile ' + label, ok)}"))
