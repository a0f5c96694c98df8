"""DP bounds from log-scale bins: bin layout, threshold, post-processing."""

from __future__ import annotations

import pytest

from dpcurator.errors import DomainError, ParameterError
from dpcurator.estimators.bounds import LogBins, bounds_from_noisy_counts, detection_threshold
from dpcurator.mechanisms import Laplace


def test_bin_layout_and_counts() -> None:
    bins = LogBins(min_exponent=0, max_exponent=2)
    assert bins.edges == (-4.0, -2.0, -1.0, 0.0, 1.0, 2.0, 4.0)
    assert bins.bins == 8
    assert bins.counts([-10, -3, 0, 0.5, 3, 100, float("nan")]).tolist() == [1, 1, 0, 0, 2, 0, 1, 1]
    assert bins.bin_bounds(0) == (-8.0, -4.0)
    assert bins.bin_bounds(7) == (4.0, 8.0)
    with pytest.raises(ParameterError, match="max_exponent"):
        LogBins(3, 3)


def test_bounds_from_noisy_counts() -> None:
    bins = LogBins(min_exponent=0, max_exponent=2)
    assert bounds_from_noisy_counts([0, 0, 0, 9, 0, 7, 0, 0], bins, 5) == (-1.0, 2.0)
    with pytest.raises(DomainError, match="budget was spent"):
        bounds_from_noisy_counts([1] * 8, bins, 5)


def test_threshold_is_a_union_bound_over_bins() -> None:
    laplace = Laplace.for_epsilon(1, 1)
    threshold = detection_threshold(laplace, 100, 0.01)
    # the one-sided tail at the threshold is <= β / bins, and one step lower it is not
    assert threshold == laplace.ci_halfwidth(2 * 0.01 / 100)
    assert threshold > laplace.ci_halfwidth(0.05)
