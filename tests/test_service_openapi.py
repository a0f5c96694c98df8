"""The OpenAPI document tells the truth about errors (issue 24, item 7): each route lists the
problem responses it can answer, as ``application/problem+json``, and a request that provokes
each of them gets a documented status (the schemathesis run checks conformance at large)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.service_kit import Kit, people_kit

PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kit]:
    with people_kit(tmp_path_factory.mktemp("openapi"), rows=200) as made:
        yield made


@pytest.fixture(scope="module")
def document(kit: Kit) -> dict[str, Any]:
    spec: dict[str, Any] = kit.owner.get("/v1/openapi.json").json()
    return spec


def _operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


def test_every_error_response_is_a_documented_problem(document: dict[str, Any]) -> None:
    for path, method, operation in _operations(document):
        responses = operation["responses"]
        errors = {code: r for code, r in responses.items() if code[0] in "45"}
        assert "413" in errors, (method, path)
        for code, response in errors.items():
            assert list(response["content"]) == [PROBLEM], (method, path, code)
        if path == "/v1/health":
            continue
        for code in ("401", "422", "429", "503"):
            assert code in errors, (method, path, code)
        if "{" in path:
            assert "404" in errors, (method, path)
        if method in ("post", "put", "patch", "delete"):
            assert {"404", "409"} <= set(errors), (method, path)


def test_owner_routes_document_403(document: dict[str, Any]) -> None:
    owner_only = [
        ("post", "/v1/datasets"),
        ("post", "/v1/datasets/{dataset_id}/releases"),
        ("post", "/v1/datasets/{dataset_id}/streams"),
        ("post", "/v1/datasets/{dataset_id}/pmw"),
        ("post", "/v1/datasets/{dataset_id}/synthetic"),
        ("put", "/v1/analysts/{analyst_id}/grants/{dataset_id}"),
        ("get", "/v1/audit"),
    ]
    for method, path in owner_only:
        assert "403" in document["paths"][path][method]["responses"], (method, path)


def test_provoked_errors_have_documented_statuses(kit: Kit, document: dict[str, Any]) -> None:
    anonymous = kit.server.client()
    cases = [
        (anonymous.get("/v1/datasets"), "get", "/v1/datasets"),
        (kit.alice.get("/v1/audit"), "get", "/v1/audit"),
        (kit.alice.get("/v1/datasets/nope"), "get", "/v1/datasets/{dataset_id}"),
        (
            kit.alice.post("/v1/datasets/people/queries", json={"sql": "x", "epsilon": 5}),
            "post",
            "/v1/datasets/{dataset_id}/queries",
        ),
        (
            kit.alice.post(
                "/v1/datasets/people/queries",
                content=b"{",
                headers={"content-type": "application/json"},
            ),
            "post",
            "/v1/datasets/{dataset_id}/queries",
        ),
        (
            kit.alice.post(
                "/v1/datasets/people/queries",
                json={"sql": "SELECT COUNT(*) FROM people", "epsilon": 50},
            ),
            "post",
            "/v1/datasets/{dataset_id}/queries",
        ),
    ]
    anonymous.close()
    seen = set()
    for response, method, path in cases:
        code = str(response.status_code)
        seen.add(code)
        assert code in document["paths"][path][method]["responses"], (method, path, code)
        assert response.headers["content-type"].startswith(PROBLEM)
    assert seen == {"400", "401", "403", "404", "409", "422"}
