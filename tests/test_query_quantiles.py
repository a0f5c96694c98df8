"""Refined quantiles in the query layer (issue 14, "Quantiles" and "Inference").

Float quantiles resolve below the first level's bins (1/1,024 of the range) at a large ε, per group
too (each group's window from its own level-1 choice); each level after the first is one engine
pass whatever the number of groups or quantile outputs; releases carry a noise-only interval.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.random import SeededRng

HUGE = 1e7
#: The final level's bin width for income in [0, 400000] (32 of 1,024 bins split in 2,048).
FINE = 400_000 / 1_024 * 32 / 2_048


def _near_quantile(value: float, data: pd.Series, p: float, width: float) -> bool:
    """Whether ``value`` lies within ``width`` of [the value before x_(⌊ρ⌋), the value after
    x_(⌈ρ⌉)], ρ = p·(n - 1): where a refined edge lands at a large ε (with ties, an edge just
    below or above the tied values may be the closest in rank; one level: a bin centre up to
    half a coarse bin away)."""
    ordered = np.sort(data.to_numpy(dtype=float))
    rank = p * (len(ordered) - 1)
    low, high = ordered[int(np.floor(rank))], ordered[int(np.ceil(rank))]
    below, above = ordered[ordered < low], ordered[ordered > high]
    start = below[-1] if below.size else low
    return bool(start - width <= value <= (above[0] if above.size else high) + width)


def _session(engine: str) -> dpc.Session:
    return dpc.Session.from_data(
        dpc.demo_path("people.csv"),
        metadata=dpc.Metadata.from_yaml(dpc.demo_path("people.yaml")),
        budget=dpc.Budget(epsilon=1e9),
        engine=engine,
        rng=SeededRng(7),
    )


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return pd.read_csv(dpc.demo_path("people.csv"))


@pytest.mark.parametrize("engine", ["duckdb", "memory"])
def test_float_median_resolves_below_the_first_level(engine: str, frame: pd.DataFrame) -> None:
    release = _session(engine).sql("SELECT MEDIAN(income) AS m FROM people", epsilon=HUGE)
    estimate = release.value("m")
    truth = float(np.quantile(frame.income.clip(0, 400_000), 0.5))
    assert _near_quantile(estimate.value, frame.income.clip(0, 400_000), 0.5, FINE)
    assert estimate.ci_low is not None
    assert estimate.ci_high is not None
    assert estimate.ci_low <= truth <= estimate.ci_high
    (use,) = [m for m in release.mechanisms if m.statistic == "quantile"]
    assert "noise only" in use.mechanism


@pytest.mark.parametrize("engine", ["duckdb", "memory"])
def test_grouped_quantiles_refine_each_group_in_one_pass_per_level(
    engine: str, frame: pd.DataFrame
) -> None:
    session = _session(engine)
    backend = session._backend
    with mock.patch.object(backend, "compute", wraps=backend.compute) as compute:
        release = session.sql(
            "SELECT region, QUANTILE(income, 0.25) AS q1, MEDIAN(hours) AS h FROM people "
            "GROUP BY region",
            epsilon=HUGE,
        )
    assert compute.call_count == 2  # the query's plan (level 1) and one pass for level 2
    for key, group in frame.groupby("region"):
        region = str(key)
        q1 = release.value("q1", (region,))
        income = group.income.clip(0, 400_000)
        truth = float(np.quantile(income, 0.25))
        assert _near_quantile(q1.value, income, 0.25, FINE)
        assert q1.ci_low is not None
        assert q1.ci_high is not None
        assert q1.ci_low <= truth <= q1.ci_high
        hours = group.hours.dropna().clip(0, 80)
        assert _near_quantile(release.value("h", (region,)).value, hours, 0.5, 80 / 1024 / 64)


def test_integer_quantiles_keep_unit_bins_with_an_interval(frame: pd.DataFrame) -> None:
    release = _session("duckdb").sql("SELECT MEDIAN(age) AS m FROM people", epsilon=HUGE)
    estimate = release.value("m")
    assert estimate.value == float(np.median(frame.age))
    assert estimate.ci_low is not None
    assert estimate.ci_high is not None
    assert estimate.ci_low <= estimate.value <= estimate.ci_high
    assert float(estimate.ci_low).is_integer()
