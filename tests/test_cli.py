"""The CLI against a real `dpcurator serve` subprocess, and crash safety: SIGKILL the server at
random points under load; every released answer is charged, nothing twice; restart resumes."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import threading
import time
from fractions import Fraction
from pathlib import Path

import httpx
import pytest

from dpcurator.cli import format_release, main
from dpcurator.core.measures import ApproxDP
from dpcurator.service.ledger import Ledger
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
        assert "exhausted" in capsys.readouterr().err
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


def test_format_release_aligns_values_and_intervals() -> None:
    release = {
        "group_columns": ["g"],
        "value_columns": ["n"],
        "rows": [{"group": {"g": "a"}, "values": {"n": {"value": 3.0, "ci_low": 1, "ci_high": 5}}}],
    }
    assert format_release(release).splitlines() == ["g  n", "a  3 [1, 5]"]


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
        assert set(statuses) <= {200, 409}
        for answers in by_key.values():  # one charge per key; a second copy: same answer or 409
            charges = {charge for status, charge in answers if status == 200}
            assert len(charges) <= 1
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
