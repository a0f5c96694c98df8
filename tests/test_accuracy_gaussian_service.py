"""Accuracy-first Gaussian queries and ρ with partition selection over HTTP (issue 18): the
service passes noise, rho, delta and accuracy through to the planner (dpcurator.query.accuracy,
dpcurator.query.noise) and charges what the plan says."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import Any

import pytest

from tests.neighbour_queries import demo_frame
from tests.neighbour_service import DATASET, ServedTable

COUNT = "SELECT COUNT(*) AS n FROM people"


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    with ServedTable(demo_frame(), accounting="concentrated") as served:
        yield served._client


def _post(client: Any, path: str, body: Mapping[str, object]) -> dict[str, Any]:
    response = client.post(f"/v1/datasets/{DATASET}/{path}", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_accuracy_with_gaussian_noise_is_estimated_and_charged_in_rho(client: Any) -> None:
    body = {"sql": COUNT, "accuracy": {"n": 50}, "noise": "gaussian"}
    estimate = _post(client, "queries:estimate", body)
    rho = Fraction(estimate["cost"]["rho_exact"])
    assert rho > 0
    assert estimate["estimate"]["ci_halfwidths"]["n"] <= 50
    answer = _post(client, "queries", body)
    assert Fraction(answer["cost"]["rho_exact"]) == rho
    assert answer["release"]["mechanisms"][0]["mechanism"] == "discrete Gaussian"


def test_rho_with_delta_selects_groups_by_gaussian_thresholding(client: Any) -> None:
    body = {"sql": "SELECT hours, COUNT(*) AS n FROM people GROUP BY hours", "rho": 0.05}
    answer = _post(client, "queries", {**body, "delta": 1e-7})
    assert answer["cost"]["rho_exact"] == "1/20"
    assert "threshold" in answer["release"]["noise"]
