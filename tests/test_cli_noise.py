"""The CLI's --noise and --rho (issue 18 §1) against a served dataset whose cap and grant are
accounted by the concentrated filter."""

from __future__ import annotations

import json

import httpx
import pytest

from tests._service_helpers import new_analyst as _analyst
from tests._service_helpers import run_cli as _run
from tests.test_cli_client import _strict_json, curator

__all__ = ["curator"]

SQL = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"


def test_query_and_estimate_take_rho_and_the_noise_family(
    curator: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, owner_token = curator
    analyst_id, _, token = _analyst(url, owner_token, 1.0)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {owner_token}"}) as owner:
        owner.patch(
            "/v1/datasets/people",
            json={"cap_epsilon": 1000, "cap_delta": 1e-3, "accounting": "concentrated"},
        ).raise_for_status()
        owner.put(f"/v1/analysts/{analyst_id}/grants/people", json={"rho": 1}).raise_for_status()
    base = ["--url", url, "--token", token, "--dataset", "people"]
    code, out, _ = _run(capsys, "estimate", *base, "--rho", "0.25", SQL)
    assert code == 0
    assert "cost: ρ=0.25 (an estimate: nothing was charged)" in out
    code, out, _ = _run(capsys, "query", *base, "--rho", "0.25", "--format", "json", SQL)
    assert code == 0
    assert _strict_json(out)["cost"]["rho_exact"] == "1/4"
    code, out, _ = _run(capsys, "budget", *base, "--format", "json")
    budget = _strict_json(out)
    assert budget["accounting"] == "concentrated"
    assert budget["spent"]["rho_exact"] == "1/4"
    gaussian = [*base, "--epsilon", "1", "--delta", "1e-6", "--noise", "gaussian"]
    code, out, _ = _run(capsys, "query", *gaussian, "--format", "json", SQL)
    assert code == 0
    assert "gaussian" in json.dumps(_strict_json(out)["release"]["mechanisms"]).lower()
    with pytest.raises(SystemExit):  # one cost only
        _run(capsys, "query", *base, "--epsilon", "1", "--rho", "0.1", SQL)
