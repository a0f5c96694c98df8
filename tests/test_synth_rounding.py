"""The sampler's rounding (dpcurator.synth.common.round_counts_randomly): exact totals, counts
within one of their shares, and no bias where a parent configuration holds a single record
(largest remainders would always give it its most likely value)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

from dpcurator.random import SeededRng
from dpcurator.synth.common import round_counts, round_counts_randomly


@pytest.mark.parametrize("total", [0, 1, 7, 1000])
def test_counts_sum_to_the_total_within_one_of_their_shares(total: int) -> None:
    rng = SeededRng(1)
    weights = np.array([1.25, 2.5, 0.0, 0.75, 0.5, -3.0, np.nan])
    positive = np.clip(np.nan_to_num(weights), 0, None)
    share = positive / positive.sum() * total
    for _ in range(200):
        counts = round_counts_randomly(weights, total, rng)
        assert counts.sum() == total
        assert (counts >= np.floor(share)).all()
        assert (counts <= np.floor(share) + 1).all()
        assert counts[2] == counts[5] == counts[6] == 0


def test_a_single_record_follows_the_weights() -> None:
    """One record over weights (0.6, 0.3, 0.1), 3,000 draws: a chi-square test at level 0.001
    does not reject the weights. Power: largest remainders put every draw on the first value,
    which the same test rejects (p ≈ 0)."""
    rng = SeededRng(2)
    weights = np.array([0.6, 0.3, 0.1])
    draws = 3_000
    seen = sum(round_counts_randomly(weights, 1, rng) for _ in range(draws))
    assert chisquare(seen, weights * draws).pvalue > 0.001
    biased = sum(round_counts(weights, 1) for _ in range(draws))
    assert chisquare(biased, weights * draws).pvalue < 0.001
