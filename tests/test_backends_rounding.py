"""Fixed-point sums round half to even, and clamp/fill NULL, NaN and infinities, on every engine.

The DuckDB backend relies on CAST(DOUBLE AS BIGINT) rounding half to even and on NaN ordering
above every number; these exact ties and edge values pin that against the in-memory oracle.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from dpcurator.query.backends import open_backend
from dpcurator.query.ir import AggregatePlan, Col, ExactAggregate, GroupColumn
from tests.backends_fixtures import spark  # noqa: F401  (session fixture)

pytestmark = pytest.mark.xdist_group("spark_local")  # one local Spark per run: backends_fixtures
ENGINES = ["memory", "duckdb", "polars", pytest.param("spark", marks=pytest.mark.spark)]
TIES = [0.5, 1.5, 2.5, -0.5, -2.5, 3.5, 0.25, 0.75, -0.25, 999.5]
EDGES = [math.nan, None, math.inf, -math.inf, 7.0, -7.0, 1.0]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """Each engine in turn (Spark starts its shared session on first use)."""
    if request.param == "spark":
        request.getfixturevalue("spark")
    return str(request.param)


def _plan(lower: float, upper: float, fill: float | None) -> AggregatePlan:
    aggregates = tuple(
        ExactAggregate(f"{kind}{k}", kind, Col("x"), lower, upper, fill, grid_exponent=k)
        for kind in ("sum", "sum_squares")
        for k in (-2, -1, 0, 1, 3)
    )
    histogram = ExactAggregate("h", "histogram", Col("x"), lower, upper, fill, bins=4)
    return AggregatePlan("t", (*aggregates, histogram), group_by=(GroupColumn("g", Col("g")),))


@pytest.mark.parametrize("fill", [None, 0.0, 2.5])
def test_ties_and_edges_match_the_oracle(engine: str, fill: float | None) -> None:
    values = TIES + EDGES
    table = pa.table(
        {"x": pa.array(values, type=pa.float64()), "g": [i % 3 for i in range(len(values))]}
    )
    plan = _plan(-4.0, 1000.0, fill)
    expected = open_backend(table, table="t", engine="memory").compute(plan).groups
    backend = open_backend(table, table="t", engine=engine)
    try:
        got = backend.compute(plan).groups
    finally:
        backend.close()
    assert got.keys() == expected.keys()
    for key, values_of in expected.items():
        for name, value in values_of.items():
            assert got[key][name] == pytest.approx(value, abs=0), (key, name)
    assert expected[(0,)]["sum0"] != sum(math.floor(v + 0.5) for v in TIES[::3])  # ties matter


def test_integer_column_is_clamped_like_floats(engine: str) -> None:
    table = pa.table({"x": pa.array([1, 5, -9, None, 3], type=pa.int64()), "g": [0] * 5})
    plan = _plan(-2.0, 4.0, 1.0)
    expected = open_backend(table, table="t", engine="memory").compute(plan).groups
    got = open_backend(table, table="t", engine=engine).compute(plan).groups
    assert got.keys() == expected.keys()
    assert {k: v for k, v in got[(0,)].items() if k != "h"} == {
        k: v for k, v in expected[(0,)].items() if k != "h"
    }
    histogram, oracle = got[(0,)]["h"], expected[(0,)]["h"]
    assert isinstance(histogram, np.ndarray)
    assert isinstance(oracle, np.ndarray)
    assert histogram.tolist() == oracle.tolist()
