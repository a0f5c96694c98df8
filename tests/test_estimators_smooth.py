"""Smooth sensitivity (NRS07): the median and trimmed-mean bounds, the heavy-tailed noise,
releases and CIs."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from dpcurator.estimators.smooth import (
    median_smooth_sensitivity,
    smooth_median,
    trimmed_mean,
    trimmed_mean_smooth_sensitivity,
    trimmed_mean_smooth_sensitivity_add_remove,
)
from dpcurator.mechanisms.heavy_tailed import heavy_tailed_halfwidth, heavy_tailed_integers
from dpcurator.random import SeededRng
from tests.stat_tools import ALPHA, chi_square_pvalue

LOW, HIGH = 0.0, 10.0


def brute_replace(x: np.ndarray, beta: float) -> float:
    """NRS07's smooth sensitivity of x_(m) by the O(n^2) double maximum."""
    n = x.size
    padded = np.concatenate(([LOW], x, [HIGH]))
    m = n // 2 + 1
    return max(
        math.exp(-beta * (j - i - 1)) * (padded[j] - padded[i])
        for i in range(m + 1)
        for j in range(max(m, i + 1), n + 2)
    )


def median_of(x: np.ndarray) -> float:
    return float(np.sort(x)[x.size // 2]) if x.size else (LOW + HIGH) / 2


def test_replace_bound_equals_brute_force() -> None:
    gen = np.random.default_rng(1)
    for _ in range(400):
        x = np.sort(np.round(gen.uniform(LOW, HIGH, int(gen.integers(0, 25))), 1))
        beta = float(gen.choice([0.01, 0.3, 2.0]))
        fast = median_smooth_sensitivity(x, beta, LOW, HIGH, "replace")
        assert fast == pytest.approx(brute_replace(x, beta), rel=1e-12)


def test_add_remove_bound_is_smooth_and_above_local_sensitivity() -> None:
    gen = np.random.default_rng(2)
    beta = 0.2
    for _ in range(200):
        x = np.round(gen.uniform(LOW, HIGH, int(gen.integers(1, 15))), 1)
        s = median_smooth_sensitivity(np.sort(x), beta, LOW, HIGH)
        removals = [np.delete(x, i) for i in range(x.size)]
        additions = [np.append(x, v) for v in [LOW, HIGH, *x, *(x + 0.05)]]
        for y in removals + additions:
            assert abs(median_of(y) - median_of(x)) <= s + 1e-12  # S >= local sensitivity
            s_y = median_smooth_sensitivity(np.sort(y), beta, LOW, HIGH)
            assert s <= math.exp(beta) * s_y * (1 + 1e-12)  # β-smooth


def heavy_pmf(scale: float, support: np.ndarray) -> np.ndarray:
    far = np.arange(-200_000, 200_001, dtype=np.float64)
    total = np.sum(1 / (1 + (far / scale) ** 4))
    return 1 / (1 + (support / scale) ** 4) / total


@pytest.mark.statistical
def test_heavy_tailed_sampler_matches_its_pmf() -> None:
    """Chi-square at ALPHA; the same sample must reject a 20% wider scale (power)."""
    draws = np.array(heavy_tailed_integers(SeededRng(3), 3, 12_000).tolist())
    cells = np.arange(-12, 13)
    observed = np.array([np.sum(np.clip(draws, -12, 12) == c) for c in cells])

    def folded(scale: float) -> np.ndarray:
        p = heavy_pmf(scale, cells.astype(np.float64))
        tail = (1 - p.sum()) / 2
        p[0] += tail
        p[-1] += tail
        return p

    assert chi_square_pvalue(observed, folded(3)) > ALPHA
    assert chi_square_pvalue(observed, folded(3.6)) < ALPHA


@pytest.mark.parametrize("scale", [0.5, 2.0, 40.0])
def test_heavy_tailed_halfwidth_bounds_the_exact_tail(scale: float) -> None:
    for alpha in (0.2, 0.05, 0.01):
        u = heavy_tailed_halfwidth(scale, alpha)
        support = np.arange(-200_000, 200_001, dtype=np.float64)
        pmf = heavy_pmf(scale, support)
        assert pmf[np.abs(support) > u].sum() <= alpha
        if scale >= 1:  # the bound is within a factor 3 of the exact quantile
            assert pmf[np.abs(support) > u / 3].sum() > alpha


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_large_epsilon_gives_the_median(delta: float) -> None:
    x = np.array([3.0, 1.5, 8.25, 4.0, 9.5, 2.0, 7.0])
    out = smooth_median(x, epsilon=1e6, lower=LOW, upper=HIGH, delta=delta, rng=SeededRng(4))
    assert float(out.value) == pytest.approx(np.median(x), abs=1e-3)
    assert out.ci_low <= out.value <= out.ci_high


def test_nan_and_out_of_range_are_clamped_and_filled() -> None:
    x = [np.nan, -50.0, 50.0, np.inf, 6.0]  # -> 5, 0, 10, 10, 6: median 6
    out = smooth_median(x, epsilon=1e6, lower=LOW, upper=HIGH, delta=1e-6, rng=SeededRng(5))
    assert float(out.value) == pytest.approx(6.0, abs=1e-3)


def coverage(
    statistic: str, delta: float, reps: int = 300, neighbours: str = "add_remove"
) -> tuple[int, int]:
    """How many of ``reps`` seeded releases' intervals hold the truth, and how many still do when
    narrowed to 1/20 of each side around the value (the power check; the same releases)."""
    gen = np.random.default_rng(6)
    x = gen.normal(5, 1, 201)
    clean = np.clip(x, LOW, HIGH)
    truth = median_of(clean) if statistic == "median" else float(stats.trim_mean(clean, 0.1))
    rng = SeededRng(7)
    hits = narrow = 0
    for _ in range(reps):
        if statistic == "median":
            out = smooth_median(x, epsilon=1.0, lower=LOW, upper=HIGH, delta=delta, rng=rng)
        else:
            out = trimmed_mean(
                x, epsilon=1.0, bounds=(LOW, HIGH), trim=0.1, delta=delta, rng=rng,
                neighbours=neighbours,  # type: ignore[arg-type]
            )  # fmt: skip
        low, high, centre = float(out.ci_low), float(out.ci_high), float(out.value)
        hits += low <= truth <= high
        narrow += centre - (centre - low) * 0.05 <= truth <= centre + (high - centre) * 0.05
    return hits, narrow


@pytest.mark.statistical
@pytest.mark.parametrize("statistic", ["median", "trimmed_mean"])
@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_noise_ci_covers(statistic: str, delta: float) -> None:
    """Binomial test (alpha ALPHA) that coverage >= 0.95 - 0.03; a CI 20x too narrow is caught."""
    reps = 300
    ok, narrow = coverage(statistic, delta, reps)
    assert stats.binomtest(ok, reps, 0.92, alternative="less").pvalue > ALPHA
    assert stats.binomtest(narrow, reps, 0.92, alternative="less").pvalue < ALPHA


def brute_trimmed_smooth(x: np.ndarray, beta: float, trim: float) -> float:
    """max_k e^{-kβ} A_k by enumeration: every data set with k of the n values replaced by LOW or
    HIGH, and the local sensitivity of each by every single replacement (extremes suffice: moving
    a replaced value outwards only widens a gap of order statistics)."""
    n = x.size
    t = math.floor(trim * n)

    def f(y: np.ndarray) -> float:
        return float(sum(sorted(y.tolist())[t : n - t])) / (n - 2 * t)

    def local(y: np.ndarray) -> float:
        here = f(y)
        return max(
            abs(f(np.concatenate((y[:p], [z], y[p + 1 :]))) - here)
            for p in range(n)
            for z in (LOW, HIGH)
        )

    reach = [0.0] * (n + 1)  # reach[k]: the largest local sensitivity at distance exactly k
    for choice in itertools.product((None, LOW, HIGH), repeat=n):
        y = np.array([x[p] if c is None else c for p, c in enumerate(choice)])
        k = sum(c is not None for c in choice)
        reach[k] = max(reach[k], local(y))
    return max(math.exp(-beta * k) * max(reach[: k + 1]) for k in range(n + 1))


def test_trimmed_mean_bound_equals_brute_force() -> None:
    """The O(n log n) bound equals the enumerated smooth sensitivity (every neighbour within k)."""
    gen = np.random.default_rng(11)
    for _ in range(40):
        x = np.round(gen.uniform(LOW, HIGH, int(gen.integers(1, 7))), 1)
        beta = float(gen.choice([0.05, 0.5, 3.0]))
        trim = float(gen.choice([0.0, 0.2, 0.34, 0.49]))
        fast = trimmed_mean_smooth_sensitivity(np.sort(x), beta, LOW, HIGH, trim)
        assert fast == pytest.approx(brute_trimmed_smooth(x, beta, trim), rel=1e-12), (x, trim)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_large_epsilon_gives_the_trimmed_mean(delta: float) -> None:
    x = np.array([3.0, 1.5, 8.25, 4.0, 9.5, 2.0, 7.0, -40.0, np.nan, 60.0])  # clamped, NaN -> 5
    clean = np.clip(np.nan_to_num(x, nan=5.0), LOW, HIGH)
    out = trimmed_mean(x, epsilon=1e6, bounds=(LOW, HIGH), trim=0.2, delta=delta, rng=SeededRng(12))
    assert out.value is not None
    assert out.ci_low is not None
    assert out.ci_high is not None
    assert float(out.value) == pytest.approx(stats.trim_mean(clean, 0.2), abs=1e-3)
    assert float(out.ci_low) <= float(out.value) <= float(out.ci_high)


@pytest.mark.parametrize(
    ("bounds", "trim"), [((0.0, 10.0), 0.5), ((0.0, 10.0), -0.1), ((10.0, 0.0), 0.1), (3.0, 0.1)]
)
def test_trimmed_mean_refuses_bad_public_parameters(bounds: object, trim: float) -> None:
    with pytest.raises(ValueError, match="trimmed_mean"):
        trimmed_mean([1.0], epsilon=1.0, bounds=bounds, trim=trim)  # type: ignore[arg-type]


@pytest.mark.statistical
@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_trimmed_mean_ci_covers_under_replace_one_too(delta: float) -> None:
    """Both neighbour notions (add/remove is the default): coverage >= 0.92 at ALPHA, power."""
    ok, narrow = coverage("trimmed_mean", delta, 300, neighbours="replace")
    assert stats.binomtest(ok, 300, 0.92, alternative="less").pvalue > ALPHA
    assert stats.binomtest(narrow, 300, 0.92, alternative="less").pvalue < ALPHA


def _trim_of(y: np.ndarray, trim: float) -> float:
    n = y.size
    t = math.floor(trim * n)
    return float(np.mean(np.sort(y)[t : n - t])) if n else (LOW + HIGH) / 2


def _add_remove_neighbours(y: np.ndarray) -> list[np.ndarray]:
    """Every neighbour that matters: one value removed, or LOW, HIGH or a middle value added
    (the trimmed mean is monotone in each value: extremes bound every addition)."""
    removed = [np.delete(y, i) for i in range(y.size)]
    return removed + [np.append(y, z) for z in (LOW, HIGH, (LOW + HIGH) / 2)]


def test_trimmed_mean_add_remove_bound_is_smooth_and_bounds_the_local_sensitivity() -> None:
    """S(x) >= |T(x') - T(x)| and S(x) <= e^β S(x') for every add/remove neighbour x' (n not
    public: the trim count changes with n)."""
    gen = np.random.default_rng(13)
    for _ in range(60):
        x = np.sort(np.round(gen.uniform(LOW, HIGH, int(gen.integers(0, 9))), 1))
        beta = float(gen.choice([0.05, 0.5, 3.0]))
        trim = float(gen.choice([0.0, 0.2, 0.34, 0.49]))
        here = trimmed_mean_smooth_sensitivity_add_remove(x, beta, LOW, HIGH, trim)
        for y in _add_remove_neighbours(x):
            assert abs(_trim_of(y, trim) - _trim_of(x, trim)) <= here + 1e-12, (x, y, trim)
            there = trimmed_mean_smooth_sensitivity_add_remove(np.sort(y), beta, LOW, HIGH, trim)
            assert here <= math.exp(beta) * there + 1e-12, (x, y, trim, beta)
