"""Pan-private density estimation (dpcurator.streams.pan_private).

Statistical checks use the suite's ALPHA (1e-6) as the false-failure probability of each binomial
test, each paired with a power check.
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpcurator.errors import ParameterError
from dpcurator.random import SeededRng
from dpcurator.streams import PanPrivateDensity
from tests.stat_tools import ALPHA


def test_state_bits_are_fair_coins_or_biased_coins_only() -> None:
    density = PanPrivateDensity(epsilon=1, universe=40_000, rng=SeededRng(1))
    appeared = np.arange(0, 40_000, 2)
    density.observe(np.concatenate([appeared, appeared[:5000]]), rng=SeededRng(2))
    seen, unseen = density.bits[appeared], density.bits[1::2]
    p = float(density.bias)
    assert stats.binomtest(int(seen.sum()), seen.size, p).pvalue > ALPHA
    assert stats.binomtest(int(unseen.sum()), unseen.size, 0.5).pvalue > ALPHA
    # Power: the appeared users' bits are distinguishable from fair coins.
    assert stats.binomtest(int(seen.sum()), seen.size, 0.5).pvalue < ALPHA


def test_state_is_epsilon_dp_per_user() -> None:
    for epsilon in (Fraction(1, 10**9), Fraction(1, 2), Fraction(3)):
        density = PanPrivateDensity(epsilon=epsilon, universe=1, rng=SeededRng(0))
        p = density.bias
        assert Fraction(1, 2) < p
        ratio = max(p / Fraction(1, 2), Fraction(1, 2) / (1 - p))
        assert float(ratio) <= np.exp(float(epsilon)) * (1 + 1e-12)


def test_estimate_recovers_the_fraction_with_a_covering_interval() -> None:
    hits, reps, alpha = 0, 200, 0.1
    rng = SeededRng(3)
    for _ in range(reps):
        density = PanPrivateDensity(epsilon=1, universe=4000, rng=rng)
        density.observe(np.arange(1000), rng=rng)  # a quarter of the universe
        result = density.estimate(epsilon=1, alpha=alpha, rng=rng)
        hits += int(result.ci_low <= 0.25 <= result.ci_high)
        assert result.ci_high - result.ci_low < 0.3
    assert stats.binomtest(reps - hits, reps, alpha, alternative="greater").pvalue > ALPHA


def test_estimate_from_a_sample_of_a_large_universe() -> None:
    rng = SeededRng(4)
    density = PanPrivateDensity(epsilon=1, universe=3 * 10**6, sample_size=50_000, rng=rng)
    for start in range(0, 3 * 10**6, 10**6):
        density.observe(np.arange(start, start + 10**6, 3), rng=rng)  # every third user
    result = density.estimate(epsilon=1, rng=rng)
    assert result.ci_low <= 1 / 3 <= result.ci_high
    assert abs(result.fraction - 1 / 3) < 0.05
    # Power: the interval excludes neighbouring truths.
    assert not result.ci_low <= 0.5 <= result.ci_high
    assert not result.ci_low <= 0.2 <= result.ci_high


def test_persisted_bytes_are_the_private_state_only() -> None:
    def run(events: list[int]) -> bytes:
        density = PanPrivateDensity(epsilon=1, universe=2**20, sample_size=64, rng=SeededRng(5))
        tracked = density.tracked
        assert tracked is not None
        density.observe(np.array([int(tracked[i]) for i in events]), rng=SeededRng(6))
        return density.to_bytes()

    # The same set of users in another order and multiplicity persists to the same bytes: the
    # events themselves (order, repeats, count) are not stored.
    once = run([3, 9])
    assert once == run([9, 3, 3, 9, 9])
    assert once != run([3])
    restored = PanPrivateDensity.from_bytes(once)
    header_line = once.split(b"\n")[1]
    assert json.loads(header_line) == {"epsilon": "1", "sample_size": 64, "universe": 2**20}
    tail = once[-8:]  # 64 bits packed: the private bits and nothing after them
    assert tail == np.packbits(restored.bits).tobytes()
    assert restored.to_bytes() == once


def test_observe_ignores_ids_outside_the_universe_and_refuses_non_integers() -> None:
    density = PanPrivateDensity(epsilon=1, universe=10, rng=SeededRng(7))
    before = density.bits.copy()
    density.observe(np.array([-1, 10, 99]), rng=SeededRng(8))
    np.testing.assert_array_equal(density.bits, before)
    with pytest.raises(ParameterError, match=r"'users'.*integer user ids"):
        density.observe(np.array(["a"]), rng=SeededRng(8))
    with pytest.raises(ParameterError, match=r"'sample_size'.*<= universe"):
        PanPrivateDensity(epsilon=1, universe=10, sample_size=11)
