"""Every backend returns exactly the aggregates of the in-memory oracle on real public data.

Plans without contribution bounding, and bounded plans on data where every person is within the
bounds, must agree EXACTLY. On data where persons exceed the bounds, engines may keep different
rows (each uses its own fast hash), so those tests check what privacy needs instead: each person
keeps exactly min(rows, k) rows per kept group and exactly min(groups, m) groups. The tables and
plans are in ``tests/conformance_cases.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dpcurator.errors import (
    ENGINE_FAILURE_MESSAGE,
    BackendError,
    ParameterError,
    UnsupportedQueryError,
)
from dpcurator.query.backends import Backend, DuckDBBackend, open_backend
from dpcurator.query.backends.duckdb_columns import coded_groups, columnar
from dpcurator.query.backends.duckdb_query import build_query, cube_serves
from dpcurator.query.ir import (
    AggregatePlan,
    And,
    BinOp,
    Col,
    Compare,
    ContributionBound,
    ExactAggregate,
    Func,
    GroupColumn,
    Lit,
)
from tests.backends_fixtures import spark  # noqa: F401  (session fixture)
from tests.conformance_cases import (
    AGE,
    EDUCATIONS,
    OVER,
    OVER_BOUND_PLANS,
    OVER_GROUPS,
    OVER_ROWS,
    OVER_STABLE,
    PLANS,
    SEX,
    count,
    load_tables,
    normalise,
    precomputed_for,
    total,
)

pytestmark = [
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
    pytest.mark.xdist_group("spark_local"),  # one local Spark per run: backends_fixtures
]

ENGINES = [
    "memory",
    "duckdb",
    "duckdb_fixed",  # DuckDB with every precomputed column (see precomputed_for)
    "polars",
    pytest.param("spark", marks=[pytest.mark.spark, pytest.mark.slow]),
]


@pytest.fixture(scope="module")
def tables(shared_data: Path) -> dict[str, pa.Table]:
    return load_tables(shared_data)


@pytest.fixture(scope="module")
def backends(
    request: pytest.FixtureRequest, tables: dict[str, pa.Table]
) -> Iterator[Callable[[str, str], Backend]]:
    """Open (once per module) the backend of an engine on a named table."""
    opened: dict[tuple[str, str], Backend] = {}

    def get(engine: str, table: str) -> Backend:
        if engine == "spark":
            request.getfixturevalue("spark")
        if (engine, table) not in opened:
            if engine == "duckdb_fixed":
                opened[engine, table] = open_backend(
                    tables[table], table=table, precomputed=precomputed_for(table)
                )
            else:
                opened[engine, table] = open_backend(tables[table], table=table, engine=engine)
        return opened[engine, table]

    yield get
    for backend in opened.values():
        backend.close()


def test_fixed_point_columns_serve_the_sums_they_match(
    backends: Callable[[str, str], Backend],
) -> None:
    """The duckdb_fixed engine really reads its precomputed columns (so the oracle comparisons
    above test them), and only for the sums whose bounds and grid they match."""
    plan = PLANS["sum_offset"]
    backend = backends("duckdb_fixed", plan.table)
    assert isinstance(backend, DuckDBBackend)
    hidden = backend._hidden[plan.table]
    assert cube_serves(plan, hidden)  # grouped by a key code, unfiltered: from the cube ...
    assert "__dp_cube_pums" in build_query(plan, None, hidden)[0]
    sql, _ = build_query(plan, None, replace(hidden, cube=None))  # ... or from the rows
    assert sql.count("__dp_fp") == len([a for a in plan.aggregates if a.kind == "sum"])
    other = AggregatePlan("pums", (total("s", AGE, 0, 99, fill=0.0),))  # other bounds: no match
    assert "__dp_fp" not in build_query(other, None, hidden)[0]
    bounded = replace(plan, bound=ContributionBound("pid", 1, 1, 3))  # bounded plans: never
    assert "__dp_fp" not in build_query(bounded, None, hidden)[0]


def test_bin_codes_serve_the_quantile_levels_they_match(
    backends: Callable[[str, str], Backend],
) -> None:
    """The duckdb_fixed engine reads its bin-code columns for a quantile's levels (so the oracle
    comparisons above test them: every histogram of both plans, the grouped CASE included), and
    not for other bounds, bins that are no power of two, or rows the query bounds itself."""
    for name in ("quantile_levels", "quantile_levels_grouped"):
        plan = PLANS[name]
        backend = backends("duckdb_fixed", plan.table)
        assert isinstance(backend, DuckDBBackend)
        hidden = backend._hidden[plan.table]
        sql, _ = build_query(plan, None, hidden)
        assert sql.count("__dp_bc") >= len(plan.aggregates), name
        assert "floor" not in sql  # no histogram scales a value
        bounded = replace(plan, bound=ContributionBound("pid", 1, 1, 3))
        assert "__dp_bc" not in build_query(bounded, None, hidden)[0]
    hidden = backends("duckdb_fixed", "pums")._hidden["pums"]
    for other in (
        ExactAggregate("h", "histogram", AGE, 0, 99, None, 0, 16),
        replace(PLANS["quantile_levels_grouped"].aggregates[0], bins=12),
    ):
        assert "__dp_bc" not in build_query(AggregatePlan("pums", (other,)), None, hidden)[0]


def test_key_codes_serve_the_groups_whose_keys_they_hold(
    backends: Callable[[str, str], Backend],
) -> None:
    """Key-code columns are really used by the oracle comparisons above (plans with public keys
    grouped by a bare column), and never when a released key has no code or persons are
    bounded; a key with no row in the data gives no group (as on every engine)."""
    plan = PLANS["public_keys"]
    backend = backends("duckdb_fixed", plan.table)
    assert isinstance(backend, DuckDBBackend)
    hidden = backend._hidden[plan.table]
    assert set(coded_groups(plan, hidden)) == set(range(len(plan.group_by)))
    assert "__dp_kc" in build_query(plan, None, hidden)[0]
    unknown = replace(plan, group_keys=(*(plan.group_keys or ()), (9, 99)))
    assert not coded_groups(unknown, hidden).keys() >= set(range(len(plan.group_by)))
    assert backend.compute(unknown).groups == backends("memory", plan.table).compute(unknown).groups
    bounded = replace(plan, bound=ContributionBound("pid", 1, 1, 3))
    assert coded_groups(bounded, hidden) == {}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("plan_id", list(PLANS))
def test_matches_oracle(engine: str, plan_id: str, backends: Callable[[str, str], Backend]) -> None:
    plan = PLANS[plan_id]
    expected = normalise(backends("memory", plan.table).compute(plan))
    assert normalise(backends(engine, plan.table).compute(plan)) == expected


def test_oracle_is_not_vacuous(
    backends: Callable[[str, str], Backend], tables: dict[str, pa.Table]
) -> None:
    """Spot values computed independently of the oracle (plain numpy on the same table)."""
    memory = backends("memory", "pums")
    assert memory.compute(PLANS["count"]).groups == {(): {"n": 1000}}
    empty = memory.compute(PLANS["count_empty"]).groups[()]
    assert empty["n"] == 0
    assert empty["s"] == 0
    assert np.array_equal(empty["h"], np.zeros(4, dtype=np.int64))  # type: ignore[arg-type]
    assert memory.compute(PLANS["grouped_empty"]).groups == {}
    income = np.clip(tables["pums"]["income"].to_numpy(), 0, 100_000)
    assert memory.compute(PLANS["sum_clamped"]).groups[()]["s"] == int(income.sum())
    keys = set(memory.compute(PLANS["public_keys"]).groups)
    assert keys == {(9, 0), (9, 1), (13, 1)}


# ----------------------------------------------------------------------------------------------
# Over-bound data: the engines may keep different rows, but always the right number of them.


def _rows_per_person(tables: dict[str, pa.Table]) -> dict[int, list[str]]:
    table = tables[OVER]
    per: dict[int, list[str]] = {}
    for uid, education in zip(
        table["uid"].to_pylist(), table["education"].to_pylist(), strict=True
    ):
        per.setdefault(uid, []).append(education)
    return per


@pytest.mark.parametrize("engine", ENGINES)
def test_over_bound_rows_per_person(
    engine: str, backends: Callable[[str, str], Backend], tables: dict[str, pa.Table]
) -> None:
    per = _rows_per_person(tables)
    for k, plan in OVER_ROWS.items():
        result = backends(engine, OVER).compute(plan).groups[()]
        assert result == {"n": sum(min(len(rows), k) for rows in per.values()), "p": len(per)}


@pytest.mark.parametrize("engine", ENGINES)
def test_over_bound_groups_per_person(
    engine: str, backends: Callable[[str, str], Backend], tables: dict[str, pa.Table]
) -> None:
    per = _rows_per_person(tables)
    for m, plan in OVER_GROUPS.items():
        groups = backends(engine, OVER).compute(plan).groups
        # one row per kept (person, group): count == persons per group, and summed over groups
        # each person appears in exactly min(#groups, m) groups
        assert all(values["n"] == values["p"] for values in groups.values())
        assert sum(v["n"] for v in groups.values()) == sum(  # type: ignore[misc]
            min(len(set(rows)), m) for rows in per.values()
        )


@pytest.mark.parametrize("engine", ENGINES)
def test_bounding_is_stable(engine: str, tables: dict[str, pa.Table]) -> None:
    """Which rows a person keeps depends on that person's rows only: removing one person (uid 0,
    8 rows in 7 educations) takes at most its bounded contribution (one group, 2 rows) and
    changes nothing anybody else contributes, so no group gains rows or hours. A selection that
    depended on other persons' rows (e.g. on row positions or the table size) would fail this."""
    table = tables[OVER]
    rows = table["uid"].to_numpy()
    plan = OVER_STABLE
    fixed = engine == "duckdb_fixed"
    results = []
    for data in (table, table.filter(pa.array(rows != 0))):
        backend = open_backend(
            data,
            table=OVER,
            engine="duckdb" if fixed else engine,
            precomputed=precomputed_for(OVER) if fixed else None,
        )
        groups = backend.compute(plan).groups
        results.append(
            {key: groups.get(key, {"n": 0, "h": 0}) for key in [(e,) for e in EDUCATIONS]}
        )
        backend.close()
    full, without = results
    removed = [int(full[key]["n"]) - int(without[key]["n"]) for key in full]  # type: ignore[call-overload]
    assert all(0 <= n <= 2 for n in removed)
    assert 0 < sum(removed) <= 2
    assert all(int(full[key]["h"]) >= int(without[key]["h"]) for key in full)  # type: ignore[call-overload]


def test_bounding_columns_serve_the_plans_they_match(
    backends: Callable[[str, str], Backend],
) -> None:
    """The duckdb_fixed engine really reads its bounding columns for the unfiltered bounded plans
    above (no window in the query), and never for a filter, another bound, other keys or a
    grouping without keys."""
    backend = backends("duckdb_fixed", OVER)
    assert isinstance(backend, DuckDBBackend)
    hidden = backend._hidden[OVER]
    for plan in OVER_BOUND_PLANS:
        sql = build_query(plan, None, hidden)[0]
        assert "__dp_bk" in sql
        assert "ROW_NUMBER" not in sql
    plan = OVER_GROUPS[1]
    for other in (
        replace(plan, where=Compare(">", Col("age"), Lit(30))),
        replace(plan, bound=replace(plan.bound, seed=8)),
        replace(plan, group_keys=(plan.group_keys or ())[:-1]),
        replace(plan, group_keys=None),
    ):
        sql = build_query(other, None, hidden)[0]
        assert "__dp_bk" not in sql
        assert "ROW_NUMBER" in sql
    within = PLANS["within_bounds_keys"]
    backend = backends("duckdb_fixed", within.table)
    assert isinstance(backend, DuckDBBackend)
    assert "__dp_bk" in build_query(within, None, backend._hidden[within.table])[0]


def test_plans_grouped_by_key_codes_group_the_codes_alone(
    backends: Callable[[str, str], Backend],
) -> None:
    """On the duckdb_fixed private copy (in file order), plans grouped by key codes only and
    not served by the cube group the code columns, read column-wise, with no extra aggregate
    (an ``any_value`` of the first code helped only on a copy sorted by code: 1-8% more CPU on
    the unsorted one). The conformance plans above run that path."""
    backend = backends("duckdb_fixed", "pums")
    assert isinstance(backend, DuckDBBackend)
    hidden = backend._hidden["pums"]
    grouped = [plan for plan in PLANS.values() if plan.table == "pums" and plan.group_by]
    coded = [
        plan
        for plan in grouped
        if len(coded_groups(plan, hidden)) == len(plan.group_by)
        and not cube_serves(plan, hidden)
        and all(agg.kind != "histogram" for agg in plan.aggregates)  # histograms: row-wise
    ]
    assert coded
    for plan in coded:
        query = build_query(plan, None, hidden)[0]
        assert columnar(plan, hidden)
        assert "any_value" not in query
        codes = ", ".join(f'"__dp_g{i}"' for i in range(len(plan.group_by)))
        assert query.endswith(f"GROUP BY {codes}"), query
    assert not coded_groups(PLANS["derived_groups"], hidden)  # derived groups have no codes


def test_the_cube_answers_as_the_rows_do(
    tables: dict[str, pa.Table], backends: Callable[[str, str], Backend]
) -> None:
    """Every conformance plan that the duckdb_fixed cube serves gets the same exact result from
    the table's rows (the same backend with its cube hidden)."""
    served = [p for p in PLANS.values() if p.table == "pums" and p.bound.person_column is None]
    backend = backends("duckdb_fixed", "pums")
    assert isinstance(backend, DuckDBBackend)
    hidden = backend._hidden["pums"]
    served = [p for p in served if cube_serves(p, hidden)]
    assert len(served) >= 3
    # Filters on a cube dimension: equal to one of its keys (served), to a value outside them
    # or by another operator (not served: such a filter reads the rows).
    assert hidden.cube is not None
    dimensions = hidden.cube.dimensions
    column, (_, code) = next((c, named) for c, named in hidden.key_codes.items() if c in dimensions)
    outside = 1 + max(k for k in code.keys if isinstance(k, int))
    assert not cube_serves(
        replace(served[0], where=Compare("=", Col(column), Lit(outside))), hidden
    )
    assert not cube_serves(
        replace(served[0], where=Compare(">", Col(column), Lit(code.keys[0]))), hidden
    )
    for key in code.keys:
        for plan in served[:3]:
            filtered = replace(plan, where=And((Compare("=", Lit(key), Col(column)),)))
            assert cube_serves(filtered, hidden)
            served.append(filtered)
    rows = open_backend(tables["pums"], table="pums", precomputed=precomputed_for("pums"))
    assert isinstance(rows, DuckDBBackend)
    try:
        rows._hidden["pums"] = replace(rows._hidden["pums"], cube=None)
        for plan in served:
            assert normalise(backend.compute(plan)) == normalise(rows.compute(plan)), plan
    finally:
        rows.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_bounding_is_deterministic(engine: str, backends: Callable[[str, str], Backend]) -> None:
    plan = AggregatePlan(
        OVER,
        (count(), total("h", Col("hours_per_week"), 0, 99, fill=0.0)),
        group_by=(GroupColumn("education", Col("education")),),
        bound=ContributionBound("uid", 2, 2, 123),
    )
    backend = backends(engine, OVER)
    assert normalise(backend.compute(plan)) == normalise(backend.compute(plan))


# ----------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("engine", ENGINES)
def test_one_row_beyond_int64_is_refused(
    engine: str, backends: Callable[[str, str], Backend]
) -> None:
    """A plan whose bounds let ONE row exceed int64 on its grid is malformed (a public fact);
    totals of many rows are clamped instead (see tests/test_backends_totality.py)."""
    backend = backends(engine, "pums")
    per_row = AggregatePlan("pums", (total("s", AGE, 0, 2.0**64, fill=0.0),))
    with pytest.raises(ParameterError, match="could exceed int64 on one row"):
        backend.compute(per_row)
    squares = AggregatePlan("pums", (ExactAggregate("q", "sum_squares", AGE, 0, 2.0**32, 0.0, 0),))
    with pytest.raises(ParameterError, match="could exceed int64 on one row"):
        backend.compute(squares)
    offset = AggregatePlan("pums", (total("s", AGE, 0, 2.0**62, fill=0.0, offset=-(2**62)),))
    with pytest.raises(ParameterError, match="could exceed int64 on one row"):
        backend.compute(offset)
    # the same magnitudes on a coarser grid fit
    coarse = AggregatePlan("pums", (total("s", AGE, 0, 2.0**62, fill=0.0, grid_exponent=20),))
    assert backend.compute(coarse).groups[()]["s"] == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_unknown_table_and_column(engine: str, backends: Callable[[str, str], Backend]) -> None:
    backend = backends(engine, "pums")
    with pytest.raises(BackendError, match="no table 'nope'"):
        backend.compute(AggregatePlan("nope", (count(),)))
    with pytest.raises(BackendError, match="no table 'nope'"):
        backend.columns("nope")
    with pytest.raises(BackendError, match="no column 'salary'"):
        backend.compute(AggregatePlan("pums", (total("s", Col("salary"), 0, 1),)))
    with pytest.raises(BackendError, match="no column 'who'"):
        backend.compute(AggregatePlan("pums", (count(),), bound=ContributionBound("who")))


@pytest.mark.parametrize(
    ("plan", "error", "message"),
    [
        (AggregatePlan("pums", ()), ParameterError, "'aggregates'"),
        (AggregatePlan("pums", (ExactAggregate("s", "sum", AGE),)), ParameterError, "'lower'"),
        (AggregatePlan("pums", (total("s", AGE, 5, 1),)), ParameterError, "'upper'"),
        (AggregatePlan("pums", (total("s", AGE, 0, 1, fill=3.0),)), ParameterError, "'fill'"),
        (AggregatePlan("pums", (total("s", AGE, 0, math.inf),)), ParameterError, "finite"),
        (
            AggregatePlan("pums", (ExactAggregate("h", "histogram", AGE, 0, 1, bins=0),)),
            ParameterError,
            "'bins'",
        ),
        (AggregatePlan("pums", (count("x"), count("x"))), ParameterError, "uniquely"),
        (AggregatePlan("pums", (count("__dp_x"),)), ParameterError, "__dp_"),
        (
            AggregatePlan("pums", (count(),), group_keys=((1,),)),
            ParameterError,
            "'group_keys'",
        ),
        (
            AggregatePlan(
                "pums", (count(),), group_by=(GroupColumn("s", SEX),), group_keys=((1, 2),)
            ),
            ParameterError,
            "length 1",
        ),
        (
            AggregatePlan("pums", (count(),), bound=ContributionBound("age", max_rows_per_group=0)),
            ParameterError,
            "'max_rows_per_group'",
        ),
        (
            AggregatePlan("pums", (count(),), where=Compare("=", AGE, Lit(2**70))),
            ParameterError,
            "int64",
        ),
        (
            AggregatePlan(
                "pums", (count(),), where=Compare("=", Func("round", (AGE, Lit(1))), Lit(1))
            ),
            UnsupportedQueryError,
            "exactly one argument",
        ),
    ],
)
@pytest.mark.parametrize("engine", ["memory", "duckdb", "polars"])
def test_malformed_plans(
    engine: str,
    plan: AggregatePlan,
    error: type[Exception],
    message: str,
    backends: Callable[[str, str], Backend],
) -> None:
    with pytest.raises(error, match=message):
        backends(engine, "pums").compute(plan)


@pytest.mark.parametrize("engine", ["memory", "duckdb", "polars"])
def test_engine_type_errors_are_backend_errors(
    engine: str, backends: Callable[[str, str], Backend]
) -> None:
    """A type mismatch the planner would refuse, hand-built: the one constant engine failure."""
    plan = AggregatePlan(
        "adult", (count(),), where=Compare(">", BinOp("+", Col("workclass"), Lit(3)), Lit(1))
    )
    with pytest.raises(BackendError) as raised:
        backends(engine, "adult").compute(plan)
    assert str(raised.value) == ENGINE_FAILURE_MESSAGE
    assert raised.value.__cause__ is None
    assert raised.value.__suppress_context__


def test_a_lone_histogram_is_counted_per_bin() -> None:
    """Plans, grouped or not, whose only other aggregates are row counts (quantiles) count rows
    per group and bin (the oracle comparisons above then test that path); any other aggregate,
    or a second histogram, keeps histogram()."""
    for plan_id in ("histogram", "histogram_ungrouped", "histogram_missing", "histogram_empty"):
        assert "__dp_bin" in build_query(PLANS[plan_id])[0]
        assert "histogram(" not in build_query(PLANS[plan_id])[0]
    for plan_id in ("quantile_levels", "quantile_levels_grouped", "count_empty"):
        assert "__dp_bin" not in build_query(PLANS[plan_id])[0]
