"""DP quantiles: the exponential mechanism (permute-and-flip) over a histogram of public bins.

The candidates are the centres of public bins over [lower, upper] (unit bins centred on the
integers for small integer ranges, so integer data gets exact answers at large ε). For bin j let
L_j be the number of values in bins left of j and R_j = L_j + c_j. With n values, the target
(0-indexed) rank is ρ = p·(n - 1) (the definition of linear-interpolation quantiles), and bin j
holds ranks L_j ... R_j - 1. The score of bin j is minus the distance from ρ to that range::

    q_j = -max(0, L_j - ρ, ρ - (R_j - 1))

Adding or removing one value changes n by one, ρ by p, and each of L_j, R_j by at most one, so
every q_j moves by at most max(p, 1 - p) <= 1; a person with r values moves it by at most
r·max(p, 1 - p). Scores are multiplied by the denominator of p (a rational) to be exact integers,
and permute-and-flip selects a bin with ε-DP (McKenna & Sheldon 2020; the exponential mechanism of
McSherry & Talwar 2007 applied to quantiles as in Smith 2011). Unlike ``-|L_j - p·n|``, this score
gives the extreme quantiles (MIN = 0-quantile, MAX = 1-quantile) a unique best bin.

Accuracy (permute-and-flip inherits the exponential mechanism's bound): with probability >= 1-α the
chosen bin's rank range is within 2Δ(ln m + ln(1/α)) / (ε·den) ranks of ρ, for m candidates
(:func:`rank_error`). A value interval would need the private data, so none is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, check_positive, check_probability, check_real, fail
from dpcurator.core.numbers import to_fraction
from dpcurator.mechanisms import PermuteAndFlip
from dpcurator.random import Rng

#: The most unit bins (integers) a quantile chooses among; wider integer ranges and float data
#: refine (:mod:`dpcurator.estimators.quantile_refine`).
DEFAULT_MAX_BINS = 1024

#: Largest denominator used for the rational approximation of p.
MAX_P_DENOMINATOR = 10_000

#: Scores are clamped to [-_MAX_DISTANCE, 0] (far beyond any gap cap of permute-and-flip).
_MAX_DISTANCE = 2**62


@dataclass(frozen=True)
class QuantileBins:
    """Public equal-width bins whose centres are the quantile candidates.

    Attributes:
        lower, upper: the histogram range (values are clamped into it).
        bins: the number of bins.
    """

    lower: float
    upper: float
    bins: int

    def __post_init__(self) -> None:
        low = check_real("QuantileBins", "lower", self.lower)
        high = check_real("QuantileBins", "upper", self.upper)
        if not low < high:
            raise fail("QuantileBins", "upper", f"> lower ({self.lower})", self.upper)
        check_int("QuantileBins", "bins", self.bins, minimum=1)

    @classmethod
    def for_bounds(
        cls, lower: float, upper: float, *, integer: bool, max_bins: int = DEFAULT_MAX_BINS
    ) -> QuantileBins:
        """Unit bins centred on the integers of [lower, upper] when they fit, else ``max_bins``."""
        check_int("QuantileBins.for_bounds", "max_bins", max_bins, minimum=1)
        if integer and float(lower).is_integer() and float(upper).is_integer():
            span = int(upper) - int(lower) + 1
            if span <= max_bins:
                return cls(lower - 0.5, upper + 0.5, span)
        return cls(lower, upper, max_bins)

    def centres(self) -> npt.NDArray[np.float64]:
        """The candidate values (bin centres)."""
        width = (self.upper - self.lower) / self.bins
        return self.lower + width * (np.arange(self.bins, dtype=np.float64) + 0.5)

    def counts(self, values: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The histogram of clamped values with the bin rule of :mod:`dpcurator.query.ir`."""
        array = np.clip(np.asarray(values, dtype=np.float64), self.lower, self.upper)
        index = np.floor((array - self.lower) / (self.upper - self.lower) * self.bins)
        index = np.minimum(index.astype(np.int64), self.bins - 1)
        return np.bincount(index, minlength=self.bins).astype(np.int64)


def rational_level(p: object) -> Fraction:
    """p in [0, 1] as a Fraction of denominator <= MAX_P_DENOMINATOR (exact for 0.5, 0.25...)."""
    check_probability("quantile", "p", p)
    return to_fraction(p).limit_denominator(MAX_P_DENOMINATOR)


def saturated(
    alpha: int, a: npt.ArrayLike, beta: int, b: npt.ArrayLike, gamma: int
) -> npt.NDArray[np.int64]:
    """alpha·a - beta·b + gamma, elementwise and exact, clamped to [-2^62, 2^62], for int64
    arrays ``a``, ``b`` in [0, 2^63) and Python integers |alpha|, |beta|, |gamma| < 2^15.

    The same int64 operations whatever the values (no data-dependent path): with a = a_h·2^32 +
    a_l (and b likewise), x = H·2^32 + R where H = alpha·a_h - beta·b_h (|H| < 2^47) and R =
    alpha·a_l - beta·b_l + gamma (|R| < 2^48). When |H| >= 2^30 + 2^17, |x| > 2^62 and H is
    clipped to that bound without changing the clamped result; otherwise |x| < 2^63 and the
    int64 sum is exact.
    """
    if max(abs(alpha), abs(beta), abs(gamma)) >= 2**15:
        raise fail("saturated", "alpha", "coefficients below 2**15", (alpha, beta, gamma))
    left, right = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    mask = np.int64(2**32 - 1)
    high = alpha * (left >> 32) - beta * (right >> 32)
    low = alpha * (left & mask) - beta * (right & mask) + gamma
    bound = 2**30 + 2**17
    total = np.clip(high, -bound, bound) * np.int64(2**32) + low
    clamped: npt.NDArray[np.int64] = np.clip(total, -_MAX_DISTANCE, _MAX_DISTANCE)
    return clamped


def quantile_scores(
    counts: npt.ArrayLike, p: Fraction, rows_per_person: int = 1
) -> tuple[npt.NDArray[np.int64], int]:
    """Integer scores of each bin and their sensitivity (see the module docstring); ``counts``
    of shape (..., bins) give scores of that shape (one histogram per row).

    Computed exactly whatever the counts (:func:`saturated`: no int64 wrap-around), then
    clamped to [-2^62, 0]: clamping is 1-Lipschitz, so the sensitivity holds for the clamped
    scores.
    """
    check_int("quantile_scores", "rows_per_person", rows_per_person, minimum=1)
    exact = np.asarray(counts, dtype=np.int64)
    num, den = p.numerator, p.denominator
    right = np.cumsum(exact, axis=-1)
    left = right - exact
    total = right[..., -1:]
    # den·L - den·ρ and den·ρ - den·(R - 1), den·ρ = num·(n - 1)
    above = saturated(den, left, num, total, num)
    below = saturated(num, total, den, right, den - num)
    distance = np.maximum(np.maximum(above, below), 0)
    return -distance, rows_per_person * max(num, den - num)


def quantile_mechanism(
    p: object, epsilon: object, candidates: int, rows_per_person: int = 1
) -> PermuteAndFlip:
    """The permute-and-flip selection of a p-quantile among ``candidates`` bins (public inputs
    only: a plan can build it, and be refused, before anything is charged)."""
    level = rational_level(p)
    check_int("quantile_mechanism", "rows_per_person", rows_per_person, minimum=1)
    sensitivity = rows_per_person * max(level.numerator, level.denominator - level.numerator)
    return PermuteAndFlip(epsilon, sensitivity, candidates)


def select_quantile_bin(
    counts: npt.ArrayLike,
    p: object,
    epsilon: object,
    *,
    rows_per_person: int = 1,
    rng: Rng | None = None,
) -> int:
    """The index of the bin chosen for the p-quantile (ε-DP for the stated contribution)."""
    array = np.asarray(counts)
    mechanism = quantile_mechanism(p, epsilon, array.size, rows_per_person)
    scores, _ = quantile_scores(array, rational_level(p), rows_per_person)
    return mechanism.select(scores, rng)


def rank_error(
    epsilon: object, p: object, candidates: int, alpha: object = 0.05, rows_per_person: int = 1
) -> float:
    """Ranks within which the chosen bin lies of the target with probability >= 1-α."""
    eps = float(check_positive("rank_error", "epsilon", epsilon))
    a = float(check_probability("rank_error", "alpha", alpha, open_low=True, open_high=True))
    check_int("rank_error", "candidates", candidates, minimum=1)
    level = rational_level(p)
    sensitivity = rows_per_person * max(level.numerator, level.denominator - level.numerator)
    return 2 * sensitivity * (math.log(candidates) + math.log(1 / a)) / (eps * level.denominator)
