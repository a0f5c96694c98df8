"""User-level continual counting (ContinualSum(max_events_per_person=k)): the per-person cap, the
k-fold noise, free refusals, and the error bound at declared alpha with a power check."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpcurator.errors import ParameterError
from dpcurator.random import SeededRng
from dpcurator.streams import ContinualSum
from tests.stat_tools import ALPHA


def test_events_past_a_persons_kth_are_not_counted() -> None:
    counter = ContinualSum.counter(epsilon=10**6, horizon=16, max_events_per_person=2)
    first = counter.update([1, 1, 1, 1], SeededRng(1), persons=[5, 5, 5, 6])
    second = counter.update([1, 1, 0], SeededRng(2), persons=[6, 6, 7])
    assert np.round(np.concatenate((first, second))).tolist() == [1, 2, 2, 3, 4, 4, 4]
    assert counter.time == 7  # capped events keep their time slot: the clock stays public


def test_sums_replace_capped_events_by_zero_clamped_to_the_bounds() -> None:
    tree = ContinualSum(10**6, horizon=8, lower=2, upper=5, max_events_per_person=1)
    released = tree.update([3.0, 4.0, 5.0], SeededRng(3), persons=["a", "a", "b"])
    assert np.round(released).tolist() == [3, 5, 10]  # a's second event counts as lower = 2


def test_noise_is_k_times_the_event_level_noise_for_the_same_claim() -> None:
    event = ContinualSum.counter(epsilon=1, horizon=64)
    user = ContinualSum.counter(epsilon=1, horizon=64, max_events_per_person=3)
    assert user.mechanism.scale == 3 * event.mechanism.scale
    assert user.epsilon_spent == event.epsilon_spent == 1
    assert user.ci_halfwidth(time=63) > 2.9 * event.ci_halfwidth(time=63)


def test_person_ids_are_required_and_checked_before_ingesting() -> None:
    user = ContinualSum.counter(epsilon=1, horizon=8, max_events_per_person=2)
    with pytest.raises(ParameterError, match="persons"):
        user.update([1, 1])
    with pytest.raises(ParameterError, match="persons"):
        user.update([1, 1], persons=[1])
    with pytest.raises(ParameterError, match="persons"):
        ContinualSum.counter(epsilon=1, horizon=8).update([1], persons=[1])
    with pytest.raises(ParameterError, match="max_events_per_person"):
        ContinualSum.counter(epsilon=1, horizon=8, max_events_per_person=0)
    assert user.time == 0
    assert user.events_per_person == {}


def _errors(reps: int) -> np.ndarray:
    """Release errors at t = 63 of a user-level counter (k = 4): 16 persons, 4 events each."""
    rng = SeededRng(4)
    persons = [i // 4 for i in range(63)]
    out = np.empty(reps)
    for r in range(reps):
        counter = ContinualSum.counter(epsilon=1, horizon=64, max_events_per_person=4)
        out[r] = counter.update(np.ones(63), rng, persons=persons)[-1] - 63
    return out


def test_user_level_ci_covers_at_declared_alpha_with_power() -> None:
    """alpha = 0.2 is the CI's declared miss rate; each binomial test fails falsely with
    probability at most ALPHA (1e-6). Power: the event-level interval (k times too narrow for
    this noise) must be seen to miss too often."""
    alpha, reps = 0.2, 600
    errors = _errors(reps)
    user = ContinualSum.counter(epsilon=1, horizon=64, max_events_per_person=4)
    half = user.ci_halfwidth(time=63, alpha=alpha)
    misses = int((np.abs(errors) > half).sum())
    assert stats.binomtest(misses, reps, alpha, alternative="greater").pvalue > ALPHA
    event_half = ContinualSum.counter(epsilon=1, horizon=64).ci_halfwidth(time=63, alpha=alpha)
    narrow = int((np.abs(errors) > event_half).sum())
    assert stats.binomtest(narrow, reps, alpha, alternative="greater").pvalue < ALPHA
