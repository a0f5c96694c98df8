"""Opening a table on DuckDB reports its progress (large tables take seconds to minutes)."""

from __future__ import annotations

import logging
import re

import pytest

from dpcurator.query.backends.duckdb import DuckDBBackend
from dpcurator.query.ir import (
    BoundingColumn,
    ContributionBound,
    FixedPointColumn,
    KeyCodeColumn,
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
    assert ("bounding" in lines[0]) is bounded
    assert "key-code" in lines[0]
    assert "fixed-point" in lines[0]
