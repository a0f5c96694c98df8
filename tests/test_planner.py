"""The planner: sensitivities and budget splits against hand-computed values; no data is read."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

import pytest

import dpcurator.query.frontend.builder as qb
from dpcurator.core.measures import ApproxDP, PureDP
from dpcurator.errors import DomainError, ParameterError, UnsupportedQueryError
from dpcurator.mechanisms import Laplace
from dpcurator.query import ir
from dpcurator.query.backends.grid import bin_index
from dpcurator.query.frontend.row_expressions import col
from dpcurator.query.plan.analysis import infer_bounds, is_integer_valued, public_keys
from dpcurator.query.plan.bounds import plan_bounds
from dpcurator.query.plan.facts import choose_grid_exponent, grid_units
from dpcurator.query.plan.limits import MAX_AGGREGATES, MIN_EPSILON
from dpcurator.query.plan.planner import plan_query
from dpcurator.query.precomputed import precomputed_columns
from dpcurator.query.privacy_unit import PrivacyUnit
from dpcurator.query.schema import Metadata

ROW = Metadata.from_dict(
    {
        "table": "t",
        "columns": {
            "age": {"type": "int", "lower": 0, "upper": 100},
            "x": {"type": "float", "lower": -1.0, "upper": 3.0},
            "sex": {"type": "string", "keys": ["F", "M"]},
            "city": {"type": "string"},
            "flag": {"type": "bool"},
            "free": {"type": "float"},
        },
    }
)
USER = Metadata.from_dict(
    {
        "table": "t",
        "person_column": "pid",
        "max_rows_per_person": 2,
        "max_groups_per_person": 3,
        "columns": {
            "pid": {"type": "int"},
            "age": {"type": "int", "lower": 0, "upper": 100},
            "income": {"type": "int", "lower": 0, "upper": 500000},
            "region": {"type": "string", "keys": ["N", "E", "S", "W"]},
            "sex": {"type": "string", "keys": ["F", "M"]},
            "city": {"type": "string"},
        },
    }
)


def _parts(plan_output: object) -> list[tuple[str, int, int, Fraction]]:
    return [
        (p.role, p.sensitivity, p.grid_exponent, p.epsilon)
        for p in plan_output.parts  # type: ignore[attr-defined]
    ]


def test_row_level_count_sum_mean_sensitivities() -> None:
    query = qb.Query("t").agg(qb.count(), qb.sum_("age"), qb.mean("age"), qb.sum_("x"))
    plan = plan_query(query, ROW, epsilon=1)
    count, total, mean, float_sum = plan.outputs
    # weights (planner docstring): 1 per count and sum, 1 + q^(1/3) = 1.6934 for the mean (q = 1/3)
    third = Fraction(10_000, 46_934)
    assert _parts(count) == [("count", 1, 0, third)]
    assert _parts(total) == [("sum", 100, 0, third)]  # integer column: grid 1, max |value| 100
    # mean: centre 50, centred values in [-50, 50]: sensitivity 50; count : sum = 0.6934 : 1
    assert mean.centre == 50.0
    assert _parts(mean) == [("count", 1, 0, Fraction(6_934, 46_934)), ("sum", 50, 0, third)]
    # float sum over [-1, 3]: grid 2^(floor(log2 3) - 20) = 2^-19, max |value| = 3 * 2^19 units
    assert _parts(float_sum) == [("sum", 3 * 2**19, -19, third)]
    assert float_sum.parts[0].mechanism == Laplace(Fraction(3 * 2**19) / third)
    assert plan.cost == PureDP(1)
    assert plan.exact.bound == ir.ContributionBound(None, 1, 1)


def test_float_mean_sums_the_column_minus_an_offset_and_far_bounds_centre_each_value() -> None:
    # x in [-1, 3]: grid 2^-19 of [-1, 3]; centre 1 = 2^19 grid steps, subtracted per group
    (mean,) = plan_query(qb.Query("t").agg(qb.mean("x")), ROW, epsilon=1).outputs
    (_, exact_sum) = plan_query(qb.Query("t").agg(qb.mean("x")), ROW, epsilon=1).exact.aggregates
    assert (exact_sum.expr, exact_sum.lower, exact_sum.upper) == (ir.Col("x"), -1.0, 3.0)
    assert (exact_sum.grid_exponent, exact_sum.offset) == (-19, 2**19)
    assert mean.centre == 1.0
    assert _parts(mean)[1][:3] == ("sum", 2 * 2**19, -19)  # max |value - centre| = 2
    # Bounds far from 0 for their width: the uncentred grid would be 2^20 times coarser than the
    # centred one, so values are centred before rounding (offset 0, the finer grid).
    far = Metadata.from_dict(
        {"table": "t", "columns": {"y": {"type": "float", "lower": 1e6, "upper": 1e6 + 4}}}
    )
    plan = plan_query(qb.Query("t").agg(qb.mean("y")), far, epsilon=1)
    far_sum = plan.exact.aggregates[1]
    assert far_sum.offset == 0
    assert far_sum.expr == ir.BinOp("-", ir.Col("y"), ir.Lit(1e6 + 2))
    assert (far_sum.lower, far_sum.upper, far_sum.grid_exponent) == (-2.0, 2.0, -19)
    assert plan.outputs[0].centre == 1e6 + 2
    low, high = grid_units(-1.0, -19) - 2**19, grid_units(3.0, -19) - 2**19
    assert PrivacyUnit().sum_l1(low, high, grouped=False) == 2 * 2**19


def test_user_level_grouped_sensitivities_use_min_of_groups_and_keys() -> None:
    by_sex = qb.Query("t").group_by("sex").agg(qb.count(), qb.sum_("income"), qb.count_persons())
    plan = plan_query(by_sex, USER, epsilon=3)
    count, total, persons = plan.outputs
    # r = 2 rows per group, g = min(3 groups per person, 2 keys) = 2; the distinct-person count
    # has sensitivity g instead of r·g: weight (2/4)^(2/3) = 0.63 against 1 and 1
    assert _parts(count) == [("count", 4, 0, Fraction(300, 263))]
    assert _parts(total) == [("sum", 4 * 500000, 0, Fraction(300, 263))]
    assert _parts(persons) == [("count", 2, 0, Fraction(189, 263))]
    assert plan.exact.bound == ir.ContributionBound("pid", 2, 2)
    by_region = qb.Query("t").group_by("region").agg(qb.count())
    (count,) = plan_query(by_region, USER, epsilon=1).outputs
    assert _parts(count) == [("count", 6, 0, Fraction(1))]  # r·g = 2·3
    ungrouped = plan_query(qb.Query("t").agg(qb.count()), USER, epsilon=1)
    assert _parts(ungrouped.outputs[0]) == [("count", 2, 0, Fraction(1))]  # g = 1
    assert ungrouped.exact.bound == ir.ContributionBound("pid", 1, 2)


def test_precomputed_bounding_columns_have_the_bounds_of_the_plans_they_serve() -> None:
    """One bounding column for ungrouped plans and one per column with public keys, each with
    exactly the bound and keys that plan_query gives a plan of that shape; none row-level."""
    specs = precomputed_columns(USER)
    assert [code.column for code in specs.key_codes] == ["region", "sex"]
    by_group = {None if s.group is None else s.group.column: s for s in specs.bounding}
    assert set(by_group) == {None, "region", "sex"}
    ungrouped = plan_query(qb.Query("t").agg(qb.count()), USER, epsilon=1).exact
    assert by_group[None].bound == ungrouped.bound
    for column in ("region", "sex"):
        plan = plan_query(qb.Query("t").group_by(column).agg(qb.count()), USER, epsilon=1).exact
        spec = by_group[column]
        assert spec.bound == plan.bound
        assert spec.group is not None
        assert [(key,) for key in spec.group.keys] == list(plan.group_keys or ())
    assert precomputed_columns(ROW).bounding == ()


def test_variance_parts_and_quantile_step() -> None:
    plan = plan_query(
        qb.Query("t").group_by("region").agg(qb.variance("age"), qb.median("age")), USER, epsilon=2
    )
    variance, median = plan.outputs
    # count r·g = 6; centred sum 6·50; centred squares 6·2500; weights (1-2q)^(2/3) = 0.4807,
    # (4q)^(1/3) = 1.1006 and 1 (q = 1/3): the variance weighs 2.5813 against the median's 1
    total = Fraction(35_813, 10_000)
    assert _parts(variance) == [
        ("count", 6, 0, 2 * Fraction(4_807, 10_000) / total),
        ("sum", 300, 0, 2 * Fraction(11_006, 10_000) / total),
        ("sum_squares", 15000, 0, 2 / total),
    ]
    step = median.quantile
    assert step is not None
    assert (step.bins.lower, step.bins.upper, step.bins.bins) == (-0.5, 100.5, 101)
    assert step.epsilon_per_group == 2 / total / 3  # its share over 3 groups per person
    assert step.rows_per_person == 2


def test_weights_split_the_budget() -> None:
    query = qb.Query("t").agg(qb.count(weight=3), qb.sum_("age"))
    count, total = plan_query(query, ROW, epsilon=1).outputs
    assert (count.epsilon, total.epsilon) == (Fraction(3, 4), Fraction(1, 4))
    with pytest.raises(ParameterError, match="'weight'"):
        qb.count(weight=0)


def test_public_keys_give_the_full_cross_product() -> None:
    query = qb.Query("t").group_by("sex", "flag").agg(qb.count())
    plan = plan_query(query, ROW, epsilon=1)
    assert plan.keys == (("F", False), ("F", True), ("M", False), ("M", True))
    assert plan.exact.group_keys == plan.keys
    assert plan.selection is None


def test_small_bounded_int_columns_have_their_integers_as_public_keys() -> None:
    plan = plan_query(qb.Query("t").group_by("age").agg(qb.count()), ROW, epsilon=1)
    assert plan.keys == tuple((age,) for age in range(101))  # age: int in [0, 100]
    assert plan.selection is None
    assert public_keys(ir.Col("age"), ROW) == tuple(range(101))
    # beyond MAX_KEYS_FROM_BOUNDS integers (income: int in [0, 500000]), or a float column: none
    with pytest.raises(UnsupportedQueryError, match="needs public keys"):
        plan_query(qb.Query("t").group_by("income").agg(qb.count()), USER, epsilon=1)
    assert public_keys(ir.Col("x"), ROW) is None
    many = Metadata.from_dict(
        {"table": "t", "columns": {"k": {"type": "int", "lower": -0.5, "upper": 1_000.5}}}
    )
    assert public_keys(ir.Col("k"), many) is None  # 1,001 integers
    few = Metadata.from_dict(
        {"table": "t", "columns": {"k": {"type": "int", "lower": -0.5, "upper": 999.5}}}
    )
    assert public_keys(ir.Col("k"), few) == tuple(range(1_000))


def test_partition_selection_needs_delta() -> None:
    query = qb.Query("t").group_by("city").agg(qb.count())
    with pytest.raises(UnsupportedQueryError, match="delta > 0"):
        plan_query(query, ROW, epsilon=1)
    plan = plan_query(query, ROW, epsilon=1, delta=1e-6)
    assert plan.keys is None
    assert plan.selection is not None
    # the count (one row per person) is thresholded itself: the selection has the count's share
    assert plan.selection.epsilon == Fraction(1)
    assert plan.selection_output == "count"
    assert plan.cost == ApproxDP(1, 1e-6)
    assert plan.selection_exact == plan.exact.aggregates[-1].name
    summed = qb.Query("t").group_by("city").agg(qb.sum("age"))
    plan = plan_query(summed, ROW, epsilon=1, delta=1e-6)
    assert plan.selection is not None
    assert plan.selection.epsilon == Fraction(1, 2)  # one share for the sum, one for selection
    assert plan.exact.aggregates[-1] == ir.ExactAggregate("__persons", "count_persons")
    assert plan_query(qb.Query("t").agg(qb.count()), ROW, epsilon=1, delta=1e-6).cost == PureDP(1)


def test_public_keys_of_expressions() -> None:
    age = ir.Col("age")
    case = ir.Case(((ir.Compare(">", age, ir.Lit(50)), ir.Lit("old")),), ir.Lit("young"))
    assert public_keys(case, ROW) == ("old", "young")
    assert public_keys(ir.Compare(">", age, ir.Lit(1)), ROW) == (False, True)
    assert public_keys(ir.Col("city"), ROW) is None
    assert public_keys(ir.BinOp("+", age, ir.Lit(1)), ROW) is None


def test_interval_arithmetic_bounds() -> None:
    age, x = ir.Col("age"), ir.Col("x")
    assert infer_bounds(ir.BinOp("*", x, ir.Lit(-2)), ROW) == (-6.0, 2.0)
    assert infer_bounds(ir.BinOp("-", age, x), ROW) == (-3.0, 101.0)
    assert infer_bounds(ir.BinOp("/", age, ir.Lit(4)), ROW) == (0.0, 25.0)
    assert infer_bounds(ir.BinOp("/", age, x), ROW) is None  # divisor range contains 0
    assert infer_bounds(ir.Func("abs", (x,)), ROW) == (0.0, 3.0)
    assert infer_bounds(ir.Col("free"), ROW) is None
    assert is_integer_valued(ir.BinOp("*", age, ir.Lit(2)), ROW)
    assert not is_integer_valued(ir.BinOp("/", age, ir.Lit(2)), ROW)


def test_grid_helpers() -> None:
    assert choose_grid_exponent(0, 500000, integer=True) == 0
    assert choose_grid_exponent(0, 1.0, integer=False) == -20
    assert grid_units(2.5, 0) == 2  # half to even
    assert grid_units(-0.75, -1) == -2
    assert PrivacyUnit(rows=2).sum_l1(-3, 1, grouped=False) == 6


def test_missing_bounds_give_a_hint_and_derived_columns_are_substituted() -> None:
    with pytest.raises(DomainError, match=r"dp_bounds\('free'"):
        plan_query(qb.Query("t").agg(qb.sum_("free")), ROW, epsilon=1)
    plan = plan_query(qb.Query("t").agg(qb.sum_("free", lower=0, upper=8)), ROW, epsilon=1)
    assert plan.outputs[0].parts[0].grid_exponent == 3 - 20
    query = (
        qb.Query("t")
        .with_column("double_age", col("age") * 2)
        .filter(col("double_age") > 10)
        .agg(qb.sum_("double_age"))
    )
    plan = plan_query(query, ROW, epsilon=1)
    assert plan.outputs[0].parts[0].sensitivity == 200
    assert plan.exact.where == ir.Compare(">", ir.BinOp("*", ir.Col("age"), ir.Lit(2)), ir.Lit(10))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"epsilon": 0}, ParameterError, "'epsilon'"),
        ({"epsilon": float("nan")}, ParameterError, "'epsilon'"),
        ({"epsilon": 1, "delta": 1.5}, ParameterError, "'delta'"),
        ({"epsilon": 1, "shares": [Fraction(1, 2)]}, ParameterError, "'shares'"),
        ({"epsilon": 1, "shares": [Fraction(-1)]}, ParameterError, "'shares'"),
    ],
)
def test_invalid_budget_parameters(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        plan_query(qb.Query("t").agg(qb.count()), ROW, **kwargs)


def test_other_refusals() -> None:
    with pytest.raises(UnsupportedQueryError, match="person column"):
        plan_query(qb.Query("t").group_by("pid").agg(qb.count()), USER, epsilon=1)
    with pytest.raises(UnsupportedQueryError, match="person column"):
        plan_query(qb.Query("t").agg(qb.count_persons()), ROW, epsilon=1)
    with pytest.raises(UnsupportedQueryError, match="no aggregate"):
        plan_query(qb.Query("t"), ROW, epsilon=1)
    with pytest.raises(DomainError, match="Unknown table"):
        plan_query(qb.Query("u").agg(qb.count()), ROW, epsilon=1)
    with pytest.raises(ParameterError, match="distinct"):
        plan_query(qb.Query("t").agg(qb.count(), qb.count()), ROW, epsilon=1)
    with pytest.raises(UnsupportedQueryError, match="sort"):
        plan_query(qb.Query("t").agg(qb.count()).sort("age"), ROW, epsilon=1)


def test_bounds_plan() -> None:
    plan = plan_bounds(USER, "income", epsilon=0.5)
    assert plan.cost == PureDP(0.5)
    assert plan.laplace.scale == 2 * 3 / Fraction(1, 2)  # r·g / ε
    assert plan.exact.group_keys is not None
    assert len(plan.exact.group_keys) == plan.bins.bins
    with pytest.raises(ParameterError, match="numeric"):
        plan_bounds(USER, "city", epsilon=1)


def test_epsilon_below_the_documented_minimum_is_refused() -> None:
    plan_query(qb.Query("t").agg(qb.count()), ROW, epsilon=MIN_EPSILON)
    with pytest.raises(ParameterError, match=r"'epsilon'.*1e-09.*1e-10"):
        plan_query(qb.Query("t").agg(qb.count()), ROW, epsilon=1e-10)
    with pytest.raises(ParameterError, match=r"'epsilon'.*1e-09"):
        plan_bounds(USER, "income", epsilon=1e-12)


def test_noise_scales_beyond_the_sampler_are_refused_at_plan_time() -> None:
    huge = qb.Query("t").agg(qb.sum_("age", lower=0, upper=2**50))
    with pytest.raises(ParameterError, match="'scale'"):
        plan_query(huge, ROW, epsilon=1e-3)
    plan_query(huge, ROW, epsilon=1e3)


def test_public_limits_name_the_limit_and_the_value() -> None:
    many = qb.Query("t").agg(*(qb.count(name=f"c{i}") for i in range(MAX_AGGREGATES + 1)))
    with pytest.raises(UnsupportedQueryError, match=r"aggregates is 65.*MAX_AGGREGATES = 64"):
        plan_query(many, ROW, epsilon=1)
    bins = qb.Query("t").agg(qb.histogram("age", 10**8))
    with pytest.raises(UnsupportedQueryError, match=r"100,000,000.*MAX_HISTOGRAM_BINS = 10,000"):
        plan_query(bins, ROW, epsilon=1)
    keys = [f"k{i}" for i in range(400)]
    wide = Metadata.from_dict(
        {
            "table": "t",
            "columns": {
                "a": {"type": "string", "keys": keys},
                "b": {"type": "string", "keys": keys},
            },
        }
    )
    with pytest.raises(UnsupportedQueryError, match=r"160,000.*MAX_PUBLIC_GROUPS = 100,000"):
        plan_query(qb.Query("t").group_by("a", "b").agg(qb.count()), wide, epsilon=1)


def test_names_reserved_for_internal_columns_are_refused() -> None:
    renamed = replace(qb.Query("t"), groups=(ir.GroupColumn("__a1_count", ir.Col("sex")),))
    with pytest.raises(UnsupportedQueryError, match="'__a1_count'"):
        plan_query(renamed.agg(qb.count()), ROW, epsilon=1)


def test_deep_builder_expressions_are_refused_without_recursion_errors() -> None:
    deep = col("age")
    for _ in range(5000):
        deep = deep + 1
    with pytest.raises(UnsupportedQueryError, match="MAX_EXPRESSION_DEPTH"):
        plan_query(qb.Query("t").filter(deep > 0).agg(qb.count()), ROW, epsilon=1)
    with pytest.raises(UnsupportedQueryError, match="MAX_EXPRESSION_DEPTH"):
        qb.Query("t").with_column("d", col("age")).filter(deep > col("d"))
    chained = qb.Query("t")
    for i in range(200):  # each filter ANDs onto the last: one level, however many
        chained = chained.filter(col("age") > i)
    plan_query(chained.agg(qb.count()), ROW, epsilon=1)


@pytest.mark.parametrize(
    ("lower", "upper", "bins"),
    [
        (0, 100, 3),
        (0, 100, 7),
        (-7, 93, 9),
        (18, 90, 4),
        (0, 10, 10),
        (-(2**53), 2**53, 3),
        (0, 2**53, 9_999),
    ],
)
def test_integer_histogram_edges_are_the_first_integer_each_engine_bins_there(
    lower: int, upper: int, bins: int
) -> None:
    """Labels of integer histograms use these edges: each must be exactly where the engines'
    bin formula (backends.grid.bin_index) moves an integer into the next bin."""
    query = qb.Query("t").agg(qb.histogram("age", bins, lower=lower, upper=upper))
    plan = plan_query(query, ROW, epsilon=1)
    (exact,) = plan.exact.aggregates
    edges = plan.outputs[0].edges
    assert len(edges) == bins + 1
    assert (edges[0], edges[-1]) == (lower, upper)
    assert all(float(edge).is_integer() for edge in edges)
    for i, edge in enumerate(edges[1:-1], start=1):
        assert bin_index(exact, edge) == i
        assert bin_index(exact, edge - 1) == i - 1
    assert _parts(plan.outputs[0]) == [("histogram", 1, 0, Fraction(1))]  # sensitivity r·g


def test_mean_split_minimises_the_first_order_variance_of_the_ratio() -> None:
    """Var(c + S/N) ≈ (2/N²)(b_S² + m²·b_N²) for Laplace scales b, with the public stand-in
    m² = q·h² (q = 1/3, h = 50): the planned split beats equal shares and nearby splits."""
    (mean,) = plan_query(qb.Query("t").agg(qb.mean("age")), ROW, epsilon=1).outputs
    count, total = mean.parts
    stand_in = 50.0**2 / 3

    def variance(count_share: float) -> float:
        b_n, b_s = count.sensitivity / count_share, total.sensitivity / (1 - count_share)
        return b_s**2 + stand_in * b_n**2

    planned = float(count.epsilon)
    assert count.epsilon + total.epsilon == 1
    assert variance(planned) < 0.92 * variance(0.5)  # equal shares: 10% more variance
    assert variance(planned) <= min(variance(planned * 0.95), variance(planned * 1.05))
