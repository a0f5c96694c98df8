"""Distributional tests of the mechanisms' outputs (alpha = 1e-6 each, with power checks)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpcurator.mechanisms import (
    KaryRandomizedResponse,
    Laplace,
    PermuteAndFlip,
    RandomizedResponse,
    exponential_mechanism,
    permute_and_flip,
)
from dpcurator.random import SeededRng
from tests.stat_tools import ALPHA, chi_square_pvalue

pytestmark = pytest.mark.statistical


def softmax_probabilities(scores: list[int], epsilon: float, sensitivity: int) -> np.ndarray:
    weights = np.exp(epsilon * np.array(scores, dtype=float) / (2 * sensitivity))
    return weights / weights.sum()


def test_exponential_mechanism_matches_softmax() -> None:
    scores = [0, 1, 2, 4, 4, 7]
    n = 400_000
    draws = exponential_mechanism(scores, epsilon=1.0, sensitivity=1, rng=SeededRng(201), size=n)
    observed = np.bincount(draws, minlength=len(scores))
    assert chi_square_pvalue(observed, softmax_probabilities(scores, 1.0, 1)) > ALPHA
    # power: the same sample rejects epsilon off by 10% either way
    for wrong in (0.9, 1.1):
        assert chi_square_pvalue(observed, softmax_probabilities(scores, wrong, 1)) < ALPHA


def permute_and_flip_probabilities(scores: list[int], epsilon: float) -> np.ndarray:
    """Exact output law: P[r] = p_r * E[1 / (1 + #heads among the others)] (Poisson-binomial)."""
    q = np.array(scores, dtype=float)
    p = np.exp(epsilon * (q - q.max()) / 2)
    out = np.zeros(len(scores))
    for r in range(len(scores)):
        others = np.delete(p, r)
        dist = np.array([1.0])  # distribution of the number of heads among others
        for pi in others:
            dist = np.convolve(dist, [1 - pi, pi])
        out[r] = p[r] * float(np.sum(dist / np.arange(1, dist.size + 1)))
    return out


def test_permute_and_flip_matches_its_exact_law() -> None:
    scores = [0, 2, 3, 5, 5]
    rng = SeededRng(202)
    n = 20_000
    draws = np.array([permute_and_flip(scores, epsilon=1.0, rng=rng) for _ in range(n)])
    observed = np.bincount(draws, minlength=len(scores))
    expected = permute_and_flip_probabilities(scores, 1.0)
    assert expected.sum() == pytest.approx(1.0)
    assert chi_square_pvalue(observed, expected) > ALPHA
    for wrong in (0.5, 2.0):
        assert chi_square_pvalue(observed, permute_and_flip_probabilities(scores, wrong)) < ALPHA


def test_seeded_permute_and_flip_selections_follow_its_exact_law() -> None:
    """Seeded (the release of a seed is what the golden files pin): the one-word coins of
    PermuteAndFlip.coins give permute-and-flip's exact selection law on candidates whose
    exponents γ_r = ε·gap_r/2 cover [0, 5] (each coin goes through the float test; its exact
    fallback is taken about 2^-24 of the time). alpha = ALPHA (1e-6); power: the same draws
    reject the law at 0.8 and at 1.25 times the scale ε (p-values below 1e-80)."""
    scores = [0, 2, 3, 5, 5, 6, 9, 10]
    mechanism = PermuteAndFlip(1.0, 1, len(scores))
    rng = SeededRng(26)
    draws = [mechanism.select(scores, rng) for _ in range(10_000)]
    observed = np.bincount(draws, minlength=len(scores))
    assert chi_square_pvalue(observed, permute_and_flip_probabilities(scores, 1.0)) > ALPHA
    for wrong in (0.8, 1.25):
        assert chi_square_pvalue(observed, permute_and_flip_probabilities(scores, wrong)) < ALPHA


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_randomized_response_flip_rate_is_exact(epsilon: float) -> None:
    mech = RandomizedResponse(epsilon)
    n = 1_000_000
    truth = np.zeros(n, dtype=bool)
    truth[: n // 3] = True
    reports = mech.randomize(truth, rng=SeededRng(203))
    kept = int(np.sum(reports == truth))
    p = float(mech.truth_probability)
    assert stats.binomtest(kept, n, p).pvalue > ALPHA
    for wrong in (0.9 * epsilon, 1.1 * epsilon):
        p_wrong = math.exp(wrong) / (1 + math.exp(wrong))
        assert stats.binomtest(kept, n, p_wrong).pvalue < ALPHA


def test_kary_randomized_response_spreads_uniformly_over_other_categories() -> None:
    mech = KaryRandomizedResponse(1.0, 5)
    n = 500_000
    reports = mech.randomize(np.full(n, 2), rng=SeededRng(204))
    observed = np.bincount(reports, minlength=5)
    p, q = float(mech.truth_probability), float(mech.other_probability)
    expected = np.array([q, q, p, q, q])
    assert chi_square_pvalue(observed, expected) > ALPHA
    skewed = np.array([q * 1.1, q * 0.9, p, q, q])
    assert chi_square_pvalue(observed, skewed) < ALPHA


def test_kary_estimator_confidence_interval_covers_at_nominal_rate() -> None:
    """Over 400 surveys the 90% CI covers the true share a Binomial(400, 0.9) number of times."""
    mech = KaryRandomizedResponse(1.0, 3)
    rng = SeededRng(95)  # seeded: the binomial test rejects a correct CI in ALPHA of seeds
    truth = np.repeat([0, 1, 2], [2000, 1000, 1000])
    covered = 0
    trials = 400
    for _ in range(trials):
        est = mech.estimate_frequencies(mech.randomize(truth, rng=rng), alpha=0.1)
        covered += int(est.ci_low[0] <= 0.5 <= est.ci_high[0])
    assert stats.binomtest(covered, trials, 0.9).pvalue > ALPHA
    # power: a 70% interval would have been rejected at this sample size.
    assert stats.binomtest(covered, trials, 0.7).pvalue < ALPHA


def test_laplace_float_noise_has_the_discrete_law_on_its_grid() -> None:
    mech = Laplace(Fraction(3, 2))
    n = 400_000
    out = mech.release_floats(np.zeros(n), rng=SeededRng(205))
    # Scale 1.5: the grid is 2^-30, so noise in grid units is discrete Laplace(1.5 * 2^30);
    # bucket it into unit-width cells and compare with the Laplace(1.5) cell probabilities.
    edges = np.arange(-15, 16, dtype=float)
    observed = np.histogram(
        np.clip(out, -15.5, 15.5), bins=np.concatenate(([-16.0], edges[1:] - 0.5, [16.0]))
    )[0]
    cdf = stats.laplace(scale=1.5).cdf
    cuts = np.concatenate(([-np.inf], edges[1:] - 0.5, [np.inf]))
    expected = np.diff(cdf(cuts))
    assert chi_square_pvalue(observed, expected) > ALPHA
    for wrong in (1.35, 1.65):
        assert chi_square_pvalue(observed, np.diff(stats.laplace(scale=wrong).cdf(cuts))) < ALPHA
