"""A user-level plan bounded by its own windows (a filter: no bounding column serves it) and
grouped by a column with key codes keeps the rows of its public keys by their code and groups
by code: the rows kept, hence every exact result, are those of the key SEMI JOIN and value
grouping it replaces (persons far over the bound, values outside the keys, NULL keys)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dpcurator.query.backends.duckdb import DuckDBBackend
from dpcurator.query.backends.duckdb_columns import bounded_codes
from dpcurator.query.backends.duckdb_query import build_query
from dpcurator.query.ir import (
    AggregatePlan,
    Col,
    Compare,
    ContributionBound,
    ExactAggregate,
    GroupColumn,
    KeyCodeColumn,
    Lit,
    PrecomputedColumns,
)

KEYS = KeyCodeColumn("g", ("a", "b", "c", "d", None))
ROWS = 600


def _source() -> dict[str, list[object]]:
    rng = np.random.default_rng(11)
    values = ["a", "b", "c", "d", "zz", None]  # "zz" is no key: its rows must not use up groups
    return {
        "g": [values[i] for i in rng.integers(0, len(values), ROWS)],
        "x": rng.normal(5.0, 4.0, ROWS).round(2).tolist(),
        "pid": [int(p) for p in rng.integers(0, 12, ROWS)],  # ~50 rows per person
    }


PLAN = AggregatePlan(
    "t",
    (
        ExactAggregate("n", "count"),
        ExactAggregate("s", "sum", Col("x"), 0.0, 10.0, 0.0, -4),
        ExactAggregate("p", "count_persons"),
    ),
    where=Compare(">", Col("x"), Lit(1.0)),
    group_by=(GroupColumn("g", Col("g")),),
    group_keys=tuple((key,) for key in KEYS.keys),
    bound=ContributionBound("pid", 2, 3, 9),
)


@pytest.mark.parametrize("where", [PLAN.where, Compare("<", Col("x"), Lit(8.0))])
def test_code_filter_keeps_the_rows_of_the_key_join(where: Compare) -> None:
    plan = replace(PLAN, where=where)
    coded = DuckDBBackend.from_source(
        _source(), table="t", precomputed=PrecomputedColumns(key_codes=(KEYS,))
    )
    plain = DuckDBBackend.from_source(_source(), table="t")
    try:
        hidden = coded._hidden["t"]
        assert bounded_codes(plan, hidden)
        query = build_query(plan, None, hidden, coded.columns("t"))[0]
        assert "SEMI JOIN" not in query
        assert "SEMI JOIN" in build_query(plan, None, plain._hidden["t"], plain.columns("t"))[0]
        result = coded.compute(plan)
        assert result == plain.compute(plan)
        assert sum(v["p"] for v in result.groups.values()) == 12 * 2  # type: ignore[misc]
    finally:
        coded.close()
        plain.close()


def test_other_keys_use_the_join() -> None:
    """Fewer keys than the code column holds, or no bound: not this path."""
    backend = DuckDBBackend.from_source(
        _source(), table="t", precomputed=PrecomputedColumns(key_codes=(KEYS,))
    )
    hidden = backend._hidden["t"]
    assert not bounded_codes(replace(PLAN, group_keys=(("a",), ("b",))), hidden)
    assert not bounded_codes(replace(PLAN, bound=ContributionBound()), hidden)
    backend.close()
