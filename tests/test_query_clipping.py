"""The query layer's opt-in clipping report (issue 14, "clipping bias";
:mod:`dpcurator.query.plan.clipping`, :mod:`dpcurator.query.release.clipping`).

Coverage: with 30% of the values above the upper bound, the upper end of the clamped share's
(1-α) interval must reach 0.25 in (nearly) every release: a miss has probability <= CI_ALPHA,
so a one-sided binomial test at ALPHA must not reject a miss rate <= CI_ALPHA. Power: on a table
within the bounds the same bound must stay below 0.05, so a report that always said
"everything may be clamped" fails.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import dpcurator as dpc
from dpcurator.accounting import PureEvent
from dpcurator.core.measures import PureDP
from dpcurator.errors import ParameterError, UnsupportedQueryError
from dpcurator.query.backends import open_backend
from dpcurator.query.caches import new_result_cache
from dpcurator.query.session import Session
from dpcurator.random import SeededRng
from tests.stat_tools import ALPHA

REPS = 200
CI_ALPHA = 0.05
VICTIM = 4322

META: dict[str, Any] = {
    "table": "t",
    "person_column": "pid",
    "max_rows_per_person": 1,
    "columns": {
        "pid": {"type": "int"},
        "x": {"type": "float", "lower": 0, "upper": 100},
        "k": {"type": "int", "keys": [0, 1]},
    },
}


def _session(outside: float, n: int = 2_000, seed: int = 1) -> Session:
    """n rows, ``outside`` of them at 150 (above the upper bound 100), the rest in [0, 100]."""
    gen = np.random.default_rng(seed)
    x = gen.uniform(0, 100, n)
    x[: int(outside * n)] = 150.0
    frame = pd.DataFrame({"pid": np.arange(n), "x": x, "k": gen.integers(0, 2, n)})
    return Session(
        open_backend(frame, table="t", engine="duckdb"),
        dpc.Metadata.from_dict(META),
        budget=dpc.Budget(1e9),
        rng=SeededRng(seed),
        result_cache=new_result_cache(),
    )


def _share_highs(outside: float) -> list[float]:
    session = _session(outside)
    highs = []
    for _ in range(REPS):
        release = session.sql(
            "SELECT AVG(x) AS m FROM t", epsilon=1.0, clipping=0.2, alpha=CI_ALPHA
        )
        (report,) = release.clipping
        highs.append(report.clamped_share_high)
    return highs


@pytest.mark.statistical
def test_clamped_share_covers_and_has_power() -> None:
    """30% above U: the share's upper end reaches 0.25 (misses not above CI_ALPHA at ALPHA);
    within the bounds it stays below 0.05 (power)."""
    misses = sum(high < 0.25 for high in _share_highs(0.3))
    assert stats.binomtest(misses, REPS, CI_ALPHA, alternative="greater").pvalue > ALPHA
    clean = _share_highs(0.0)
    assert max(clean) < 0.05


def test_report_is_shown_everywhere_and_charged_within_epsilon() -> None:
    session = _session(0.3)
    query = "SELECT k, AVG(x) AS m, MEDIAN(x) AS med, COUNT(*) AS n FROM t GROUP BY k"
    release = session.sql(query, epsilon=1.0, clipping=0.1)
    assert release.cost == PureDP(1)
    assert [(r.columns, r.group) for r in release.clipping] == [
        (("m", "med"), (0,)),
        (("m", "med"), (1,)),
    ]
    for report in release.clipping:
        assert report.above[1] > 200  # ~300 rows above 100 per group
        assert report.notes[1] == "med: unaffected by clamping (95%)"  # 30% above < 50%
    frame = release.to_pandas()
    assert {"m_clipped_above", "m_clamped_share_high", "med_clipped_below"} <= set(frame.columns)
    assert "clipping report" in release.summary()
    assert release.to_dict()["clipping"][0]["group"] == {"k": 0}
    clip_uses = [m for m in release.mechanisms if m.statistic.startswith("clipping")]
    assert [m.column for m in clip_uses] == ["m,med"]
    assert float(clip_uses[0].epsilon) == pytest.approx(0.1)
    estimate = session.estimate(query, epsilon=1.0, clipping=0.1)
    assert estimate.cost == PureDP(1)
    assert any(m.statistic.startswith("clipping") for m in estimate.mechanisms)


def test_refusals_are_free_and_clear() -> None:
    session = _session(0.0)
    with pytest.raises(ParameterError, match="clipping"):
        session.sql("SELECT AVG(x) AS m FROM t", epsilon=1.0, clipping=1.0)
    with pytest.raises(UnsupportedQueryError, match="clipping report counts"):
        session.sql("SELECT COUNT(*) AS n FROM t", epsilon=1.0, clipping=0.1)
    with pytest.raises(UnsupportedQueryError, match="accuracy targets"):
        session.sql("SELECT SUM(x) AS s FROM t", accuracy={"s": 100.0}, clipping=0.1)
    assert session.spent() == PureDP(0)


def _demo(frame: pd.DataFrame) -> Session:
    return Session(
        open_backend(frame, table="people", engine="duckdb"),
        dpc.Metadata.from_yaml(dpc.demo_path("people.yaml")),
        budget=dpc.Budget(100, 1e-3),
        rng=SeededRng(7),
    )


@pytest.mark.parametrize(
    "query",
    [
        "SELECT sex, AVG(income) AS m, QUANTILE(hours, 0.9) AS q FROM people GROUP BY sex",
        "SELECT region, SUM(hours) AS s FROM people GROUP BY region",
    ],
)
def test_neighbours_see_the_same_report_structure(query: str) -> None:
    """D and D minus one person: the same reported columns, groups, bounds, mechanisms and
    charge (only the noisy numbers and the notes they imply may differ)."""
    frame = pd.read_csv(dpc.demo_path("people.csv"))
    releases = [
        _demo(f).sql(query, epsilon=0.5, delta=1e-6, clipping=0.2)
        for f in (frame, frame[frame["pid"] != VICTIM])
    ]
    shapes = [
        (
            [(r.columns, r.group, r.lower, r.upper) for r in release.clipping],
            release.cost,
            release.mechanisms,
            list(release.to_pandas().columns),
        )
        for release in releases
    ]
    assert shapes[0] == shapes[1]
    assert shapes[0][0]


def test_engines_count_the_same_cells() -> None:
    """Below, within and above (NULLs nowhere: no fill) agree on DuckDB, Polars and memory."""
    x = np.concatenate([np.full(30, 150.0), np.full(5, -5.0), np.full(10, np.nan), np.arange(55.0)])
    frame = pd.DataFrame({"pid": np.arange(100), "x": x, "k": np.arange(100) % 2})
    meta = {**META, "columns": {**META["columns"], "x": {**META["columns"]["x"], "nullable": True}}}
    found = []
    for engine in ("duckdb", "polars", "memory"):
        session = Session(
            open_backend(frame, table="t", engine=engine),
            dpc.Metadata.from_dict(meta),
            budget=dpc.Budget(1e9),
        )
        plan = session.plan("SELECT k, SUM(x) AS s FROM t GROUP BY k", epsilon=1.0, clipping=0.5)
        (exact,) = session.compute_exact([plan.exact], PureEvent(0), description="cells")
        found.append(
            {key: [exact.groups[key][c] for c in plan.clipping[0].exact] for key in [(0,), (1,)]}
        )
    assert found == [{(0,): [3, 27, 15], (1,): [2, 28, 15]}] * 3


def test_long_frame_and_html_show_the_report() -> None:
    """to_pandas(long=True) carries each clamped column's counts and share on its rows (None on
    the count's); the HTML view has the report's table, its notes and bounds, escaped."""
    release = _session(0.3).sql(
        "SELECT k, AVG(x) AS m, COUNT(*) AS n FROM t GROUP BY k", epsilon=1.0, clipping=0.1
    )
    long = release.to_pandas(long=True)
    assert list(long.columns)[-3:] == ["clipped_below", "clipped_above", "clamped_share_high"]
    wide = release.to_pandas()
    for k in (0, 1):
        row = long[(long["k"] == k) & (long["statistic"] == "m")].iloc[0]
        expected = wide[wide["k"] == k].iloc[0]
        assert row["clipped_above"] == expected["m_clipped_above"] > 200
        assert row["clamped_share_high"] == expected["m_clamped_share_high"]
        count_row = long[(long["k"] == k) & (long["statistic"] == "n")].iloc[0]
        assert count_row[["clipped_below", "clipped_above"]].isna().all()
    shown = release._repr_html_()
    assert '<table class="dpcurator-clipping">' in shown
    assert "(&gt; 100)" in shown  # the upper bound, escaped
    for report in release.clipping:
        assert all(note in shown for note in report.notes)
    plain = _session(0.3).sql("SELECT AVG(x) AS m FROM t", epsilon=1.0)
    assert "clipped_below" not in plain.to_pandas(long=True).columns
    assert "dpcurator-clipping" not in plain._repr_html_()
