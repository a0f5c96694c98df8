"""Hypothesis tests through the HTTP query endpoint (issue 27 item 2): ``SELECT TTEST(x, g)``
and its kin are charged like any query, estimated free, refused free, and the release carries
the test (name, H0, statistic, p-value, estimate, the noisy statistics and their noise)."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from tests.neighbour_queries import demo_frame
from tests.neighbour_service import DATASET, ServedTable

QUERIES = f"/v1/datasets/{DATASET}/queries"


@pytest.fixture(scope="module")
def served() -> Iterator[ServedTable]:
    with ServedTable(demo_frame()) as table:
        yield table


def _spent(table: ServedTable) -> float:
    budget = table._client.get(f"/v1/datasets/{DATASET}/budget").json()
    return float(Fraction(budget["spent"]["epsilon_exact"]))


def _post(table: ServedTable, path: str, sql: str, **body: Any) -> Any:
    return table._client.post(path, json={"sql": sql, "epsilon": 0.5, **body})


def test_a_test_is_estimated_free_then_charged_and_serialised(served: ServedTable) -> None:
    sql = "SELECT TTEST(income, sex) FROM people"
    before = _spent(served)
    estimate = _post(served, f"{QUERIES}:estimate", sql)
    assert estimate.status_code == 200, estimate.text
    assert estimate.json()["estimate"]["test"] == "TEST TTEST(income, sex)"
    assert _spent(served) == before
    response = _post(served, QUERIES, sql)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["cost"]["epsilon_exact"] == "1/2" == estimate.json()["cost"]["epsilon_exact"]
    assert _spent(served) == pytest.approx(before + 0.5)
    test = answer["release"]["test"]
    assert test["name"] == "two-sample t (Welch)"
    assert test["null"] == "mean(F) = mean(M) (two-sided)"
    assert 0 < test["p_value"] <= 1
    assert isinstance(test["statistic"], float)
    assert len(test["released"]["n"]) == 2
    assert test["noise"]["n"] > 0
    figures = [row["group"]["figure"] for row in answer["release"]["rows"]]
    assert figures[:3] == ["statistic", "p_value", "estimate"]
    assert "n[F]" in figures


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT CHI2(sex, region) FROM people",
        "SELECT ANOVA(age, education) FROM people",
        "SELECT KS(hours, sex, 20, 40, 60) FROM people",
        "SELECT TTEST(hours - age) FROM people",
    ],
)
def test_other_tests_answer_over_http(served: ServedTable, sql: str) -> None:
    response = _post(served, QUERIES, sql)
    assert response.status_code == 200, response.text
    assert 0 < response.json()["release"]["test"]["p_value"] <= 1


@pytest.mark.parametrize(
    ("sql", "body", "says"),
    [
        ("SELECT TTEST(income, region) FROM people", {}, "has 4 public keys"),
        ("SELECT TTEST(income, sex) FROM people", {"delta": 1e-6}, "delta"),
        ("SELECT TTEST(income, pid) FROM people", {}, "person column"),
    ],
)
def test_refusals_are_free_over_http(
    served: ServedTable, sql: str, body: dict[str, Any], says: str
) -> None:
    before = _spent(served)
    response = _post(served, QUERIES, sql, **body)
    assert 400 <= response.status_code < 500, response.text
    assert says in response.text
    assert _spent(served) == before
