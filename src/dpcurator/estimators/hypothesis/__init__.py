"""DP hypothesis tests whose p-values are valid under the privacy noise.

One module per family: :mod:`.means` (one-sample, paired and Welch t), :mod:`.anova` (one-way
ANOVA), :mod:`.proportions` (two-proportion z), :mod:`.chi_square` (goodness of fit and
independence), :mod:`.ks` (two-sample Kolmogorov–Smirnov on public bins); :mod:`.core` states the
shared guarantee (noisy sufficient statistics at a declared ε, sensitivity from the privacy unit,
a simulated null of sampling and noise) and :mod:`.moments` the release of bounded moments.

Each test has an array entry point (``*_test`` / ``one_way_anova``) and a post-processing entry
point from released statistics (``*_from_moments`` / ``*_from_table``) for a query layer that
releases the same statistics itself.
"""

from __future__ import annotations

from dpcurator.estimators.hypothesis.anova import anova_from_moments, one_way_anova
from dpcurator.estimators.hypothesis.chi_square import (
    goodness_of_fit_from_table,
    goodness_of_fit_test,
    independence_from_table,
    independence_test,
)
from dpcurator.estimators.hypothesis.core import SIMULATIONS, HypothesisTestResult, Noise
from dpcurator.estimators.hypothesis.ks import ks_from_table, ks_test
from dpcurator.estimators.hypothesis.means import (
    difference_of_means_test,
    one_sample_from_moments,
    one_sample_t_test,
    paired_t_test,
    welch_from_moments,
    welch_t_test,
)
from dpcurator.estimators.hypothesis.moments import Moments, release_moments
from dpcurator.estimators.hypothesis.proportions import (
    two_proportion_from_table,
    two_proportion_z_test,
)

#: The tests on arrays, by name (the conformance matrix has a row for each).
TESTS = {
    "one_sample_t_test": one_sample_t_test,
    "paired_t_test": paired_t_test,
    "welch_t_test": welch_t_test,
    "one_way_anova": one_way_anova,
    "two_proportion_z_test": two_proportion_z_test,
    "goodness_of_fit_test": goodness_of_fit_test,
    "independence_test": independence_test,
    "ks_test": ks_test,
}

__all__ = [
    "SIMULATIONS",
    "TESTS",
    "HypothesisTestResult",
    "Moments",
    "Noise",
    "anova_from_moments",
    "difference_of_means_test",
    "goodness_of_fit_from_table",
    "goodness_of_fit_test",
    "independence_from_table",
    "independence_test",
    "ks_from_table",
    "ks_test",
    "one_sample_from_moments",
    "one_sample_t_test",
    "one_way_anova",
    "paired_t_test",
    "release_moments",
    "two_proportion_from_table",
    "two_proportion_z_test",
    "welch_from_moments",
    "welch_t_test",
]
