"""Accuracy-first queries over HTTP: ``accuracy`` instead of ``epsilon`` in query and estimate
requests; the cost is the smallest meeting the targets; refusals charge nothing."""

from __future__ import annotations

from fractions import Fraction

from dpcurator.core.measures import ApproxDP
from tests.test_service_api import Kit, _assert_problem, _spent, kit

__all__ = ["kit"]

COUNT = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"


def test_accuracy_chooses_the_cost_and_the_release_meets_it(kit: Kit) -> None:
    estimate = kit.alice.post(
        "/v1/datasets/people/queries:estimate", json={"sql": COUNT, "accuracy": {"n": 40}}
    )
    assert estimate.status_code == 200, estimate.text
    body = estimate.json()
    cost = Fraction(body["cost"]["epsilon_exact"])
    assert body["estimate"]["ci_halfwidths"]["n"] <= 40
    assert _spent(kit) == ApproxDP(0, 0)
    response = kit.alice.post(
        "/v1/datasets/people/queries", json={"sql": COUNT, "accuracy": {"n": 40}}
    )
    assert response.status_code == 200, response.text
    assert Fraction(response.json()["cost"]["epsilon_exact"]) == cost
    for row in response.json()["release"]["rows"]:
        assert row["values"]["n"]["ci_high"] - row["values"]["n"]["value"] <= 40
    assert _spent(kit) == ApproxDP(cost, 0)


def test_bad_or_unaffordable_targets_are_refused_free(kit: Kit) -> None:
    both = {"sql": COUNT, "accuracy": {"n": 40}, "epsilon": 0.5}
    assert kit.alice.post("/v1/datasets/people/queries", json=both).status_code == 422
    neither = {"sql": COUNT}
    assert kit.alice.post("/v1/datasets/people/queries", json=neither).status_code == 422
    negative = {"sql": COUNT, "accuracy": {"n": -1}}
    assert kit.alice.post("/v1/datasets/people/queries", json=negative).status_code == 422
    mean = {"sql": "SELECT AVG(age) AS a FROM people", "accuracy": {"a": 1}}
    response = kit.alice.post("/v1/datasets/people/queries", json=mean)
    _assert_problem(response, 422, "unsupported-query")
    assert "No budget can meet" in response.json()["detail"]
    # ±0 on every count needs more than alice's grant of ε = 1
    exact = {"sql": COUNT, "accuracy": {"n": 0}}
    _assert_problem(
        kit.alice.post("/v1/datasets/people/queries", json=exact), 409, "budget-exceeded"
    )
    assert _spent(kit) == ApproxDP(0, 0)
