"""Advanced and optimal composition in (ε, δ) for a sequence fixed in advance (DRV10, KOV15)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import ClassVar

import numpy as np
from scipy.special import gammaln

from dpcurator._validation import fail
from dpcurator.accounting.accountants import Accountant, _approx_terms, _check_total_delta, _events
from dpcurator.accounting.events import PrivacyEvent
from dpcurator.core.measures import ApproxDP
from dpcurator.core.numbers import float_down, float_up, fraction_up

__all__ = ["AdvancedCompositionAccountant", "drv_epsilon", "kov_epsilon"]


def drv_epsilon(terms: Sequence[tuple[ApproxDP, int]], delta_slack: Fraction) -> Fraction:
    """Advanced composition (Dwork, Rothblum & Vadhan 2010, Theorem III.3), rounded up.

    k mechanisms, ε_i-DP each, compose to ε_g = sqrt(2 ln(1/δ') Σ ε_i²) + Σ ε_i (e^{ε_i} - 1)
    with δ_g = Σ δ_i + δ'. DRV state the homogeneous case; their proof (a martingale bound on
    the privacy loss) holds verbatim for differing ε_i.
    """
    squares = math.fsum(n * float_up(cost.epsilon) ** 2 for cost, n in terms)
    drift = math.fsum(
        n * float_up(cost.epsilon) * math.expm1(float_up(cost.epsilon)) for cost, n in terms
    )
    log_inverse = math.log(1 / float_down(delta_slack))
    return fraction_up(math.sqrt(2 * log_inverse * squares) + drift, 16)


def kov_epsilon(epsilon: Fraction, k: int, delta_slack: Fraction) -> Fraction:
    """Optimal k-fold composition of (ε, δ)-DP (Kairouz, Oh & Viswanath 2015, Theorem 3.3).

    The composition is ((k - 2i)ε, 1 - (1-δ)^k (1 - δ_i))-DP for each i in 0..⌊k/2⌋, with

        δ_i = Σ_{ℓ=0}^{i-1} C(k, ℓ) (e^{(k-ℓ)ε} - e^{(k-2i+ℓ)ε}) / (1 + e^ε)^k.

    Since 1 - (1-δ)^k (1 - δ_i) <= kδ + δ_i, any i with δ_i <= δ' gives total δ <= kδ + δ'.
    Returns the smallest such (k - 2i)ε (exact). δ_i grows with i, so i is found by bisection;
    each δ_i is summed in log space and inflated by a bound on the floating-point error.
    """
    eps = float(epsilon)
    log_norm = k * float(np.logaddexp(0.0, eps))
    margin = 1e-9 + 2.0**-40 * (k * (math.log(k + 1) + eps) + 1)

    def delta_i(i: int) -> float:
        ell = np.arange(i, dtype=np.float64)
        log_terms = (
            gammaln(k + 1)
            - gammaln(ell + 1)
            - gammaln(k - ell + 1)
            + (k - ell) * eps
            - log_norm
            + np.log(-np.expm1(-2 * (i - ell) * eps))
        )
        return math.fsum(np.exp(log_terms).tolist()) * math.exp(margin)

    slack = float_down(delta_slack)
    lo, hi = 0, k // 2  # delta_i(lo) fits; find the largest i that fits
    if delta_i(hi) <= slack:
        return (k - 2 * hi) * epsilon
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if delta_i(mid) <= slack:
            lo = mid
        else:
            hi = mid
    return (k - 2 * lo) * epsilon


class AdvancedCompositionAccountant(Accountant):
    """The best of basic, advanced (DRV10) and optimal homogeneous (KOV15) composition.

    With slack δ' the total is (ε_g, Σ δ_i + δ') where ε_g is the smallest of Σ ε_i
    (basic; then δ is only Σ δ_i), the Dwork–Rothblum–Vadhan 2010 bound (:func:`drv_epsilon`)
    and, when all events share one (ε, δ), the optimal bound of Kairouz, Oh & Viswanath 2015,
    Theorem 3.3 (:func:`kov_epsilon`). These bounds assume the sequence is fixed in advance, so
    this accountant does not support adaptive filters (Rogers, Roth, Ullman & Vadhan 2016).
    Gaussian and zCDP events have no (ε, δ) cost of their own and are refused.
    """

    supports_adaptive: ClassVar[bool] = False

    def __init__(self, delta_slack: object) -> None:
        owner = "AdvancedCompositionAccountant"
        self.delta_slack = _check_total_delta(owner, delta_slack, "delta_slack")

    def total(self, events: Iterable[PrivacyEvent], delta: object = None) -> ApproxDP:
        """The composed (ε, δ); ``delta`` is not used (the slack is fixed at construction)."""
        return self._approx_total(
            _events("AdvancedCompositionAccountant.total", events), Fraction(0)
        )

    def _approx_total(self, events: Sequence[PrivacyEvent], delta: Fraction) -> ApproxDP:
        terms = _approx_terms("AdvancedCompositionAccountant.total", events)
        basic_epsilon = sum((n * cost.epsilon for cost, n in terms), Fraction(0))
        basic_delta = sum((n * cost.delta for cost, n in terms), Fraction(0))
        if basic_delta >= 1:
            raise fail(
                "AdvancedCompositionAccountant.total", "events", "a total δ < 1", basic_delta
            )
        slack_delta = basic_delta + self.delta_slack
        if basic_epsilon == 0 or slack_delta >= 1:
            return ApproxDP(basic_epsilon, basic_delta)
        best = drv_epsilon(terms, self.delta_slack)
        distinct = {cost for cost, _ in terms}
        if len(distinct) == 1:
            k = sum(n for _, n in terms)
            best = min(best, kov_epsilon(distinct.pop().epsilon, k, self.delta_slack))
        if best >= basic_epsilon:
            return ApproxDP(basic_epsilon, basic_delta)
        return ApproxDP(best, slack_delta)

    def __repr__(self) -> str:
        return f"AdvancedCompositionAccountant(delta_slack={self.delta_slack})"
