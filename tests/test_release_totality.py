"""release_plan runs after the charge, so it must never raise on an exact value.

The exact results are built by hand with the values an engine may hand over under the shared
semantics (S4/S5): group totals saturated at ±(2^63 - 1) grid units, and defensively NULL, NaN,
±inf, Decimals and groups absent from the data.
"""

from __future__ import annotations

import math
from decimal import Decimal

import pytest

import dpcurator as dpc
from dpcurator.query import ir
from dpcurator.query.frontend.sql import parse_sql
from dpcurator.query.plan.planner import Plan, plan_query
from dpcurator.query.release.core import release_plan
from dpcurator.random import SeededRng

INT64_MAX = 2**63 - 1
EXTREMES: tuple[object, ...] = (
    INT64_MAX,
    -INT64_MAX,
    2**70,
    None,
    math.nan,
    math.inf,
    -math.inf,
    Decimal(2**64),
    0,
)
QUERIES = (
    "SELECT COUNT(*) AS n, SUM(income) AS s FROM people",
    "SELECT sex, AVG(income) AS m, VARIANCE(age) AS v, STDDEV(age) AS sd FROM people GROUP BY sex",
    "SELECT HISTOGRAM(age, 18, 90, 4) AS h FROM people",
    "SELECT MEDIAN(age) AS med FROM people",
    "SELECT region, COUNT(*) AS n FROM people GROUP BY region",
)


def _plan(sql: str) -> Plan:
    metadata = dpc.Metadata.from_yaml(dpc.demo_path("people.yaml"))
    return plan_query(parse_sql(sql, metadata), metadata, epsilon=1.0, delta=1e-6)


def _exact(plan: Plan, value: object, keys: list[tuple[ir.ScalarValue, ...]]) -> ir.ExactResult:
    """Every aggregate of every group set to ``value`` (histograms: every bin)."""
    groups: dict[tuple[ir.ScalarValue, ...], dict[str, object]] = {}
    for key in keys:
        groups[key] = {
            aggregate.name: ([value] * aggregate.bins if aggregate.kind == "histogram" else value)
            for aggregate in plan.exact.aggregates
        }
    return ir.ExactResult(groups)


@pytest.mark.parametrize("sql", QUERIES)
@pytest.mark.parametrize("value", EXTREMES, ids=repr)
def test_release_never_raises_on_exact_values(sql: str, value: object) -> None:
    plan = _plan(sql)
    keys: list[tuple[ir.ScalarValue, ...]] = list(plan.keys) if plan.keys is not None else []
    keys = keys or [("North",), ("South",)]
    release = release_plan(plan, _exact(plan, value, keys), alpha=0.05, rng=SeededRng(1))
    assert all(len(estimates) == len(release.value_columns) for _, estimates in release.rows)
