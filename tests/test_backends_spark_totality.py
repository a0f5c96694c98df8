"""The Spark engine evaluates every plan totally, whatever the data, and hides its own errors.

The privacy rule (docs/PRIVACY.md): whether a release answers, and the text of its error, must
depend on public inputs only. After the charge, evaluation is total: an integer ``+ - *`` whose
exact result leaves int64 is NULL, ``abs(-2**63)`` is NULL, ``x / 0`` is NULL, doubles follow
IEEE, narrow columns and literals follow the int64/double rules, each sum's exact total is clamped
to ``[-(2**63-1), 2**63-1]``; whatever the engine still raises becomes
``BackendError(ENGINE_FAILURE_MESSAGE)``, its text on the logger ``dpcurator.engine`` only.
Each case runs under ANSI mode on and off: the SparkSession may be the owner's.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator

import pyarrow as pa
import pytest

import dpcurator
from dpcurator.errors import ENGINE_FAILURE_MESSAGE, BackendError, DomainError
from dpcurator.query.backends import Backend, open_backend
from dpcurator.query.ir import (
    AggregatePlan,
    BinOp,
    Case,
    Col,
    Compare,
    ContributionBound,
    ExactAggregate,
    Expr,
    Func,
    GroupColumn,
    In,
    Lit,
)
from tests.backends_fixtures import spark  # noqa: F401  (session fixture)

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
    pytest.mark.xdist_group("spark_local"),  # one local Spark per run: backends_fixtures
]

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
BOUND = 2.0**62  # values are clamped to [-BOUND, BOUND] and rounded to integers
FILL = -12345  # what a NULL or NaN value adds: tells NULL from a number
VICTIM = 4322

PID, X, N, G, F, S, D = (Col(name) for name in ("pid", "x", "n", "g", "f", "s", "d"))
EDGE = pa.table(
    {
        "pid": pa.array([1, 2, 3, 4, 5, 6, 7], pa.int64()),
        "x": pa.array([INT64_MIN, INT64_MAX, -3, 0, 1, 5, None], pa.int64()),
        "n": pa.array([-7, 57, 2, 0, 1, 100, None], pa.int32()),
        "g": pa.array([16777216.0, -1.5, 0.25, math.nan, math.inf, 3.0, None], pa.float32()),
        "f": pa.array([1e300, math.nan, math.inf, -math.inf, -0.5, 2.5, None], pa.float64()),
        "s": pa.array(["a", "BB", "", None, "ccc", "d", "e"], pa.string()),
        "d": pa.array([10**37, -(10**37), 3, 0, 1, 5, None], pa.decimal128(38, 0)),
    }
)
"""Per pid, each case's values are given as the exact value of the expression (None: NULL)."""

NAN = math.nan
CASES: dict[str, list[tuple[Expr, list[object]]]] = {
    "int64_overflow_is_null": [
        (BinOp("*", X, Lit(INT64_MAX)), [None, None, None, 0, INT64_MAX, None, None]),
        (BinOp("+", X, X), [None, None, -6, 0, 2, 10, None]),
        (BinOp("-", X, Lit(1)), [None, INT64_MAX - 1, -4, -1, 0, 4, None]),
        (BinOp("*", Lit(-1), X), [None, -INT64_MAX, 3, 0, -1, -5, None]),
    ],
    "abs_of_int64_min_is_null": [
        (Func("abs", (X,)), [None, INT64_MAX, 3, 0, 1, 5, None]),
        (Func("abs", (F,)), [1e300, NAN, math.inf, math.inf, 0.5, 2.5, None]),
    ],
    "narrow_columns_and_literals_are_int64_and_double": [
        (
            BinOp("*", N, Lit(100_000_000)),
            [-7 * 10**8, 57 * 10**8, 2 * 10**8, 0, 10**8, 10**10, None],
        ),
        (BinOp("+", Lit(2**31 - 1), Lit(1)), [2**31] * 7),
        (BinOp("+", G, Lit(1)), [16777217.0, -0.5, 1.25, NAN, math.inf, 4.0, None]),
        (
            BinOp("*", Func("length", (S,)), Lit(2**40)),
            [2**40, 2**41, 0, None, 3 * 2**40, 2**40, 2**40],
        ),
    ],
    "decimal_columns_are_double": [
        (BinOp("*", D, Lit(100)), [1e39, -1e39, 300, 0, 100, 500, None]),
    ],
    "division_by_zero_is_null": [
        (BinOp("/", BinOp("*", X, Lit(2)), BinOp("-", PID, PID)), [None] * 7),
        (BinOp("/", F, Lit(0.0)), [None] * 7),
        (BinOp("/", BinOp("+", X, Lit(1)), Lit(2)), [-(2**62), None, -1.0, 0.5, 1.0, 3.0, None]),
        (BinOp("/", F, F), [1.0, NAN, NAN, NAN, 1.0, 1.0, None]),
    ],
    "nan_and_infinities_pass_through_functions": [
        (Func("floor", (F,)), [1e300, NAN, math.inf, -math.inf, -1.0, 2.0, None]),
        (Func("ceil", (F,)), [1e300, NAN, math.inf, -math.inf, 0.0, 3.0, None]),
        (Func("round", (F,)), [1e300, NAN, math.inf, -math.inf, -1.0, 3.0, None]),
        (BinOp("-", F, F), [0.0, NAN, NAN, NAN, 0.0, 0.0, None]),
        (Func("floor", (BinOp("*", X, Lit(3)),)), [None, None, -9, 0, 3, 15, None]),
    ],
}


def _observed(value: object) -> int:
    """What a sum over one row reports for ``value``: FILL for NULL/NaN, else clamp and round."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return FILL
    return round(min(max(float(value), -BOUND), BOUND))  # type: ignore[arg-type]


def _per_row_plan(exprs: list[Expr]) -> AggregatePlan:
    aggregates = tuple(
        ExactAggregate(f"v{i}", "sum", expr, -BOUND, BOUND, float(FILL))
        for i, expr in enumerate(exprs)
    )
    return AggregatePlan("t", aggregates, group_by=(GroupColumn("pid", PID),))


@pytest.fixture(params=["true", "false"], ids=["ansi", "legacy"])
def ansi(request: pytest.FixtureRequest, spark: object) -> Iterator[None]:  # noqa: F811
    """Run the test with ``spark.sql.ansi.enabled`` set as given (restored afterwards)."""
    conf = spark.conf  # type: ignore[attr-defined]
    before = conf.get("spark.sql.ansi.enabled")
    conf.set("spark.sql.ansi.enabled", request.param)
    yield
    conf.set("spark.sql.ansi.enabled", before)


@pytest.fixture(scope="module")
def engines(spark: object) -> Iterator[dict[str, Backend]]:  # noqa: F811
    """The Spark engine and the in-memory oracle on the edge table."""
    opened = {name: open_backend(EDGE, table="t", engine=name) for name in ("spark", "memory")}
    yield opened
    for backend in opened.values():
        backend.close()


@pytest.mark.parametrize("case", list(CASES))
def test_edge_values_match_the_oracle(case: str, engines: dict[str, Backend], ansi: None) -> None:
    exprs, values = zip(*CASES[case], strict=True)
    plan = _per_row_plan(list(exprs))
    expected = {
        (pid,): {f"v{i}": _observed(column[pid - 1]) for i, column in enumerate(values)}
        for pid in range(1, 8)
    }
    assert engines["spark"].compute(plan).groups == expected
    assert engines["memory"].compute(plan).groups == expected


def test_sums_are_exact_and_clamped_to_int64(engines: dict[str, Backend], ansi: None) -> None:
    """Seven rows of 2**62 sum to 7 * 2**62, beyond int64: the total is clamped, not refused;
    partial sums beyond int64 that come back within it are exact."""
    zero = BinOp("*", PID, Lit(0))
    crossing = Case(
        ((Compare("<=", PID, Lit(2)), Lit(2**62)), (Compare("=", PID, Lit(3)), Lit(-(2**62)))),
        Lit(0),
    )
    exprs: dict[str, Expr] = {
        "up": BinOp("+", zero, Lit(2**62)),
        "down": BinOp("-", zero, Lit(2**62)),
        "crossing": crossing,
    }
    sums = tuple(ExactAggregate(name, "sum", e, -BOUND, BOUND, 0.0) for name, e in exprs.items())
    squares = ExactAggregate("squares", "sum_squares", BinOp("+", zero, Lit(2**31)), 0, 2.0**31)
    plan = AggregatePlan("t", (*sums, squares))
    expected = {(): {"up": INT64_MAX, "down": -INT64_MAX, "crossing": 2**62, "squares": INT64_MAX}}
    assert engines["spark"].compute(plan).groups == expected
    assert engines["memory"].compute(plan).groups == expected


def _victim(value: Expr, otherwise: Expr) -> Case:
    return Case(((Compare("=", Col("pid"), Lit(VICTIM)), value),), otherwise)


AGE, INCOME = Col("age"), Col("income")
NEIGHBOUR_PLANS = {
    "overflow_in_where": AggregatePlan(
        "people",
        (ExactAggregate("n", "count"),),
        where=Compare("=", _victim(BinOp("*", AGE, Lit(INT64_MAX)), Lit(0)), Lit(0)),
    ),
    "overflow_in_bounded_value": AggregatePlan(
        "people",
        (
            ExactAggregate(
                "s", "sum", BinOp("*", AGE, _victim(Lit(INT64_MAX), Lit(1))), 0, 100, 0.0
            ),
        ),
        group_by=(GroupColumn("sex", Col("sex")),),
        group_keys=(("F",), ("M",)),
        bound=ContributionBound("pid"),
    ),
    "abs_of_int64_min": AggregatePlan(
        "people",
        (ExactAggregate("s", "sum", Func("abs", (_victim(Lit(INT64_MIN), AGE),)), 0, 100, 0.0),),
    ),
    "floor_of_infinity": AggregatePlan(
        "people",
        (ExactAggregate("n", "count"),),
        where=Compare(
            "=", Func("floor", (_victim(BinOp("*", INCOME, Lit(1e308)), Lit(0.0)),)), Lit(0)
        ),
    ),
    "division_by_zero": AggregatePlan(
        "people",
        (ExactAggregate("h", "histogram", _victim(BinOp("/", AGE, Lit(0)), AGE), 0, 100, bins=4),),
    ),
    "sum_beyond_int64_only_with_the_victim": AggregatePlan(
        "people",
        (ExactAggregate("s", "sum", BinOp("+", BinOp("*", AGE, Lit(0)), Lit(2**62)), 0, BOUND),),
        where=In(Col("pid"), (VICTIM, 1)),
    ),
}


def test_neighbours_never_raise(spark: object) -> None:  # noqa: F811
    """D and D minus the victim both answer every adversarial plan (the demo CSV's integer
    columns are read as INT, so this also checks their widening)."""
    path = str(dpcurator.demo_path("people.csv"))
    full = spark.read.csv(path, header=True, inferSchema=True)  # type: ignore[attr-defined]
    neighbours = {
        "D": open_backend(full, table="people"),
        "D minus the victim": open_backend(full.where(f"pid != {VICTIM}"), table="people"),
    }
    for name, plan in NEIGHBOUR_PLANS.items():
        for table, backend in neighbours.items():
            try:
                backend.compute(plan)
            except BackendError as exc:
                pytest.fail(f"{name} raised on {table}: {exc}")


def test_engine_text_goes_to_the_log_only(
    spark: object,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An owner's DataFrame whose column fails on one row: the analyst sees the one constant
    text, not Spark's (which quotes the value); the owner's log gets Spark's."""
    sf = pytest.importorskip("pyspark.sql.functions")
    frame = spark.createDataFrame(EDGE.select(["pid", "x"]))  # type: ignore[attr-defined]
    secret = sf.concat(sf.lit("secret value "), sf.col("x").cast("string"))
    frame = frame.withColumn(
        "x", sf.when(sf.col("pid") == 3, sf.raise_error(secret)).otherwise(sf.col("x"))
    )
    backend = open_backend(frame, table="t")
    plan = AggregatePlan("t", (ExactAggregate("s", "sum", X, -BOUND, BOUND, 0.0),))
    with (
        caplog.at_level(logging.ERROR, logger="dpcurator.engine"),
        pytest.raises(BackendError) as raised,
    ):
        backend.compute(plan)
    assert str(raised.value) == ENGINE_FAILURE_MESSAGE
    assert raised.value.__cause__ is None
    assert raised.value.__suppress_context__
    (record,) = [r for r in caplog.records if r.name == "dpcurator.engine"]
    assert record.exc_info is not None
    assert "secret value -3" in str(record.exc_info[1])


@pytest.mark.parametrize(
    ("values", "declared"),
    [(["1", "1.5"], "int"), (["1", "2**70"], "int"), (["x"], "float"), (["maybe"], "bool")],
)
def test_declared_types_are_checked_without_ansi_mode(
    spark: object,  # noqa: F811
    values: list[str],
    declared: str,
) -> None:
    """With ANSI mode off (an owner's session), a text that is no exact value of its declared
    type is still refused at open, not silently truncated or made NULL."""
    conf = spark.conf  # type: ignore[attr-defined]
    before = conf.get("spark.sql.ansi.enabled")
    conf.set("spark.sql.ansi.enabled", "false")
    try:
        with pytest.raises(DomainError, match=rf"'bad' of table 't' is declared '{declared}'"):
            open_backend(
                pa.table({"bad": values}), table="t", engine="spark", column_types={"bad": declared}
            )
    finally:
        conf.set("spark.sql.ansi.enabled", before)
