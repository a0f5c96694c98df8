"""Relative accuracy targets (dpcurator.query.plan.accuracy.resolve_target): ``"P%"`` of the
declared bounds' width of the value a SUM reads, ``"P% of S"`` of a given scale; counts need a
scale; the library, the HTTP body schema and the CLI argument accept them."""

from __future__ import annotations

import pytest

import dpcurator
from dpcurator import Budget
from dpcurator.cli import args as cli_args
from dpcurator.errors import ParameterError, UnsupportedQueryError
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from dpcurator.service.bodies import QueryIn

SQL = "SELECT COUNT(*) AS n, SUM(age) AS s FROM people"


@pytest.fixture(scope="module")
def people() -> Session:
    meta = Metadata.from_yaml(dpcurator.demo_path("people.yaml"))
    return Session.from_data(
        str(dpcurator.demo_path("people.csv")), metadata=meta, budget=Budget(100)
    )


def test_relative_targets_equal_their_absolute_half_widths(people: Session) -> None:
    """age is declared in [18, 90]: "5%" of SUM(age) is 0.05 * 72 = 3.6; "2% of 1000" of the
    count is 20. The plans (and costs) are those of the absolute targets."""
    relative = people.plan(SQL, accuracy={"n": "2% of 1000", "s": "5%"})
    absolute = people.plan(SQL, accuracy={"n": 20, "s": 3.6})
    assert relative.cost == absolute.cost
    assert relative.outputs == absolute.outputs
    estimate = people.estimate(SQL, accuracy={"n": "2% of 1000", "s": "5%"})
    assert estimate.ci_halfwidths["n"] is not None
    assert estimate.ci_halfwidths["n"] <= 20


def test_relative_target_refusals_are_free_and_name_the_output(people: Session) -> None:
    with pytest.raises(UnsupportedQueryError, match=r"COUNT\(n\).*no public scale"):
        people.plan(SQL, accuracy={"n": "5%", "s": 3})
    for bad in ("5", "5 %% of", "-5%", "5% of 0", "5% of x", "5% of inf"):
        with pytest.raises(ParameterError, match=r"accuracy\['n'\]"):
            people.plan(SQL, accuracy={"n": bad, "s": 3})


def test_http_and_cli_take_relative_targets() -> None:
    body = QueryIn(sql=SQL, accuracy={"n": "2% of 1000", "s": 3.5})
    assert body.accuracy == {"n": "2% of 1000", "s": 3.5}
    assert cli_args.target("s=5%") == ("s", "5%")
    assert cli_args.target("n=2% of 1000") == ("n", "2% of 1000")
    assert cli_args.target("n=50") == ("n", 50.0)
