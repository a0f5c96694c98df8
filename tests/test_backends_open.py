"""open_backend accepts every documented source, reads files like the oracle, and refuses others."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pa_parquet
import pytest

from dpcurator.errors import BackendError, ParameterError
from dpcurator.query.backends import Backend, open_backend
from dpcurator.query.backends.duckdb_query import build_query
from dpcurator.query.ir import (
    AggregatePlan,
    Col,
    Compare,
    ExactAggregate,
    FixedPointColumn,
    GroupColumn,
    IsNull,
    Lit,
    PrecomputedColumns,
    ScalarValue,
)
from tests.backends_fixtures import spark  # noqa: F401  (session fixture)

pytestmark = [
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
    pytest.mark.xdist_group("spark_local"),  # one local Spark per run: backends_fixtures
]

LOCAL_ENGINES = ["memory", "duckdb", "polars"]
PLAN = AggregatePlan(
    "t",
    (
        ExactAggregate("n", "count"),
        ExactAggregate("s", "sum", Col("age"), 0, 100, 50.0),
        ExactAggregate("nulls", "sum", IsNull(Col("income")), 0, 1, 0.0),
    ),
    group_by=(GroupColumn("sex", Col("sex")),),
)


def _answer(
    backend: Backend, plan: AggregatePlan = PLAN
) -> dict[tuple[ScalarValue, ...], dict[str, object]]:
    try:
        return backend.compute(plan).groups
    finally:
        backend.close()


@pytest.fixture(scope="module")
def pums_null(shared_data: Path) -> Path:
    return shared_data / "pums_smartnoise" / "PUMS_null.csv"


@pytest.fixture(scope="module")
def expected(pums_null: Path) -> dict[tuple[ScalarValue, ...], dict[str, object]]:
    return _answer(open_backend(pa_csv.read_csv(pums_null), table="t", engine="memory"))


@pytest.mark.parametrize("engine", [*LOCAL_ENGINES, pytest.param("spark", marks=pytest.mark.spark)])
def test_csv_and_parquet_paths(
    engine: str,
    pums_null: Path,
    tmp_path: Path,
    expected: dict[object, object],
    request: pytest.FixtureRequest,
) -> None:
    if engine == "spark":
        request.getfixturevalue("spark")
    parquet = tmp_path / "pums.parquet"
    pa_parquet.write_table(pa_csv.read_csv(pums_null), parquet)
    assert _answer(open_backend(pums_null, table="t", engine=engine)) == expected
    assert _answer(open_backend(str(parquet), table="t", engine=engine)) == expected


def _sources(path: Path) -> dict[str, Callable[[], object]]:
    def connection() -> duckdb.DuckDBPyConnection:
        con = duckdb.connect()
        con.execute("CREATE TABLE t AS SELECT * FROM read_csv_auto($path)", {"path": str(path)})
        return con

    return {
        "pandas": lambda: pd.read_csv(path),  # NaN for missing: read back as NULL
        "polars": lambda: pl.read_csv(path),
        "polars_lazy": lambda: pl.scan_csv(path),
        "arrow": lambda: pa_csv.read_csv(path),
        "duckdb_connection": connection,
        "duckdb_relation": lambda: duckdb.read_csv(str(path)),
    }


@pytest.mark.parametrize("engine", LOCAL_ENGINES)
@pytest.mark.parametrize(
    "kind",
    ["pandas", "polars", "polars_lazy", "arrow", "duckdb_connection", "duckdb_relation"],
)
def test_frame_sources(
    engine: str, kind: str, pums_null: Path, expected: dict[object, object]
) -> None:
    source = _sources(pums_null)[kind]()
    assert _answer(open_backend(source, table="t", engine=engine)) == expected


@pytest.mark.parametrize("engine", LOCAL_ENGINES)
def test_dict_of_numpy_arrays_keeps_nan(engine: str) -> None:
    arrays = {"x": np.array([1.0, np.nan, 3.0]), "k": np.array([1, 1, 2])}
    plan = AggregatePlan(
        "t",
        (ExactAggregate("s", "sum", Col("x"), 0, 10, 5.0), ExactAggregate("n", "count")),
        where=IsNull(Col("x")),
    )
    assert _answer(open_backend(arrays, table="t", engine=engine), plan) == {(): {"s": 0, "n": 0}}
    unfiltered = AggregatePlan("t", plan.aggregates)
    result = _answer(open_backend(arrays, table="t", engine=engine), unfiltered)
    assert result == {(): {"s": 9, "n": 3}}


@pytest.mark.spark
def test_spark_dataframe_implies_spark(
    spark: object,  # noqa: F811  (the imported session fixture)
    pums_null: Path,
    expected: dict[object, object],
) -> None:
    frame = spark.createDataFrame(pa_csv.read_csv(pums_null))  # type: ignore[attr-defined]
    backend = open_backend(frame, table="t")
    assert backend.name == "spark"
    assert _answer(backend) == expected
    with pytest.raises(ParameterError, match="'spark' for a Spark DataFrame"):
        open_backend(frame, table="t", engine="polars")


def test_refusals(pums_null: Path) -> None:
    with pytest.raises(ParameterError, match=r"Got an object of type builtins\.list"):
        open_backend([1, 2, 3], table="t")
    with pytest.raises(ParameterError, match="'engine'"):
        open_backend(pums_null, table="t", engine="sqlite")
    with pytest.raises(ParameterError, match="'table'"):
        open_backend(pums_null, table="")
    with pytest.raises(ParameterError, match=r"\.csv or \.parquet"):
        open_backend("data.json", table="t")
    with pytest.raises(BackendError, match="no table 'missing'"):
        open_backend(duckdb.connect(), table="missing")


def test_sql_binds_values_and_quotes_identifiers() -> None:
    evil = "x'); DROP TABLE t; --"
    table = pa.table({'we"ird col': [evil, "a", None], "v": [1, 2, 3]})
    plan = AggregatePlan(
        "t",
        (ExactAggregate("n", "count"),),
        where=Compare("=", Col('we"ird col'), Lit(evil)),
    )
    query, params = build_query(plan)
    assert evil not in query
    assert evil in params.values()
    for engine in LOCAL_ENGINES:
        assert _answer(open_backend(table, table="t", engine=engine), plan) == {(): {"n": 1}}


def test_connection_is_not_closed_by_backend(pums_null: Path) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM read_csv_auto($path)", {"path": str(pums_null)})
    backend = open_backend(con, table="t")
    assert "t" in backend.tables()
    assert backend.columns("t")["age"] == "BIGINT"
    backend.close()
    assert con.execute("SELECT count(*) FROM t").fetchone() == (1948,)


def test_fixed_point_columns_on_a_given_connection_leave_its_table_alone() -> None:
    """On a caller's DuckDB connection the fixed-point columns go to a private copy: the caller's
    table keeps its columns, two backends share the connection, and sums equal the oracle's."""
    values = [0.5, -3.0, 250.0, None, 99.75, float("nan"), 12.125]
    connection = duckdb.connect()
    connection.execute("CREATE TABLE t AS SELECT * FROM (SELECT unnest($v) AS x)", {"v": values})
    spec = FixedPointColumn("x", 0.0, 100.0, -3)
    plan = AggregatePlan(
        "t",
        (
            ExactAggregate("s", "sum", Col("x"), 0.0, 100.0, None, -3, offset=400),
            ExactAggregate("f", "sum", Col("x"), 0.0, 100.0, 50.0, -3),
        ),
    )
    precomputed = PrecomputedColumns(fixed_point=(spec,))
    first = open_backend(connection, table="t", precomputed=precomputed)
    second = open_backend(connection, table="t", precomputed=precomputed)
    oracle = open_backend({"x": values}, table="t", engine="memory")
    expected = oracle.compute(plan).groups
    assert first.compute(plan).groups == expected == second.compute(plan).groups
    assert expected[()]["s"] == sum(
        round(min(max(v, 0), 100) * 8) - 400 for v in [0.5, -3.0, 250.0, 99.75, 12.125]
    )
    assert [row[0] for row in connection.execute("DESCRIBE t").fetchall()] == ["x"]
    first.close()
    second.close()
    assert connection.execute("SELECT count(*) FROM t").fetchone() == (7,)


def test_whole_table_counts_of_a_private_copy_are_its_size_and_a_live_table_is_queried() -> None:
    """A count of a table the backend copied is the copy's size (it cannot change), a count with
    a filter is still computed, and a caller's table read in place is counted afresh each time
    (its owner may add rows)."""
    connection = duckdb.connect()
    connection.execute("CREATE TABLE t AS SELECT range AS x FROM range(10)")
    count = AggregatePlan("t", (ExactAggregate("n", "count"),))
    filtered = replace(count, where=Compare(">", Col("x"), Lit(4)))
    spec = FixedPointColumn("x", 0.0, 100.0, 0)
    copied = open_backend(
        connection, table="t", precomputed=PrecomputedColumns(fixed_point=(spec,))
    )
    in_place = open_backend(connection, table="t")
    connection.execute("INSERT INTO t SELECT range FROM range(5)")
    assert copied.compute(count).groups == {(): {"n": 10}}  # the snapshot taken when opened
    assert copied.compute(filtered).groups == {(): {"n": 5}}
    assert in_place.compute(count).groups == {(): {"n": 15}}
    copied.close()
    in_place.close()
