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

This module holds the interface and the two exact, additive accountants (basic composition and
zCDP, the sums the interface itself uses for pure and zCDP budgets); the others have a module
each: :mod:`~dpcurator.accounting.accountants_advanced` (DRV10 and KOV15),
:mod:`~dpcurator.accounting.accountants_rdp` (Rényi DP) and
:mod:`~dpcurator.accounting.accountants_pld` (privacy loss distributions).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from typing import ClassVar, TypeVar

from dpcurator._validation import check_probability, fail
from dpcurator.accounting.events import PrivacyEvent, RepeatedEvent
from dpcurator.core.display import amount_text
from dpcurator.core.measures import ZCDP, ApproxDP, Measure, PureDP, require_measure
from dpcurator.core.numbers import to_fraction
from dpcurator.errors import ParameterError

__all__ = ["Accountant", "BasicAccountant", "ZCDPAccountant"]


def _events(owner: str, events: Iterable[PrivacyEvent]) -> list[PrivacyEvent]:
    result = list(events)
    for event in result:
        if not isinstance(event, PrivacyEvent):
            raise fail(owner, "events", "a sequence of PrivacyEvent", event)
    return result


def _cost_text(event: PrivacyEvent) -> str:
    """An event's cost for people (amounts rounded up: what it asks is never understated)."""
    approx = event.approx_cost()
    if approx is not None:
        parts = [("ε", approx.epsilon), ("δ", approx.delta)]
    else:
        zcdp_pair = event.approx_zcdp_cost()
        if zcdp_pair is None:  # pragma: no cover  # every event kind has one of the two
            return "an amount this budget cannot express"
        parts = [("ρ", zcdp_pair[0].rho), ("δ", zcdp_pair[1])]
    return " and ".join(f"{name}{amount_text(value, up=True)}" for name, value in parts)


def _unsupported(owner: str, event: PrivacyEvent, what: str, hint: str) -> Exception:
    """``event`` cannot be composed by ``owner``: say so by its cost, never by its repr."""
    return ParameterError(
        f"The 'events' parameter of {owner} must be events with {what}; "
        f"got a release costing {_cost_text(event)}. {hint}"
    )


def _unpayable(event: PrivacyEvent, what: str, hint: str) -> ParameterError:
    """A release the budget's measure cannot pay, in the user's words: what it costs, what the
    budget takes, what to change (no class names: this reaches analysts through sessions)."""
    return ParameterError(f"This release costs {_cost_text(event)}, but {what}. {hint}")


_Cost = TypeVar("_Cost", PureDP, ZCDP)


def _costs(
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
            raise _unpayable(event, what, hint)
        costs.append(cost)
    return costs


def _pure_total(owner: str, events: Sequence[PrivacyEvent]) -> PureDP:
    """Basic composition of pure costs (Dwork, McSherry, Nissim & Smith 2006). Exact."""
    costs = _costs(
        events,
        lambda e: e.pure_cost(),
        "the budget is pure ε (δ=0): it pays only releases with a pure ε cost",
        "Release with delta=0 (Laplace noise), or ask for a budget with δ > 0 or a ρ.",
    )
    return PureDP(sum((cost.epsilon for cost in costs), Fraction(0)))


def _zcdp_total(owner: str, events: Sequence[PrivacyEvent]) -> ZCDP:
    """zCDP composition: ρ adds (Bun & Steinke 2016, Lemma 2.3). Exact."""
    costs = _costs(
        events,
        lambda e: e.zcdp_cost(),
        "the budget is a ρ (zCDP) budget: it pays only releases with a zCDP cost",
        "Releases with δ > 0 (e.g. partition selection of non-public keys) have none: declare "
        "the keys public, or use an (ε, δ) budget.",
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
