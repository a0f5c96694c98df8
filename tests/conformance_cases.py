"""The conformance cases of ``tests/test_backends_conformance.py``: its tables (PUMS variants,
Adult with a person id and an 8-row user id, a small table of NaN, ±inf and NULL), the plans every
engine must answer exactly as the in-memory oracle (:data:`PLANS`), the over-bound plans on Adult
(:data:`OVER_BOUND_PLANS`), the precomputed columns the ``duckdb_fixed`` engine opens with
(:func:`precomputed_for`) and the comparable form of a result (:func:`normalise`). Also read by
``tests/spark_cluster_driver.py``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from dpcurator.query.ir import (
    AggregatePlan,
    And,
    Between,
    BinCodeColumn,
    BinOp,
    BoundingColumn,
    Case,
    Col,
    Compare,
    ContributionBound,
    ExactAggregate,
    ExactResult,
    Expr,
    FixedPointColumn,
    Func,
    GroupColumn,
    In,
    IsNull,
    KeyCodeColumn,
    Lit,
    Not,
    Or,
    PrecomputedColumns,
)

ADULT_COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation",
    "relationship", "race", "sex", "capital_gain", "capital_loss", "hours_per_week",
    "native_country", "income",
]  # fmt: skip


def _adult(path: Path) -> pa.Table:
    options = pa_csv.ReadOptions(column_names=ADULT_COLUMNS)
    table = pa_csv.read_csv(path, read_options=options)
    table = table.filter(pc.is_valid(table["income"]))
    for name in table.column_names:
        if pa.types.is_string(table[name].type):
            index = table.column_names.index(name)
            table = table.set_column(index, name, pc.utf8_trim_whitespace(table[name]))
    return table


def _with_nan() -> pa.Table:
    x = [1.5, math.nan, None, 7.25, math.inf, -math.inf, 3.0, math.nan, 2.5, -2.5]
    return pa.table(
        {
            "g": ["a", "b", "a", None, "b", "a", "b", None, "a", "b"],
            "x": pa.array(x, type=pa.float64()),
            "n": pa.array([1, 2, None, 4, 5, 6, None, 8, 9, 10], type=pa.int64()),
        }
    )


def load_tables(shared_data: Path) -> dict[str, pa.Table]:
    """The conformance tables by name (also read by tests/spark_cluster_driver.py)."""
    pums = shared_data / "pums_smartnoise"
    adult = _adult(shared_data / "adult_uci" / "adult.data")
    row = pa.array(np.arange(adult.num_rows, dtype=np.int64))
    return {
        "pums": pa_csv.read_csv(pums / "PUMS.csv"),
        "pums_pid": pa_csv.read_csv(pums / "PUMS_pid.csv"),
        "pums_dup": pa_csv.read_csv(pums / "PUMS_dup.csv"),
        "pums_null": pa_csv.read_csv(pums / "PUMS_null.csv"),
        "adult": adult.append_column("pid", row).append_column("uid", pc.divide(row, 8)),
        "nan": _with_nan(),
    }


def precomputed_for(table: str) -> PrecomputedColumns:
    """For ``table``: a fixed-point column for each bare column summed by a plan (the first such
    sum's bounds and grid), a key-code column for each bare column grouped by a plan with
    public keys (every key any plan uses, plus one that none has, except on columns that a
    bounded plan groups: exactly its keys), and a bounding column for each bounded plan that can
    use one, so that the oracle comparisons go through the precomputed columns wherever they
    apply."""
    plans = [PLANS["sum_offset"], *PLANS.values(), *OVER_BOUND_PLANS]
    specs: dict[str, FixedPointColumn] = {}
    keys: dict[str, dict[object, None]] = {}
    bounding: dict[BoundingColumn, None] = {}
    for plan in [p for p in plans if p.table == table and p.bound.person_column and not p.where]:
        if not plan.group_by:
            bounding[BoundingColumn(plan.bound)] = None
        elif len(plan.group_by) == 1 and plan.group_keys and isinstance(plan.group_by[0].expr, Col):
            code = KeyCodeColumn(plan.group_by[0].expr.name, tuple(k for (k,) in plan.group_keys))
            bounding[BoundingColumn(plan.bound, code)] = None
    exact = {spec.group.column: spec.group for spec in bounding if spec.group is not None}
    for plan in plans:
        if plan.table != table:
            continue
        for agg in plan.aggregates:
            if agg.kind == "sum" and isinstance(agg.expr, Col):
                assert agg.lower is not None
                assert agg.upper is not None
                spec = FixedPointColumn(agg.expr.name, agg.lower, agg.upper, agg.grid_exponent)
                specs.setdefault(agg.expr.name, spec)
        for i, group in enumerate(plan.group_by):
            if plan.group_keys is not None and isinstance(group.expr, Col):
                found = keys.setdefault(group.expr.name, {})
                found.update(dict.fromkeys(key[i] for key in plan.group_keys))
    for column, found in keys.items():  # one more key, of the column's type, with no rows
        if column not in exact:
            found["no such key" if any(isinstance(k, str) for k in found) else 123_456_789] = None
    codes = [
        exact.get(column, KeyCodeColumn(column, tuple(found)))  # type: ignore[arg-type]
        for column, found in keys.items()
    ]
    return PrecomputedColumns(
        tuple(specs.values()), tuple(codes), tuple(bounding), _bin_codes(plans, table)
    )


def _bin_codes(plans: list[AggregatePlan], table: str) -> tuple[BinCodeColumn, ...]:
    """A bin-code column per bare column of ``table`` a plan takes a histogram of with 2^b bins
    (the first such histogram's bounds)."""
    bins: dict[str, BinCodeColumn] = {}
    for plan in [p for p in plans if p.table == table]:
        for agg in plan.aggregates:
            if (
                agg.kind == "histogram"
                and isinstance(agg.expr, Col)
                and agg.bins & (agg.bins - 1) == 0
            ):
                assert agg.lower is not None
                assert agg.upper is not None
                spec = BinCodeColumn(agg.expr.name, float(agg.lower), float(agg.upper), 30)
                bins.setdefault(agg.expr.name, spec)
    return tuple(bins.values())


def normalise(result: ExactResult) -> dict[tuple[object, ...], dict[str, object]]:
    """Make results comparable with ==, checking value types on the way."""
    normalised: dict[tuple[object, ...], dict[str, object]] = {}
    for key, values in result.groups.items():
        row: dict[str, object] = {}
        for name, value in values.items():
            if isinstance(value, np.ndarray):
                assert value.dtype == np.int64
                row[name] = tuple(value.tolist())
            else:
                assert type(value) is int, (name, value)
                row[name] = value
        normalised[key] = row
    return normalised


def count(name: str = "n") -> ExactAggregate:
    return ExactAggregate(name, "count")


def total(name: str, expr: object, lower: float, upper: float, **kw: object) -> ExactAggregate:
    return ExactAggregate(name, "sum", expr, lower, upper, **kw)  # type: ignore[arg-type]


AGE, INCOME, SEX, EDUC = Col("age"), Col("income"), Col("sex"), Col("educ")


def fine_bin(expr: Expr, lower: float, upper: float, resolution: int, first: int) -> Expr:
    """floor((expr - lower) / (upper - lower) * resolution) - first: a quantile window's value."""
    unit = BinOp("/", BinOp("-", expr, Lit(lower)), Lit(upper - lower))
    return BinOp("-", Func("floor", (BinOp("*", unit, Lit(float(resolution))),)), Lit(float(first)))


AGE_BANDS = Case(
    ((Compare("<", AGE, Lit(30)), Lit("young")), (Compare("<", AGE, Lit(60)), Lit("middle"))),
    Lit("old"),
)

PLANS: dict[str, AggregatePlan] = {
    "count": AggregatePlan("pums", (count(),)),
    "count_empty": AggregatePlan(
        "pums",
        (
            count(),
            total("s", AGE, 0, 100, fill=0.0),
            ExactAggregate("h", "histogram", AGE, 0, 100, bins=4),
        ),
        where=Compare(">", AGE, Lit(1000)),
    ),
    "grouped_empty": AggregatePlan(
        "pums", (count(),), where=Compare(">", AGE, Lit(1000)), group_by=(GroupColumn("s", SEX),)
    ),
    "sum_clamped": AggregatePlan("pums", (total("s", INCOME, 0, 100_000, fill=0.0),)),
    "sum_fine_grid": AggregatePlan(
        "pums_pid",
        (total("s", BinOp("/", AGE, Lit(3)), 0, 40, fill=0.0, grid_exponent=-3),),
    ),
    "sum_coarse_grid": AggregatePlan(
        "pums_pid", (total("s", INCOME, 1_000, 250_000.5, fill=5_000.0, grid_exponent=7),)
    ),
    "sum_offset": AggregatePlan(
        "pums",
        (
            count(),
            total("s", AGE, 10, 80.5, fill=None, grid_exponent=-2, offset=181),
            total("t", INCOME, 0, 1e5, fill=5e4, grid_exponent=4, offset=-77),
        ),
        group_by=(GroupColumn("sex", SEX),),
    ),
    "sum_squares": AggregatePlan(
        "pums",
        (ExactAggregate("q", "sum_squares", BinOp("-", AGE, Lit(40)), -20, 35.5, 0.0, 2),),
        group_by=(GroupColumn("sex", SEX),),
    ),
    "histogram": AggregatePlan(
        "pums",
        (ExactAggregate("h", "histogram", AGE, 10, 90, None, 0, 7), count()),
        group_by=(GroupColumn("married", Col("married")),),
    ),
    "histogram_ungrouped": AggregatePlan(  # a quantile's plan: counted per bin (GROUP BY)
        "pums",
        (count(), ExactAggregate("h", "histogram", AGE, 10, 90, None, 0, 7), count("m")),
        where=Compare(">", INCOME, Lit(1000)),
    ),
    "histogram_missing": AggregatePlan(  # NULL and NaN without fill: in no bin, still rows
        "nan", (ExactAggregate("h", "histogram", Col("x"), -5, 5, None, 0, 3), count())
    ),
    # A quantile's levels (dpcurator.query.plan.quantile): 2^b bins of the bounds, then windows
    # of fine bins (floor((x - lower) / (upper - lower) * 2^m) - first over [0, bins]), which
    # duckdb_fixed reads from a bin-code column: NaN, NULL, ±inf and values out of the bounds.
    "quantile_levels": AggregatePlan(
        "nan",
        (
            ExactAggregate("h", "histogram", Col("x"), -5, 5, None, 0, 4),
            ExactAggregate("w", "histogram", fine_bin(Col("x"), -5.0, 5.0, 64, 16), 0, 8, bins=8),
            ExactAggregate("f", "histogram", Col("x"), -5, 5, 1.0, 0, 8),
        ),
    ),
    "quantile_levels_grouped": AggregatePlan(
        "pums",
        (
            ExactAggregate("h", "histogram", AGE, 0, 100, None, 0, 16),
            ExactAggregate(
                "w",
                "histogram",
                Case(
                    (
                        (Compare("=", SEX, Lit(0)), fine_bin(AGE, 0.0, 100.0, 128, 16)),
                        (Compare("=", SEX, Lit(1)), fine_bin(AGE, 0.0, 100.0, 128, 48)),
                    )
                ),
                0,
                16,
                bins=16,
            ),
        ),
        group_by=(GroupColumn("sex", SEX),),
        group_keys=((0,), (1,)),
    ),
    "histogram_empty": AggregatePlan(
        "pums",
        (ExactAggregate("h", "histogram", AGE, 0, 100, None, 0, 3), count()),
        where=Compare(">", AGE, Lit(1000)),
    ),
    "filters_every_node": AggregatePlan(
        "pums",
        (count(), total("s", AGE, 0, 100, fill=0.0)),
        where=And(
            (
                Or((Compare(">=", AGE, Lit(25)), Not(Compare("=", SEX, Lit(1))))),
                Not(IsNull(INCOME)),
                In(EDUC, (9, 11, 13, 14)),
                Between(AGE, Lit(18), Lit(70.5)),
                Compare("!=", Col("race"), Lit(2)),
                Compare("<=", BinOp("*", AGE, Lit(2)), BinOp("+", INCOME, Lit(150))),
            )
        ),
        group_by=(GroupColumn("educ", EDUC),),
    ),
    "derived_groups": AggregatePlan(
        "pums",
        (count(), total("s", INCOME, 0, 200_000, fill=0.0, grid_exponent=3)),
        group_by=(
            GroupColumn("band", AGE_BANDS),
            GroupColumn("k", Func("floor", (BinOp("/", INCOME, Lit(50_000)),))),
        ),
    ),
    "functions": AggregatePlan(
        "pums",
        (
            count(),
            total(
                "r",
                Func("round", (BinOp("/", BinOp("-", AGE, Lit(50)), Lit(2)),)),
                -30,
                30,
                fill=0.0,
            ),
            total("c", Func("ceil", (BinOp("/", AGE, Lit(7)),)), 0, 20, fill=0.0),
            total("a", Func("abs", (BinOp("-", AGE, Lit(45)),)), 0, 60, fill=0.0),
        ),
        group_by=(GroupColumn("sex", SEX),),
    ),
    "division_by_zero": AggregatePlan(
        "pums",
        (total("s", BinOp("/", INCOME, SEX), 0, 100_000, fill=1.0), count()),
        group_by=(GroupColumn("sex", SEX),),
    ),
    "public_keys": AggregatePlan(
        "pums",
        (count(), total("s", AGE, 0, 100, fill=0.0)),
        group_by=(GroupColumn("educ", EDUC), GroupColumn("sex", SEX)),
        group_keys=((9, 0), (9, 1), (13, 1), (99, 0), (None, 1)),
    ),
    "public_keys_empty": AggregatePlan(
        "pums", (count(),), group_by=(GroupColumn("educ", EDUC),), group_keys=()
    ),
    "null_fill": AggregatePlan(
        "pums_null",
        (
            count(),
            total("age", AGE, 0, 100, fill=30.0),
            total("income_skip", INCOME, 0, 500_000),
            ExactAggregate("h", "histogram", AGE, 0, 100, 100.0, 0, 5),
        ),
        group_by=(GroupColumn("married", Col("married")),),
    ),
    "null_filters": AggregatePlan(
        "pums_null",
        (count(),),
        where=Or((IsNull(AGE), Compare(">", Func("coalesce", (INCOME, Lit(0))), Lit(20_000)))),
        group_by=(GroupColumn("null_sex", IsNull(SEX)), GroupColumn("sex", SEX)),
    ),
    "in_with_null": AggregatePlan(
        "pums_null",
        (count(),),
        where=Not(In(EDUC, (9, None))),
        group_by=(GroupColumn("x", In(EDUC, ())),),
    ),
    "nan_fill": AggregatePlan(
        "nan",
        (
            count(),
            total("s", Col("x"), -5, 5, fill=1.0, grid_exponent=-2),
            ExactAggregate("q", "sum_squares", Col("x"), -5, 5, None, -4),
            ExactAggregate("h", "histogram", Col("x"), -5, 5, 0.0, 0, 4),
            total("m", Col("n"), 0, 8),
        ),
        group_by=(GroupColumn("g", Col("g")),),
    ),
    "strings": AggregatePlan(
        "adult",
        (count(), total("hours", Col("hours_per_week"), 0, 80, fill=0.0)),
        where=And(
            (
                Compare("=", Col("workclass"), Lit("Private")),
                Compare(">", Func("length", (Col("occupation"),)), Lit(5)),
            )
        ),
        group_by=(
            GroupColumn("edu", Func("upper", (Col("education"),))),
            GroupColumn("sex", Func("lower", (Col("sex"),))),
        ),
    ),
    "adult_income": AggregatePlan(
        "adult",
        (
            count(),
            total("gain", Col("capital_gain"), 0, 10_000, fill=0.0, grid_exponent=5),
            ExactAggregate("h", "histogram", Col("age"), 17, 90, 17.0, 0, 8),
        ),
        where=In(Col("race"), ("White", "Black", "Other")),
        group_by=(GroupColumn("income", Col("income")), GroupColumn("race", Col("race"))),
    ),
    "within_bounds_rows": AggregatePlan(
        "pums_pid",
        (count(), ExactAggregate("p", "count_persons"), total("s", AGE, 0, 100, fill=0.0)),
        group_by=(GroupColumn("educ", EDUC),),
        bound=ContributionBound("pid", 1, 1, 3),
    ),
    "within_bounds_dup": AggregatePlan(
        "pums_dup",
        (count(), ExactAggregate("p", "count_persons"), total("s", INCOME, 0, 90_000, fill=0.0)),
        group_by=(GroupColumn("sex", SEX),),
        bound=ContributionBound("pid", 1, 4, 11),
    ),
    "within_bounds_null_pid": AggregatePlan(
        "pums_null",
        (count(), ExactAggregate("p", "count_persons"), total("s", AGE, 0, 100, fill=50.0)),
        bound=ContributionBound("pid", 2, 4, 0),
    ),
    "within_bounds_keys": AggregatePlan(
        "pums_pid",
        (count(), ExactAggregate("p", "count_persons"), total("s", AGE, 0, 100, fill=0.0)),
        group_by=(GroupColumn("educ", EDUC),),
        group_keys=tuple((educ,) for educ in range(1, 17)),
        bound=ContributionBound("pid", 5, 1, 3),
    ),
    "within_bounds_adult": AggregatePlan(
        "adult",
        (
            ExactAggregate("p", "count_persons"),
            ExactAggregate("h", "histogram", Col("age"), 17, 90, bins=6),
        ),
        group_by=(GroupColumn("sex", Col("sex")),),
        bound=ContributionBound("pid", 3, 2, 5),
    ),
}


OVER = "adult"  # pid: row // 8 in "uid"; persons have ~8 rows spread over several educations


EDUCATIONS = (  # Adult's public categories of education
    *("Preschool", "1st-4th", "5th-6th", "7th-8th", "9th", "10th", "11th", "12th", "HS-grad"),
    *("Some-college", "Assoc-voc", "Assoc-acdm", "Bachelors", "Masters", "Prof-school"),
    "Doctorate",
)
BY_EDUCATION = GroupColumn("education", Col("education"))
PERSONS = (count(), ExactAggregate("p", "count_persons"))
OVER_ROWS = {
    k: AggregatePlan(OVER, PERSONS, bound=ContributionBound("uid", 1, k, 42)) for k in (1, 3)
}
OVER_GROUPS = {
    m: AggregatePlan(
        OVER,
        PERSONS,
        group_by=(BY_EDUCATION,),
        group_keys=tuple((education,) for education in EDUCATIONS),
        bound=ContributionBound("uid", m, 1, 7),
    )
    for m in (1, 2)
}
OVER_STABLE = replace(
    OVER_GROUPS[1],
    aggregates=(count(), total("h", Col("hours_per_week"), 0, 99, fill=0.0)),
    bound=ContributionBound("uid", 1, 2, 5),
)
OVER_BOUND_PLANS = [*OVER_ROWS.values(), *OVER_GROUPS.values(), OVER_STABLE]
