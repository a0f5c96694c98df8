"""Issue 28 item 1: a release warns when ε makes it effectively exact, and says how NULL/NaN in
a non-nullable column is treated. Both are public: decided from the plan and the metadata."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.random import SeededRng
from tests.neighbour_queries import demo_frame
from tests.neighbour_service import DATASET, ServedTable

YAML = dpc.demo_path("people.yaml")


def _session(frame: pd.DataFrame, metadata: dpc.Metadata | None = None) -> dpc.Session:
    meta = metadata or dpc.Metadata.from_yaml(YAML)
    budget = dpc.Budget(epsilon=1e9, delta=1e-5)
    return dpc.Session.from_data(frame, metadata=meta, budget=budget, rng=SeededRng(3))


def _exact_warnings(release: dpc.Release) -> list[str]:
    return [w for w in release.warnings if "protects almost nothing" in w]


def test_a_huge_epsilon_is_flagged_and_the_values_are_then_exact() -> None:
    s = _session(pd.read_csv(dpc.demo_path("people.csv")))
    huge = s.sql("SELECT region, COUNT(*) AS n FROM people GROUP BY region", epsilon=1e8)
    assert _exact_warnings(huge)
    assert "warning:" in huge.summary()
    assert huge.to_dict()["warnings"] == list(huge.warnings)
    # the warning is true: the released counts are the exact ones (every group)
    frame = pd.read_csv(dpc.demo_path("people.csv"))
    exact = frame.groupby("region").size()
    assert {key[0]: e[0].value for key, e in huge.rows} == exact.to_dict()
    # power: an ordinary ε gets no such warning
    assert not _exact_warnings(s.sql("SELECT COUNT(*) AS n FROM people", epsilon=1.0))
    assert not _exact_warnings(s.sql("SELECT SUM(income) AS t FROM people", epsilon=1e3))


def test_the_nan_note_depends_on_the_metadata_not_the_data() -> None:
    clean = pd.read_csv(dpc.demo_path("people.csv"))
    dirty = clean.copy()
    dirty["age"] = dirty["age"].astype(float)
    dirty.loc[:9, "age"] = np.nan
    query = "SELECT AVG(age) AS a, AVG(hours) AS h, COUNT(*) AS n FROM people"
    releases = [_session(f).sql(query, epsilon=1.0) for f in (clean, dirty)]
    notes = [r.notes for r in releases]
    assert releases[0].to_dict()["notes"] == list(notes[0])
    assert notes[0] == notes[1]
    (note,) = notes[0]
    assert "age is NULL or NaN" in note  # age: non-nullable, no fill
    assert "hours" not in note  # hours is declared nullable
    assert not _session(clean).sql("SELECT COUNT(*) AS n FROM people", epsilon=1.0).notes
    filled: dict[str, Any] = dpc.Metadata.from_yaml(YAML).to_dict()
    filled["columns"]["age"]["fill"] = 40
    with_fill = _session(clean, dpc.Metadata.from_dict(filled)).sql(query, epsilon=1.0)
    assert not with_fill.notes


@pytest.fixture(scope="module")
def served() -> Iterator[ServedTable]:
    with ServedTable(demo_frame()) as table:
        yield table


def test_the_http_answers_carry_the_warnings_and_the_box_flag(served: ServedTable) -> None:
    query = {"sql": "SELECT COUNT(*) AS n FROM people", "epsilon": 1e5, "delta": 0}
    answer = served._client.post(f"/v1/datasets/{DATASET}/queries", json=query)
    assert answer.status_code == 200, answer.text
    assert any("protects almost nothing" in w for w in answer.json()["release"]["warnings"])
    fit = {"model": "logistic", "response": "employed", "predictors": ["age"],
           "epsilon": 1.0, "coef_bound": 0.001}  # fmt: skip
    body = served._client.post(f"/v1/datasets/{DATASET}/fits", json=fit)
    assert body.status_code == 200, body.text
    release = body.json()["fit"]
    assert release["at_box_bound"] == {"intercept": True, "age": True}
    assert release["warnings"]
