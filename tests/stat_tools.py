"""Statistical tools for tests of randomized code (ARCHITECTURE.md, "Tests of randomized code").

Every test using these declares its alpha; each goodness-of-fit test is paired with a power check
(the same sample must reject a slightly wrong distribution).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats

#: Per-test false-failure probability used across the suite.
ALPHA = 1e-6


def chi_square_pvalue(
    observed: npt.NDArray[np.int64], expected_probabilities: npt.NDArray[np.float64]
) -> float:
    """Chi-square goodness of fit with adjacent cells merged until each expects >= 5 counts.

    ``observed`` and ``expected_probabilities`` cover the same ordered cells; tails beyond them must
    already be folded into the first and last cells by the caller.
    """
    n = int(observed.sum())
    expected = expected_probabilities / expected_probabilities.sum() * n
    merged_obs: list[float] = []
    merged_exp: list[float] = []
    acc_obs = acc_exp = 0.0
    for o, e in zip(observed, expected, strict=True):
        acc_obs += float(o)
        acc_exp += float(e)
        if acc_exp >= 5:
            merged_obs.append(acc_obs)
            merged_exp.append(acc_exp)
            acc_obs = acc_exp = 0.0
    if merged_exp:
        merged_obs[-1] += acc_obs
        merged_exp[-1] += acc_exp
    result = stats.chisquare(merged_obs, merged_exp)
    return float(result.pvalue)


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """Two-sided exact (Clopper-Pearson) interval for a binomial proportion at level 1 - alpha."""
    low = (
        0.0
        if successes == 0
        else float(stats.beta.ppf(alpha / 2, successes, trials - successes + 1))
    )
    high = (
        1.0
        if successes == trials
        else float(stats.beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    )
    return low, high


def epsilon_lower_bound(
    outputs_x: npt.NDArray[np.int64],
    outputs_neighbour: npt.NDArray[np.int64],
    *,
    delta: float = 0.0,
    alpha: float = ALPHA,
    selection_share: float = 0.2,
    min_count: int = 50,
) -> float:
    """A (1 - alpha)-confidence lower bound on ε from samples of M(x) and M(x') (a privacy audit).

    A first share of each sample chooses the most distinguishing threshold event S = {o >= c} or
    {o <= c} (in either direction); the rest estimates P[M(x') ∈ S] and P[M(x) ∈ S] with
    Clopper-Pearson bounds (alpha/2 each, one-sided), giving ε >= ln((P_low(x') - δ) / P_high(x)).
    Choosing S on separate data keeps the final bound honest (Jagielski et al. 2020 style audit).
    """
    cut_a = int(outputs_x.size * selection_share)
    cut_b = int(outputs_neighbour.size * selection_share)
    sel_a, est_a = np.sort(outputs_x[:cut_a]), np.sort(outputs_x[cut_a:])
    sel_b, est_b = np.sort(outputs_neighbour[:cut_b]), np.sort(outputs_neighbour[cut_b:])
    candidates = np.unique(np.concatenate((sel_a, sel_b)))

    def counts(sorted_values: npt.NDArray[np.int64], c: int, upper: bool) -> int:
        if upper:
            return int(sorted_values.size - np.searchsorted(sorted_values, c, side="left"))
        return int(np.searchsorted(sorted_values, c, side="right"))

    def bound(big: int, big_n: int, small: int, small_n: int) -> float:
        big_low = clopper_pearson(big, big_n, alpha)[0] - delta
        small_high = clopper_pearson(small, small_n, alpha)[1]
        return math.log(big_low / small_high) if big_low > 0 else -math.inf

    # Choose the event whose bound is best on the selection sample (not the raw ratio, which
    # favours noisy far-tail events).
    best: tuple[float, int, bool, bool] | None = None
    for c in candidates:
        for upper in (True, False):
            a, b = counts(sel_a, int(c), upper), counts(sel_b, int(c), upper)
            for swapped in (False, True):
                big, small = (a, b) if swapped else (b, a)
                big_n, small_n = (sel_a.size, sel_b.size) if swapped else (sel_b.size, sel_a.size)
                if big < min_count:
                    continue
                value = bound(big, big_n, small, small_n)
                if best is None or value > best[0]:
                    best = (value, int(c), upper, swapped)
    if best is None:
        return 0.0
    _, c, upper, swapped = best
    big_sample, small_sample = (est_a, est_b) if swapped else (est_b, est_a)
    big_count, small_count = counts(big_sample, c, upper), counts(small_sample, c, upper)
    return max(0.0, bound(big_count, big_sample.size, small_count, small_sample.size))


def coverage_counts(estimates: Iterable[Any], truth: float, shrink: float) -> tuple[int, int]:
    """How many of ``estimates``' intervals cover ``truth``, and how many still do when each is
    narrowed to ``shrink`` of each side's width around its value (a coverage test's power check:
    too-narrow intervals must be caught)."""
    hits = narrow = 0
    for estimate in estimates:
        value, low, high = estimate.value, estimate.ci_low, estimate.ci_high
        assert low is not None
        assert high is not None
        hits += low <= truth <= high
        narrow += value - (value - low) * shrink <= truth <= value + (high - value) * shrink
    return hits, narrow
