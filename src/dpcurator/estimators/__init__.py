"""DP estimators usable directly on arrays and by the query layer (quantiles, bounds), and the
statistical estimators of Dwork & Smith 2009, Section 3 (smooth sensitivity, propose-test-release,
sample-and-aggregate, DP MLE, linear regression), each returning an :class:`Estimate`."""

from __future__ import annotations

from dpcurator.estimators.bounds import LogBins, bounds_from_noisy_counts, detection_threshold
from dpcurator.estimators.clipping import ClippingBias
from dpcurator.estimators.hypothesis import (
    HypothesisTestResult,
    difference_of_means_test,
    goodness_of_fit_test,
    independence_test,
    ks_test,
    one_sample_t_test,
    one_way_anova,
    paired_t_test,
    two_proportion_z_test,
    welch_t_test,
)
from dpcurator.estimators.logistic import logistic_regression
from dpcurator.estimators.mle import MODELS, Model, dp_mle, dp_mle_sufficient
from dpcurator.estimators.ptr import ptr_iqr, ptr_median, ptr_parallel
from dpcurator.estimators.ptr_regression import ptr_l1_regression
from dpcurator.estimators.quantile_refine import (
    RefinedQuantile,
    dp_quantile,
    median,
    refined_quantile,
)
from dpcurator.estimators.quantiles import (
    QuantileBins,
    quantile_mechanism,
    quantile_scores,
    rank_error,
    select_quantile_bin,
)
from dpcurator.estimators.regression import linear_regression
from dpcurator.estimators.release import Covers, Estimate
from dpcurator.estimators.sample_aggregate import sample_and_aggregate
from dpcurator.estimators.smooth import smooth_median, smooth_sensitivity_release, trimmed_mean
from dpcurator.estimators.wald import WaldTest, wald_test

__all__ = [
    "MODELS",
    "ClippingBias",
    "Covers",
    "Estimate",
    "HypothesisTestResult",
    "LogBins",
    "Model",
    "QuantileBins",
    "RefinedQuantile",
    "WaldTest",
    "bounds_from_noisy_counts",
    "detection_threshold",
    "difference_of_means_test",
    "dp_mle",
    "dp_mle_sufficient",
    "dp_quantile",
    "goodness_of_fit_test",
    "independence_test",
    "ks_test",
    "linear_regression",
    "logistic_regression",
    "median",
    "one_sample_t_test",
    "one_way_anova",
    "paired_t_test",
    "ptr_iqr",
    "ptr_l1_regression",
    "ptr_median",
    "ptr_parallel",
    "quantile_mechanism",
    "quantile_scores",
    "rank_error",
    "refined_quantile",
    "sample_and_aggregate",
    "select_quantile_bin",
    "smooth_median",
    "smooth_sensitivity_release",
    "trimmed_mean",
    "two_proportion_z_test",
    "wald_test",
    "welch_t_test",
]
