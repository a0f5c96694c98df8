"""``dpcurator synthetic estimate|publish|list|show|download`` against one real ``dpcurator
serve`` subprocess: the estimate is free and states the per-marginal errors, publish charges the
cap once and waits with a progress line (or returns the running job with --no-wait), analysts
list and download for free, public releases download without a token, refusals are one line."""

from __future__ import annotations

import io
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from dpcurator.cli import main
from dpcurator.cli import synth as cli_synth
from dpcurator.service.stores import synth_plan
from tests._service_helpers import new_analyst, run_cli, serve_people

#: A quick release: MWEM over the two public-key columns, 300 records.
MWEM = ["--kind", "mwem", "--epsilon", "1", "--columns", "sex", "region", "--rows", "300"]


pytestmark = pytest.mark.usefixtures("cli_environment_cleared")


@pytest.fixture(scope="module")
def curator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A served ``people`` dataset (cap ε 1000, δ 1e-6): its URL and the owner's token."""
    with serve_people(tmp_path_factory.mktemp("cli-synth"), "--cap-delta", "1e-6") as served:
        yield served


def _cap_spent(url: str, owner: str) -> float:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {owner}"}) as client:
        spent: float = client.get("/v1/datasets/people").json()["cap"]["spent"]["epsilon"]
    return spent


def test_estimate_is_free_and_names_the_errors(
    curator: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, owner = curator
    before = _cap_spent(url, owner)
    base = ["synthetic", "estimate", "--url", url, "--token", owner, "--dataset", "people"]
    code, out, _ = run_cli(capsys, *base, *MWEM)
    assert code == 0
    assert out.startswith("mwem: cost ε=1 δ=0 (an estimate: nothing was charged); fits")
    assert "noise_std" in out.splitlines()[2]
    code, out, _ = run_cli(
        capsys, *base, "--kind", "marginals", "--epsilon", "1", "--format", "csv"
    )
    assert code == 0
    header = out.splitlines()[0].split(",")
    assert "ci_halfwidth" in header
    assert len(out.splitlines()) > 2  # one row per measured marginal
    code, out, _ = run_cli(capsys, *base, "--kind", "mst", "--rho", "0.1", "--delta", "1e-9")
    assert code == 0
    converted = re.search(r"cost ε≤(\S+) δ=1e-9", out)  # ε rounded up: an upper bound
    assert converted is not None, out
    assert 0.1 < float(converted.group(1)) < 10  # ρ = 0.1 converted at δ = 1e-9
    code, out, err = run_cli(
        capsys, *base, "--kind", "fourier", "--rho", "0.1", "--delta", "1e-9",
        "--columns", "sex", "region", "age",
    )  # fmt: skip
    assert code == 0, err
    assert out.startswith("fourier: cost")
    assert [line.split()[0] for line in out.splitlines()[3:]][:3] == ["sex", "region", "age"]
    code, out, _ = run_cli(capsys, *base, *MWEM, "--format", "json")
    assert json.loads(out)["cost"]["epsilon_exact"] == "1"
    assert _cap_spent(url, owner) == before


def test_publish_waits_then_analysts_list_show_and_download(
    curator: tuple[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url, owner = curator
    _, _, analyst = new_analyst(url, owner, 1)
    before = _cap_spent(url, owner)
    publish = ["synthetic", "publish", "--url", url, "--token", owner, "--dataset", "people"]
    code, out, err = run_cli(capsys, *publish, *MWEM, "--format", "json")
    assert code == 0, err
    release: dict[str, Any] = json.loads(out)
    assert (release["status"], release["rows"]) == ("done", 300)
    assert f"{release['id']}: " in err  # the progress line
    assert _cap_spent(url, owner) == before + 1
    as_analyst = ["--url", url, "--token", analyst]
    code, out, _ = run_cli(capsys, "synthetic", "list", *as_analyst, "--dataset", "people")
    assert code == 0
    assert out.splitlines()[0].split()[:4] == ["id", "kind", "status", "progress"]
    assert any(line.split()[:3] == [release["id"], "mwem", "done"] for line in out.splitlines())
    code, out, _ = run_cli(capsys, "synthetic", "show", *as_analyst, release["id"])
    assert "status: done" in out
    assert "cost: ε=1 δ=0" in out
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {analyst}"}) as client:
        for fmt in ("csv", "parquet", "json"):
            path = tmp_path / f"release.{fmt}"
            code, _, err = run_cli(
                capsys, "synthetic", "download", *as_analyst, release["id"], "-o", str(path)
            )
            assert code == 0, err
            served = client.get(f"/v1/synthetic/{release['id']}/data", params={"format": fmt})
            assert path.read_bytes() == served.content
    frame = pd.read_parquet(tmp_path / "release.parquet")
    assert list(frame.columns) == ["sex", "region"]
    assert len(frame) == 300
    assert len(pd.read_csv(tmp_path / "release.csv")) == 300
    assert len(pd.read_json(io.StringIO((tmp_path / "release.json").read_text()))) == 300
    forced = tmp_path / "data.txt"
    code, _, _ = run_cli(
        capsys,
        "synthetic",
        "download",
        *as_analyst,
        release["id"],
        "-o",
        str(forced),
        "--as",
        "json",
    )
    assert code == 0
    assert json.loads(forced.read_text())[0].keys() == {"sex", "region"}
    # private: no token, no data
    code, _, err = run_cli(
        capsys, "synthetic", "download", "--url", url, release["id"], "-o", str(forced)
    )
    assert code == 1
    assert f"No synthetic release with id {release['id']!r}" in err
    assert _cap_spent(url, owner) == before + 1  # reading is free


def test_no_wait_returns_the_job_and_public_releases_need_no_token(
    curator: tuple[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url, owner = curator
    publish = ["synthetic", "publish", "--url", url, "--token", owner, "--dataset", "people"]
    code, out, err = run_cli(capsys, *publish, *MWEM, "--public", "--no-wait", "--format", "json")
    assert code == 0
    job = json.loads(out)
    assert job["status"] == "running"
    assert err == ""  # no progress line without waiting
    deadline = time.monotonic() + 120
    while job["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
        _, out, _ = run_cli(
            capsys,
            "synthetic",
            "show",
            "--url",
            url,
            "--token",
            owner,
            job["id"],
            "--format",
            "json",
        )
        job = json.loads(out)
    assert job["status"] == "done"
    assert job["public"] is True
    path = tmp_path / "public.csv"
    code, _, err = run_cli(
        capsys, "synthetic", "download", "--url", url, job["id"], "-o", str(path)
    )
    assert code == 0, err
    assert len(pd.read_csv(path)) == 300


def test_refusals_are_one_line_and_free(
    curator: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, owner = curator
    _, _, analyst = new_analyst(url, owner, 1)
    before = _cap_spent(url, owner)
    base = ["synthetic", "publish", "--url", url, "--dataset", "people"]
    code, out, err = run_cli(capsys, *base, "--token", analyst, *MWEM)
    assert (code, out) == (1, "")
    assert err == "error: --token: This operation is reserved to data owners.\n"
    code, _, err = run_cli(capsys, *base, "--token", owner, "--kind", "mst", "--epsilon", "1")
    assert code == 1
    assert err.startswith("error: ")
    assert "delta > 0" in err
    assert err.count("\n") == 1
    code, _, err = run_cli(capsys, *base, "--token", owner, *MWEM[:4], "--columns", "nope")
    assert code == 1
    assert "nope" in err
    assert _cap_spent(url, owner) == before
    with pytest.raises(SystemExit) as exited:
        main([*base, "--token", owner, *MWEM, "--marginal", "sex,"])
    assert exited.value.code == 2
    assert "--marginal: expected COLUMN[,COLUMN...], got 'sex,'" in capsys.readouterr().err


def test_the_cli_offers_every_kind_the_service_plans() -> None:
    """The client keeps its own copy (it does not import the server); they must agree."""
    assert cli_synth.KINDS == synth_plan.KINDS
