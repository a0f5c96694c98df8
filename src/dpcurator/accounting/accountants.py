"""Accountants: how a sequence of privacy events composes into one total cost.

Every accountant answers two questions with the same interface:

* ``total(events, delta=None)`` — its native total (see each class);
* ``fits(events, new_event, budget)`` — whether ``events`` followed by ``new_event`` stays within
  ``budget`` (a PureDP, ApproxDP or ZCDP measure). The cost is computed in the budget's measure:
  pure budgets use basic composition of pure costs (optimal at δ = 0; Kairouz, Oh & Viswanath
  2015), zCDP budgets add ρ (Bun & Steinke 2016, Lemma 2.3), and (ε, δ) budgets use the
  accountant's own method with the budget's δ.

An event an accountant cannot express (e.g. a Gaussian under basic (ε, δ) composition) raises
:class:`~dpcurator.errors.ParameterError` naming the event, never a silent under-count.

Adaptivity: ``supports_adaptive`` says whether the bound stays valid as a privacy *filter*, i.e.
when each event's parameters are chosen after seeing earlier releases. Basic composition (Rogers,
Roth, Ullman & Vadhan 2016), zCDP and Rényi composition (Feldman & Zrnic 2021) do; the advanced,
optimal and PLD bounds assume the parameters of the whole sequence are fixed in advance.

Results are exact where the composition is rational and rounded up otherwise.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from typing import ClassVar, TypeVar

import numpy as np
from dp_accounting import NeighboringRelation, RandomizedResponseDpEvent, ZCDpEvent
from dp_accounting.dp_event import DpEvent, GaussianDpEvent
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld.common import DifferentialPrivacyParameters
from dp_accounting.rdp.rdp_privacy_accountant import (
    DEFAULT_RDP_ORDERS,
    RdpAccountant,
    compute_epsilon,
)
from scipy.special import gammaln

from dpcurator._validation import check_int, check_positive, check_probability, fail
from dpcurator.accounting.calibration import DISCRETE_GAUSSIAN_EXACT_MAX_SIGMA
from dpcurator.accounting.events import (
    GaussianEvent,
    ParallelEvent,
    PrivacyEvent,
    RepeatedEvent,
    ZCDPEvent,
)
from dpcurator.core.measures import ZCDP, ApproxDP, Measure, PureDP, require_measure
from dpcurator.core.numbers import (
    float_down,
    float_up,
    fraction_up,
    to_fraction,
    widen_down,
    widen_up,
)

__all__ = [
    "Accountant",
    "AdvancedCompositionAccountant",
    "BasicAccountant",
    "PLDAccountant",
    "RDPAccountant",
    "ZCDPAccountant",
    "drv_epsilon",
    "group_privacy",
    "kov_epsilon",
    "parallel_composition",
]


def _events(owner: str, events: Iterable[PrivacyEvent]) -> list[PrivacyEvent]:
    result = list(events)
    for event in result:
        if not isinstance(event, PrivacyEvent):
            raise fail(owner, "events", "a sequence of PrivacyEvent", event)
    return result


def _unsupported(owner: str, event: PrivacyEvent, what: str, hint: str) -> Exception:
    return fail(owner, "events", f"events with {what}", event, hint)


_Cost = TypeVar("_Cost", PureDP, ZCDP)


def _costs(
    owner: str,
    events: Sequence[PrivacyEvent],
    cost_of: Callable[[PrivacyEvent], _Cost | None],
    what: str,
    hint: str,
) -> list[_Cost]:
    """Each event's ``cost_of``; an event without one (None) is refused as lacking ``what``."""
    costs: list[_Cost] = []
    for event in events:
        cost = cost_of(event)
        if cost is None:
            raise _unsupported(owner, event, what, hint)
        costs.append(cost)
    return costs


def _pure_total(owner: str, events: Sequence[PrivacyEvent]) -> PureDP:
    """Basic composition of pure costs (Dwork, McSherry, Nissim & Smith 2006). Exact."""
    costs = _costs(
        owner, events, lambda e: e.pure_cost(), "a pure ε cost", "Use an (ε, δ) or zCDP budget."
    )
    return PureDP(sum((cost.epsilon for cost in costs), Fraction(0)))


def _zcdp_total(owner: str, events: Sequence[PrivacyEvent]) -> ZCDP:
    """zCDP composition: ρ adds (Bun & Steinke 2016, Lemma 2.3). Exact."""
    costs = _costs(
        owner, events, lambda e: e.zcdp_cost(), "a zCDP cost", "Events with δ > 0 have none."
    )
    return ZCDP(sum((cost.rho for cost in costs), Fraction(0)))


def _approx_terms(owner: str, events: Sequence[PrivacyEvent]) -> list[tuple[ApproxDP, int]]:
    """Each event's (ε, δ) cost with its multiplicity (repetitions kept apart for k-fold bounds)."""
    terms: list[tuple[ApproxDP, int]] = []
    for event in events:
        if isinstance(event, RepeatedEvent):
            terms.extend((cost, n * event.count) for cost, n in _approx_terms(owner, [event.event]))
            continue
        cost = event.approx_cost()
        if cost is None:
            raise _unsupported(
                owner,
                event,
                "an (ε, δ) cost",
                "Gaussian and zCDP events need ZCDPAccountant, RDPAccountant or PLDAccountant.",
            )
        terms.append((cost, 1))
    return terms


def _check_total_delta(owner: str, delta: object, name: str = "delta") -> Fraction:
    check_probability(owner, name, delta, open_low=True, open_high=True)
    return to_fraction(delta, owner=owner, name=name)


def _within(cost: Measure, budget: Measure) -> bool:
    if isinstance(budget, ZCDP):
        return isinstance(cost, ZCDP) and cost.fits_within(budget)
    if isinstance(cost, ZCDP):
        return False
    approx = cost.to_approx()
    if isinstance(budget, PureDP):
        return approx.delta == 0 and approx.epsilon <= budget.epsilon
    return approx.fits_within(budget)


class Accountant(ABC):
    """Composes privacy events into a total cost (see the module docstring)."""

    #: Whether the bound holds when parameters are chosen adaptively (privacy filters).
    supports_adaptive: ClassVar[bool]

    @abstractmethod
    def total(self, events: Iterable[PrivacyEvent], delta: object = None) -> Measure:
        """The total cost of ``events`` in this accountant's native measure."""

    @abstractmethod
    def _approx_total(self, events: Sequence[PrivacyEvent], delta: Fraction) -> Measure:
        """The (ε, δ) cost of ``events`` for a budget whose δ is ``delta`` > 0."""

    def cost_in(self, events: Iterable[PrivacyEvent], budget: Measure) -> Measure:
        """The total cost of ``events`` expressed in the measure of ``budget``."""
        owner = f"{type(self).__name__}.cost_in"
        budget = require_measure(owner, "budget", budget)
        checked = _events(owner, events)
        if isinstance(budget, ZCDP):
            return _zcdp_total(owner, checked)
        if isinstance(budget, PureDP) or budget.delta == 0:
            return _pure_total(owner, checked)
        return self._approx_total(checked, budget.delta)

    def fits(
        self, events: Iterable[PrivacyEvent], new_event: PrivacyEvent, budget: Measure
    ) -> bool:
        """Whether ``events`` followed by ``new_event`` compose to a cost within ``budget``."""
        if not isinstance(new_event, PrivacyEvent):
            raise fail(f"{type(self).__name__}.fits", "new_event", "a PrivacyEvent", new_event)
        return _within(self.cost_in([*events, new_event], budget), budget)

    def extend(
        self,
        spent: Measure,
        events: Sequence[PrivacyEvent],
        new_event: PrivacyEvent,
        budget: Measure,
    ) -> Measure:
        """The cost of ``events`` then ``new_event`` in the measure of ``budget``.

        ``spent`` must be ``cost_in(events, budget)``. Where the composition is a plain sum in
        that measure (ρ for a zCDP budget, ε for a pure one: Bun & Steinke 2016, Dwork et al.
        2006) the new cost is added to ``spent`` exactly, in constant time; otherwise all events
        are composed again.
        """
        if isinstance(budget, ZCDP):
            cost = new_event.zcdp_cost()
            if isinstance(spent, ZCDP) and cost is not None:
                return ZCDP(spent.rho + cost.rho)
        elif isinstance(budget, PureDP) or budget.delta == 0:
            pure = new_event.pure_cost()
            if isinstance(spent, PureDP) and pure is not None:
                return PureDP(spent.epsilon + pure.epsilon)
        elif isinstance(spent, ApproxDP):
            added = self._add_approx_cost(spent, new_event)
            if added is not None:
                return added
        return self.cost_in([*events, new_event], budget)

    def _add_approx_cost(self, spent: ApproxDP, new_event: PrivacyEvent) -> ApproxDP | None:
        """``spent`` plus the event's cost for an (ε, δ) budget, when this accountant's
        composition in (ε, δ) is a plain sum; None otherwise (compose everything again)."""
        return None

    @staticmethod
    def within(cost: Measure, budget: Measure) -> bool:
        """Whether ``cost`` (from :meth:`cost_in` or :meth:`extend`) fits within ``budget``."""
        return _within(cost, budget)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class BasicAccountant(Accountant):
    """Basic sequential composition: ε and δ add (Dwork, Kenthapadi, McSherry, Mironov & Naor 2006).

    Valid for adaptively chosen parameters (Rogers, Roth, Ullman & Vadhan 2016). ``total`` returns
    PureDP when every event is pure, else ApproxDP; it spends no δ on conversions, so ``delta``
    is not used.
    """

    supports_adaptive: ClassVar[bool] = True

    def total(self, events: Iterable[PrivacyEvent], delta: object = None) -> PureDP | ApproxDP:
        checked = _events("BasicAccountant.total", events)
        if all(event.pure_cost() is not None for event in checked):
            return _pure_total("BasicAccountant.total", checked)
        return self._approx_total(checked, Fraction(0))

    def _approx_total(self, events: Sequence[PrivacyEvent], delta: Fraction) -> ApproxDP:
        return self._add_approx(ApproxDP(0, 0), events)

    def _add_approx_cost(self, spent: ApproxDP, new_event: PrivacyEvent) -> ApproxDP | None:
        return self._add_approx(spent, [new_event])  # basic composition: ε and δ add

    @staticmethod
    def _add_approx(start: ApproxDP, events: Sequence[PrivacyEvent]) -> ApproxDP:
        terms = _approx_terms("BasicAccountant.total", events)
        epsilon = start.epsilon + sum((n * cost.epsilon for cost, n in terms), Fraction(0))
        total_delta = start.delta + sum((n * cost.delta for cost, n in terms), Fraction(0))
        if total_delta >= 1:
            raise fail("BasicAccountant.total", "events", "a total δ < 1", float(total_delta))
        return ApproxDP(epsilon, total_delta)


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
            raise fail("AdvancedCompositionAccountant.total", "events", "a total δ < 1", terms)
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


class ZCDPAccountant(Accountant):
    """zCDP composition: ρ adds (Bun & Steinke 2016, Lemma 2.3), valid adaptively.

    Pure ε enters as ε²/2 (Bun & Steinke 2016, Proposition 1.4), Gaussian noise as Δ²/(2σ²)
    (Proposition 1.6; discrete Gaussian: Canonne, Kamath & Steinke 2020, Theorem 4). ``total``
    returns ZCDP, or the (ε, δ) of :meth:`ZCDP.to_approx` when ``delta`` is given. Events with
    δ > 0 are refused.
    """

    supports_adaptive: ClassVar[bool] = True

    def total(self, events: Iterable[PrivacyEvent], delta: object = None) -> ZCDP | ApproxDP:
        rho = _zcdp_total("ZCDPAccountant.total", _events("ZCDPAccountant.total", events))
        if delta is None:
            return rho
        return rho.to_approx(_check_total_delta("ZCDPAccountant.total", delta))

    def _approx_total(self, events: Sequence[PrivacyEvent], delta: Fraction) -> ApproxDP:
        return _zcdp_total("ZCDPAccountant.total", events).to_approx(delta)


def _rr_noise(epsilon: Fraction) -> float:
    """The noise parameter 2/(1+e^ε) of binary ε-randomized response, rounded down (less noise)."""
    eps = float_up(epsilon)
    return max(widen_down(2 * math.exp(-eps) / (1 + math.exp(-eps)), 8), 0.0)


class RDPAccountant(Accountant):
    """Rényi DP composition (Mironov 2017) with Google's ``dp_accounting`` RDP accountant.

    Each event's curve on ``orders`` (default: dp_accounting's) comes from
    ``dp_accounting.rdp.RdpAccountant``: Gaussian noise gives α Δ²/(2σ²), exact for the
    continuous Gaussian and an upper bound for the discrete one (Canonne, Kamath & Steinke 2020,
    Theorem 4); zCDP events give ρα; pure and Laplace events are charged as binary
    ε-randomized response, whose output pair every ε-DP mechanism is a post-processing of
    (Kairouz, Oh & Viswanath 2015, Section 2), so by data processing its Rényi divergence bounds
    theirs, including the discrete Laplace on any grid. Repetitions multiply a curve; parallel
    parts take the pointwise worst. The (ε, δ) conversion is dp_accounting's ``compute_epsilon``
    (Canonne, Kamath & Steinke 2020 / Asoodeh et al. 2021), rounded up. Valid adaptively (Feldman
    & Zrnic 2021). Events with δ > 0 have no Rényi curve and are refused.
    """

    supports_adaptive: ClassVar[bool] = True

    def __init__(self, orders: Sequence[float] = tuple(DEFAULT_RDP_ORDERS)) -> None:
        self.orders = tuple(float(order) for order in orders)
        if not self.orders or any(not order > 1 for order in self.orders):
            raise fail("RDPAccountant", "orders", "a non-empty sequence of orders > 1", orders)

    def _event_curve(self, event: PrivacyEvent) -> np.ndarray:
        if isinstance(event, RepeatedEvent):
            repeated: np.ndarray = event.count * self._event_curve(event.event)
            return repeated
        if isinstance(event, ParallelEvent):
            worst: np.ndarray = np.max([self._event_curve(part) for part in event.events], axis=0)
            return worst
        dp_event: DpEvent
        pure = event.pure_cost()
        if isinstance(event, GaussianEvent):
            dp_event = GaussianDpEvent(float_down(event.sigma / event.l2_sensitivity))
        elif isinstance(event, ZCDPEvent):
            dp_event = ZCDpEvent(float_up(event.rho))
        elif pure is not None:
            dp_event = RandomizedResponseDpEvent(_rr_noise(pure.epsilon), num_buckets=2)
        else:
            raise _unsupported(
                "RDPAccountant.total", event, "a Rényi DP curve", "Events with δ > 0 have none."
            )
        accountant = RdpAccountant(
            list(self.orders), neighboring_relation=NeighboringRelation.REPLACE_ONE
        )
        accountant.compose(dp_event)
        curve: np.ndarray = accountant.rdp
        return curve

    def curve(self, events: Iterable[PrivacyEvent]) -> np.ndarray:
        """The composed Rényi DP curve ε(α) on :attr:`orders` (curves add; Mironov 2017)."""
        total = np.zeros(len(self.orders))
        for event in _events("RDPAccountant.total", events):
            total = total + self._event_curve(event)
        return total

    def total(self, events: Iterable[PrivacyEvent], delta: object = None) -> ApproxDP:
        """The composed (ε, δ) at the given ``delta`` (required)."""
        if delta is None:
            raise fail("RDPAccountant.total", "delta", "a target δ in (0, 1)", delta)
        return self._approx_total(list(events), _check_total_delta("RDPAccountant.total", delta))

    def _approx_total(self, events: Sequence[PrivacyEvent], delta: Fraction) -> ApproxDP:
        epsilon, _ = compute_epsilon(list(self.orders), self.curve(events), float_down(delta))
        return ApproxDP(fraction_up(max(float(epsilon), 0.0), 8), delta)

    def __repr__(self) -> str:
        return f"RDPAccountant(orders=<{len(self.orders)} orders>)"


#: Share of the target δ reserved for the truncated tails of discrete Gaussian PLDs.
_TRUNCATION_SHARE = 2.0**-10


def _discrete_gaussian_pld(
    event: GaussianEvent, interval: float
) -> tuple[pld_lib.PrivacyLossDistribution, float]:
    """The pessimistic PLD of one scalar discrete Gaussian release (CKS20), truncated to
    ±T = ±(20σ + Δ), and a bound on the mass outside: 2(σ²/T)e^(-T²/(2σ²)) (both tails, Mills'
    bound on the unnormalised sum; the normaliser is at least 1)."""
    owner = "PLDAccountant.total"
    if event.l2_sensitivity.denominator != 1:
        raise _unsupported(
            owner, event, "an integer sensitivity", "Use ZCDPAccountant or RDPAccountant."
        )
    if event.sigma > DISCRETE_GAUSSIAN_EXACT_MAX_SIGMA:
        raise _unsupported(
            owner, event, "σ <= 10^4 (a discrete pmf)", "Use ZCDPAccountant or RDPAccountant."
        )
    sigma = float_down(event.sigma)
    sensitivity = event.l2_sensitivity.numerator
    bound = math.ceil(20 * sigma) + sensitivity
    pld = pld_lib.from_discrete_gaussian_mechanism(
        sigma,
        sensitivity=sensitivity,
        truncation_bound=bound,
        pessimistic_estimate=True,
        value_discretization_interval=interval,
    )
    mass = 2 * sigma * sigma / bound * math.exp(-(bound * bound) / (2 * sigma * sigma))
    return pld, widen_up(mass)


class PLDAccountant(Accountant):
    """Privacy-loss-distribution composition (Koskela et al. 2020; Doroshenko et al. 2022).

    Backed by ``dp_accounting.pld`` with pessimistic discretisation (interval
    ``value_discretization_interval``), which rounds privacy losses up so the reported ε is an
    upper bound. Pure, Laplace and (ε, δ) events use the worst-case PLD of an (ε, δ)-DP
    mechanism (``from_privacy_parameters``; Kairouz, Oh & Viswanath 2015), valid for the
    discrete Laplace on any grid. Gaussian events are the DISCRETE Gaussian of
    :class:`~dpcurator.mechanisms.Gaussian` on a scalar integer release: their PLD is built from
    the discrete pmf (``from_discrete_gaussian_mechanism``; Canonne, Kamath & Steinke 2020), not
    from the continuous Gaussian, whose PLD under-states the discrete δ at small σ (σ = 1, Δ = 1:
    δ(0.9565) is 0.148, not 0.135). That pmf is truncated to ±(20σ + Δ); the truncated mass τ
    (at most 2(σ²/T)e^(-T²/2σ²) per side and release) changes δ by at most (1 + e^ε)·Στ, which is
    checked to be below 2^-10 δ and then covered by asking dp_accounting for δ(1 - 2^-10).
    Gaussian events need an integer sensitivity and σ <= 10^4
    (:data:`~dpcurator.accounting.calibration.DISCRETE_GAUSSIAN_EXACT_MAX_SIGMA`); others are
    refused (use ZCDPAccountant or RDPAccountant, proven in every regime). A vector release is
    not covered by the scalar PLD: account for it with zCDP. zCDP events have no PLD and are
    refused. Parallel parts must be identical or have an (ε, δ) cost (their worst). PLD bounds
    assume the sequence is fixed in advance: not for adaptive filters.
    """

    supports_adaptive: ClassVar[bool] = False

    def __init__(self, value_discretization_interval: object = 1e-4) -> None:
        check_positive(
            "PLDAccountant", "value_discretization_interval", value_discretization_interval
        )
        self.value_discretization_interval = float(
            to_fraction(value_discretization_interval, name="value_discretization_interval")
        )

    def _pld(self, event: PrivacyEvent) -> tuple[pld_lib.PrivacyLossDistribution, float]:
        """The event's PLD and the noise mass its truncation ignored (an upper bound)."""
        interval = self.value_discretization_interval
        if isinstance(event, RepeatedEvent):
            pld, mass = self._pld(event.event)
            return pld.self_compose(event.count), mass * event.count
        if isinstance(event, ParallelEvent) and len(set(event.events)) == 1:
            return self._pld(event.events[0])
        if isinstance(event, GaussianEvent):
            return _discrete_gaussian_pld(event, interval)
        cost = event.approx_cost()
        if cost is None:
            raise _unsupported(
                "PLDAccountant.total",
                event,
                "a privacy loss distribution",
                "zCDP events have none; use ZCDPAccountant or RDPAccountant.",
            )
        parameters = DifferentialPrivacyParameters(float_up(cost.epsilon), float_up(cost.delta))
        pld = pld_lib.from_privacy_parameters(parameters, value_discretization_interval=interval)
        return pld, 0.0

    def total(self, events: Iterable[PrivacyEvent], delta: object = None) -> ApproxDP:
        """The composed (ε, δ) at the given ``delta`` (required)."""
        if delta is None:
            raise fail("PLDAccountant.total", "delta", "a target δ in (0, 1)", delta)
        return self._approx_total(list(events), _check_total_delta("PLDAccountant.total", delta))

    def _approx_total(self, events: Sequence[PrivacyEvent], delta: Fraction) -> ApproxDP:
        composed = pld_lib.identity(
            value_discretization_interval=self.value_discretization_interval
        )
        truncated = 0.0
        for event in _events("PLDAccountant.total", events):
            pld, mass = self._pld(event)
            composed = composed.compose(pld)
            truncated += mass
        target = float_down(delta)
        epsilon = composed.get_epsilon_for_delta(target * (1 - _TRUNCATION_SHARE))
        if not math.isfinite(epsilon):
            raise fail("PLDAccountant.total", "delta", "larger than the events' own δ", delta)
        epsilon = max(float(epsilon), 0.0)
        if (
            truncated
            and (1 + math.exp(min(epsilon, 700.0))) * truncated > target * _TRUNCATION_SHARE
        ):
            raise fail(
                "PLDAccountant.total",
                "delta",
                "large enough to cover the truncated discrete Gaussian tails",
                delta,
                "Use ZCDPAccountant or RDPAccountant.",
            )
        return ApproxDP(fraction_up(epsilon, 8), delta)

    def __repr__(self) -> str:
        return f"PLDAccountant(value_discretization_interval={self.value_discretization_interval})"


def parallel_composition(costs: Iterable[Measure]) -> Measure:
    """The cost of releases on disjoint partitions: the worst part (McSherry 2009, Theorem 4).

    All costs must be of one measure (PureDP, ApproxDP or ZCDP). For events, use
    :class:`~dpcurator.accounting.events.ParallelEvent`.
    """
    parts = [require_measure("parallel_composition", "costs", cost) for cost in costs]
    if not parts or any(type(part) is not type(parts[0]) for part in parts):
        raise fail("parallel_composition", "costs", "a non-empty list of one measure type", costs)
    if isinstance(parts[0], PureDP):
        return PureDP(max(part.epsilon for part in parts if isinstance(part, PureDP)))
    if isinstance(parts[0], ApproxDP):
        approx = [part for part in parts if isinstance(part, ApproxDP)]
        return ApproxDP(max(p.epsilon for p in approx), max(p.delta for p in approx))
    return ZCDP(max(part.rho for part in parts if isinstance(part, ZCDP)))


def group_privacy(measure: Measure, k: object) -> Measure:
    """The cost for groups of ``k`` people (datasets at distance k) of a per-person ``measure``.

    * ε-DP gives kε-DP (Dwork, McSherry, Nissim & Smith 2006);
    * (ε, δ)-DP gives (kε, k e^{(k-1)ε} δ)-DP (Vadhan 2017, Lemma 2.2), δ rounded up; refused if
      that δ reaches 1 (the guarantee would be vacuous);
    * ρ-zCDP gives k²ρ-zCDP (Bun & Steinke 2016, Proposition 1.9).
    """
    cost = require_measure("group_privacy", "measure", measure)
    size = check_int("group_privacy", "k", k, minimum=1)
    if isinstance(cost, PureDP):
        return PureDP(size * cost.epsilon)
    if isinstance(cost, ZCDP):
        return ZCDP(size**2 * cost.rho)
    if cost.delta == 0:
        return ApproxDP(size * cost.epsilon, 0)
    log_delta = (
        math.log(size) + (size - 1) * float_up(cost.epsilon) + math.log(float_up(cost.delta))
    )
    delta = fraction_up(math.exp(log_delta), 8) if log_delta < 0 else Fraction(1)
    if delta >= 1:
        raise fail("group_privacy", "k", f"small enough that k·e^((k-1)ε)·δ < 1 for {cost}", k)
    return ApproxDP(size * cost.epsilon, delta)
