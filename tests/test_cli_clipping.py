"""``dpcurator query/estimate --clipping``: the clipping report's share of ε reaches the server
(:mod:`dpcurator.query.plan.clipping`) and the report is printed (issue 14)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests._service_helpers import new_analyst, run_cli, serve_people

SQL = "SELECT sex, AVG(age) AS a FROM people GROUP BY sex"

pytestmark = pytest.mark.usefixtures("cli_environment_cleared")


@pytest.fixture(scope="module")
def curator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with serve_people(tmp_path_factory.mktemp("cli_clipping")) as served:
        yield served


def test_query_and_estimate_forward_clipping(
    curator: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, owner = curator
    _, _, token = new_analyst(url, owner, 1.0)
    base = ["--url", url, "--token", token, "--dataset", "people", "--epsilon", "0.5"]
    code, out, _ = run_cli(capsys, "estimate", *base, "--clipping", "0.2", "--format", "json", SQL)
    assert code == 0
    mechanisms = json.loads(out)["estimate"]["mechanisms"]
    assert any(m["statistic"].startswith("clipping") for m in mechanisms)
    code, out, _ = run_cli(capsys, "query", *base, "--clipping", "0.2", SQL)
    assert code == 0
    assert "clipping [sex=F]: a: at most" in out
    assert "cost: ε=0.5 δ=0" in out
    with pytest.raises(SystemExit):
        run_cli(capsys, "query", *base, "--clipping", "1", SQL)
    assert "argument --clipping: expected a finite number > 0 and < 1" in capsys.readouterr().err
