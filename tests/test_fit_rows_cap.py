"""The engine-side cap of sample-and-aggregate fits (issue 14; :mod:`dpcurator.query.fit.rows`).

A fit on a large table fetches at most ``max_rows`` rows from the engine, whatever the table's
size; on neighbouring tables (D and D minus one person) the fetched rows differ in at most one
block, and the charge and every refusal's text are the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.errors import DPError
from dpcurator.query import ir
from dpcurator.query.session import Session
from dpcurator.random import SeededRng

VICTIM = 4322
#: Engines that run in this test's time (Spark implements the same IR: tests/test_backends_*).
ENGINES = ("memory", "duckdb", "polars")
MLE: dict[str, Any] = {"y": "age", "model": "gaussian", "lower": [0, 0.1], "upper": [100, 50]}


def _metadata(rows_per_person: int = 1) -> dpc.Metadata:
    return dpc.Metadata.from_dict(
        {
            "table": "people",
            "person_column": "pid",
            "max_rows_per_person": rows_per_person,
            "columns": {"pid": {"type": "int"}, "age": {"type": "float", "lower": 0, "upper": 100}},
        }
    )


def _session(frame: pd.DataFrame, engine: str, rows_per_person: int = 1) -> Session:
    return Session.from_data(
        frame, metadata=_metadata(rows_per_person), budget=dpc.Budget(100, 0),
        rng=SeededRng(11), engine=engine,
    )  # fmt: skip


@pytest.fixture
def fetched(monkeypatch: pytest.MonkeyPatch) -> list[ir.ExactResult]:
    """The exact results the fits fetch from the engine (Session.compute_exact, spied on)."""
    results: list[ir.ExactResult] = []
    original = Session.compute_exact

    def spy(self: Session, plans: Any, event: Any, *, description: str) -> list[ir.ExactResult]:
        out = original(self, plans, event, description=description)
        results.extend(out)
        return out

    monkeypatch.setattr(Session, "compute_exact", spy)
    return results


def _rows(result: ir.ExactResult) -> int:
    return sum(int(values["n"]) for values in result.groups.values())  # type: ignore[call-overload]


def test_a_large_table_fetches_at_most_max_rows(fetched: list[ir.ExactResult]) -> None:
    persons = 300_000  # two rows each: 600,000 rows in the engine
    ages = np.random.default_rng(0).normal(50, 10, 2 * persons)
    frame = pd.DataFrame({"pid": np.repeat(np.arange(persons), 2), "age": ages})
    session = _session(frame, "duckdb", rows_per_person=2)
    fit = session.fit("mle", epsilon=1.0, max_rows=20_000, **MLE)
    assert 10_000 < _rows(fetched[0]) <= 20_000  # capped, and the cap is nearly filled
    assert fit.value is not None
    assert fit.ci_low is not None
    assert fit.ci_high is not None
    assert fit.ci_low[0] <= 50 <= fit.ci_high[0]  # ~10,000 persons: an interval around the mean
    assert fit.ci_high[0] - fit.ci_low[0] < 10  # and a useful one (sd 10, a tenth of the range)
    blocked = session.fit("mle", epsilon=1.0, max_rows=20_000, blocks=300, **MLE)
    assert _rows(fetched[1]) <= 20_000
    assert blocked.value is not None
    assert {key[0] for key in fetched[1].groups} == set(range(300))  # the engine's blocks


def _by_block(result: ir.ExactResult) -> dict[object, set[tuple[object, ...]]]:
    blocks: dict[object, set[tuple[object, ...]]] = {}
    for key, values in result.groups.items():
        blocks.setdefault(key[0], set()).add((*key[1:], values["n"]))
    return blocks


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("blocks", [None, 40])
def test_neighbours_differ_in_one_block_and_nothing_public(
    fetched: list[ir.ExactResult], engine: str, blocks: int | None
) -> None:
    frame = pd.read_csv(dpc.demo_path("people.csv"))[["pid", "age"]]
    neighbour = frame[frame["pid"] != VICTIM]
    options = {**MLE, "max_rows": 1_000, **({} if blocks is None else {"blocks": blocks})}
    sessions = [_session(data, engine) for data in (frame, neighbour)]
    fits = [s.fit("mle", epsilon=1.0, **options) for s in sessions]
    full, less = (_by_block(result) for result in fetched)
    assert all(_rows(result) <= 1_000 for result in fetched)
    changed = [b for b in full.keys() | less.keys() if full.get(b) != less.get(b)]
    assert len(changed) <= 1, changed  # the victim's block only
    assert sessions[0].spent() == sessions[1].spent()
    assert (fits[0].cost, fits[0].method, fits[0].covers) == (
        fits[1].cost, fits[1].method, fits[1].covers,
    )  # fmt: skip
    texts = []
    for session in sessions:  # too small a cap: the same free refusal on both
        spent = session.spent()
        with pytest.raises(DPError) as refused:
            session.fit("mle", epsilon=1.0, **{**options, "max_rows": 10, "blocks": 40})
        assert session.spent() == spent
        texts.append((type(refused.value), str(refused.value)))
    assert texts[0] == texts[1]
    assert "max_rows" in texts[0][1]
