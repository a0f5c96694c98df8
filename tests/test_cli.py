"""The CLI against a real `dpcurator serve` subprocess, and crash safety: SIGKILL the server at
random points under load; every released answer is charged, nothing twice; restart resumes."""

from __future__ import annotations

import argparse
import json
import random
import socket
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path

import httpx
import pytest

from dpcurator.cli.format import release_text
from dpcurator.cli.main import _parser, main
from dpcurator.core.measures import ApproxDP
from dpcurator.service.ledger import Ledger
from dpcurator.service.server import build_service
from tests.service_fixtures import PEOPLE_METADATA, LiveServer, write_people


@pytest.fixture
def people(tmp_path: Path) -> tuple[Path, Path]:
    """A CSV and its metadata file."""
    csv = write_people(tmp_path / "people.csv")
    meta = tmp_path / "people.json"
    meta.write_text(json.dumps(PEOPLE_METADATA), encoding="utf-8")
    return csv, meta


def _serve_args(people: tuple[Path, Path], ledger: str) -> list[str]:
    csv, meta = people
    return [
        "--data",
        str(csv),
        "--metadata",
        str(meta),
        "--ledger",
        ledger,
        "--cap-epsilon",
        "1000",
    ]


def _analyst(url: str, owner_token: str, epsilon: float) -> tuple[str, str]:
    owner = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {owner_token}"})
    with owner:
        issued = owner.post("/v1/analysts", json={"name": f"a{time.monotonic_ns()}"}).json()
        owner.put(
            f"/v1/analysts/{issued['principal']['id']}/grants/people", json={"epsilon": epsilon}
        ).raise_for_status()
    return issued["principal"]["id"], issued["token"]


def test_serve_query_and_budget_commands(
    people: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = LiveServer(_serve_args(people, f"sqlite:///{tmp_path / 'l.sqlite3'}"))
    server.start(wait_lines=2, serving_after_lines=True)  # the URL is printed once serving
    try:
        owner_line, url_line = server.first_lines
        assert owner_line.startswith("owner token: dpc_")
        assert url_line == f"url: {server.url}/console/"
        _, token = _analyst(server.url, owner_line.removeprefix("owner token: "), 1.0)
        args = ["--url", server.url, "--token", token, "--dataset", "people"]
        sql = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"
        assert main(["query", *args, "--epsilon", "0.25", sql]) == 0
        out = capsys.readouterr().out
        assert out.splitlines()[0].split() == ["sex", "n"]
        assert out.splitlines()[1].startswith("F ")
        assert "cost: ε=0.25" in out
        assert main(["budget", *args]) == 0
        assert "remaining: ε=0.75" in capsys.readouterr().out
        assert main(["query", *args, "--epsilon", "5", sql]) == 1
        refusal = capsys.readouterr().err
        assert "is not enough for this release (epsilon: 5 asked, 0.75 left)" in refusal
        assert main(["query", *args, "--accuracy", "n=400", sql]) == 0  # costs ε ≈ 0.009
        out = capsys.readouterr().out
        assert "cost: ε≤0.00" in out  # rounded up to 4 significant digits, and said so
        assert "≤ rounded up, ≥ rounded down, to 4 significant digits" in out
    finally:
        server.stop()


def test_serve_refuses_a_port_in_use_before_making_anything(
    people: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another server on the port: a clear error naming --port, no token, no ledger, and no URL
    (the other server would have answered the start-up's health poll)."""
    ledger = tmp_path / "l.sqlite3"
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        args = [*_serve_args(people, f"sqlite:///{ledger}"), "--port", str(port)]
        assert main(["serve", *args]) == 1
    said = capsys.readouterr()
    assert f"--port {port}" in said.err
    assert "in use" in said.err
    assert said.out == ""
    assert not ledger.exists()


def test_release_text_aligns_values_intervals_and_names_the_level() -> None:
    cell = {"value": 3.0, "ci_low": 1, "ci_high": 5.5}
    release = {
        "group_columns": ["g"],
        "value_columns": ["n"],
        "rows": [
            {"group": {"g": "a"}, "values": {"n": cell}},
            {
                "group": {"g": None},
                "values": {"n": {"value": 0.25, "ci_low": None, "ci_high": None}},
            },
        ],
        "ci_level": 0.9,
    }
    assert release_text(release).splitlines() == [
        "g     n",
        "a     3 [1, 5.5]",
        "NULL  0.25 —",
        "[low, high]: 90% confidence intervals",
    ]


@pytest.mark.slow
def test_sigkill_under_load_never_loses_or_doubles_a_charge(
    people: tuple[Path, Path], tmp_path: Path
) -> None:
    ledger_url = f"sqlite:///{tmp_path / 'crash.sqlite3'}"
    args = _serve_args(people, ledger_url)
    server = LiveServer(args).start(wait_lines=2)
    owner_token = server.first_lines[0].removeprefix("owner token: ")
    analyst_id, token = _analyst(server.url, owner_token, 1000.0)
    answers: dict[str, dict[str, object]] = {}
    lock = threading.Lock()
    keys = [f"k{i}" for i in range(120)]
    rng = random.Random(7)

    def client_loop(worker: int) -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=5) as http:
            for key in keys[worker::4]:
                while True:  # retry with the same key until answered (the server may be dead)
                    try:
                        response = http.post(
                            f"{server.url}/v1/datasets/people/queries",
                            json={"sql": "SELECT COUNT(*) AS n FROM people", "epsilon": 0.5},
                            headers={"Idempotency-Key": key},
                        )
                    except httpx.HTTPError:
                        time.sleep(0.05)
                        continue
                    if response.status_code == 200:
                        with lock:
                            answers[key] = response.json()
                        break
                    time.sleep(0.05)  # 409 "still running" or 5xx: retry

    workers = [threading.Thread(target=client_loop, args=(w,)) for w in range(4)]
    for worker in workers:
        worker.start()
    for _ in range(4):  # kill at random points, restart on the same ledger
        time.sleep(rng.uniform(0.2, 0.8))
        server.kill()
        server.stop()
        server = LiveServer(args)
        server.start()
    for worker in workers:
        worker.join(timeout=120)
    server.stop()
    assert len(answers) == len(keys)
    ledger = Ledger(ledger_url)
    try:
        charges = [c for c in ledger.history(limit=10_000) if c.principal_id == analyst_id]
        by_key: dict[str | None, list[int]] = {}
        for charge in charges:
            by_key.setdefault(charge.request_key, []).append(charge.id)
        assert all(len(ids) == 1 for ids in by_key.values())  # nothing charged twice
        released = {c.request_key: c for c in charges if c.status == "released"}
        for key, answer in answers.items():  # every answer seen by the client is charged
            assert released[key].id == answer["charge_id"]
            assert released[key].result == answer["release"]
        assert ledger.charged_total("people") == ApproxDP(Fraction(1, 2) * len(charges), 0)
    finally:
        ledger.close()


@pytest.mark.slow
def test_worker_processes_share_the_ledger_without_overspending_or_running_twice(
    people: tuple[Path, Path], tmp_path: Path
) -> None:
    """``serve --workers 2``: two processes answer on one port; concurrent requests against a
    budget for 10 answers get exactly 10; concurrent retries of one request (same key) are
    charged once and all get the same answer, whichever worker they reach."""
    ledger_url = f"sqlite:///{tmp_path / 'workers.sqlite3'}"
    server = LiveServer([*_serve_args(people, ledger_url), "--workers", "2"]).start(wait_lines=2)
    try:
        assert server.process is not None
        children = subprocess.run(
            ["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True, check=False
        ).stdout.split()
        assert len(children) >= 2  # the worker processes (and multiprocessing's helper)
        owner_token = server.first_lines[0].removeprefix("owner token: ")
        analyst_id, token = _analyst(server.url, owner_token, 5.0)
        statuses: list[int] = []
        by_key: dict[str, list[tuple[int, object]]] = {}
        lock = threading.Lock()
        body = {"sql": "SELECT COUNT(*) AS n FROM people", "epsilon": 0.5}

        def ask(key: str | None) -> None:
            headers = {"Authorization": f"Bearer {token}"}
            if key is not None:
                headers["Idempotency-Key"] = key
            response = httpx.post(
                f"{server.url}/v1/datasets/people/queries", json=body, headers=headers, timeout=60
            )
            with lock:
                statuses.append(response.status_code)
                if key is not None:
                    charge = response.json().get("charge_id")
                    by_key.setdefault(key, []).append((response.status_code, charge))

        keys = [f"same-{i // 2}" for i in range(8)]  # 4 keys, each sent twice at once
        threads = [threading.Thread(target=ask, args=(k,)) for k in [*keys, *[None] * 32]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert statuses.count(200) >= 10
        # beyond the answers the budget allows: refusals (409), then rate-limited refusals (429)
        assert set(statuses) <= {200, 409, 429}
        for answers in by_key.values():  # one charge per key; a second copy: same answer or 409
            released = {charge for status, charge in answers if status == 200}
            assert len(released) <= 1
    finally:
        server.stop()
    ledger = Ledger(ledger_url)
    try:
        charges = [c for c in ledger.history(limit=1000) if c.principal_id == analyst_id]
        assert len(charges) == 10  # the budget fits exactly 10 at ε = 0.5
        assert len({c.request_key for c in charges if c.request_key}) == sum(
            1 for c in charges if c.request_key
        )
        assert sum((Fraction(c.epsilon) for c in charges), Fraction(0)) == 5
    finally:
        ledger.close()


def test_importing_the_cli_loads_no_engine() -> None:
    """``dpcurator --help`` must answer at once: importing the CLI module loads neither the query
    engines nor numeric, web or database libraries (their import took 5-6 s)."""
    heavy = ["duckdb", "polars", "pyspark", "numpy", "pandas", "pyarrow", "scipy", "fastapi"]
    heavy += ["uvicorn", "sqlalchemy", "httpx", "pydantic", "dp_accounting"]
    code = f"import sys, dpcurator.cli; print([m for m in {heavy!r} if m in sys.modules])"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert loaded.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epsilon", "nan"], "--epsilon: expected a finite number > 0, got 'nan'"),
        (["--epsilon", "0"], "--epsilon: expected a finite number > 0"),
        (["--epsilon", "1", "--delta", "1"], "--delta: expected a finite number >= 0 and < 1"),
        (["--epsilon", "1", "--token", " "], "--token: the token is empty"),
        ([], "one of the arguments --epsilon --accuracy --rho is required"),
        (["--accuracy", "n"], "--accuracy: expected NAME=WIDTH (e.g. n=50), got 'n'"),
        (["--accuracy", "n=-1"], "--accuracy: expected a finite number >= 0"),
        (["--epsilon", "1", "--accuracy", "n=5"], "not allowed with argument --epsilon"),
    ],
)
def test_bad_query_arguments_are_usage_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checked before any request, with exit status 2; ε has no silent default."""
    base = ["query", "--url", "http://127.0.0.1:9", "--token", "t", "--dataset", "d"]
    with pytest.raises(SystemExit) as exited:
        main([*base, *args, "SELECT COUNT(*) AS n FROM people"])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_an_unreachable_server_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        args = ["--url", f"http://127.0.0.1:{port}", "--token", "t", "--dataset", "d"]
        assert main(["budget", *args]) == 1
        assert main(["query", *args, "--epsilon", "1", "SELECT COUNT(*) AS n FROM t"]) == 1
    err = capsys.readouterr().err
    assert err.count(f"error: cannot reach the curator at --url http://127.0.0.1:{port}") == 2
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "command",
    [
        *([c] for c in ("serve", "query", "estimate", "budget", "datasets", "history")),
        *([c] for c in ("publish", "releases", "admin")),
        [],
    ],
)
def test_help_is_plain_text(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    text = capsys.readouterr().out
    assert "``" not in text
    assert "usage: dpcurator" in text


def test_every_option_and_command_is_explained() -> None:
    unexplained = []
    parsers = [_parser()]
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
                explained = {a.dest for a in action._choices_actions if a.help}
                unexplained += [f"{parser.prog} {c}" for c in action.choices if c not in explained]
            elif not action.help:
                unexplained.append(f"{parser.prog} {action.dest}")
    assert unexplained == []


def test_admin_commands_recover_a_ledger_without_a_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An owner whose token was never printed (the first serve failed) gets a new one from the
    ledger file; tokens can be revoked; analysts, grants and datasets are listed."""
    url = f"sqlite:///{tmp_path / 'l.sqlite3'}"
    ledger = Ledger(url)
    ledger.create_principal("own_1", "owner", "owner")
    ledger.add_dataset(
        "d",
        name="d",
        source={"path": "/x.csv"},
        metadata_doc={},
        cap=ApproxDP(3, 0),
        replay_enabled=False,
        by="own_1",
    )
    ledger.close()
    admin = ["admin", "--ledger", url]
    assert main([*admin, "issue-token", "owner"]) == 0
    token = capsys.readouterr().out.split("token: ")[-1].strip()
    assert main([*admin, "create-analyst", "ann"]) == 0
    assert "token: dpc_" in capsys.readouterr().out
    service = build_service(url)
    try:
        owner = service.authority.authenticate(f"Bearer {token}", "cli")
        assert owner.role == "owner"
        ann = next(p for p in service.ledger.principals("analyst") if p.name == "ann")
        service.ledger.set_grant(ann.id, "d", ApproxDP(1, 0), by=owner.principal_id)
    finally:
        service.close()
    assert main([*admin, "list-analysts"]) == 0
    assert f"{ann.id}  ann  live tokens: " in capsys.readouterr().out
    assert main([*admin, "list-grants"]) == 0
    assert f"{ann.id}  d  budget ε=1 δ=0  spent ε=0 δ=0" in capsys.readouterr().out
    assert main([*admin, "list-datasets"]) == 0
    assert "d  /x.csv  cap ε=3 δ=0" in capsys.readouterr().out
    assert main([*admin, "revoke-token", owner.token_id]) == 0
    assert main([*admin, "list-owners"]) == 0
    assert capsys.readouterr().out.strip().endswith("live tokens: none")
    assert main(["admin", "--ledger", f"sqlite:///{tmp_path / 'typo.sqlite3'}", "list-owners"]) == 1
    assert "the file does not exist" in capsys.readouterr().err
