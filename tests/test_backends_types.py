"""Backends expose tables with the metadata's declared column types, or refuse at open time."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pytest

from dpcurator.accounting import Budget
from dpcurator.errors import DomainError, ParameterError
from dpcurator.query.backends import Backend, open_backend
from dpcurator.query.ir import (
    AggregatePlan,
    Col,
    Compare,
    ExactAggregate,
    GroupColumn,
    Lit,
    ScalarValue,
)
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from dpcurator.random import SeededRng
from tests.backends_fixtures import spark  # noqa: F401  (session fixture)

pytestmark = [
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
    pytest.mark.xdist_group("spark_local"),  # one local Spark per run: backends_fixtures
]

ENGINES = ["memory", "duckdb", "polars", pytest.param("spark", marks=pytest.mark.spark)]
COUNT = (ExactAggregate("n", "count"),)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """Each engine in turn (Spark starts its shared session on first use)."""
    if request.param == "spark":
        request.getfixturevalue("spark")
    return str(request.param)


@pytest.fixture(scope="module")
def pums(shared_data: Path) -> Path:
    return shared_data / "pums_smartnoise"


def _groups(
    backend: Backend, plan: AggregatePlan
) -> dict[tuple[ScalarValue, ...], dict[str, object]]:
    try:
        return backend.compute(plan).groups
    finally:
        backend.close()


def test_pums_strings_declared_in_yaml_answer_through_the_session(engine: str, pums: Path) -> None:
    metadata = Metadata.from_yaml(pums / "PUMS.yaml")
    assert (metadata.schema, metadata.table) == ("PUMS", "PUMS")
    expected = int((pd.read_csv(pums / "PUMS.csv")["sex"] == 1).sum())
    with Session.from_data(
        str(pums / "PUMS.csv"), metadata=metadata, budget=Budget(1e13), engine=engine,
        rng=SeededRng(3),
    ) as session:  # fmt: skip
        release = session.sql("SELECT COUNT(*) AS n FROM PUMS.PUMS WHERE sex = '1'", epsilon=1e12)
    assert release.to_pandas()["n"].tolist() == [expected]


TYPES = {"code": "string", "w": "int", "flag": "bool"}
FRAME = pd.DataFrame(
    {
        "code": pd.array([7, 7, 12, None], dtype="Int64"),
        "w": [1.0, 2.0, 3.0, 4.0],
        "flag": [1, 0, 1, 1],
    }
)


def _assert_converted(backend: Backend, code: str) -> None:
    """The declared types hold: code is text, w an exact int, flag a bool."""
    plan = AggregatePlan(
        "t",
        (*COUNT, ExactAggregate("s", "sum", Col("w"), 0, 10, 0.0)),
        where=Compare("=", Col("code"), Lit(code)),
        group_by=(GroupColumn("flag", Col("flag")),),
    )
    assert _groups(backend, plan) == {(True,): {"n": 1, "s": 1}, (False,): {"n": 1, "s": 2}}


@pytest.mark.parametrize("kind", ["csv", "parquet", "arrow", "pandas"])
def test_every_source_kind_is_converted(engine: str, kind: str, tmp_path: Path) -> None:
    source: object = FRAME
    if kind == "csv":
        (tmp_path / "t.csv").write_text("code,w,flag\n007,1,1\n007,2,0\n12,3,1\n,4,1\n")
        source = str(tmp_path / "t.csv")
    elif kind == "parquet":
        FRAME.to_parquet(tmp_path / "t.parquet")
        source = tmp_path / "t.parquet"
    elif kind == "arrow":
        source = pa.Table.from_pandas(FRAME)
    backend = open_backend(source, table="t", engine=engine, column_types=TYPES)
    _assert_converted(backend, "007" if kind == "csv" else "7")  # CSV text keeps leading zeros


def test_duckdb_connection_is_converted_without_being_modified() -> None:
    source = duckdb.connect()
    source.register("frame", FRAME)
    source.execute("CREATE TABLE t AS SELECT * FROM frame")
    backend = open_backend(source, table="t", engine="duckdb", column_types=TYPES)
    _assert_converted(backend, "7")
    assert list(map(str, source.table("t").types)) == ["BIGINT", "DOUBLE", "BIGINT"]
    backend.close()
    temporary = "SELECT count(*) FROM duckdb_tables() WHERE temporary"
    assert source.execute(temporary).fetchone() == (0,)  # the private copy is dropped


@pytest.mark.parametrize(
    ("values", "declared"),
    [([1.0, 2.5], "int"), ([1.0, float("nan")], "int"), (["1", "1.5"], "int"), (["x"], "float")],
)
def test_inexact_conversions_are_refused_at_open(
    engine: str, values: list[object], declared: str
) -> None:
    table = pa.table({"ok": [1] * len(values), "bad": values})
    with pytest.raises(DomainError, match=rf"'bad' of table 't' is declared '{declared}'") as info:
        open_backend(table, table="t", engine=engine, column_types={"ok": "float", "bad": declared})
    assert "2.5" not in str(info.value)  # no data value in the message


def test_integral_floats_become_ints(engine: str) -> None:
    table = pa.table({"x": [1e5, None, -3.0]})
    backend = open_backend(table, table="t", engine=engine, column_types={"x": "int"})
    assert backend.columns("t")["x"].lower() in ("bigint", "int64")
    plan = AggregatePlan("t", (ExactAggregate("s", "sum", Col("x"), -10, 10**6, 0.0),))
    assert _groups(backend, plan) == {(): {"s": 100_000 - 3}}


def test_bad_column_types_are_refused() -> None:
    table = pa.table({"x": [1]})
    with pytest.raises(ParameterError, match=r"column_types\['x'\]"):
        open_backend(table, table="t", column_types={"x": "integer"})
    with pytest.raises(ParameterError, match="'column_types'"):
        open_backend(table, table="t", column_types=["x"])  # type: ignore[arg-type]
    with pytest.raises(DomainError, match=r"declares the column\(s\) \['y'\]"):
        open_backend(table, table="t", column_types={"y": "int"})
