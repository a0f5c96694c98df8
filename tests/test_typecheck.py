"""Plan-time typing and range proofs: every refusal is free, decided from the query and metadata."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

import dpcurator as dpc
import dpcurator.query.frontend.builder as qb
from dpcurator.accounting import PrivacyFilter
from dpcurator.accounting.events import PrivacyEvent
from dpcurator.accounting.filter import Reservation
from dpcurator.core.measures import Measure
from dpcurator.errors import UnsupportedQueryError
from dpcurator.query import ir
from dpcurator.query.backends.plan_checks import check_plan
from dpcurator.query.frontend.row_expressions import Expression, col
from dpcurator.query.frontend.sql import parse_sql
from dpcurator.query.plan.planner import plan_query
from dpcurator.query.schema import Metadata

DEMO = Metadata.from_yaml(dpc.demo_path("people.yaml"))


def _plan(sql: str, epsilon: float = 1.0) -> object:
    return plan_query(parse_sql(sql, DEMO), DEMO, epsilon=epsilon)


TYPE_MISMATCHES = [
    ("SELECT COUNT(*) FROM people WHERE sex = 1", "'sex'", "string"),
    ("SELECT COUNT(*) FROM people WHERE pid = 4322 AND region = 1", "'region'", "string"),
    ("SELECT COUNT(*) FROM people WHERE 1 < education", "'education'", "string"),
    ("SELECT COUNT(*) FROM people WHERE employed = 'yes'", "'employed'", "bool"),
    ("SELECT COUNT(*) FROM people WHERE age = 'thirty'", "'age'", "int"),
    ("SELECT COUNT(*) FROM people WHERE age + sex > 1", "'sex'", "string"),
    ("SELECT COUNT(*) FROM people WHERE employed * 2 > 1", "'employed'", "bool"),
    ("SELECT COUNT(*) FROM people WHERE LOWER(age) = 'a'", "'age'", "int"),
    ("SELECT COUNT(*) FROM people WHERE LENGTH(income) > 3", "'income'", "float"),
    ("SELECT COUNT(*) FROM people WHERE ABS(sex) > 1", "'sex'", "string"),
    ("SELECT COUNT(*) FROM people WHERE FLOOR(employed) > 1", "'employed'", "bool"),
    ("SELECT COUNT(*) FROM people WHERE COALESCE(sex, 1) = 'F'", "'sex'", "string"),
    ("SELECT COUNT(*) FROM people WHERE CASE WHEN age > 1 THEN sex ELSE 1 END = 'F'", "'sex'", ""),
    ("SELECT COUNT(*) FROM people WHERE CASE WHEN age THEN 1 ELSE 0 END = 1", "'age'", "int"),
    ("SELECT COUNT(*) FROM people WHERE age IN (1, 'a')", "'age'", "int"),
    ("SELECT COUNT(*) FROM people WHERE age BETWEEN 'a' AND 'b'", "'age'", "int"),
    ("SELECT COUNT(*) FROM people WHERE age", "'age'", "int"),
    ("SELECT COUNT(*) FROM people WHERE NOT income", "'income'", "float"),
    ("SELECT COUNT(*) FROM people WHERE age > 1 AND sex", "'sex'", "string"),
    ("SELECT SUM(CLAMP(sex, 0, 1)) FROM people", "'sex'", "string"),
    ("SELECT AVG(CLAMP(employed, 0, 1)) FROM people", "'employed'", "bool"),
    ("SELECT HISTOGRAM(region, 0, 1, 2) FROM people", "'region'", "string"),
    ("SELECT LOWER(age) AS g, COUNT(*) FROM people GROUP BY LOWER(age)", "'age'", "int"),
]


@pytest.mark.parametrize(("sql", "column", "declared"), TYPE_MISMATCHES)
def test_type_mismatches_are_refused_at_plan_time_naming_the_column(
    sql: str, column: str, declared: str
) -> None:
    with pytest.raises(UnsupportedQueryError) as refused:
        _plan(sql)
    text = str(refused.value)
    assert column in text
    assert f"declared {declared}" in text


def test_the_refusal_gives_a_hint() -> None:
    with pytest.raises(UnsupportedQueryError, match="quoted string") as refused:
        _plan("SELECT COUNT(*) FROM people WHERE sex = 1")
    assert "column 'sex' is declared string" in str(refused.value)
    with pytest.raises(UnsupportedQueryError, match="CASE WHEN"):
        _plan("SELECT SUM(CLAMP(employed, 0, 1)) FROM people")


def test_builder_queries_are_typed_too() -> None:
    with pytest.raises(UnsupportedQueryError, match="column 'sex' is declared string"):
        plan_query(qb.Query("people").filter(col("sex") == 1).agg(qb.count()), DEMO, epsilon=1)
    with pytest.raises(UnsupportedQueryError, match="column 'sex' is declared string"):
        plan_query(qb.Query("people").agg(qb.sum_("sex", lower=0, upper=1)), DEMO, epsilon=1)
    bad = Expression(ir.Func("abs", (ir.Col("age"), ir.Col("age"))))
    with pytest.raises(UnsupportedQueryError, match="ABS takes exactly one argument"):
        plan_query(qb.Query("people").filter(bad > 1).agg(qb.count()), DEMO, epsilon=1)


def test_integer_literals_must_fit_int64_and_floats_be_finite() -> None:
    # the edges of int64 parse; one past either edge is refused at parse time, naming it
    parse_sql("SELECT COUNT(*) FROM people WHERE pid > -9223372036854775808", DEMO)
    parse_sql("SELECT COUNT(*) FROM people WHERE pid < 9223372036854775807", DEMO)
    for literal in ("9223372036854775808", "-9223372036854775809"):
        with pytest.raises(UnsupportedQueryError, match=literal.lstrip("-")):
            parse_sql(f"SELECT COUNT(*) FROM people WHERE pid > {literal}", DEMO)
    with pytest.raises(UnsupportedQueryError, match="finite"):
        parse_sql("SELECT COUNT(*) FROM people WHERE income > 1e999", DEMO)
    with pytest.raises(UnsupportedQueryError, match="99999999999999999999"):
        plan_query(
            qb.Query("people").filter(col("pid").isin([99999999999999999999])).agg(qb.count()),
            DEMO,
            epsilon=1,
        )


def test_integer_values_that_can_leave_int64_are_refused() -> None:
    # age <= 90: age * 10^17 <= 9e18 fits int64; age * 10^18 may reach 9e19 and does not
    _plan("SELECT SUM(age * 100000000000000000) FROM people")
    with pytest.raises(UnsupportedQueryError, match=r"int64.*'age'"):
        _plan("SELECT SUM(age * 1000000000000000000) FROM people")
    with pytest.raises(UnsupportedQueryError, match=r"int64.*'age'"):
        _plan("SELECT AVG(CLAMP((age * 1000000000000000000) / 1000, 0, 1)) FROM people")


def test_float_values_beyond_the_bound_magnitude_are_refused() -> None:
    with pytest.raises(UnsupportedQueryError, match=r"'income'.*MAX_BOUND_MAGNITUDE"):
        _plan("SELECT SUM(income * 1e300) FROM people")
    with pytest.raises(UnsupportedQueryError, match=r"VARIANCE\(variance_income\).*1e150"):
        plan_query(
            qb.Query("people").agg(qb.variance("income", lower=0, upper=1e200)), DEMO, epsilon=1
        )
    with pytest.raises(UnsupportedQueryError, match="MAX_BOUND_MAGNITUDE"):
        plan_query(
            qb.Query("people").agg(qb.histogram("income", 4, lower=-1e308, upper=1e308)),
            DEMO,
            epsilon=1,
        )


FILLED = Metadata.from_dict(
    {
        "table": "t",
        "columns": {
            "x": {"type": "float", "lower": 0, "upper": 100, "nullable": True, "fill": 0},
            "n": {"type": "int"},
        },
    }
)


@pytest.mark.parametrize(
    "query",
    [
        qb.Query("t").agg(qb.sum_("x", lower=10, upper=20)),  # declared fill 0 outside [10, 20]
        qb.Query("t").agg(qb.mean("x", lower=10, upper=20)),
        qb.Query("t").agg(qb.variance("x", lower=10, upper=20)),
        qb.Query("t").agg(qb.variance("n", lower=0, upper=2**60)),  # squares beyond int64
        qb.Query("t").agg(qb.sum_("n", lower=-(2**62), upper=2**62)),
    ],
)
def test_planned_plans_pass_the_engines_check(query: qb.Query) -> None:
    plan = plan_query(query, FILLED, epsilon=1)
    check_plan(plan.exact, FILLED.column_types())  # raises if an engine would refuse the plan


@dataclass
class _SpyFilter:
    """A budget filter that records every reservation (and would charge through ``inner``)."""

    inner: PrivacyFilter
    reserved: list[PrivacyEvent] = field(default_factory=list)

    def reserve(self, event: PrivacyEvent, *, description: str = "") -> Reservation:
        self.reserved.append(event)
        return self.inner.reserve(event, description=description)

    def remaining(self) -> Measure:
        return self.inner.remaining()

    def spent(self) -> Measure:
        return self.inner.spent()

    def events(self) -> tuple[PrivacyEvent, ...]:
        return self.inner.events()


def test_session_refuses_a_type_mismatch_before_the_budget_filter_is_touched() -> None:
    spy = _SpyFilter(PrivacyFilter(dpc.Budget(epsilon=10.0)))
    session = dpc.Session.from_data(
        dpc.demo_path("people.csv"), metadata=DEMO, budget_filter=spy, engine="memory"
    )
    before = session.spent()
    for sql, _, _ in TYPE_MISMATCHES[:2]:
        with pytest.raises(UnsupportedQueryError, match="declared string"):
            session.sql(sql, epsilon=0.5)
    assert spy.reserved == []
    assert session.spent() == before
    session.sql("SELECT COUNT(*) FROM people WHERE sex = 'F'", epsilon=0.5)  # the spy does see
    assert len(spy.reserved) == 1
