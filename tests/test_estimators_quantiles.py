"""DP quantiles: exact integer scores, their sensitivity, and the limit at large epsilon."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from dpcurator.errors import ParameterError
from dpcurator.estimators.quantiles import (
    QuantileBins,
    dp_quantile,
    quantile_scores,
    rank_error,
    rational_level,
)
from dpcurator.random import SeededRng


def test_scores_hand_computed() -> None:
    # values 0,1,1,2 in bins 0..3 (bin 3 empty); median rank ρ = (4-1)/2 = 1.5
    scores, sensitivity = quantile_scores([1, 2, 1, 0], Fraction(1, 2))
    # bin 0 holds rank 0 -> distance 1.5; bin 1 ranks 1-2 -> 0; bin 2 rank 3 -> 1.5; bin 3 -> 2.5
    assert scores.tolist() == [-3, 0, -3, -5]  # times the denominator 2
    assert sensitivity == 1
    minimum, _ = quantile_scores([0, 0, 3, 1], Fraction(0))
    assert minimum.tolist() == [-1, -1, 0, -3]  # unique best bin for MIN
    maximum, _ = quantile_scores([0, 0, 3, 1], Fraction(1))
    assert maximum.tolist() == [-4, -4, -1, 0]


@pytest.mark.parametrize(
    "p", [Fraction(0), Fraction(1, 4), Fraction(1, 2), Fraction(9, 10), Fraction(1)]
)
def test_sensitivity_bounds_every_neighbour(p: Fraction) -> None:
    for counts in itertools.product(range(3), repeat=4):
        scores, sensitivity = quantile_scores(counts, p)
        for b in range(4):
            neighbour = list(counts)
            neighbour[b] += 1
            other, _ = quantile_scores(neighbour, p)
            assert np.max(np.abs(other - scores)) <= sensitivity
    _, doubled = quantile_scores([1, 2], p, rows_per_person=2)
    assert doubled == 2 * max(p.numerator, p.denominator - p.numerator)


def test_bins_for_integers_and_floats() -> None:
    unit = QuantileBins.for_bounds(0, 100, integer=True)
    assert (unit.lower, unit.upper, unit.bins) == (-0.5, 100.5, 101)
    assert unit.centres()[42] == 42.0
    assert unit.counts([0, 42, 42, 100, 500]).tolist()[42] == 2
    wide = QuantileBins.for_bounds(0, 1, integer=False, max_bins=4)
    assert wide.centres().tolist() == [0.125, 0.375, 0.625, 0.875]


def test_large_epsilon_gives_the_exact_quantile() -> None:
    values = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    rng = SeededRng(5)
    assert dp_quantile(values, 0.5, 1e9, lower=0, upper=10, integer=True, rng=rng) == 4.0
    assert dp_quantile(values, 0.0, 1e9, lower=0, upper=10, integer=True, rng=rng) == 1.0
    assert dp_quantile(values, 1.0, 1e9, lower=0, upper=10, integer=True, rng=rng) == 9.0


def test_rank_error_and_level_validation() -> None:
    assert rational_level(0.3) == Fraction(3, 10)
    expected = 2 * 1 * (np.log(100) + np.log(20)) / (1.0 * 2)
    assert rank_error(1.0, 0.5, 100, 0.05) == pytest.approx(expected)
    with pytest.raises(ParameterError, match="'p'"):
        rational_level(1.5)
    with pytest.raises(ParameterError, match="'upper'"):
        QuantileBins(1.0, 0.0, 3)
