"""The numeric input policy at the edge (issue 24, item 6; :mod:`dpcurator.service.schemas`).

A property test over extreme floats (subnormal, huge, negative zero), integers beyond a double,
booleans, numeric strings and strings with NUL on every field of every charging or state-changing
route: the answer is never a 5xx; an invalid value is 422 naming its field; nothing is charged by a
refused request. Then the hand-made cases of the issue, each once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.service_kit import Kit, people_kit

ALL = "SELECT COUNT(*) FROM people"

#: (caller: 0 owner / 1 alice, path, a valid body, the fields to replace)
ROUTES: list[tuple[int, str, dict[str, Any], list[str]]] = [
    (1, "/v1/datasets/people/queries", {"sql": ALL, "epsilon": 0.01}, ["epsilon", "delta"]),
    (1, "/v1/datasets/people/queries", {"sql": ALL, "rho": 0.001}, ["rho"]),
    (1, "/v1/datasets/people/queries:estimate", {"sql": ALL, "rho": 0.001}, ["rho", "sql"]),
    (
        1,
        "/v1/datasets/people/sparse-vector",
        {"queries": [ALL], "threshold": 10, "epsilon": 0.01},
        ["threshold", "epsilon", "c"],
    ),
    (
        1,
        "/v1/datasets/people/fits",
        {"model": "linear", "response": "income", "predictors": ["age"], "epsilon": 0.01},
        ["epsilon", "delta", "alpha", "coef_bound"],
    ),
    (
        0,
        "/v1/datasets/people/streams",
        {"kind": "sum", "epsilon": 0.01, "horizon": 10, "lower": 0, "upper": 1},
        ["epsilon", "lower", "upper", "horizon"],
    ),
    (
        0,
        "/v1/datasets/people/pmw",
        {"epsilon": 0.01, "threshold": 40, "max_updates": 1, "columns": ["sex"]},
        ["epsilon", "threshold", "max_updates"],
    ),
    (0, "/v1/analysts/{alice}/grants/people", {"epsilon": 1}, ["epsilon", "delta", "rho"]),
]

EXTREMES = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e-320, 5e-324, 1e-300, -0.0, 1e308, -1e308, 1e-10, 2.0**-40, 1e16]),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.booleans(),
    st.sampled_from(["0.1", "1", "1e-3", "", "\x00", "0.1\x00"]),
    st.text(max_size=5),
)


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kit]:
    with people_kit(tmp_path_factory.mktemp("numbers"), rows=300) as made:
        yield made


def _alice_id(kit: Kit) -> str:
    me: str = kit.alice.get("/v1/me").json()["id"]
    return me


def _send(kit: Kit, caller: int, path: str, body: dict[str, Any]) -> Any:
    client = (kit.owner, kit.alice)[caller]
    path = path.replace("{alice}", _alice_id(kit))
    if "/grants/" in path:
        return client.put(path, json=body)
    return client.post(path, json=body)


def _check(kit: Kit, caller: int, path: str, body: dict[str, Any], field: str) -> None:
    before = kit.service.ledger.charged_total("people")
    response = _send(kit, caller, path, body)
    assert response.status_code < 500, (body, response.text)
    if response.status_code == 422:
        assert response.headers["content-type"].startswith("application/problem+json")
        if response.json()["type"].endswith(":invalid-request"):  # refused by the schema
            assert field in response.json()["detail"], (body, response.text)
    if response.status_code >= 400:
        assert kit.service.ledger.charged_total("people") == before, body


@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(route=st.sampled_from(ROUTES), data=st.data())
def test_no_value_of_any_field_gives_a_server_error(
    kit: Kit, route: tuple[int, str, dict[str, Any], list[str]], data: st.DataObject
) -> None:
    caller, path, body, fields = route
    field = data.draw(st.sampled_from(fields))
    value = data.draw(EXTREMES)
    _check(kit, caller, path, {**body, field: value}, field)


@pytest.mark.parametrize(
    ("caller", "path", "body", "field"),
    [
        (1, "/v1/datasets/people/queries", {"sql": ALL, "rho": 1e-320}, "rho"),
        (1, "/v1/datasets/people/queries:estimate", {"sql": ALL, "rho": 1e-320}, "rho"),
        (1, "/v1/datasets/people/queries", {"sql": ALL, "epsilon": True}, "epsilon"),
        (1, "/v1/datasets/people/queries", {"sql": ALL, "epsilon": "0.1"}, "epsilon"),
        (1, "/v1/datasets/people/queries", {"sql": ALL + "\x00", "epsilon": 0.1}, "sql"),
        (0, "/v1/analysts/{alice}/grants/people", {"epsilon": 1e-300}, "epsilon"),
        (0, "/v1/analysts/{alice}/grants/people", {"epsilon": 1, "delta": 1e-300}, "delta"),
        (
            0,
            "/v1/datasets/people/streams",
            {"kind": "sum", "epsilon": 1, "horizon": 10, "lower": -1e308, "upper": 1e308},
            "lower",
        ),
        (0, "/v1/datasets/people/pmw", {"epsilon": True, "threshold": 4, "max_updates": 1}, "eps"),
    ],
)
def test_the_issues_inputs_are_refused_naming_the_field(
    kit: Kit, caller: int, path: str, body: dict[str, Any], field: str
) -> None:
    before = kit.service.ledger.charged_total("people")
    response = _send(kit, caller, path, body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert field in response.json()["detail"]
    assert kit.service.ledger.charged_total("people") == before


def test_a_nul_in_a_path_or_query_parameter_is_refused(kit: Kit) -> None:
    for path in ("/v1/datasets/peo%00ple", "/v1/streams/str_%00", "/v1/datasets/people/queries"):
        params = {"limit": "1\x00"} if path.endswith("queries") else None
        response = kit.owner.get(path, params=params)
        assert response.status_code == 422, (path, response.text)
        assert "NUL" in response.json()["detail"]


def test_the_edges_of_the_ranges_are_accepted(kit: Kit) -> None:
    """ε = 2·10^-9 (near the least, 10^-9) is charged exactly as written; bounds of ±10^15
    make a stream."""
    response = kit.alice.post("/v1/datasets/people/queries", json={"sql": ALL, "epsilon": 2e-9})
    assert response.status_code == 200, response.text
    assert response.json()["cost"]["epsilon_exact"] == "1/500000000"
    assert (
        kit.alice.post(
            "/v1/datasets/people/queries", json={"sql": ALL, "epsilon": 9e-10}
        ).status_code
        == 422
    )
    stream = kit.owner.post(
        "/v1/datasets/people/streams",
        json={"kind": "sum", "epsilon": 1, "horizon": 10, "lower": -1e15, "upper": 1e15},
    )
    assert stream.status_code == 201, stream.text
    posted = kit.owner.post(f"/v1/streams/{stream.json()['id']}/events", json={"values": [1e15]})
    assert posted.status_code == 200, posted.text


def test_the_ledger_holds_the_longest_accepted_fraction(kit: Kit) -> None:
    """The longest exact fraction an accepted grant can hold fits the ledger's columns."""
    alice = _alice_id(kit)
    # A grant's δ must fit the cap's (a δ the cap can never pay is refused at the grant).
    kit.owner.patch("/v1/datasets/people", json={"cap_delta": 1e-6}).raise_for_status()
    body = {"epsilon": 1.2345678901234567e-9, "delta": 1.2345678901234567e-30}
    response = kit.owner.put(f"/v1/analysts/{alice}/grants/people", json=body)
    assert response.status_code == 200, response.text
    total = response.json()["budget"]["total"]
    assert total["delta_exact"] == f"12345678901234567/1{'0' * 46}"  # 64 characters
    kit.owner.put(f"/v1/analysts/{alice}/grants/people", json={"epsilon": 1})
    kit.owner.patch("/v1/datasets/people", json={"cap_delta": 0}).raise_for_status()
