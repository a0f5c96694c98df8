"""The budget arguments every Session verb takes, and how a verb's charge reaches the filter.

Every verb of :class:`dpcurator.api.Session` takes the same arguments: ``epsilon`` (with
``delta``, default 0) or ``rho``. The verb's algorithm has a native guarantee, and the arguments
are converted to it exactly, or refused (free, before anything is charged, naming the parameter)
when the conversion is not sound:

* a **pure ε-DP** algorithm (the mining algorithms, MWEM, PMW) takes ``epsilon`` with
  ``delta = 0``; a ``rho`` is refused (ρ-zCDP does not imply any pure ε-DP), and so is a
  ``delta`` > 0 (the algorithm would spend none of it);
* a **ρ-zCDP** algorithm (MST, AIM) takes ``rho``, or ``epsilon`` and ``delta`` > 0, turned into
  the largest ρ whose zCDP implies (ε, δ)-DP (Canonne, Kamath & Steinke 2020, Corollary 13;
  :func:`~dpcurator.accounting.concentrated.largest_rho`, exact rational arithmetic);
* an algorithm with both guarantees (the hypothesis tests) takes either.

What the session's filter is charged depends on what it composes. A ρ-zCDP release charged to a
filter with basic composition of (ε, δ) is charged its conversion at ``delta``, as a
:class:`~dpcurator.accounting.ConcentratedEvent` carrying both views (its ρ and the (ε, δ) it
implies, never more than the ε asked for); a :class:`~dpcurator.accounting.ConcentratedFilter` or a
ρ budget charges its ρ. A ``rho`` on a session whose budget is a pure ε is refused; a ``rho``
without ``delta`` on an (ε, δ) budget with basic composition is refused (give ``delta`` to charge
its conversion). The algorithms reserve before they read the data, so the charge always precedes
the engine (:class:`Charging`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from dpcurator._validation import check_probability, fail
from dpcurator.accounting import (
    BudgetFilter,
    ConcentratedFilter,
    PrivacyFilter,
    Reservation,
)
from dpcurator.accounting.concentrated import largest_rho, zcdp_epsilon
from dpcurator.accounting.events import (
    ConcentratedEvent,
    PrivacyEvent,
    ZCDPEvent,
)
from dpcurator.core.measures import ZCDP, ApproxDP, Measure, PureDP
from dpcurator.core.numbers import to_fraction
from dpcurator.errors import UnsupportedQueryError

#: The native guarantees of the verbs' algorithms.
PURE, ZCDP_ONLY, EITHER = "pure", "zcdp", "either"


@dataclass(frozen=True)
class Cost:
    """A verb's resolved budget: the algorithm runs at ``epsilon`` (pure ε-DP) or at ``rho``
    (ρ-zCDP); ``delta`` > 0 is the δ at which a ρ is converted for an (ε, δ) filter."""

    epsilon: Fraction | None
    rho: Fraction | None
    delta: Fraction

    def charge(self, event: PrivacyEvent) -> PrivacyEvent:
        """The event the session's filter is asked for, given the algorithm's own event: a
        zCDP event converted at ``delta`` (both views) when a δ was given, else unchanged."""
        if isinstance(event, ZCDPEvent) and self.delta > 0:
            epsilon = zcdp_epsilon(event.rho, self.delta)
            return ConcentratedEvent(event.rho, epsilon=epsilon, epsilon_delta=self.delta)
        return event


def composes(budget_filter: BudgetFilter) -> str:
    """What ``budget_filter`` composes: ``pure`` (a pure ε budget), ``approx`` (basic
    composition of (ε, δ)), ``zcdp`` (a ρ budget) or ``concentrated`` (any event)."""
    if isinstance(budget_filter, ConcentratedFilter):
        return "concentrated"
    budget = (
        budget_filter.budget
        if isinstance(budget_filter, PrivacyFilter)
        else budget_filter.remaining()
    )
    if isinstance(budget, ZCDP):
        return "zcdp"
    if isinstance(budget, PureDP) or (isinstance(budget, ApproxDP) and budget.delta == 0):
        return "pure"
    return "approx"


def resolve(
    owner: str,
    budget_filter: BudgetFilter,
    native: str,
    *,
    epsilon: object,
    delta: object,
    rho: object,
) -> Cost:
    """Check a verb's budget arguments against its ``native`` guarantee and the session's filter
    (free refusals naming the parameter); the exact budget the algorithm runs at."""
    if (epsilon is None) == (rho is None):
        raise fail(owner, "epsilon", "given, or rho given (exactly one)", epsilon)
    delta_ = _delta(owner, delta)
    filter_kind = composes(budget_filter)
    if rho is not None:
        rho_ = _positive(owner, "rho", rho)
        if native == PURE:
            raise UnsupportedQueryError(
                f"{owner} is pure ε-DP and rho = {rho} is a ρ-zCDP cost, which implies no pure "
                "ε: give epsilon instead of rho."
            )
        if filter_kind == "pure":
            raise UnsupportedQueryError(
                f"{owner}: the session's budget is a pure ε, which cannot be charged "
                f"rho = {rho}: give epsilon (with delta = 0) instead."
            )
        if filter_kind == "approx" and delta_ == 0:
            raise UnsupportedQueryError(
                f"{owner}: the session composes (ε, δ) by basic composition, so rho = {rho} "
                "is charged as the (ε, δ) it implies: give delta > 0 too (or epsilon and "
                "delta), or open the session with accounting='concentrated'."
            )
        return Cost(None, rho_, delta_)
    eps = _positive(owner, "epsilon", epsilon)
    if native == ZCDP_ONLY:
        if delta_ == 0:
            raise UnsupportedQueryError(
                f"{owner} is ρ-zCDP: epsilon = {epsilon} needs a delta > 0 to be converted to "
                "a ρ (or give rho)."
            )
        if filter_kind == "pure":
            raise UnsupportedQueryError(
                f"{owner}: the session's budget is a pure ε, which cannot be charged "
                f"delta = {delta}: open the session with an (ε, δ) budget or a ρ."
            )
        return Cost(None, largest_rho(eps, delta_), delta_)
    if delta_ != 0:
        raise UnsupportedQueryError(
            f"{owner} is pure ε-DP with epsilon and spends no δ: leave delta out (got "
            f"delta = {delta})."
        )
    return Cost(eps, None, Fraction(0))


def _delta(owner: str, delta: object) -> Fraction:
    if delta is None:
        return Fraction(0)
    check_probability(owner, "delta", delta, open_high=True)
    return to_fraction(delta, owner=owner, name="delta")


def _positive(owner: str, name: str, value: object) -> Fraction:
    exact = to_fraction(value, owner=owner, name=name)
    if exact <= 0:
        raise fail(owner, name, "> 0", value)
    return exact


class Charging:
    """The budget filter a verb's algorithm sees: each reservation is forwarded to the session's
    filter as the event :meth:`Cost.charge` makes of it, and recorded (``charged``), so that the
    release states exactly what the session paid."""

    def __init__(self, outer: BudgetFilter, convert: Callable[[PrivacyEvent], PrivacyEvent]):
        self._outer = outer
        self._convert = convert
        self.charged: list[PrivacyEvent] = []

    def reserve(self, event: PrivacyEvent, *, description: str = "") -> Reservation:
        charged = self._convert(event)
        reservation = self._outer.reserve(charged, description=description)
        self.charged.append(charged)
        return reservation

    def remaining(self) -> Measure:
        return self._outer.remaining()

    def spent(self) -> Measure:
        return self._outer.spent()

    def events(self) -> tuple[PrivacyEvent, ...]:
        return self._outer.events()


def total_cost(events: list[PrivacyEvent]) -> Measure:
    """The basic composition of a verb's events (a verb's events share one kind): the sum of
    their ε, of their (ε, δ), or of their ρ."""
    pure = [event.pure_cost() for event in events]
    if pure and all(p is not None for p in pure):
        return PureDP(sum((p.epsilon for p in pure if p is not None), Fraction(0)))
    approx = [event.approx_cost() for event in events]
    if approx and all(a is not None for a in approx):
        return ApproxDP(
            sum((a.epsilon for a in approx if a is not None), Fraction(0)),
            sum((a.delta for a in approx if a is not None), Fraction(0)),
        )
    rhos = [event.zcdp_cost() for event in events]
    return ZCDP(sum((r.rho for r in rhos if r is not None), Fraction(0)))


__all__ = ["EITHER", "PURE", "ZCDP_ONLY", "Charging", "Cost", "composes", "resolve", "total_cost"]
