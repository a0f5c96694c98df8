"""Coverage and tightness of the AVG / VARIANCE / STDDEV intervals
(:mod:`dpcurator.query.release.ratio_interval`; issue 14, "means and variances as ratios of noisy
sums").

The interval is noise-only: it covers the exact statistic of THIS table, so each case's data
are drawn once (inside the bounds), its exact aggregates computed once, and the release repeated
REPS times with fresh noise (:func:`~dpcurator.query.release.core.release_plan`, the post-charge
step of every query). Coverage: a one-sided binomial test at ALPHA must not reject coverage >= FLOOR
(nominal 0.95 less a 0.01 tolerance) in any cell, n ∈ {10², 10⁴} x ε ∈ {0.1, 1}. Tightness (the
power check): the same intervals narrowed by 25% around the value must be rejected as
under-covering in at least one cell of each statistic; the union-bound intervals these replaced
were so wide that narrowed by 25% they still covered (AVG and STDDEV in every cell, VARIANCE
everywhere but its whole-range fallback at n = 100, ε = 0.1).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import dpcurator as dpc
from dpcurator.accounting import PureEvent
from dpcurator.mechanisms import Gaussian, Laplace
from dpcurator.query.backends import open_backend
from dpcurator.query.release.core import release_plan
from dpcurator.query.release.ratio_interval import (
    POINTS,
    MomentNoise,
    _tail_quantiles,
    moment_intervals,
)
from dpcurator.query.session import Session
from dpcurator.random import SeededRng
from tests.stat_tools import ALPHA, coverage_counts

REPS = 3_000
FLOOR = 0.94
CI_ALPHA = 0.05
NARROW = 0.75

META = {
    "table": "t",
    "person_column": "pid",
    "max_rows_per_person": 1,
    "columns": {"pid": {"type": "int"}, "x": {"type": "int", "lower": 0, "upper": 100}},
}
Truth = Callable[["pd.Series[int]"], float]
STATISTICS: dict[str, tuple[str, Truth]] = {
    "avg": ("AVG(x)", lambda x: float(x.mean())),
    "variance": ("VARIANCE(x)", lambda x: float(x.var(ddof=1))),
    "stddev": ("STDDEV(x)", lambda x: float(x.std(ddof=1))),
}
CELLS = [(s, n, e) for s in STATISTICS for n in (100, 10_000) for e in (0.1, 1.0)]


@functools.cache
def coverage(statistic: str, n: int, eps: float) -> tuple[int, int]:
    """(hits, hits of the intervals narrowed to NARROW of their width) over REPS releases."""
    gen = np.random.default_rng(n)
    x = np.clip(np.round(gen.normal(40, 15, n)), 0, 100).astype(int)
    frame = pd.DataFrame({"pid": np.arange(n), "x": x})
    session = Session(
        open_backend(frame, table="t", engine="duckdb"),
        dpc.Metadata.from_dict(META),
        budget=dpc.Budget(1e9),
    )
    sql, truth_of = STATISTICS[statistic]
    truth = truth_of(frame["x"])
    plan = session.plan(f"SELECT {sql} AS s FROM t", epsilon=eps)
    (exact,) = session.compute_exact([plan.exact], PureEvent(0), description="test")
    rng = SeededRng(n + int(eps * 10))
    releases = (release_plan(plan, exact, alpha=CI_ALPHA, rng=rng) for _ in range(REPS))
    return coverage_counts((release.value("s") for release in releases), truth, NARROW)


@pytest.mark.statistical
@pytest.mark.slow
@pytest.mark.parametrize(("statistic", "n", "eps"), CELLS)
def test_interval_covers(statistic: str, n: int, eps: float) -> None:
    hits, _ = coverage(statistic, n, eps)
    assert stats.binomtest(hits, REPS, FLOOR, alternative="less").pvalue > ALPHA


@pytest.mark.statistical
@pytest.mark.slow
@pytest.mark.parametrize("statistic", list(STATISTICS))
def test_intervals_narrowed_by_a_quarter_under_cover_somewhere(statistic: str) -> None:
    """Power: intervals 25% narrower are caught as under-covering in at least one cell."""
    pvalues = [
        stats.binomtest(coverage(*cell)[1], REPS, FLOOR, alternative="less").pvalue
        for cell in CELLS
        if cell[0] == statistic
    ]
    assert min(pvalues) < ALPHA


def test_intervals_are_total_on_extreme_noisy_values() -> None:
    """Noisy parts whose squares overflow, a count at 0 or below: an answer within the range,
    no warning (the suite turns warnings into errors)."""
    noise = MomentNoise((Laplace(3), Laplace(50), Laplace(2_500)), (1.0, 1.0, 1.0))
    cases = [(-5.0, 1e200, 1e300), (1e6, -1e200, 1e300), (1e6, 1e160, -1e300)]
    for kind in ("mean", "variance", "stddev"):
        for case in cases:
            observed = [np.array([v]) for v in case]
            (cell,) = moment_intervals(kind, observed, noise, (0.0, 1e140), 5e139, alpha=0.05)
            assert all(np.isfinite(cell))
            assert cell[1] <= cell[0] <= cell[2]


def test_vectorised_intervals_equal_the_per_group_loop() -> None:
    """Blocks of groups give each group the interval it gets alone (to 1e-12 relative), with
    counts near and below the whole-range fallback and both kinds of noise."""
    gen = np.random.default_rng(7)
    groups = 300
    n = gen.integers(1, 3_000, groups).astype(float)
    n[:20] = np.linspace(-4.0, 3.0, 20)
    m, v = gen.uniform(-20, 20, groups), gen.uniform(0, 400, groups)
    observed = [n, n * m + gen.laplace(0, 50, groups), v * (n - 1) + n * m * m]
    for noise in (
        MomentNoise((Laplace(3), Laplace(50), Laplace(2_500)), (1.0, 1.0, 1.0)),
        MomentNoise((Gaussian(4), Gaussian(60), Gaussian(3_000)), (1.0, 0.5, 0.25)),
    ):
        for kind in ("mean", "variance", "stddev"):
            parts = observed[:2] if kind == "mean" else observed
            together = moment_intervals(kind, parts, noise, (-50.0, 50.0), 0.0, alpha=0.05)
            alone = [
                moment_intervals(
                    kind, [p[[g]] for p in parts], noise, (-50.0, 50.0), 0.0, alpha=0.05
                )[0]
                for g in range(groups)
            ]
            np.testing.assert_allclose(together, alone, rtol=1e-12, atol=0.0)


@pytest.mark.parametrize("size", [POINTS, 64, 5])
def test_tail_quantiles_equal_numpy(size: int) -> None:
    """The tail selection gives np.quantile's linear quantiles, with ties (discrete noise),
    infinities and rows whose threshold set is too small or too large."""
    gen = np.random.default_rng(size)
    errors = np.round(gen.standard_t(2, (200, size)) * gen.uniform(0.1, 30, (200, 1)))
    errors[:10] = 0.0
    errors[10:20, : size // 2] = np.inf
    errors[20:30, ::3] = -np.inf
    levels = [0.0225, 0.9775]
    with np.errstate(invalid="ignore"):
        expected = np.quantile(errors, levels, axis=1)
        np.testing.assert_array_equal(_tail_quantiles(errors, levels), expected)
