"""Pan-private incidence counting (dpcurator.streams.incidence): the fraction of users who appeared
at least k times.

Statistical checks use the suite's ALPHA (1e-6) as the false-failure probability of each binomial
test, each paired with a power check.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpcurator.errors import ParameterError
from dpcurator.random import SeededRng
from dpcurator.streams import PanPrivateIncidence
from tests.stat_tools import ALPHA


def test_counters_are_randomised_response_of_the_count_mod_m() -> None:
    """A user seen c times has counter c mod m with probability p (and each other value with
    probability q): checked for c = 0, 1, 3 and 9 (which wraps to 1) at m = 8."""
    users = 20_000
    incidence = PanPrivateIncidence(epsilon=2, universe=4 * users, modulus=8, rng=SeededRng(1))
    groups = {c: np.arange(i * users, (i + 1) * users) for i, c in enumerate((0, 1, 3, 9))}
    incidence.observe(np.concatenate([np.repeat(ids, c) for c, ids in groups.items()]))
    p = float(incidence.coin.truth_probability)
    for c, ids in groups.items():
        at_count = int(np.count_nonzero(incidence.counters[ids] == c % 8))
        assert stats.binomtest(at_count, users, p).pvalue > ALPHA, c
        # Power: the counter does not sit at a wrong count more often than q.
        wrong = int(np.count_nonzero(incidence.counters[ids] == (c + 1) % 8))
        assert stats.binomtest(wrong, users, p).pvalue < ALPHA


def test_state_is_epsilon_dp_per_user() -> None:
    for epsilon in (Fraction(1, 10**9), Fraction(1, 2), Fraction(3)):
        for modulus in (2, 5, 64):
            coin = PanPrivateIncidence(epsilon, 1, modulus, rng=SeededRng(0)).coin
            ratio = coin.truth_probability / coin.other_probability
            assert 1 < ratio <= Fraction(math.exp(float(epsilon))) * (1 + Fraction(1, 10**12))


def test_at_least_k_covers_the_truth_at_declared_alpha() -> None:
    """A quarter of 4,000 users appear once and a quarter three times: at least 1 is 1/2, at
    least 2 and at least 3 are 1/4, at least 4 is 0. Coverage of the (1-α) intervals, α = 0.1,
    over 200 runs, binomial test at ALPHA; power: the intervals exclude the neighbouring truth."""
    hits, reps, alpha = 0, 200, 0.1
    rng = SeededRng(3)
    truths = {1: 0.5, 2: 0.25, 3: 0.25, 4: 0.0}
    for _ in range(reps):
        incidence = PanPrivateIncidence(epsilon=2, universe=4000, modulus=6, rng=rng)
        incidence.observe(np.arange(1000))
        incidence.observe(np.repeat(np.arange(1000, 2000), 3))
        k = int(rng.integers_below(4, 1)[0]) + 1
        result = incidence.estimate_at_least(k, epsilon=1, alpha=alpha, rng=rng)
        hits += int(result.ci_low <= truths[k] <= result.ci_high)
        assert result.ci_high - result.ci_low < 0.4
        assert not result.ci_low <= truths[k] + 0.25 <= result.ci_high
    assert stats.binomtest(reps - hits, reps, alpha, alternative="greater").pvalue > ALPHA


def test_at_least_k_from_a_sample_of_a_large_universe() -> None:
    rng = SeededRng(4)
    universe = 3 * 10**6
    incidence = PanPrivateIncidence(2, universe, modulus=4, sample_size=50_000, rng=rng)
    incidence.observe(np.arange(0, universe, 3))  # a third once
    incidence.observe(np.repeat(np.arange(1, universe, 6), 2))  # a sixth twice
    result = incidence.estimate_at_least(2, epsilon=1, rng=rng)
    assert result.ci_low <= 1 / 6 <= result.ci_high
    assert not result.ci_low <= 1 / 3 <= result.ci_high
    assert not result.ci_low <= 0.0 <= result.ci_high


def test_refusals_name_the_parameter() -> None:
    with pytest.raises(ParameterError, match="'modulus'"):
        PanPrivateIncidence(1, 10, modulus=1)
    incidence = PanPrivateIncidence(1, 10, modulus=4, rng=SeededRng(5))
    with pytest.raises(ParameterError, match=r"'k'.*below the modulus"):
        incidence.estimate_at_least(4, epsilon=1)
    with pytest.raises(ParameterError, match="'k'"):
        incidence.estimate_at_least(0, epsilon=1)
    with pytest.raises(ParameterError, match="'users'"):
        incidence.observe([1.5])
    before = incidence.counters.copy()
    incidence.observe([-1, 10, 99])  # outside the universe: ignored, never an error
    assert np.array_equal(incidence.counters, before)


def test_persisted_bytes_are_the_private_state_only() -> None:
    """The bytes are the public header, the public sample and one byte per tracked counter (m <=
    256), and restore the same state: two streams with the same counters persist identically."""
    incidence = PanPrivateIncidence(1, 2**20, modulus=5, sample_size=64, rng=SeededRng(6))
    incidence.observe(np.repeat(incidence.tracked, 3))  # type: ignore[arg-type]
    data = incidence.to_bytes()
    restored = PanPrivateIncidence.from_bytes(data)
    assert np.array_equal(restored.counters, incidence.counters)
    assert (restored.epsilon, restored.modulus, restored.universe) == (Fraction(1), 5, 2**20)
    assert np.array_equal(restored.tracked, incidence.tracked)  # type: ignore[arg-type]
    line = data.split(b"\n")[1]
    assert json.loads(line) == {"epsilon": "1", "modulus": 5, "sample_size": 64, "universe": 2**20}
    assert data.endswith(incidence.counters.astype(np.uint8).tobytes())
    assert len(data) == len(b"".join(data.split(b"\n")[:2])) + 2 + 8 * 64 + 64
    with pytest.raises(ParameterError, match="'data'"):
        PanPrivateIncidence.from_bytes(b"not a state")
