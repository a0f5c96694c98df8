"""Randomized response: local-model collection of sensitive answers (Warner 1965).

Privacy guarantee: each respondent's reported value is ε-DP with respect to their true value
(local differential privacy): the probability of any report changes by at most a factor e^ε when
the true answer changes. Binary: report the truth with probability p = e^ε / (1 + e^ε), else the
opposite. k-ary (generalised RR, Kairouz, Oh & Viswanath 2016 / Wang et al. 2017): the truth with
probability p = e^ε / (e^ε + k - 1), else one of the other k - 1 values uniformly.

p is computed exactly, rounded DOWN to a multiple of 1/(k·2^64) (at most that much below e^ε /
(e^ε + k - 1), never above it, and always above 1/k), so that coins are exact and the privacy
loss ln(p / q) is at most ε. ε below :data:`MIN_EPSILON` (1e-9, the documented minimum ε of a
query) is refused at construction: p would be indistinguishable from 1/k. Frequencies are
estimated without bias by inverting the known channel, with a normal-approximation confidence
interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Context, Decimal, localcontext
from fractions import Fraction

import numpy as np
import numpy.typing as npt
from scipy.special import ndtri

from dpcurator._validation import check_int, check_positive, check_probability, fail
from dpcurator.core.numbers import to_fraction
from dpcurator.random import Rng, default_rng
from dpcurator.random.samplers.bernoulli import bernoulli_rational

#: The smallest ε accepted (the documented minimum ε per query).
MIN_EPSILON = Fraction(1, 10**9)

#: p is a multiple of 1/(k·2^_P_BITS).
_P_BITS = 64

#: e^-ε is evaluated at min(ε, _EXP_CAP): an upper bound (so p stays a lower bound) that makes
#: no difference at 64 bits and needs no exponent range.
_EXP_CAP = 100


def _truth_probability(epsilon: Fraction, k: int) -> Fraction:
    """e^ε / (e^ε + k - 1) = 1 / (1 + (k - 1) e^-ε), rounded down to a multiple of 1/(k·2^64).

    e^-ε is bounded above in 60-digit decimal arithmetic (exp is correctly rounded; a relative
    margin of 10^-50 covers that and the rounding of ε), so the result never exceeds the exact p.
    Since p > 1/k, which is a multiple of the step, the result is >= 1/k, and > 1/k for
    ε >= MIN_EPSILON.
    """
    with localcontext(Context(prec=60)):
        capped = min(epsilon, Fraction(_EXP_CAP))
        exp_neg = (-Decimal(capped.numerator) / Decimal(capped.denominator)).exp()
    upper = Fraction(exp_neg) * (1 + Fraction(1, 10**50))
    denominator = k << _P_BITS
    return Fraction(math.floor(denominator / (1 + (k - 1) * upper)), denominator)


@dataclass(frozen=True)
class FrequencyEstimate:
    """An unbiased frequency estimate with a normal-approximation (1-α) confidence interval."""

    estimate: npt.NDArray[np.float64]
    ci_low: npt.NDArray[np.float64]
    ci_high: npt.NDArray[np.float64]
    alpha: float


@dataclass(frozen=True)
class KaryRandomizedResponse:
    """Generalised randomized response over categories {0, ..., k-1} (ε-local DP)."""

    epsilon: Fraction
    categories: int
    truth_probability: Fraction

    def __init__(self, epsilon: object, categories: int) -> None:
        eps = to_fraction(check_positive("KaryRandomizedResponse", "epsilon", epsilon))
        if eps < MIN_EPSILON:
            raise fail("KaryRandomizedResponse", "epsilon", ">= 1e-9 (MIN_EPSILON)", epsilon)
        k = check_int("KaryRandomizedResponse", "categories", categories, minimum=2)
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "categories", k)
        object.__setattr__(self, "truth_probability", _truth_probability(eps, k))

    @property
    def other_probability(self) -> Fraction:
        """Probability of reporting one given wrong category."""
        return (1 - self.truth_probability) / (self.categories - 1)

    def randomize(self, values: npt.ArrayLike, rng: Rng | None = None) -> npt.NDArray[np.int64]:
        """Each respondent's report: the true category, or a uniformly chosen other one."""
        array = np.asarray(values)
        if array.dtype.kind not in "iu" or (
            array.size and (array.min() < 0 or array.max() >= self.categories)
        ):
            raise fail(
                "KaryRandomizedResponse.randomize",
                "values",
                f"integer categories in [0, {self.categories - 1}]",
                f"array of dtype {array.dtype}",
            )
        source = rng or default_rng()
        p = self.truth_probability
        keep = bernoulli_rational(source, p.numerator, p.denominator, array.size)
        shift = source.integers_below(self.categories - 1, array.size) + 1
        flat = array.reshape(-1).astype(np.int64)
        reports = np.where(keep, flat, (flat + shift) % self.categories)
        return reports.reshape(array.shape)

    def estimate_frequencies(
        self, reports: npt.ArrayLike, alpha: object = 0.05
    ) -> FrequencyEstimate:
        """Unbiased estimates of the true category proportions from the reports (post-processing).

        With observed share f_j, E[f_j] = q + (p - q) π_j, so π̂_j = (f_j - q) / (p - q);
        Var[π̂_j] = f_j (1 - f_j) / (n (p - q)²) estimated by plug-in.
        """
        a = float(
            check_probability("estimate_frequencies", "alpha", alpha, open_low=True, open_high=True)
        )
        array = np.asarray(reports).reshape(-1)
        n = array.size
        if n == 0:
            raise fail("estimate_frequencies", "reports", "non-empty", "an empty array")
        shares = np.bincount(array, minlength=self.categories)[: self.categories] / n
        p, q = float(self.truth_probability), float(self.other_probability)
        estimate = (shares - q) / (p - q)
        stderr = np.sqrt(shares * (1 - shares) / n) / (p - q)
        z = float(ndtri(1 - a / 2))
        return FrequencyEstimate(estimate, estimate - z * stderr, estimate + z * stderr, a)


@dataclass(frozen=True)
class RandomizedResponse:
    """Binary randomized response (ε-local DP; Warner 1965, Dwork & Roth 2014 §3.2)."""

    epsilon: Fraction
    kary: KaryRandomizedResponse

    def __init__(self, epsilon: object) -> None:
        kary = KaryRandomizedResponse(epsilon, 2)
        object.__setattr__(self, "epsilon", kary.epsilon)
        object.__setattr__(self, "kary", kary)

    @property
    def truth_probability(self) -> Fraction:
        """Probability of reporting the true answer."""
        return self.kary.truth_probability

    def randomize(self, answers: npt.ArrayLike, rng: Rng | None = None) -> npt.NDArray[np.bool_]:
        """Each respondent's noisy yes/no answer."""
        array = np.asarray(answers)
        if array.dtype != np.bool_:
            raise fail("RandomizedResponse.randomize", "answers", "a boolean array", array.dtype)
        return self.kary.randomize(array.astype(np.int64), rng).astype(np.bool_)

    def estimate_proportion(
        self, reports: npt.ArrayLike, alpha: object = 0.05
    ) -> FrequencyEstimate:
        """Unbiased estimate (with CI) of the true share of "yes" answers."""
        as_int = np.asarray(reports).astype(np.int64)
        result = self.kary.estimate_frequencies(as_int, alpha)
        return FrequencyEstimate(
            result.estimate[1:], result.ci_low[1:], result.ci_high[1:], result.alpha
        )
