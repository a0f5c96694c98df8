"""Accuracy-first queries: exact smallest costs for CI half-width targets; refusals are free."""

from __future__ import annotations

from fractions import Fraction

import pytest

import dpcurator
from dpcurator.accounting import Budget
from dpcurator.core.measures import PureDP
from dpcurator.errors import BudgetExceededError, ParameterError, UnsupportedQueryError
from dpcurator.query.plan.accuracy import halfwidth
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from dpcurator.random import SeededRng

TIGHT = 1 - 1e-6


def _spent(session: Session) -> Fraction:
    spent = session.spent()
    assert isinstance(spent, PureDP)
    return spent.epsilon


@pytest.fixture
def people() -> Session:
    meta = Metadata.from_yaml(dpcurator.demo_path("people.yaml"))
    return Session.from_data(
        str(dpcurator.demo_path("people.csv")),
        metadata=meta,
        budget=Budget(100),
        rng=SeededRng(3),
    )


@pytest.mark.parametrize(
    ("sql", "name", "target", "alpha"),
    [
        ("SELECT COUNT(*) AS n FROM people", "n", 50.0, 0.05),
        ("SELECT COUNT(*) AS n FROM people", "n", 0.0, 0.05),
        ("SELECT COUNT(DISTINCT pid) AS n FROM people", "n", 3.5, 0.01),
        ("SELECT SUM(income) AS s FROM people", "s", 1e6, 0.05),
        ("SELECT SUM(hours) AS s FROM people", "s", 0.001, 0.1),  # finer than one grid step
        ("SELECT sex, HISTOGRAM(age, 18, 90, 6) AS h FROM people GROUP BY sex", "h", 20.0, 0.05),
    ],
)
def test_the_cost_is_the_smallest_meeting_the_target(
    people: Session, sql: str, name: str, target: float, alpha: float
) -> None:
    estimate = people.estimate(sql, accuracy={name: target}, alpha=alpha)
    epsilon = estimate.cost.epsilon
    widths = estimate.ci_halfwidths
    assert widths
    assert all(w is not None and w <= target for w in widths.values())
    # the same query at ε(1 - 1e-6) misses the target
    cheaper = people.estimate(sql, epsilon=float(epsilon) * TIGHT, alpha=alpha).ci_halfwidths
    assert any(w is not None and w > target for w in cheaper.values())
    assert _spent(people) == 0  # estimate charges nothing


def test_each_aggregate_gets_its_smallest_share_and_the_release_uses_it(people: Session) -> None:
    sql = "SELECT region, COUNT(*) AS n, SUM(income) AS s FROM people GROUP BY region"
    targets = {"n": 40.0, "s": 2e6}
    plan = people.plan(sql, accuracy=targets)
    for output in plan.outputs:
        (part,) = output.parts
        assert part.epsilon == output.epsilon
        assert halfwidth(part, float(output.epsilon), 0.05) <= targets[output.name]
        assert halfwidth(part, float(output.epsilon) * TIGHT, 0.05) > targets[output.name]
    assert plan.cost.epsilon == sum((o.epsilon for o in plan.outputs), Fraction(0))
    release = people.sql(sql, accuracy=targets)
    assert release.cost.epsilon == plan.cost.epsilon == _spent(people)
    for _, estimates in release.rows:
        for estimate, name in zip(estimates, ("n", "s"), strict=True):
            assert estimate.ci_high is not None
            # counts are floored at 0; the half-width above the value is the planned one
            assert estimate.ci_high - estimate.value <= targets[name]


def test_partition_selection_takes_its_usual_share_on_top(people: Session) -> None:
    meta = people.metadata
    free = Metadata(
        meta.table,
        tuple(c if c.name != "education" else type(c)(c.name, "string") for c in meta.columns),
        meta.person_column,
    )
    session = Session.from_data(
        str(dpcurator.demo_path("people.csv")), metadata=free, budget=Budget(10, 1e-6)
    )
    sql = "SELECT education, SUM(age) AS s FROM people GROUP BY education"
    plan = session.plan(sql, accuracy={"s": 300}, delta=1e-6)
    (total,) = plan.outputs
    assert plan.selection is not None
    assert plan.selection.epsilon == total.epsilon  # one share beside one aggregate
    assert plan.cost.epsilon == 2 * total.epsilon
    # a count with one row per person is thresholded itself: no share on top
    sql = "SELECT education, COUNT(*) AS n FROM people GROUP BY education"
    plan = session.plan(sql, accuracy={"n": 30}, delta=1e-6)
    (count,) = plan.outputs
    assert plan.selection is not None
    assert plan.selection_output == "n"
    assert plan.cost.epsilon == count.epsilon


def test_refusals_are_free_and_name_the_problem(people: Session) -> None:
    with pytest.raises(UnsupportedQueryError, match=r"No budget can meet .*MEAN\(m\)"):
        people.sql("SELECT AVG(income) AS m FROM people", accuracy={"m": 100})
    with pytest.raises(UnsupportedQueryError, match="'s' has none"):
        people.sql("SELECT COUNT(*) AS n, SUM(age) AS s FROM people", accuracy={"n": 10})
    with pytest.raises(ParameterError, match="outputs"):
        people.sql("SELECT COUNT(*) AS n FROM people", accuracy={"count": 10})
    with pytest.raises(ParameterError, match=r"accuracy\['n'\]"):
        people.sql("SELECT COUNT(*) AS n FROM people", accuracy={"n": -1})
    with pytest.raises(ParameterError, match="exactly one"):
        people.sql("SELECT COUNT(*) AS n FROM people", epsilon=1, accuracy={"n": 10})
    with pytest.raises(ParameterError, match="exactly one"):
        people.sql("SELECT COUNT(*) AS n FROM people")
    # ±0.5 on a sum of incomes needs far more than the budget of 100: refused with its cost
    needed = people.estimate("SELECT SUM(income) AS s FROM people", accuracy={"s": 0.5}).cost
    assert needed.epsilon > 100
    with pytest.raises(BudgetExceededError, match=r"epsilon: 1\.8\d*e\+\d+ asked") as refused:
        people.sql("SELECT SUM(income) AS s FROM people", accuracy={"s": 0.5})
    assert refused.value.requested.epsilon == needed.epsilon
    assert _spent(people) == 0
