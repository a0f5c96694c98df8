"""Coverage of the query layer's intervals at n ∈ {10², 10⁴}, ε ∈ {0.1, 1} (issue 14, "Coverage
is tested").

AVG, VARIANCE and STDDEV are ratios of noisy sums (their intervals invert the error's distribution
under the public noise, :mod:`dpcurator.query.release.ratio_interval`; tests/test_ratio_intervals.py
checks them more closely), MEDIAN a refined quantile with its noise-only interval
(:mod:`dpcurator.query.plan.quantile`). Each is noise-only: it covers the exact statistic of THIS
table, so the data are drawn once per case (inside the bounds, so clamping moves nothing) and the
release repeated with fresh noise. A one-sided binomial test at ALPHA must not reject coverage
>= 0.95 - 0.05, and (power check) the same releases with intervals shrunk 10x around the value
must be rejected, so a too-narrow interval fails the test.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import dpcurator as dpc
from dpcurator.query.backends import open_backend
from dpcurator.query.caches import new_result_cache
from dpcurator.query.session import Session
from dpcurator.random import SeededRng
from tests.stat_tools import ALPHA, coverage_counts

#: Releases per case.
REPS = 150
#: The tolerance below the nominal 0.95.
FLOOR = 0.90
#: The interval's level.
CI_ALPHA = 0.05

META = {
    "table": "t",
    "person_column": "pid",
    "max_rows_per_person": 1,
    "columns": {
        "pid": {"type": "int"},
        "x": {"type": "int", "lower": 0, "upper": 100},
        "y": {"type": "float", "lower": 0, "upper": 100},
    },
}

#: statistic -> (SQL, the exact value the interval covers, the power check's shrink factor: the
#: median's interval is far wider than its error, from counts at a fifth of its ε).
Truth = Callable[[pd.DataFrame], float]
STATISTICS: dict[str, tuple[str, Truth, float]] = {
    "avg": ("AVG(x)", lambda f: float(f["x"].mean()), 0.1),
    "variance": ("VARIANCE(x)", lambda f: float(f["x"].var(ddof=1)), 0.1),
    "stddev": ("STDDEV(x)", lambda f: float(f["x"].std(ddof=1)), 0.1),
    "median": ("MEDIAN(y)", lambda f: float(np.quantile(f["y"], 0.5)), 0.001),
}


def _frame(n: int) -> pd.DataFrame:
    gen = np.random.default_rng(n)
    return pd.DataFrame(
        {
            "pid": np.arange(n),
            "x": np.clip(np.round(gen.normal(40, 15, n)), 0, 100).astype(int),
            "y": np.clip(gen.lognormal(3, 0.5, n), 0, 100),
        }
    )


def coverage(statistic: str, n: int, eps: float) -> tuple[int, int]:
    """(hits, hits of the intervals shrunk around the value) over REPS releases."""
    frame = _frame(n)
    sql, truth_of, shrink = STATISTICS[statistic]
    truth = truth_of(frame)
    session = Session(
        open_backend(frame, table="t", engine="duckdb"),
        dpc.Metadata.from_dict(META),
        budget=dpc.Budget(1e9),
        rng=SeededRng(n + int(eps * 10)),
        result_cache=new_result_cache(),
    )
    query = f"SELECT {sql} AS s FROM t"
    releases = (session.sql(query, epsilon=eps, alpha=CI_ALPHA) for _ in range(REPS))
    return coverage_counts((release.value("s") for release in releases), truth, shrink)


@pytest.mark.statistical
@pytest.mark.slow
@pytest.mark.parametrize("statistic", list(STATISTICS))
@pytest.mark.parametrize("n", [100, 10_000])
@pytest.mark.parametrize("eps", [0.1, 1.0])
def test_query_intervals_cover_the_statistic(statistic: str, n: int, eps: float) -> None:
    """Coverage >= 0.90 not rejected at ALPHA; shrunk intervals are rejected (power)."""
    hits, narrow = coverage(statistic, n, eps)
    assert stats.binomtest(hits, REPS, FLOOR, alternative="less").pvalue > ALPHA
    assert stats.binomtest(narrow, REPS, FLOOR, alternative="less").pvalue < ALPHA


def test_median_interval_is_informative_at_n_1e4_eps_0_1() -> None:
    """At n = 10^4, ε = 0.1 the median's error is ~0.05 on [0, 100]; its 95% interval needs the
    shells beyond the last level's window (1/32 of the range) and must stay narrower than a
    quarter of the range (it was the whole of [0, 100] when the shells stopped at the window)."""
    frame = _frame(10_000)
    session = Session(
        open_backend(frame, table="t", engine="duckdb"),
        dpc.Metadata.from_dict(META),
        budget=dpc.Budget(1e9),
        rng=SeededRng(5),
    )
    estimate = session.sql("SELECT MEDIAN(y) AS s FROM t", epsilon=0.1).value("s")
    assert estimate.ci_low is not None
    assert estimate.ci_high is not None
    assert estimate.ci_high - estimate.ci_low < 25
