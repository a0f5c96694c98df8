"""Randomized response: local-model collection of sensitive answers (Warner 1965).

Privacy guarantee: each respondent's reported value is ε-DP with respect to their true value
(local differential privacy): the probability of any report changes by at most a factor e^ε when
the true answer changes. Binary: report the truth with probability p = e^ε / (1 + e^ε), else the
opposite. k-ary (generalised RR, Kairouz, Oh & Viswanath 2016 / Wang et al. 2017): the truth with
probability p = e^ε / (e^ε + k - 1), else one of the other k - 1 values uniformly.

p is rounded DOWN to a rational with a 2^52 denominator so that coins are exact; that only lowers
the privacy loss. Frequencies are estimated without bias by inverting the known channel, with a
normal-approximation confidence interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt
from scipy.special import ndtri

from dpcurator._validation import check_int, check_positive, check_probability, fail
from dpcurator.core.numbers import fraction_down, to_fraction
from dpcurator.random import Rng, default_rng
from dpcurator.random.samplers import bernoulli_rational

_P_DENOMINATOR = 2**52


def _truth_probability(epsilon: Fraction, k: int) -> Fraction:
    """e^ε / (e^ε + k - 1) rounded down to a multiple of 2^-52 (never above the exact value)."""
    exact_float = 1.0 / (1.0 + (k - 1) * math.exp(-float(epsilon)))
    below = fraction_down(exact_float)
    return Fraction(math.floor(below * _P_DENOMINATOR), _P_DENOMINATOR)


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
