"""Propose-test-release (Dwork & Lei 2009): the IQR cell, NR on unstable data, the median."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpcurator.estimators.ptr import ptr_iqr, ptr_median, ptr_test, ptr_threshold
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


def median_coverage(shrink: float, reps: int = 300) -> int:
    x = np.random.default_rng(6).normal(0, 1, 4001)
    truth = float(np.sort(x)[x.size // 2])
    rng = SeededRng(7)
    hits = 0
    for _ in range(reps):
        out = ptr_median(x, epsilon=1.0, delta=1e-6, lower=-10, upper=10, scale=1.35, rng=rng)
        assert out.replied
        centre = float(out.value)
        half = (float(out.ci_high) - centre) * shrink
        hits += abs(truth - centre) <= half
    return hits


@pytest.mark.statistical
def test_median_noise_ci_covers() -> None:
    """Binomial test (ALPHA) of coverage >= 0.95 - 0.03; a 10x narrower CI is caught."""
    assert stats.binomtest(median_coverage(1.0), 300, 0.92, alternative="less").pvalue > ALPHA
    assert stats.binomtest(median_coverage(0.1), 300, 0.92, alternative="less").pvalue < ALPHA
