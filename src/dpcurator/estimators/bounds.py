"""DP estimates of a column's bounds from a noisy histogram over logarithmic bins.

Bounds must never be read from private data (PITFALLS: data-dependent parameters). When the data
owner cannot declare them, they can be estimated with differential privacy: count the values in
public bins whose edges are ±2^k (k = min_exponent ... max_exponent, plus 0), add discrete Laplace
noise to every count (ε-DP for L1 sensitivity Δ = rows a person may contribute), and report the
outermost bins whose noisy count clears a threshold τ. τ is set so that, with probability >= 1-β,
no EMPTY bin clears it (a union bound over the bins), so the estimate does not invent a range that
no data occupies. Everything after the noisy counts is post-processing. This is the log-scale
histogram approach used by e.g. Google's and Tumult's bound estimation; the estimate may cut off a
thin tail (values in bins whose noisy count falls below τ), which is then clamped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, check_probability, fail
from dpcurator.errors import DomainError
from dpcurator.mechanisms import Laplace


@dataclass(frozen=True)
class LogBins:
    """Public bin edges -2^K < ... < -2^k0 < 0 < 2^k0 < ... < 2^K (K = max, k0 = min exponent).

    Bin 0 is (-inf, -2^K), bin i is [edges[i-1], edges[i]), the last bin is [2^K, inf).
    """

    min_exponent: int = -10
    max_exponent: int = 50

    def __post_init__(self) -> None:
        check_int("LogBins", "min_exponent", self.min_exponent)
        check_int("LogBins", "max_exponent", self.max_exponent)
        if not self.min_exponent < self.max_exponent:
            raise fail(
                "LogBins",
                "max_exponent",
                f"> min_exponent ({self.min_exponent})",
                self.max_exponent,
            )

    @property
    def edges(self) -> tuple[float, ...]:
        """The finite edges, increasing."""
        powers = [2.0**k for k in range(self.min_exponent, self.max_exponent + 1)]
        return (*(-x for x in reversed(powers)), 0.0, *powers)

    @property
    def bins(self) -> int:
        """The number of bins (one more than the number of edges)."""
        return len(self.edges) + 1

    def bin_bounds(self, index: int) -> tuple[float, float]:
        """The [low, high] range reported for a bin (outer bins: twice the outermost edge)."""
        edges = self.edges
        low = 2 * edges[0] if index == 0 else edges[index - 1]
        high = 2 * edges[-1] if index == len(edges) else edges[index]
        return low, high

    def counts(self, values: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Exact counts per bin of finite values (for the numpy entry point and tests)."""
        array = np.asarray(values, dtype=np.float64)
        index = np.searchsorted(np.array(self.edges), array[np.isfinite(array)], side="right")
        return np.bincount(index, minlength=self.bins).astype(np.int64)


def detection_threshold(laplace: Laplace, bins: int, beta: float) -> float:
    """τ with P[some empty bin's noisy count > τ] <= β (union bound over ``bins``)."""
    check_probability("detection_threshold", "beta", beta, open_low=True, open_high=True)
    # P[Z > t] = P[|Z| > t] / 2, so a two-sided level of 2β/bins gives P[Z > t] <= β/bins.
    return laplace.ci_halfwidth(2 * beta / bins)


def bounds_from_noisy_counts(
    noisy_counts: npt.ArrayLike, bins: LogBins, threshold: float
) -> tuple[float, float]:
    """The lower edge of the first and the upper edge of the last bin above ``threshold``.

    Raises:
        DomainError: no bin's noisy count clears the threshold (too little data or budget).
    """
    above = np.flatnonzero(np.asarray(noisy_counts) > threshold)
    if above.size == 0:
        raise DomainError(
            "No bin of the DP bounds histogram cleared the noise threshold: there is too little "
            "data for this epsilon. The budget was spent; retry with a larger epsilon or declare "
            "the bounds in the metadata."
        )
    low, _ = bins.bin_bounds(int(above[0]))
    _, high = bins.bin_bounds(int(above[-1]))
    return low, high
