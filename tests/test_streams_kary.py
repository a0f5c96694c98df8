"""The k-ary tree with consistent estimates (issue 27, item 1, pure ε): the best branching, the
streaming Honaker estimates (exact without noise, any batch split), the stated variance and the
CI's coverage (seeded, alpha declared, power checked)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import binom, chi2

from dpcurator.errors import ParameterError
from dpcurator.random import SeededRng
from dpcurator.streams import ContinualSum, KaryContinualSum
from dpcurator.streams.kary import _digits, _ratios, best_branching, tree_variance_factors

ALPHA = 0.01
RUNS = 400


@pytest.mark.parametrize(("horizon", "k"), [(1, 2), (50, 3), (64, 4), (1000, 7), (999, 10)])
def test_variance_factors_match_enumeration(horizon: int, k: int) -> None:
    """The digit closed forms (worst and mean over t = 1 ... T) against enumerating every t."""
    levels = len(_digits(horizon, k))
    ratios = _ratios(k, levels)
    per_t = [
        sum(d * r for d, r in zip(_digits(t, k), ratios, strict=False))
        for t in range(1, horizon + 1)
    ]
    worst, mean = tree_variance_factors(horizon, k)
    assert math.isclose(worst, max(per_t) * 2 * levels**2, rel_tol=1e-12)
    assert math.isclose(mean, sum(per_t) / horizon * 2 * levels**2, rel_tol=1e-12)


def test_best_branching_beats_the_binary_tree() -> None:
    """At T = 2^20 the best k-ary consistent tree has a worst-step variance at least 4 times
    below the binary tree's at equal ε, and the chosen k is the minimiser."""
    horizon = 2**20
    k = best_branching(horizon)
    best = tree_variance_factors(horizon, k)[0]
    binary = tree_variance_factors(horizon, 2, consistent=False)[0]
    assert binary > 4 * best
    assert all(tree_variance_factors(horizon, j)[0] >= best for j in range(2, 65))
    assert KaryContinualSum.counter(1, horizon).branching == k


@pytest.mark.parametrize("k", [2, 3, 5, 16])
def test_without_noise_the_estimates_are_the_running_sums(k: int) -> None:
    """At ε = 10^9 the discrete Laplace noise is zero, so every node estimate (a consistent
    combination) equals its true sum and each release is the exact running sum, whatever the
    batch split: this checks the streaming bookkeeping of blocks, carries and levels."""
    values = np.random.default_rng(k).integers(0, 5, 400).astype(float)
    stream = KaryContinualSum(10**9, 400, 0.0, 4.0, resolution=1, branching=k)
    rng = SeededRng(1)
    cuts = sorted({0, 1, 2, k, k * k + 1, 200, 399, 400})
    out = np.concatenate([stream.update(values[a:b], rng) for a, b in itertools.pairwise(cuts)])
    assert out.tolist() == np.cumsum(values).tolist()


def _errors(k: int, horizon: int, seed: int) -> np.ndarray:
    events = (np.arange(horizon) % 3 == 0).astype(np.int64)
    rows = []
    for run in range(RUNS):
        stream = KaryContinualSum.counter(1, horizon, branching=k)
        rng = SeededRng(seed + run)
        out = [stream.update(events[a:b], rng) for a, b in ((0, 13), (13, 50), (50, horizon))]
        rows.append(np.concatenate(out) - np.cumsum(events))
    return np.array(rows)


def test_released_noise_has_the_stated_variance() -> None:
    """Seeded χ² test at ALPHA (Bonferroni over the steps checked) of the sample variance of the
    released error against :meth:`variance` (+ at most 1/4 of output rounding); power: a
    standard deviation 1.25 times the stated one is rejected with probability > 0.99."""
    horizon, k = 80, 3
    errors = _errors(k, horizon, 10)
    stream = KaryContinualSum.counter(1, horizon, branching=k)
    times = (1, 8, 26, 27, 80)
    level = ALPHA / len(times)
    low, high = chi2.ppf(level / 2, RUNS - 1), chi2.ppf(1 - level / 2, RUNS - 1)
    for t in times:
        stated = stream.variance(t)
        statistic = errors[:, t - 1].var(ddof=1) * (RUNS - 1)
        assert low * stated <= statistic <= high * (stated + 0.25), t
    assert chi2.sf(high / 1.5625, RUNS - 1) > 0.99


def test_consistency_reduces_the_variance() -> None:
    """Honaker's estimate: the release at t = k^2 (one level-2 node) has variance r_2 V < V."""
    stream = KaryContinualSum.counter(1, 100, branching=4)
    single = stream.variance(1)
    assert stream.variance(16) < 0.8 * single
    assert math.isclose(stream.variance(16), stream.ratios[2] * single, rel_tol=1e-12)


def test_ci_covers_at_every_step() -> None:
    """Seeded coverage of the α = 0.1 CI at every step, at least the Binomial(400, 0.9) share
    reached with probability 1 - ALPHA; power: half-width intervals fall below it."""
    horizon, alpha, k = 80, 0.1, 3
    errors = _errors(k, horizon, 5000)
    stream = KaryContinualSum.counter(1, horizon, branching=k)
    widths = np.array([stream.ci_halfwidth(t, alpha) for t in range(1, horizon + 1)])
    floor = binom.ppf(ALPHA / horizon, RUNS, 1 - alpha) / RUNS
    assert (np.abs(errors) <= widths).mean(axis=0).min() >= floor
    assert (np.abs(errors) <= widths / 2).mean(axis=0).min() < floor


def test_same_epsilon_as_the_binary_tree_and_refusals() -> None:
    tree = ContinualSum.counter(1, 1000)
    kary = KaryContinualSum.counter(1, 1000, branching=2)
    assert kary.epsilon_spent == tree.epsilon_spent == 1
    assert kary.levels == tree.levels
    with pytest.raises(ParameterError, match="at most 3 more events"):
        KaryContinualSum.counter(1, 3).update([1, 1, 1, 1], SeededRng(1))
    with pytest.raises(ParameterError, match="branching"):
        KaryContinualSum.counter(1, 3, branching=1)
    user = KaryContinualSum.counter(10**9, 10, max_events_per_person=1)
    assert user.update([1, 1, 1], SeededRng(1), persons=["a", "a", "b"]).tolist() == [1, 1, 2]
    user.restore(user.to_state())
    assert user.update([1], SeededRng(1), persons=["c"]).tolist() == [3]
