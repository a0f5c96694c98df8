"""Accuracy-first Gaussian queries and ρ with partition selection over HTTP (issue 18): the
service passes noise, rho, delta and accuracy through to the planner (dpcurator.query.plan.accuracy,
dpcurator.query.plan.noise) and charges what the plan says."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import Any

import pytest

from dpcurator.core.measures import ApproxDP
from dpcurator.service.curator import NoiseRequest
from dpcurator.service.operations import fingerprint
from tests.neighbour_queries import demo_frame
from tests.neighbour_service import DATASET, ServedTable

COUNT = "SELECT COUNT(*) AS n FROM people"
GAUSSIAN = NoiseRequest("gaussian")


@pytest.fixture(scope="module")
def served() -> Iterator[ServedTable]:
    with ServedTable(demo_frame(), accounting="concentrated") as table:
        yield table


@pytest.fixture(scope="module")
def client(served: ServedTable) -> Any:
    return served._client


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


@pytest.mark.parametrize("delta", [0, 1e-6])
def test_accuracy_with_gaussian_noise_is_fingerprinted_at_its_gaussian_cost(
    served: ServedTable, delta: float
) -> None:
    """The replay/idempotency fingerprint of an accuracy query names the cost the charge
    spends (the Gaussian plan's ε at δ > 0, its ρ at δ = 0), not the Laplace plan's ε."""
    body = {"sql": COUNT, "accuracy": {"n": 30}, "noise": "gaussian", "delta": delta}
    cost = _post(served._client, "queries:estimate", body)["cost"]
    response = served._client.post(
        f"/v1/datasets/{DATASET}/queries", json=body, headers={"Idempotency-Key": f"g{delta}"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["cost"] == cost
    charge = served._service.ledger.charge(response.json()["charge_id"])
    if delta == 0:
        asked = NoiseRequest("gaussian", Fraction(cost["rho_exact"]))
        expected = fingerprint(COUNT, Fraction(0), Fraction(0), {"n": 30.0}, asked)
    else:
        epsilon, exact_delta = Fraction(cost["epsilon_exact"]), Fraction(cost["delta_exact"])
        expected = fingerprint(COUNT, epsilon, exact_delta, {"n": 30.0}, GAUSSIAN)
    assert charge.fingerprint == expected


def test_a_refused_gaussian_accuracy_query_audits_its_gaussian_cost(served: ServedTable) -> None:
    """The audit log's ``requested`` cost of a refused accuracy query with Gaussian noise is
    the Gaussian plan's (ε, δ), the one the reservation was refused."""
    service = served._service
    analyst, issued = service.create_principal("poor", "analyst")
    owner = service.ledger.principals("owner")[0]
    service.ledger.set_grant(
        analyst.id, DATASET, ApproxDP(Fraction(1, 1000), Fraction(1, 10**5)), by=owner.id
    )
    client = served._server.client(issued.token)
    body = {"sql": COUNT, "accuracy": {"n": 5}, "noise": "gaussian", "delta": 1e-6}
    cost = _post(client, "queries:estimate", body)["cost"]
    response = client.post(f"/v1/datasets/{DATASET}/queries", json=body)
    assert response.status_code == 409, response.text
    refused = next(e for e in service.ledger.audit_log() if e.action == "query_refused")
    assert refused.detail["requested"] == {
        "epsilon": cost["epsilon_exact"],
        "delta": cost["delta_exact"],
        "noise": "gaussian",
    }
