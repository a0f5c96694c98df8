"""Post-charge evaluation is total and identical on every engine (the rules of dpcurator.query.ir).

Whether a release answers, and its error text, must not depend on private data: an engine that
raises on one person's value (an int64 overflow, abs(-2**63), a division by zero, an infinite
float, a sum beyond int64) tells the analyst about that person without noise. So every engine
evaluates such values to NULL, ±inf or NaN (or clamps the sum) exactly as the in-memory oracle
does, never raises on them, and reports a failure it meets anyway with the one constant
``ENGINE_FAILURE_MESSAGE`` (details to the logger ``dpcurator.engine``).

The neighbour checks compare the demo table D with D minus the victim (pid 4322).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pytest

import dpcurator
from dpcurator.errors import ENGINE_FAILURE_MESSAGE, BackendError
from dpcurator.query.backends import Backend, DuckDBBackend, open_backend
from dpcurator.query.backends.duckdb_query import build_query, cube_serves
from dpcurator.query.frontend.sql import parse_sql
from dpcurator.query.ir import (
    AggregatePlan,
    BinOp,
    Case,
    Col,
    Compare,
    ExactAggregate,
    ExactResult,
    FixedPointColumn,
    Func,
    GroupColumn,
    In,
    IsNull,
    KeyCodeColumn,
    Lit,
    PrecomputedColumns,
)
from dpcurator.query.plan.planner import plan_query
from dpcurator.query.schema import Metadata

VICTIM = 4322
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
ENGINES = ["memory", "duckdb", "duckdb_fixed", "polars"]
#: Precomputed columns of the "duckdb_fixed" engine on the demo table: a fixed-point income on
#: bounds that let a group total exceed int64, and key codes of sex (so a cube is built).
FIXED = PrecomputedColumns(
    fixed_point=(FixedPointColumn("income", 0.0, 2.0**61, 0),),
    key_codes=(KeyCodeColumn("sex", ("F", "M")),),
)


@pytest.fixture(scope="module")
def metadata() -> Metadata:
    return Metadata.from_yaml(dpcurator.demo_path("people.yaml"))


@pytest.fixture(scope="module")
def people() -> pa.Table:
    return pa_csv.read_csv(dpcurator.demo_path("people.csv"))


@pytest.fixture(scope="module")
def opened(people: pa.Table, metadata: Metadata) -> Iterator[Callable[[str, bool], Backend]]:
    """Open (once) an engine on the demo table D, or on D minus the victim (``neighbour``)."""
    neighbour = people.filter(pc.not_equal(people["pid"], VICTIM))
    assert neighbour.num_rows == people.num_rows - 1
    backends: dict[tuple[str, bool], Backend] = {}

    def get(engine: str, minus_victim: bool) -> Backend:
        if (engine, minus_victim) not in backends:
            backends[engine, minus_victim] = open_backend(
                neighbour if minus_victim else people,
                table="people",
                engine="duckdb" if engine == "duckdb_fixed" else engine,
                column_types=metadata.column_types(),
                precomputed=FIXED if engine == "duckdb_fixed" else None,
            )
        return backends[engine, minus_victim]

    yield get
    for backend in backends.values():
        backend.close()


def normalise(result: ExactResult) -> dict[object, dict[str, object]]:
    """Comparable with ==: arrays as lists, NaN keys as the string 'NaN' (NaN != NaN)."""

    def key(value: object) -> object:
        return "NaN" if isinstance(value, float) and math.isnan(value) else value

    return {
        tuple(map(key, group)): {
            name: value.tolist() if isinstance(value, np.ndarray) else value
            for name, value in values.items()
        }
        for group, values in result.groups.items()
    }


def on_all_engines(
    opened: Callable[[str, bool], Backend], plan: AggregatePlan
) -> dict[object, dict[str, object]]:
    """The oracle's result on D and on D minus the victim, after checking every engine returns
    exactly the same on both tables (any exception fails the test)."""
    results = {}
    for minus_victim in (False, True):
        oracle = normalise(opened("memory", minus_victim).compute(plan))
        for engine in ENGINES[1:]:
            assert normalise(opened(engine, minus_victim).compute(plan)) == oracle, engine
        results[minus_victim] = oracle
    return results[False]


# ----------------------------------------------------------------------------------------------
# Planner-built plans: SQL an analyst can send, aimed at the victim's row


ADVERSARIAL_SQL = [
    # int64 overflow on the victim's row only (DuckDB raised "... (31 * 9223372036854775807)")
    "SELECT COUNT(*) FROM people "
    "WHERE (CASE WHEN pid = 4322 THEN age * 9223372036854775807 ELSE 0 END) = 0",
    "SELECT COUNT(*) FROM people WHERE (CASE WHEN pid = 4322 THEN age + 9223372036854775807 "
    "ELSE 0 END) IS NULL",
    "SELECT COUNT(*) FROM people WHERE abs(CASE WHEN pid = 4322 THEN -9223372036854775807 - age "
    "ELSE 0 END) IS NULL",
    # division by zero on the victim's row only
    "SELECT COUNT(*) FROM people WHERE age / (pid - 4322) > 0",
    # infinities and NaN on the victim's row, then rounded, floored, compared
    "SELECT COUNT(*) FROM people WHERE (CASE WHEN pid = 4322 THEN income * 1e308 * 10 "
    "ELSE 0 END) > 1",
    "SELECT COUNT(*) FROM people WHERE round(CASE WHEN pid = 4322 THEN age * 1e308 * 10 "
    "- age * 1e308 * 10 ELSE 1 END) = 1",
    "SELECT COUNT(*) FROM people WHERE floor(age * 1e300 * 1e300) > ceil(income * 1e300)",
    # sums whose exact total leaves int64 (refused after the charge on main: a count oracle)
    "SELECT SUM(age * 100000000000000000) FROM people",
    "SELECT sex, SUM(age * 100000000000000000) FROM people GROUP BY sex",
    "SELECT SUM(CASE WHEN pid = 4322 THEN 4611686018427387904 ELSE 0 END) FROM people",
]


@pytest.mark.parametrize("sql", ADVERSARIAL_SQL)
def test_adversarial_queries_answer_alike_on_neighbours(
    sql: str, metadata: Metadata, opened: Callable[[str, bool], Backend]
) -> None:
    plan = plan_query(parse_sql(sql, metadata), metadata, epsilon=1.0).exact
    on_all_engines(opened, plan)


def test_group_totals_beyond_int64_are_clamped(opened: Callable[[str, bool], Backend]) -> None:
    """Exact sums, clamped to ±(2**63-1) grid units, on every path: rows, fixed-point column
    (offset and fill applied to group totals) and cube."""
    big = BinOp("*", Col("age"), Lit(2**56))  # 18 * 2**56 > 2**60 per row, 5,000 rows
    sums = (
        ExactAggregate("up", "sum", big, 0, 2.0**62, 0.0),
        ExactAggregate("down", "sum", BinOp("-", Lit(0), big), -(2.0**62), 0, 0.0),
        ExactAggregate("squares", "sum_squares", BinOp("*", Col("age"), Lit(2**26)), 0, 2.0**31),
        # one row's grid value fits in int64 only thanks to the offset; the total does not
        ExactAggregate("fixed", "sum", Col("income"), 0, 2.0**61, 0.0, 0, offset=-(2**62)),
    )
    ungrouped = on_all_engines(opened, AggregatePlan("people", sums))
    assert ungrouped[()] == {
        "up": INT64_MAX,
        "down": -INT64_MAX,
        "squares": INT64_MAX,
        "fixed": INT64_MAX,
    }
    grouped = AggregatePlan(
        "people",
        (sums[3],),
        group_by=(GroupColumn("sex", Col("sex")),),
        group_keys=(("F",), ("M",)),
    )
    backend = opened("duckdb_fixed", False)
    assert isinstance(backend, DuckDBBackend)
    assert cube_serves(grouped, backend._hidden["people"])
    plain = AggregatePlan("people", (sums[3],))
    assert "__dp_fp" in build_query(plain, None, backend._hidden["people"])[0]
    assert on_all_engines(opened, grouped) == {
        ("F",): {"fixed": INT64_MAX},
        ("M",): {"fixed": INT64_MAX},
    }


# ----------------------------------------------------------------------------------------------
# Hand-built plans on special values


SPECIAL = pa.table(
    {
        "x": pa.array([1.5, math.nan, math.inf, -math.inf, None, math.nan, 0.0, -0.0]),
        "n": pa.array(
            [INT64_MAX, INT64_MIN, 0, -1, 5, None, 9_007_199_254_740_993, 2], type=pa.int64()
        ),
    }
)
X, N = Col("x"), Col("n")


def count_where(where: object) -> AggregatePlan:
    return AggregatePlan("t", (ExactAggregate("c", "count"),), where=where)  # type: ignore[arg-type]


SPECIAL_PLANS = {
    "mul_overflow_is_null": count_where(IsNull(BinOp("*", N, Lit(2)))),
    "add_overflow_is_null": count_where(IsNull(BinOp("+", N, Lit(1)))),
    "sub_overflow_is_null": count_where(IsNull(BinOp("-", N, Lit(1)))),
    "abs_min_is_null": count_where(IsNull(Func("abs", (N,)))),
    "floor_of_int_is_int": count_where(IsNull(BinOp("*", Func("floor", (N,)), Lit(2)))),
    "divide_by_zero_is_null": count_where(IsNull(BinOp("/", Lit(1), BinOp("*", X, Lit(0))))),
    "float_overflow_is_inf": count_where(Compare(">", BinOp("*", X, Lit(1e308)), Lit(1e308))),
    "nan_is_above_inf": count_where(Compare(">", X, Lit(math.inf))),
    "nan_equals_nan": count_where(Compare("=", X, BinOp("*", X, Lit(1)))),
    "nan_in_list": count_where(In(X, (math.nan, 2.0))),
    "int_compares_as_double": count_where(Compare("=", N, Lit(9_007_199_254_740_992.0))),
    "case_mixing_int_and_float_is_float": count_where(
        IsNull(BinOp("*", Case(((Compare(">", X, Lit(1.0)), N),), Lit(0.5)), Lit(4)))
    ),
    "round_floor_ceil_of_specials": count_where(
        Compare("=", Func("round", (X,)), Func("ceil", (Func("floor", (X,)),)))
    ),
    "sum_of_infinities_is_clamped": AggregatePlan(
        "t", (ExactAggregate("s", "sum", BinOp("*", X, Lit(1e308)), -10.0, 10.0, 3.0),)
    ),
    "grouped_by_nan": AggregatePlan(
        "t", (ExactAggregate("c", "count"),), group_by=(GroupColumn("x", X),)
    ),
    "histogram_of_specials": AggregatePlan(
        "t", (ExactAggregate("h", "histogram", BinOp("*", N, N), -4.0, 4.0, 0.0, bins=4),)
    ),
}


@pytest.fixture(scope="module")
def special() -> Iterator[dict[str, Backend]]:
    backends = {
        engine: open_backend(SPECIAL, table="t", engine=engine)
        for engine in ("memory", "duckdb", "polars")
    }
    yield backends
    for backend in backends.values():
        backend.close()


@pytest.mark.parametrize("plan_id", SPECIAL_PLANS)
def test_special_values_match_the_oracle(plan_id: str, special: dict[str, Backend]) -> None:
    plan = SPECIAL_PLANS[plan_id]
    oracle = normalise(special["memory"].compute(plan))
    for engine in ("duckdb", "polars"):
        assert normalise(special[engine].compute(plan)) == oracle, engine


def test_the_oracle_applies_the_rules(special: dict[str, Backend]) -> None:
    """Counts of some special plans, worked out by hand from the rules of dpcurator.query.ir."""
    expected = {
        "mul_overflow_is_null": 3,  # MAX * 2, MIN * 2, NULL
        "add_overflow_is_null": 2,  # MAX + 1, NULL
        "sub_overflow_is_null": 2,  # MIN - 1, NULL
        "abs_min_is_null": 2,  # abs(MIN), NULL
        "divide_by_zero_is_null": 4,  # 1 / (x * 0) for x = 1.5, 0.0, -0.0 and NULL
        "nan_is_above_inf": 2,  # the two NaN
        "nan_equals_nan": 7,  # every x but NULL equals itself
        "int_compares_as_double": 1,  # 2**53 + 1 is 2**53 as a double
    }
    counts = {
        name: special["memory"].compute(SPECIAL_PLANS[name]).groups[()]["c"] for name in expected
    }
    assert counts == expected


# ----------------------------------------------------------------------------------------------
# Failures: one constant text, details in the owner's log


@pytest.mark.parametrize("engine", ["memory", "duckdb", "polars"])
def test_engine_failures_show_one_text_and_log_the_details(
    engine: str, caplog: pytest.LogCaptureFixture, opened: Callable[[str, bool], Backend]
) -> None:
    """A hand-built type mismatch (the planner refuses it) that fails on the victim's row."""
    victim_text = Case(((Compare("=", Col("pid"), Lit(VICTIM)), Col("region")),), Lit(0))
    where = Compare(">", BinOp("+", victim_text, Lit(1)), Lit(0))
    plan = AggregatePlan("people", (ExactAggregate("c", "count"),), where=where)
    with (
        caplog.at_level(logging.ERROR, logger="dpcurator.engine"),
        pytest.raises(BackendError) as raised,
    ):
        opened(engine, False).compute(plan)
    assert str(raised.value) == ENGINE_FAILURE_MESSAGE
    assert raised.value.__cause__ is None
    (record,) = [r for r in caplog.records if r.name == "dpcurator.engine"]
    assert record.exc_info is not None
