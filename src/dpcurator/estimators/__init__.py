"""DP estimators usable directly on arrays and by the query layer (quantiles, bounds)."""

from __future__ import annotations

from dpcurator.estimators.bounds import LogBins, bounds_from_noisy_counts, detection_threshold
from dpcurator.estimators.quantiles import (
    QuantileBins,
    dp_quantile,
    quantile_mechanism,
    quantile_scores,
    rank_error,
    select_quantile_bin,
)

__all__ = [
    "LogBins",
    "QuantileBins",
    "bounds_from_noisy_counts",
    "detection_threshold",
    "dp_quantile",
    "quantile_mechanism",
    "quantile_scores",
    "rank_error",
    "select_quantile_bin",
]
