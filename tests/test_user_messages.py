"""Messages people read name their parameter in their words (issue 28, item 3): no internal
class names, no ``Fraction(...)`` reprs, no pydantic locations or phrasing."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.core.measures import PureDP
from dpcurator.errors import ParameterError
from dpcurator.mechanisms import Laplace
from dpcurator.random import SeededRng
from dpcurator.service.app import create_app
from dpcurator.service.server import DEMO_DIR, bootstrap, build_service
from tests.service_fixtures import ThreadServer, cheap_hasher
from tests.service_kit import Kit, people_kit

#: Text that would mean internal names reached a person.
INTERNAL = ("BasicAccountant", "cost_in", "Event(", "Fraction(", "Input should", "body.")

META = {
    "table": "people",
    "max_rows_per_person": 1,
    "columns": {
        "age": {"type": "int", "lower": 18, "upper": 90},
        "sex": {"type": "string", "keys": ["F", "M"]},
    },
}


def _clean(text: str) -> None:
    for internal in INTERNAL:
        assert internal not in text, (internal, text)


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    with people_kit(tmp_path, rows=200) as served:
        yield served


def test_a_delta_release_against_a_pure_budget_says_what_to_change() -> None:
    frame = pd.DataFrame({"age": [30, 40, 50] * 10, "sex": ["F", "M", "F"] * 10})
    session = dpc.Session.from_data(
        frame, metadata=dpc.Metadata.from_dict(META), budget=dpc.Budget(1), rng=SeededRng(1)
    )
    with pytest.raises(ParameterError) as refused:
        session.sql("SELECT COUNT(*) AS n FROM people", epsilon=0.5, delta=1e-6, noise="gaussian")
    message = str(refused.value)
    _clean(message)
    assert "costs ε=0.5 and δ≤1e-6" in message
    assert "the budget is pure ε (δ=0)" in message
    assert "Release with delta=0" in message
    assert session.spent() == PureDP(0)


def test_a_delta_release_against_a_pure_grant_over_http(kit: Kit) -> None:
    body = {"sql": "SELECT COUNT(*) AS n FROM people", "epsilon": 0.5, "delta": 1e-6}
    response = kit.alice.post("/v1/datasets/people/queries", json=body | {"noise": "gaussian"})
    assert response.status_code >= 400
    detail = response.json()["detail"]
    _clean(detail)
    assert "(delta: 1e-06 asked, 0 left)" in detail
    assert "Ask for a smaller delta" in detail


def test_an_exact_fraction_is_shown_as_a_decimal() -> None:
    with pytest.raises(ParameterError) as refused:
        PureDP(Fraction(-1, 3))
    assert str(refused.value) == (
        "The 'epsilon' parameter of PureDP must be >= 0. Got -0.3333333333."
    )
    with pytest.raises(ParameterError, match=r"Got 0\.$"):
        Laplace.for_epsilon(epsilon=Fraction(0), l1_sensitivity=1)


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"epsilon": "abc"}, 'epsilon must be a number; got "abc".'),
        ({"epsilon": 0}, "epsilon must be >= 1e-09; got 0."),
        ({"delta": 1.5}, "delta must be < 1; got 1.5."),
        ({"noise": "foo"}, "noise must be 'laplace' or 'gaussian'; got \"foo\"."),
        (
            {"epsilon_typo": 1},
            "epsilon_typo is not a parameter of this request; remove it or check its spelling.",
        ),
    ],
)
def test_invalid_requests_name_the_parameter_in_the_clients_words(
    kit: Kit, change: dict[str, object], detail: str
) -> None:
    body = {"sql": "SELECT COUNT(*) AS n FROM people", "epsilon": 0.5} | change
    response = kit.alice.post("/v1/datasets/people/queries", json=body)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["detail"] == detail
    _clean(problem["detail"])
    assert [e["parameter"] for e in problem["errors"]] == [next(iter(change))]


def test_a_metadata_typo_is_named_with_the_field_meant(tmp_path: Path) -> None:
    path = tmp_path / "people.yaml"
    path.write_text("table: people\ncolumns:\n  age:\n    type: int\n    lowr: 18\n    upper: 90\n")
    with pytest.raises(ParameterError) as refused:
        dpc.Metadata.from_yaml(path)
    assert str(refused.value) == (
        "Column 'age' has an unknown field 'lowr' (did you mean 'lower'?). "
        "Its fields are: fill, keys, lower, nullable, point_masses, type, upper."
    )
    with pytest.raises(ParameterError, match=r"field 'max_row_per_person' \(did you mean "):
        dpc.Metadata.from_dict(META | {"max_row_per_person": 2})
    misspelt_columns = {"table": "people", "colums": META["columns"]}
    with pytest.raises(ParameterError, match=r"field 'colums' \(did you mean 'columns'\?\)"):
        dpc.Metadata.from_dict(misspelt_columns)
    with pytest.raises(ParameterError, match="The metadata has no 'columns' field"):
        dpc.Metadata.from_dict({"table": "people"})


def test_the_delta_kept_for_the_conversion_is_explained() -> None:
    frame = pd.DataFrame({"age": [30, 40, 50] * 10, "sex": ["F", "M", "F"] * 10})
    session = dpc.Session.from_data(
        frame,
        metadata=dpc.Metadata.from_dict(META),
        budget=dpc.Budget(epsilon=20, delta=1e-5),
        rng=SeededRng(1),
    )
    session.sql("SELECT COUNT(*) AS n FROM people", epsilon=1)
    left = session.remaining()
    assert left.delta == Fraction(1e-5) / 2  # half of δ: the other half converts at the end
    assert str(left) == (
        "remaining: (ε = 19, δ = 5e-06) (δ left is what releases with δ > 0 can use: 5e-06 of "
        "the budget's δ = 1e-05 is kept for converting the whole interaction to (ε, δ)-DP)"
    )


def test_a_grant_whose_delta_the_cap_can_never_pay_is_refused(kit: Kit) -> None:
    alice = kit.alice.get("/v1/me").json()["id"]
    path = f"/v1/analysts/{alice}/grants/people"
    refused = kit.owner.put(path, json={"epsilon": 1, "delta": 1e-6})
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"] == (
        "The grant's delta (1e-6) is more than the cap of dataset 'people' allows (delta = 0): "
        "releases with delta > 0 would always be refused by the cap. Raise the cap's delta first "
        "(PATCH /v1/datasets/people with cap_delta; dpcurator serve --cap-delta), or grant "
        "delta <= 0."
    )
    rho = kit.owner.put(path, json={"rho": 0.1})
    assert rho.status_code == 422, rho.text
    assert "its cap has delta = 0" in rho.json()["detail"]
    budget = kit.alice.get("/v1/datasets/people/budget").json()
    assert budget["total"]["delta"] == 0  # the grant is unchanged
    patched = kit.owner.patch("/v1/datasets/people", json={"cap_delta": 1e-5})
    assert patched.status_code == 200, patched.text
    assert kit.owner.put(path, json={"epsilon": 1, "delta": 1e-6}).status_code == 200
    assert kit.owner.put(path, json={"epsilon": 1, "delta": 1e-4}).status_code == 422


def test_the_demo_analyst_can_run_the_documented_linear_fit(tmp_path: Path) -> None:
    service = build_service(
        f"sqlite:///{tmp_path / 'ledger.sqlite3'}", hasher=cheap_hasher(), data_root=DEMO_DIR
    )
    try:
        started = bootstrap(service, demo=True)
        assert started.analyst_token is not None
        with ThreadServer(create_app(service)) as server:
            analyst = server.client(started.analyst_token)
            body = {
                "model": "linear",
                "response": "income",
                "predictors": ["age"],
                "epsilon": 0.5,
                "delta": 1e-7,
            }
            fitted = analyst.post("/v1/datasets/demo/fits", json=body)
            assert fitted.status_code in (200, 202), fitted.text
            left = analyst.get("/v1/datasets/demo/budget").json()["remaining"]
            assert 0 < left["delta"] < 1e-6
    finally:
        service.close()
