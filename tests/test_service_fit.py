"""Model fits through the HTTP service: POST /v1/datasets/{id}/fits and fits:estimate (issue 14).

Each fit is charged like a query (reservation before data, idempotency key, free refusals,
constant engine failure, a history entry), and a fit on D and on D minus one person differs only
in its numbers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from dpcurator.cli import main
from dpcurator.errors import ENGINE_FAILURE_MESSAGE, BackendError
from dpcurator.query.ir import AggregatePlan, ExactResult
from dpcurator.service.client import CuratorClient
from tests.neighbour_queries import demo_frame
from tests.neighbour_service import DATASET, ServedTable
from tests.proxy_backend import ProxyBackend

VICTIM = 4322
FITS = f"/v1/datasets/{DATASET}/fits"
LINEAR = {"model": "linear", "response": "income", "predictors": ["age", "hours"],
          "epsilon": 1.0, "delta": 1e-6}  # fmt: skip
LOGISTIC = {"model": "logistic", "response": "employed", "predictors": ["age"], "epsilon": 1.0,
            "coef_bound": 5}  # fmt: skip


@pytest.fixture(scope="module")
def served() -> Iterator[ServedTable]:
    with ServedTable(demo_frame()) as table:
        yield table


def _spent(table: ServedTable) -> dict[str, Any]:
    spent: dict[str, Any] = table._client.get(f"/v1/datasets/{DATASET}/budget").json()["spent"]
    return spent


def test_the_robust_l1_regression_is_a_linear_fit_with_method_l1(served: ServedTable) -> None:
    """``method: "l1"`` routes a linear fit to PTR L1 regression: estimated free, charged its ε,
    answered (a value, or NR when the stability test fails) with the same terms."""
    body = {**LINEAR, "method": "l1", "coef_bound": 1e4}
    before = _spent(served)
    estimate = served._client.post(f"{FITS}:estimate", json=body)
    assert estimate.status_code == 200, estimate.text
    assert _spent(served) == before
    fit = served._client.post(FITS, json=body)
    assert fit.status_code == 200, fit.text
    answer = fit.json()
    assert answer["cost"] == estimate.json()["cost"]
    assert "method='l1'" in answer["request"]
    assert "coef_bound=10000.0" in answer["request"]
    assert "propose-test-release" in answer["fit"]["method"]
    assert [row["group"]["term"] for row in answer["fit"]["rows"]] == ["intercept", "age", "hours"]
    spent = _spent(served)
    assert float(spent["epsilon_exact"]) == pytest.approx(float(before["epsilon_exact"]) + 1.0)


def test_estimate_is_free_and_the_fit_is_charged_exactly_that(served: ServedTable) -> None:
    before = _spent(served)
    estimate = served._client.post(f"{FITS}:estimate", json=LINEAR)
    assert estimate.status_code == 200, estimate.text
    body = estimate.json()
    assert body["fits"] is True
    assert body["estimate"]["terms"] == ["intercept", "age", "hours"]
    assert _spent(served) == before
    fit = served._client.post(FITS, json=LINEAR)
    assert fit.status_code == 200, fit.text
    answer = fit.json()
    assert answer["cost"] == body["cost"]
    assert answer["request"].startswith("FIT linear_regression: income ~ age + hours")
    release = answer["fit"]
    assert release["replied"] is True
    assert release["covers"] == "noise+sampling"
    assert [row["group"]["term"] for row in release["rows"]] == ["intercept", "age", "hours"]
    for row in release["rows"]:
        value = row["values"]["coefficient"]
        assert value["ci_low"] <= value["value"] <= value["ci_high"]
    spent = _spent(served)
    assert float(spent["epsilon_exact"]) == pytest.approx(float(before["epsilon_exact"]) + 1.0)
    (entry, *_) = served._client.get(f"/v1/datasets/{DATASET}/queries").json()
    assert (entry["id"], entry["sql"], entry["status"]) == (
        answer["charge_id"],
        answer["request"],
        "released",
    )


def test_a_retry_with_the_same_key_is_answered_once(served: ServedTable) -> None:
    headers = {"Idempotency-Key": "fit-1"}
    first = served._client.post(FITS, json=LOGISTIC, headers=headers)
    assert first.status_code == 200, first.text
    before = _spent(served)
    again = served._client.post(FITS, json=LOGISTIC, headers=headers)
    assert again.json()["charge_id"] == first.json()["charge_id"]
    assert again.json()["fit"] == first.json()["fit"]
    assert _spent(served) == before


@pytest.mark.parametrize(
    ("change", "status", "needle"),
    [
        ({"predictors": ["nope"]}, 422, "nope"),
        ({"predictors": ["sex"]}, 422, "'sex' is declared string"),
        ({"predictors": ["pid"]}, 422, "person column"),
        ({"model": "logistic", "response": "employed", "blocks": 10}, 422, "blocks"),
        (
            {"model": "logistic", "response": "employed", "method": "sample_and_aggregate"},
            422,
            "delta",
        ),
        ({"delta": 0.9}, 409, "budget"),
        ({"method": "l1"}, 422, "coef_bound"),
        ({"method": "l1", "coef_bound": 1e4, "delta": 0}, 422, "delta"),
    ],
)
def test_refusals_are_free_and_name_the_problem(
    served: ServedTable, change: dict[str, Any], status: int, needle: str
) -> None:
    before = _spent(served)
    refused = served._client.post(FITS, json={**LINEAR, **change})
    assert refused.status_code == status, refused.text
    assert needle in refused.json()["detail"]
    assert _spent(served) == before


class _Leaky(ProxyBackend):
    """An engine failing after the charge with a message quoting a private value."""

    def compute(self, plan: AggregatePlan) -> ExactResult:
        raise BackendError("pid 4322 earns 123456")


def test_an_engine_failure_after_the_charge_is_the_constant_text() -> None:
    with ServedTable(demo_frame()) as table:
        service = table._service
        runtime = service.catalog.runtime(service.ledger.dataset(DATASET))
        runtime.backend = _Leaky(runtime.backend)
        failed = table._client.post(FITS, json=LINEAR)
        assert failed.status_code == 502, failed.text
        assert failed.json()["detail"] == ENGINE_FAILURE_MESSAGE
        assert "4322" not in table._client.get(f"/v1/datasets/{DATASET}/queries").text
        assert float(_spent(table)["epsilon"]) == 1.0  # the charge stands


def test_the_client_fits_and_estimates(served: ServedTable) -> None:
    client = CuratorClient(served._server.url, served._client.headers["authorization"][7:])
    with client:
        estimate = client.fit(DATASET, "linear", "income", ["age"], epsilon=0.5, delta=1e-6,
                              estimate=True)  # fmt: skip
        assert estimate["cost"]["epsilon"] == 0.5
        fit = client.fit(DATASET, "logistic", "employed", ["hours"], epsilon=0.5)
        assert fit["fit"]["terms"] == ["intercept", "hours"]


def _masked(value: object) -> object:
    """A response with every released number replaced (what may differ between neighbours)."""
    if isinstance(value, dict):
        return {
            k: "<number>" if k in ("value", "ci_low", "ci_high", "z", "p_value") else _masked(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


@pytest.mark.parametrize("body", [LINEAR, LOGISTIC], ids=["linear", "logistic"])
def test_a_fit_on_neighbouring_tables_differs_only_in_its_numbers(body: dict[str, Any]) -> None:
    frame = demo_frame()
    without = frame[frame["pid"] != VICTIM]
    seen = []
    for table_frame in (frame, without):
        with ServedTable(table_frame) as table:
            responses = [
                table._client.post(f"{FITS}:estimate", json=body),
                table._client.post(FITS, json=body),
                table._client.post(FITS, json={**body, "predictors": ["nope"]}),
                table._client.get(f"/v1/datasets/{DATASET}/queries"),
            ]
            seen.append(
                [
                    (r.status_code, json.dumps(_masked(_timeless(r.json())), sort_keys=True))
                    for r in responses
                ]
            )
    assert seen[0] == seen[1]


_RUN_FIELDS = ("created_at", "completed_at", "principal_id")


def _timeless(value: Any) -> Any:
    """History entries without their timestamps and analyst id (random in any two runs)."""
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k not in _RUN_FIELDS}
    return value


def test_the_cli_prints_the_coefficients_with_their_cis(
    served: ServedTable, capsys: pytest.CaptureFixture[str]
) -> None:
    token = served._client.headers["authorization"][len("Bearer ") :]
    common = ["--url", served._server.url, "--token", token, "--dataset", DATASET]
    linear = ["--epsilon", "1", "--delta", "1e-6", "--model", "linear", "income", "age", "hours"]
    assert main(["fit", *common, *linear]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("FIT linear_regression: income ~ age + hours")
    assert lines[3].split() == ["term", "coefficient", "95%", "CI", "Wald", "p", "(H0:", "0)"]
    assert [line.split()[0] for line in lines[4:]] == ["intercept", "age", "hours"]
    assert main(["fit", *common, "--estimate", *linear]) == 0
    assert "fits your budget" in capsys.readouterr().out
    assert main(["fit", *common, "--epsilon", "1", "--delta", "1e-6", "income", "nope"]) == 1
    assert "nope" in capsys.readouterr().err


def test_fit_sql_is_estimated_like_it_is_run_on_the_queries_endpoints(
    served: ServedTable,
) -> None:
    queries = f"/v1/datasets/{DATASET}/queries"
    body = {"sql": "SELECT LOGISTIC(employed, age) FROM people", "epsilon": 0.5}
    before = _spent(served)
    estimate = served._client.post(f"{queries}:estimate", json=body)
    assert estimate.status_code == 200, estimate.text
    details = estimate.json()["estimate"]
    assert details["terms"] == ["intercept", "age"]
    assert details["model"] == "logistic_regression"
    assert details["ci_halfwidths"] == {"coefficient": None}  # data-dependent
    assert estimate.json()["fits"] is True
    assert _spent(served) == before  # free
    ran = served._client.post(queries, json=body)
    assert ran.status_code == 200, ran.text
    for key in ("epsilon_exact", "delta_exact"):
        assert ran.json()["cost"][key] == estimate.json()["cost"][key]
    assert [r["group"]["term"] for r in ran.json()["release"]["rows"]] == details["terms"]
    twice = {**body, "sql": "SELECT LOGISTIC(employed, age, age) FROM people"}
    refused = served._client.post(f"{queries}:estimate", json=twice)
    assert refused.status_code == 422, refused.text
    assert "distinct" in refused.json()["detail"]


def test_a_fit_reports_the_wald_test_of_each_coefficient(served: ServedTable) -> None:
    """The fit's JSON carries, per term, the Wald z and p-value of H0: coefficient = 0 (the
    table's ``p_value`` column too), post-processing of the noisy release."""
    fit = served._client.post(FITS, json=LINEAR)
    assert fit.status_code == 200, fit.text
    body = fit.json()["fit"]
    assert body["value_columns"] == ["coefficient", "p_value"]
    assert set(body["wald"]) == {"intercept", "age", "hours"}
    for row in body["rows"]:
        test = body["wald"][row["group"]["term"]]
        assert 0 <= test["p_value"] <= 1
        assert row["values"]["p_value"]["value"] == test["p_value"]
