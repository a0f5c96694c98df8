"""Quantiles read from DuckDB's bin-code columns (issue 26): the same releases as the float bins.

Every level of a refined quantile is a histogram of fine bins of the bounds
(:mod:`dpcurator.query.plan.quantile`), which the DuckDB engine reads from a precomputed
:class:`~dpcurator.query.ir.BinCodeColumn` by integer shifts. For fixed seeds the releases must
not depend on that: they are compared with DuckDB without precomputed columns (the bins scaled
from the float values) and with the in-memory engine, and each level's exact histogram with a
plain numpy histogram of the same fine bins. Layouts: dyadic and non-dyadic bounds, an int
column too wide for unit bins, NULL and NaN values, values clamped at and beyond the bounds,
grouped and ungrouped, the median, other quantiles and MIN/MAX.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import dpcurator as dpc
from dpcurator.query import ir
from dpcurator.query.backends import DuckDBBackend
from dpcurator.query.backends.duckdb_query import build_query
from dpcurator.random import SeededRng

QUERIES = (
    "SELECT MEDIAN(x) AS m, QUANTILE(y, 0.9) AS q, MIN(k) AS lo FROM t",
    "SELECT g, MEDIAN(x) AS m, MAX(y) AS hi, QUANTILE(k, 0.25) AS q FROM t GROUP BY g",
)


def _table(rows: int = 1500) -> pa.Table:
    gen = np.random.default_rng(11)
    x = gen.normal(50, 30, rows)  # beyond [0, 100] on both sides; exactly at the bounds too
    x[:40], x[40:60], x[60:70] = 0.0, 100.0, np.inf
    y = gen.uniform(-5, 14, rows)  # bounds [-3.7, 12.1]: non-dyadic edges
    y[:30] = np.nan
    k = gen.integers(-(10**6), 10**6, rows).astype(float)  # int, too wide for unit bins
    return pa.table(
        {
            "x": pa.array(x, mask=np.arange(rows) % 97 == 0),  # NULLs
            "y": y,
            "k": pa.array(k.astype(np.int64)),
            "g": gen.integers(0, 4, rows),
        }
    )


METADATA = dpc.Metadata.from_dict(
    {
        "table": "t",
        "columns": {
            "x": {"type": "float", "lower": 0.0, "upper": 100.0, "nullable": True},
            "y": {"type": "float", "lower": -3.7, "upper": 12.1, "nullable": True},
            "k": {"type": "int", "lower": -(10**6), "upper": 10**6},
            "g": {"type": "int", "keys": [0, 1, 2, 3]},
        },
    }
)


def _releases(engine: str, *, precompute: bool) -> list[object]:
    session = dpc.Session.from_data(
        _table(),
        metadata=METADATA,
        budget=dpc.Budget(10**6),
        engine=engine,
        rng=SeededRng(5),
        precompute=precompute,
    )
    out = []
    for query in QUERIES:
        for epsilon in (0.5, 1000.0):
            out.append(session.sql(query, epsilon=epsilon).to_pandas().to_dict())
    return out


@pytest.mark.slow  # three engines' sessions, four releases each (about 4 s idle)
def test_releases_do_not_depend_on_the_bin_codes() -> None:
    coded = _releases("duckdb", precompute=True)
    assert coded == _releases("duckdb", precompute=False)
    assert coded == _releases("memory", precompute=True)


def _fine_reference(values: np.ndarray, agg: ir.ExactAggregate) -> np.ndarray:
    """numpy's histogram of ``agg``: a bare column's bins, or a window of fine bins (the value
    ``floor((x - lower) / width * resolution) - first`` of each group's CASE branch)."""
    if isinstance(agg.expr, ir.Col):
        assert agg.lower is not None
        assert agg.upper is not None
        scaled = (np.clip(values, agg.lower, agg.upper) - agg.lower) / (agg.upper - agg.lower)
        index = np.minimum(np.floor(scaled * agg.bins), agg.bins - 1)
    else:
        fine = agg.expr
        assert isinstance(fine, ir.BinOp)
        floor, first = fine.left, fine.right
        assert isinstance(floor, ir.Func)
        assert isinstance(first, ir.Lit)
        product = floor.args[0]
        assert isinstance(product, ir.BinOp)
        unit, resolution = product.left, product.right
        assert isinstance(unit, ir.BinOp)
        shifted, width = unit.left, unit.right
        assert isinstance(shifted, ir.BinOp)
        lower = shifted.right
        assert isinstance(lower, ir.Lit)
        assert isinstance(resolution, ir.Lit)
        assert isinstance(width, ir.Lit)
        lo, span, res = float(lower.value), float(width.value), float(resolution.value)  # type: ignore[arg-type]
        scaled = (np.clip(values, lo, lo + span) - lo) / span
        codes = np.minimum(np.floor(scaled * res), res - 1)
        index = np.clip(codes - float(first.value), 0, agg.bins - 1)  # type: ignore[arg-type]
    return np.bincount(index.astype(np.int64), minlength=agg.bins)


@pytest.mark.parametrize("epsilon", [0.5, 1000.0])
def test_each_level_is_numpys_histogram_of_the_fine_bins(epsilon: float) -> None:
    table = _table()
    session = dpc.Session.from_data(
        table, metadata=METADATA, budget=dpc.Budget(10**6), rng=SeededRng(5)
    )
    backend = session._backend
    assert isinstance(backend, DuckDBBackend)
    compute = backend.compute
    checked = []

    def checking(plan: ir.AggregatePlan) -> ir.ExactResult:
        result = compute(plan)
        query = build_query(plan, None, backend._hidden["t"], backend.columns("t"))[0]
        assert "__dp_bc" in query  # every level reads the bin codes ...
        assert "floor" not in query  # ... and scales no value
        for agg in plan.aggregates:
            if agg.kind == "histogram":
                assert plan.group_by == ()  # the ungrouped query: one histogram per level
                column = _column(agg.expr)
                values = table[column].to_numpy(zero_copy_only=False).astype(float)
                values = values[~np.isnan(values)]
                assert np.array_equal(result.groups[()][agg.name], _fine_reference(values, agg))
                checked.append(isinstance(agg.expr, ir.Col))
        return result

    backend.compute = checking  # type: ignore[method-assign]
    session.sql(QUERIES[0], epsilon=epsilon)
    assert sorted(set(checked)) == [False, True]  # first levels and windows were both checked


def _column(expr: ir.Expr | None) -> str:
    while not isinstance(expr, ir.Col):
        assert isinstance(expr, ir.BinOp | ir.Func)
        expr = expr.left if isinstance(expr, ir.BinOp) else expr.args[0]
    return expr.name
