"""Opening a table on DuckDB reports its progress (large tables take seconds to minutes), and a
user-level table's bounding columns are computed by the first plan that reads them."""

from __future__ import annotations

import logging
import re
from dataclasses import replace

import duckdb
import pyarrow as pa
import pytest

from dpcurator import Metadata, Session
from dpcurator.errors import DPError
from dpcurator.query import session as session_module
from dpcurator.query.backends import Backend, open_backend
from dpcurator.query.backends.duckdb import DuckDBBackend
from dpcurator.query.ir import (
    AggregatePlan,
    BoundingColumn,
    Col,
    Compare,
    ContributionBound,
    ExactAggregate,
    FixedPointColumn,
    GroupColumn,
    KeyCodeColumn,
    Lit,
    PrecomputedColumns,
)

KEYS = KeyCodeColumn("g", ("a", "b"))
PRECOMPUTED = PrecomputedColumns(
    (FixedPointColumn("x", 0.0, 10.0, 0),),
    (KEYS,),
    (BoundingColumn(ContributionBound("pid", 1, 1, 3), KEYS),),
)


@pytest.mark.parametrize("bounded", [False, True])
def test_opening_logs_each_step_with_its_time(
    caplog: pytest.LogCaptureFixture, bounded: bool
) -> None:
    """Each step of materialising a table (the private copy; the cube of a row-level table) is
    logged on ``dpcurator.engine`` when it starts and when it ends, with its elapsed seconds."""
    precomputed = (
        PRECOMPUTED
        if bounded
        else PrecomputedColumns(PRECOMPUTED.fixed_point, PRECOMPUTED.key_codes)  # gets a cube
    )
    source = {"x": [1.0, 2.0, 3.0], "g": ["a", "b", "c"], "pid": [1, 1, 2]}
    with caplog.at_level(logging.INFO, logger="dpcurator.engine"):
        backend = DuckDBBackend.from_source(source, table="t", precomputed=precomputed)
    backend.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "dpcurator.engine"]
    steps = ["loading the private copy"] + ([] if bounded else ["counting its cube"])
    for step in steps:
        assert any(line.startswith(f"Opening 't': {step}") for line in lines), lines
        done = [line for line in lines if step in line and "done in" in line]
        assert len(done) == 1, lines
        assert re.search(r"done in \d+\.\d\d s\.$", done[0]), lines
    assert "bounding" not in lines[0]  # computed on first use (test below)
    assert "key-code" in lines[0]
    assert "fixed-point" in lines[0]


@pytest.mark.parametrize("given", [False, True])
def test_bounding_columns_are_computed_by_their_first_plan(
    caplog: pytest.LogCaptureFixture, given: bool
) -> None:
    """Opening a user-level table sorts nothing for its bounding columns: a filtered plan (which
    cannot read them) leaves them absent, the first unfiltered plan of the column's shape adds
    it (logged once), later ones reuse it, and every result equals query-time bounding (on data
    within the bound; beyond it the conformance tests compare the engines). The same on a
    caller's connection (``given``), whose private copy is a temporary table."""
    bound = PRECOMPUTED.bounding[0].bound
    source = {  # one row per person (within the bound): equal to query-time bounding
        "x": [float(i % 7) for i in range(60)],
        "g": ["a", "b", "c"] * 20,
        "pid": [*range(59), None],
    }
    plan = AggregatePlan(
        "t",
        (ExactAggregate("n", "count"), ExactAggregate("s", "sum", Col("x"), 0.0, 10.0, 0.0)),
        group_by=(GroupColumn("g", Col("g")),),
        group_keys=(("a",), ("b",)),
        bound=bound,
    )
    filtered = replace(plan, where=Compare(">", Col("x"), Lit(1.0)))
    connection = duckdb.connect()
    if given:
        connection.register("rows", pa.table(source))
        connection.execute("CREATE TABLE t AS SELECT * FROM rows")
    opened = connection if given else source
    lazy = DuckDBBackend.from_source(opened, table="t", precomputed=PRECOMPUTED)
    copy = lazy._relations.get("t", "t")
    windows = DuckDBBackend.from_source(
        source, table="t", precomputed=PrecomputedColumns(key_codes=(KEYS,))
    )
    stored = lazy._connection.table(copy).columns
    assert not [name for name in stored if "bk" in name], stored
    assert lazy.compute(filtered) == windows.compute(filtered)
    assert not [name for name in lazy._connection.table(copy).columns if "bk" in name]
    with caplog.at_level(logging.INFO, logger="dpcurator.engine"):
        first, again = lazy.compute(plan), lazy.compute(plan)
    assert first == again == windows.compute(plan)
    flags = [name for name in lazy._connection.table(copy).columns if "bk" in name]
    assert len(flags) == 1, flags
    computed = [r.getMessage() for r in caplog.records if "bounding column" in r.getMessage()]
    assert len(computed) == 2, computed  # its start and "done in"
    lazy.close()
    windows.close()
    connection.close()


def test_a_session_that_cannot_start_closes_the_engine_it_opened(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Session.from_data`` opens the engine before the session checks its other arguments: when
    that check fails (no budget), the engine is closed, not left holding the table."""
    opened: list[DuckDBBackend] = []

    def recording(*args: object, **kwargs: object) -> Backend:
        backend = open_backend(*args, **kwargs)  # type: ignore[arg-type]
        assert isinstance(backend, DuckDBBackend)
        opened.append(backend)
        return backend

    monkeypatch.setattr(session_module, "open_backend", recording)
    metadata = Metadata.from_dict({"table": "t", "columns": {"x": {"type": "int"}}})
    with pytest.raises(DPError, match="budget"):
        Session.from_data({"x": [1, 2]}, metadata=metadata)
    [backend] = opened
    with pytest.raises(duckdb.ConnectionException):
        backend._connection.execute("SELECT 1")
