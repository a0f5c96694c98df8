"""The everyday client commands (``datasets``, ``estimate``, ``query``, ``history``, ``publish``,
``releases``, ``budget``) and their ``--format table|csv|json`` against one real
``dpcurator serve`` subprocess; each test makes its own analysts so that budgets and histories
do not mix."""

from __future__ import annotations

import csv
import http.server
import io
import json
import math
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from dpcurator.cli import main
from dpcurator.cli.format import Output, show
from tests._service_helpers import new_analyst, run_cli, serve_people

SQL = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"


pytestmark = pytest.mark.usefixtures("cli_environment_cleared")


@pytest.fixture(scope="module")
def curator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A served ``people`` dataset (cap ε 1000): its URL and the owner's token."""
    with serve_people(tmp_path_factory.mktemp("cli")) as served:
        yield served


def _strict_json(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_datasets_show_the_remaining_grant_or_the_owners_cap(
    curator: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, owner = curator
    _, _, token = new_analyst(url, owner, 2.0)
    query = ["query", "--url", url, "--token", token, "--dataset", "people", "--epsilon", "0.5"]
    assert main([*query, SQL]) == 0
    capsys.readouterr()
    code, out, _ = run_cli(capsys, "datasets", "--url", url, "--token", token)
    assert code == 0
    assert out.splitlines()[0].split()[:4] == ["id", "name", "budget", "remaining_epsilon"]
    assert out.splitlines()[1].split()[:4] == ["people", "people", "grant", "1.5"]
    code, out, _ = run_cli(capsys, "datasets", "--url", url, "--token", token, "--format", "csv")
    assert _csv(out)[0]["remaining_epsilon"] == "1.5"
    code, out, _ = run_cli(capsys, "datasets", "--url", url, "--token", token, "--format", "json")
    assert _strict_json(out)[0]["budget"]["remaining"]["epsilon_exact"] == "3/2"
    code, out, _ = run_cli(capsys, "datasets", "--url", url, "--token", owner, "--format", "csv")
    assert _csv(out)[0]["budget"] == "global cap"


def test_estimate_is_free_and_states_the_ci_half_widths_and_level(
    curator: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, owner = curator
    _, _, token = new_analyst(url, owner, 1.0)
    base = ["--url", url, "--token", token, "--dataset", "people"]
    code, out, _ = run_cli(capsys, "estimate", *base, "--epsilon", "0.5", SQL)
    assert code == 0
    assert out.splitlines()[0].split() == ["column", "95%", "CI", "half-width"]
    assert out.splitlines()[1].split()[0] == "n"
    assert "cost: ε=0.5 δ=0 (an estimate: nothing was charged)" in out
    assert "fits the remaining budget (ε=1 δ=0): yes" in out
    code, out, _ = run_cli(capsys, "estimate", *base, "--accuracy", "n=40", "--format", "csv", SQL)
    (row,) = _csv(out)
    assert row["column"] == "n"
    assert float(row["ci_halfwidth"]) <= 40
    assert row["ci_level"] == "0.95"
    _, out, _ = run_cli(capsys, "query", *base, "--accuracy", "n=40", "--format", "json", SQL)
    assert _strict_json(out)["cost"]["epsilon"] == float(row["epsilon"])  # what was estimated
    _, out, _ = run_cli(capsys, "budget", *base, "--format", "json")
    assert _strict_json(out)["spent"]["epsilon"] == float(row["epsilon"])  # estimates are free


def test_query_formats_carry_values_intervals_and_the_ci_level(
    curator: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, owner = curator
    _, _, token = new_analyst(url, owner, 1.0)
    base = ["--url", url, "--token", token, "--dataset", "people", "--epsilon", "0.25"]
    code, out, _ = run_cli(capsys, "query", *base, SQL)
    assert code == 0
    assert out.splitlines()[0].split() == ["sex", "n"]
    assert "[low, high]: 95% confidence intervals" in out
    assert "cost: ε=0.25 δ=0" in out
    assert "remaining: ε=0.75 δ=0" in out
    _, out, _ = run_cli(capsys, "query", *base, "--format", "csv", SQL)
    rows = _csv(out)
    assert list(rows[0]) == ["sex", "n", "n_ci_low", "n_ci_high", "ci_level"]
    assert [r["sex"] for r in rows] == ["F", "M"]
    assert all(float(r["n_ci_low"]) <= float(r["n"]) <= float(r["n_ci_high"]) for r in rows)
    assert {r["ci_level"] for r in rows} == {"0.95"}
    _, out, _ = run_cli(capsys, "query", *base, "--format", "json", SQL)
    answer = _strict_json(out)
    assert answer["release"]["ci_level"] == 0.95
    assert answer["cost"]["epsilon_exact"] == "1/4"


def test_history_is_the_callers_own_and_owners_see_the_analyst(
    curator: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, owner = curator
    ann_id, ann, ann_token = new_analyst(url, owner, 1.0)
    _, _, bob_token = new_analyst(url, owner, 1.0)
    for token, sql in ((ann_token, SQL), (bob_token, "SELECT COUNT(*) AS bobs FROM people")):
        argv = ["query", "--url", url, "--token", token, "--dataset", "people", "--epsilon", "0.1"]
        assert main([*argv, sql]) == 0
    capsys.readouterr()
    code, out, _ = run_cli(capsys, "history", "--url", url, "--token", ann_token)
    assert code == 0
    assert out.splitlines()[0].split() == [
        "id", "created_at", "dataset_id", "kind", "status", "epsilon", "delta", "sql"
    ]  # fmt: skip
    assert len(out.splitlines()) == 2
    assert out.splitlines()[1].endswith(SQL)
    _, out, _ = run_cli(capsys, "history", "--url", url, "--token", owner, "--format", "csv")
    rows = _csv(out)
    mine = [r for r in rows if r["analyst_id"] == ann_id]
    assert [(r["analyst"], r["sql"], r["epsilon"]) for r in mine] == [(ann, SQL, "0.1")]
    assert any(r["sql"].endswith("bobs FROM people") for r in rows)
    argv = ["history", "--url", url, "--token", owner, "--dataset", "people", "--limit", "1"]
    _, out, _ = run_cli(capsys, *argv, "--format", "json")
    (latest,) = _strict_json(out)
    assert latest["sql"] == "SELECT COUNT(*) AS bobs FROM people"


def test_owner_publishes_and_anyone_lists_and_downloads_releases(
    curator: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, owner = curator
    _, _, token = new_analyst(url, owner, 1.0)
    queries = ["SELECT COUNT(*) AS n FROM people", "SELECT region, COUNT(*) AS n FROM people"]
    queries[1] += " GROUP BY region"
    publish = ["publish", "--url", url, "--dataset", "people", "--name", "spring", "--epsilon"]
    code, out, err = run_cli(capsys, *publish, "0.5", "--token", token, *queries)
    assert (code, out) == (1, "")
    assert err == "error: --token: This operation is reserved to data owners.\n"
    code, out, _ = run_cli(capsys, *publish, "0.5", "--token", owner, *queries)
    assert code == 0
    title = out.splitlines()[0]
    assert title.startswith("release rel_")
    assert title.endswith("cost ε=1 δ=0")
    assert f"query 2: {queries[1]}" in out
    release_id = title.split()[1]
    listing = ["releases", "--url", url, "--token", token]
    _, out, _ = run_cli(capsys, *listing, "--dataset", "people", "--format", "csv")
    listed = [r for r in _csv(out) if r["id"] == release_id]
    assert [(r["name"], r["queries"], r["epsilon"]) for r in listed] == [("spring", "2", "1.0")]
    _, out, _ = run_cli(capsys, *listing, "--id", release_id, "--format", "csv")
    rows = _csv(out)
    assert list(rows[0]) == [
        "query", "region", "statistic", "value", "ci_low", "ci_high", "ci_level"
    ]  # fmt: skip
    assert [(r["query"], r["region"]) for r in rows][:2] == [("1", ""), ("2", "north")]
    assert len(rows) == 5
    _, out, _ = run_cli(capsys, *listing, "--id", release_id, "--format", "json")
    assert [r["sql"] for r in _strict_json(out)["results"]] == queries


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["estimate", "--dataset", "people", "--epsilon", "1", "SELECT wage FROM people"],
            "error: Unknown column 'wage' in table 'people'.",
        ),
        (
            ["estimate", "--dataset", "people", "--epsilon", "1", "SELECT sex FROM people"],
            "error: The selected expression 'sex' is neither an aggregate nor a GROUP BY column",
        ),
        (
            ["publish", "--dataset", "people", "--name", "big", "--epsilon", "2000", SQL],
            "error: The dataset's global privacy budget is not enough for this release (epsilon: ",
        ),
        (["history", "--dataset", "nope"], "error: No dataset with id 'nope'."),
        (["releases", "--id", "rel_nope"], "error: No release with id 'rel_nope'."),
    ],
)
def test_refusals_are_one_line_errors(
    curator: tuple[str, str],
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, owner = curator
    code, out, err = run_cli(capsys, argv[0], "--url", url, "--token", owner, *argv[1:])
    assert (code, out) == (1, "")
    assert err.startswith(message)
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_token_problems_name_the_token(
    curator: tuple[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, owner = curator
    code, _, err = run_cli(capsys, "datasets", "--url", url)
    assert (code, err) == (1, "error: --token is required (or set DPCURATOR_TOKEN)\n")
    code, _, err = run_cli(capsys, "datasets", "--url", url, "--token", "dpc_abc_def")
    assert (code, err) == (1, "error: --token: Invalid token.\n")
    monkeypatch.setenv("DPCURATOR_TOKEN", owner)
    monkeypatch.setenv("DPCURATOR_URL", url)
    code, out, _ = run_cli(capsys, "datasets", "--format", "csv")
    assert code == 0
    assert _csv(out)[0]["id"] == "people"


@pytest.mark.parametrize(
    "argv",
    [
        ["datasets"],
        ["history"],
        ["releases", "--dataset", "d"],
        ["estimate", "--dataset", "d", "--epsilon", "1", "SELECT COUNT(*) AS n FROM t"],
        ["publish", "--dataset", "d", "--name", "r", "--epsilon", "1", "SELECT COUNT(*) FROM t"],
    ],
)
def test_an_unreachable_server_is_a_clear_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, not listening: refused
        code, _, err = run_cli(capsys, argv[0], "--url", url, "--token", "t", *argv[1:])
    assert code == 1
    assert err.startswith(f"error: cannot reach the curator at --url {url}: ")
    assert err.count("\n") == 1


def test_json_output_is_strict_even_if_a_value_is_not_finite() -> None:
    """A non-finite number (which a non-conforming server could send: Python's parser accepts
    ``NaN``) prints as null; csv leaves the field empty."""
    output = Output(
        text="", doc={"v": [math.nan, math.inf, 1.5]}, header=["v", "w"], rows=[[-math.inf, 2.0]]
    )
    out = io.StringIO()
    show(output, "json", out)
    assert _strict_json(out.getvalue()) == {"v": [None, None, 1.5]}
    out = io.StringIO()
    show(output, "csv", out)
    assert out.getvalue() == "v,w\n,2.0\n"


class _NotACurator(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html>hello</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


def test_a_server_that_is_not_a_curator_is_a_clear_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotACurator) as other:
        thread = threading.Thread(target=other.serve_forever, daemon=True)
        thread.start()
        url = f"http://127.0.0.1:{other.server_address[1]}"
        try:
            code, out, err = run_cli(
                capsys, "budget", "--url", url, "--token", "t", "--dataset", "d"
            )
        finally:
            other.shutdown()
    assert (code, out) == (1, "")
    assert err == f"error: --url {url} did not answer as a dpcurator curator\n"


def test_query_prints_a_hypothesis_test_readably(
    curator: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``dpcurator query "SELECT TTEST(...)"`` prints the test's report (H0, statistic, p-value,
    the noisy statistics), not a table of intervals; ``--format json`` keeps the ``test``."""
    url, owner = curator
    _, _, token = new_analyst(url, owner, 1.0)
    base = ["--url", url, "--token", token, "--dataset", "people", "--epsilon", "0.5"]
    sql = "SELECT TTEST(age, sex) FROM people"
    code, out, _ = run_cli(capsys, "query", *base, sql)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "two-sample t (Welch) (differentially private)"
    assert lines[1] == "  H0: mean(F) = mean(M) (two-sided)"
    assert lines[2].startswith("  statistic = ")
    assert "p-value = " in lines[2]
    assert any(line.startswith("    n: ") and "noise scale" in line for line in lines)
    assert "confidence intervals" not in out
    assert "cost: ε=0.5 δ=0" in out
    _, out, _ = run_cli(capsys, "query", *base, "--format", "json", sql)
    assert _strict_json(out)["release"]["test"]["name"] == "two-sample t (Welch)"
