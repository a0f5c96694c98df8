"""Propose-test-release (Dwork & Lei 2009): the IQR cell, NR on unstable data, the median, the
L1 regression and the parallel composition rule."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpcurator.core.measures import ApproxDP, PureDP
from dpcurator.estimators.ptr import (
    parallel_cost,
    ptr_iqr,
    ptr_median,
    ptr_parallel,
    ptr_test,
    ptr_threshold,
)
from dpcurator.estimators.ptr_regression import ptr_l1_regression
from dpcurator.random import SeededRng
from tests.stat_tools import ALPHA


def order_iqr(x: np.ndarray) -> float:
    s = np.sort(x)
    return float(s[(3 * s.size) // 4] - s[s.size // 4])


def test_large_epsilon_cell_holds_the_iqr() -> None:
    x = np.random.default_rng(1).normal(0, 2, 2001)
    out = ptr_iqr(x, epsilon=1e6, delta=1e-9, lower=-20, upper=20, rng=SeededRng(1))
    assert out.replied
    assert out.ci_low <= order_iqr(x) < out.ci_high
    assert out.ci_high / out.ci_low == pytest.approx(1.2)


def test_unstable_iqr_is_no_reply_and_costs_the_same() -> None:
    # 25 zeros then 75 tens: adding one zero moves the lower quartile from 10 to 0 (D = 1).
    unstable = np.r_[np.zeros(25), np.full(75, 10.0)]
    stable = np.random.default_rng(2).normal(0, 2, 2001)
    rng = SeededRng(2)
    bad = ptr_iqr(unstable, epsilon=1e6, delta=1e-9, lower=-20, upper=20, rng=rng)
    good = ptr_iqr(stable, epsilon=1e6, delta=1e-9, lower=-20, upper=20, rng=rng)
    assert not bad.replied
    assert good.replied
    assert bad.cost == good.cost  # the charge is public: both tries are always paid for


def test_threshold_bounds_passing_at_distance_one() -> None:
    """P[pass | D = 1] <= δ: the exact discrete Laplace tail at the threshold."""
    for epsilon, delta in [(0.5, 1e-3), (1.0, 1e-6), (2.0, 0.05)]:
        t = ptr_threshold(epsilon, delta)
        p = np.exp(-epsilon)
        assert p ** (t - 1) / (1 + p) <= delta  # P[Z >= t - 1] = p^(t-1)/(1+p)
    rng = SeededRng(3)
    passes = sum(ptr_test(1, 1.0, 0.2, rng) for _ in range(2000))
    assert stats.binomtest(passes, 2000, 0.2, alternative="greater").pvalue > ALPHA


def test_median_large_epsilon_and_degenerate_data() -> None:
    x = np.random.default_rng(4).normal(3, 1, 1001)
    out = ptr_median(x, epsilon=1e3, delta=1e-9, lower=-10, upper=10, rng=SeededRng(4))
    assert float(out.value) == pytest.approx(np.median(x), abs=1e-3)
    for data in ([], np.full(50, 2.0)):  # decided privately: NR or a reply, never an exception
        ptr_median(data, epsilon=1.0, delta=1e-6, lower=-10, upper=10, rng=SeededRng(5))


def median_coverage(shrink: float, reps: int = 300) -> tuple[int, int]:
    """How many of ``reps`` seeded releases' intervals hold the truth, and how many still do when
    narrowed by ``shrink`` around the value (the power check; the same releases)."""
    x = np.random.default_rng(6).normal(0, 1, 4001)
    truth = float(np.sort(x)[x.size // 2])
    rng = SeededRng(7)
    hits = narrow = 0
    for _ in range(reps):
        out = ptr_median(x, epsilon=1.0, delta=1e-6, lower=-10, upper=10, scale=1.35, rng=rng)
        assert out.replied
        centre = float(out.value)
        half = float(out.ci_high) - centre
        hits += abs(truth - centre) <= half
        narrow += abs(truth - centre) <= half * shrink
    return hits, narrow


@pytest.mark.statistical
def test_median_noise_ci_covers() -> None:
    """Binomial test (ALPHA) of coverage >= 0.95 - 0.03; a 10x narrower CI is caught."""
    hits, narrow = median_coverage(0.1)
    assert stats.binomtest(hits, 300, 0.92, alternative="less").pvalue > ALPHA
    assert stats.binomtest(narrow, 300, 0.92, alternative="less").pvalue < ALPHA


def line_with_outliers(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """y = 1 + 2x + Laplace(1) noise; 5% of y set to 100."""
    g = np.random.default_rng(seed)
    x = g.uniform(0, 10, 8000)
    y = 1 + 2 * x + g.laplace(0, 1, x.size)
    y[:400] = 100.0
    return x, y


def test_l1_regression_is_near_the_truth_and_not_pulled_by_outliers() -> None:
    """Large ε: within 0.15 of (1, 2) (declared tolerance; a block fit's sd is ~0.3 and the
    median of 400 of them ~0.02), while least squares is pulled over 0.5 away."""
    x, y = line_with_outliers(8)
    out = ptr_l1_regression(
        x, y, epsilon=1e3, delta=1e-6, lower=-10, upper=10, blocks=400, rng=SeededRng(8)
    )
    assert out.replied
    assert out.cost == ApproxDP(1000, 1e-6)
    assert out.value is not None
    assert np.abs(out.value - [1.0, 2.0]).max() < 0.15
    least_squares = np.polyfit(x, y, 1)[::-1]
    assert np.abs(least_squares - [1.0, 2.0]).max() > 0.5


def test_l1_regression_no_reply_on_unstable_data() -> None:
    """Half the rows have slope 2, half slope -2: the block fits split between the two lines and
    their median sits near the gap, at a distance to instability far below the threshold of
    ε = 1 (T ≈ 70): NR, at the full cost."""
    g = np.random.default_rng(9)
    x = g.uniform(0, 10, 8000)
    y = np.where(np.arange(x.size) % 2 == 0, 2.0, -2.0) * x + g.normal(0, 0.1, x.size)
    out = ptr_l1_regression(
        x, y, epsilon=1.0, delta=1e-6, lower=-10, upper=10, blocks=400, rng=SeededRng(9)
    )
    assert not out.replied
    assert out.cost == ApproxDP(1, 1e-6)


def test_parallel_composition_costs_the_max() -> None:
    """By hand: (1000, 1e-6) and twice (0.5, 1e-5) on disjoint subsets cost (1000, 1e-5), not
    the sum; every public key gets a release, an empty subset (NR) included."""
    assert parallel_cost([PureDP(1), ApproxDP(0.5, 1e-5)]) == ApproxDP(1, 1e-5)
    x = np.random.default_rng(10).normal(0, 1, 3000)
    labels = np.where(np.arange(x.size) % 2 == 0, "a", "b")
    plan = {"a": (1e3, 1e-6), "b": (0.5, 1e-5), "c": (0.5, 1e-5)}
    rng = SeededRng(10)
    out, cost = ptr_parallel(
        labels, list(plan), lambda key, rows: ptr_median(
            x[rows], epsilon=plan[str(key)][0], delta=plan[str(key)][1], lower=-5, upper=5, rng=rng
        ),
    )  # fmt: skip
    assert list(out) == ["a", "b", "c"]
    assert cost == ApproxDP(1000, 1e-5)
    assert out["a"].replied
    assert not out["c"].replied
