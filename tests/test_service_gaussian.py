"""Gaussian noise and ρ costs over HTTP (issue 18 §1): releases on D and on D minus person 4322
observe the same (only noisy values differ), and concentrated budgets are charged, shown and
refused as the ledger accounts them."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from tests.neighbour_queries import (
    Neighbour,
    demo_frame,
    differences,
    failure_report,
)
from tests.neighbour_service import DATASET, ServedTable
from tests.neighbour_sql import VICTIM, NeighbourQuery

#: (query, noise family, ρ): a grouped Gaussian count and sum at (ε, δ), a ρ-cost count.
GAUSSIAN_QUERIES = {
    "grouped gaussian at (eps, delta)": (
        NeighbourQuery(
            "SELECT region, COUNT(*) AS n, SUM(income) AS s FROM people GROUP BY region",
            1.0,
            1e-6,
        ),
        "gaussian",
        None,
    ),
    "count at rho": (NeighbourQuery("SELECT COUNT(*) AS n FROM people", 1.0), None, 0.01),
}


@pytest.fixture(scope="module")
def served() -> Iterator[dict[Neighbour | None, ServedTable]]:
    """D and D minus the victim, each served with concentrated accounting."""
    frames = {None: demo_frame(), Neighbour(VICTIM): Neighbour(VICTIM).frame()}
    services = {
        key: ServedTable(frame, accounting="concentrated").__enter__()
        for key, frame in frames.items()
    }
    yield services
    for service in services.values():
        service.__exit__(None, None, None)


@pytest.mark.parametrize("name", sorted(GAUSSIAN_QUERIES))
def test_gaussian_releases_over_http_observe_the_same_on_neighbours(
    served: dict[Neighbour | None, ServedTable], name: str
) -> None:
    query, noise, rho = GAUSSIAN_QUERIES[name]
    seen = {key: table.observe(query, noise=noise, rho=rho) for key, table in served.items()}
    assert seen[None].outcome == "HTTP 200", seen[None]
    found = differences(seen[None], seen[Neighbour(VICTIM)])
    assert not found, failure_report(query, f"{Neighbour(VICTIM)}, over HTTP, {name}", found)


def _client(served: dict[Neighbour | None, ServedTable]) -> Any:
    return served[None]._client


def test_a_rho_query_is_charged_in_rho_and_the_budget_shows_its_parts(
    served: dict[Neighbour | None, ServedTable],
) -> None:
    client = _client(served)
    before = client.get(f"/v1/datasets/{DATASET}/budget").json()
    assert before["accounting"] == "concentrated"
    answer = client.post(
        f"/v1/datasets/{DATASET}/queries",
        json={"sql": "SELECT COUNT(*) AS n FROM people", "rho": 0.02},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["cost"] == {
        **dict.fromkeys(["epsilon", "delta", "epsilon_exact", "delta_exact"]),
        "rho": 0.02,
        "rho_exact": "1/50",
    }
    after = client.get(f"/v1/datasets/{DATASET}/budget").json()
    spent_rho = Fraction(after["native"]["spent"]["rho_exact"])
    assert spent_rho - Fraction(before["native"]["spent"]["rho_exact"]) == Fraction(1, 50)
    assert set(after["native"]) == {"limits", "spent", "remaining"}
    assert after["total"]["epsilon_exact"] == "1000000"


def test_estimates_take_the_noise_family_and_rho(
    served: dict[Neighbour | None, ServedTable],
) -> None:
    client = _client(served)
    sql = "SELECT region, COUNT(*) AS n FROM people GROUP BY region"
    gaussian = client.post(
        f"/v1/datasets/{DATASET}/queries:estimate",
        json={"sql": sql, "epsilon": 1, "delta": 1e-6, "noise": "gaussian"},
    ).json()
    laplace = client.post(
        f"/v1/datasets/{DATASET}/queries:estimate",
        json={"sql": sql, "epsilon": 1, "delta": 1e-6, "noise": "laplace"},
    ).json()
    assert gaussian["fits"] is True
    assert gaussian["estimate"]["mechanisms"] != laplace["estimate"]["mechanisms"]
    at_rho = client.post(
        f"/v1/datasets/{DATASET}/queries:estimate", json={"sql": sql, "rho": 0.5}
    ).json()
    assert at_rho["cost"]["rho_exact"] == "1/2"
    refused = client.post(
        f"/v1/datasets/{DATASET}/queries:estimate",
        json={"sql": sql, "rho": 0.5, "epsilon": 1},
    )
    assert refused.status_code == 422
