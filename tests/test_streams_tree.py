"""The binary tree mechanism for continual counting (dpcurator.streams.tree).

Statistical checks use the suite's ALPHA (1e-6) as the false-failure probability of each binomial
test; the coverage test is paired with a power check (the same samples must reject a too-narrow
interval).
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpcurator.errors import ParameterError
from dpcurator.random import SeededRng
from dpcurator.streams import ContinualSum
from tests.stat_tools import ALPHA


def test_exact_running_count_across_uneven_batches_at_huge_epsilon() -> None:
    rng = SeededRng(1)
    events = (np.arange(300) * 7919 % 5 < 2).astype(np.int64)
    counter = ContinualSum.counter(epsilon=10**6, horizon=1000)
    cuts = [0, 1, 2, 9, 64, 65, 200, 300]
    released = np.concatenate(
        [counter.update(events[a:b], rng) for a, b in itertools.pairwise(cuts)]
    )
    np.testing.assert_array_equal(released, np.cumsum(events))
    assert counter.time == 300


def test_bounded_sums_clamp_and_fill_at_huge_epsilon() -> None:
    values = np.array([0.5, 7.0, -3.0, np.nan, np.inf, 1.25])
    summer = ContinualSum(epsilon=10**6, horizon=8, lower=-1, upper=2, resolution=0.25)
    released = summer.update(values, SeededRng(2))
    clean = np.array([0.5, 2.0, -1.0, -1.0, 2.0, 1.25])
    np.testing.assert_allclose(released, np.cumsum(clean))


def test_cost_is_the_hand_computation() -> None:
    counter = ContinualSum.counter(epsilon=Fraction(1, 2), horizon=1000)
    assert counter.levels == 10  # 1000 < 2^10
    assert counter.mechanism.scale == Fraction(10) / Fraction(1, 2)
    assert counter.epsilon_spent == Fraction(1, 2)
    summer = ContinualSum(epsilon=1, horizon=5, lower=-1, upper=3, resolution=0.5)
    assert summer.sensitivity == 3 * (6 - (-2))  # 3 levels x range in half units
    assert summer.mechanism.scale == 24
    assert summer.epsilon_spent == 1


def test_past_the_horizon_is_refused_before_ingesting() -> None:
    counter = ContinualSum.counter(epsilon=1, horizon=4)
    counter.update([1, 1, 1], SeededRng(3))
    with pytest.raises(ParameterError, match=r"at most 1 more events"):
        counter.update([1, 1], SeededRng(3))
    assert counter.time == 3


def test_resolution_must_be_a_power_of_two() -> None:
    with pytest.raises(ParameterError, match=r"'resolution'.*power of two"):
        ContinualSum(epsilon=1, horizon=4, resolution=0.3)


def test_bounds_wider_than_a_float_are_refused_by_name() -> None:
    # Streams check their bounds with the estimators' check: before, a width of inf reached the
    # default resolution's log2 and raised OverflowError.
    with pytest.raises(ParameterError, match=r"'upper'.*narrow the bounds"):
        ContinualSum(epsilon=1, horizon=4, lower=-1e308, upper=1e308)


def _errors(time: int, reps: int) -> np.ndarray:
    rng = SeededRng(4)
    events = np.ones(time, dtype=np.int64)
    out = np.empty(reps)
    for r in range(reps):
        counter = ContinualSum.counter(epsilon=1, horizon=64)
        out[r] = counter.update(events, rng)[-1] - time
    return out


@pytest.mark.parametrize("time", [32, 63])
def test_ci_covers_at_declared_alpha_with_power(time: int) -> None:
    alpha, reps = 0.2, 600
    errors = _errors(time, reps)
    half = ContinualSum.counter(epsilon=1, horizon=64).ci_halfwidth(time=time, alpha=alpha)
    misses = int((np.abs(errors) > half).sum())
    assert stats.binomtest(misses, reps, alpha, alternative="greater").pvalue > ALPHA
    # Power: an interval a third as wide must be seen to miss too often.
    narrow = int((np.abs(errors) > half / 3).sum())
    assert stats.binomtest(narrow, reps, alpha, alternative="greater").pvalue < ALPHA


def test_noise_is_a_sum_over_the_dyadic_decomposition() -> None:
    # t = 32 uses one tree node, t = 63 uses six: the variances differ by a factor 6.
    one, six = _errors(32, 400), _errors(63, 400)
    ratio = float(np.var(six) / np.var(one))
    low, high = stats.f.ppf([ALPHA / 2, 1 - ALPHA / 2], 399, 399)
    assert low < ratio / 6 < high
