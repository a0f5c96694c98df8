"""A fully adaptive privacy filter for mixed pure, (ε, δ) and zCDP events.

:class:`ConcentratedFilter` grants an (ε, δ) budget (or a ρ budget) and splits it, once, at
construction, from public parameters only, into three parts:

* ``xi``: an ε reserved for events charged by their pure/(ε, δ) cost (basic composition: a few
  large pure queries cost what they cost under :class:`~dpcurator.accounting.PrivacyFilter`);
* ``rho``: a zCDP budget for events charged by their ρ (Gaussian queries, and pure ε queries as
  ε²/2 when that uses a smaller fraction of its part: many small queries);
* ``delta``: a δ for events that are only approximately zCDP or (ε, δ)-DP (partition selection);
  the rest of the budget's δ, ``conversion_delta``, converts ρ to (ε, δ) at the end.

They satisfy ``xi + zcdp_epsilon(rho, conversion_delta) + ln(1/(1 - delta)) <= ε`` (the zCDP
conversion of Canonne, Kamath & Steinke 2020, Corollary 13, rounded up; the logarithm pays for
conditioning on the approximate events' good case under either definition of approximate zCDP).

Each reserved event is charged on ONE side, chosen when it is reserved from public inputs (the
event and the charges so far): its ``approx_cost()`` (ε_i, δ_i) on the ``xi`` side, or its
``approx_zcdp_cost()`` (ρ_i, δ_i) on the ``rho`` side, whichever fits and uses the smaller
fraction of its part. An event that fits neither is refused (BudgetExceededError, nothing
charged).

Guarantee (fully adaptive: each event, its parameters and its side may depend on every earlier
release). Event i's Rényi divergence of every order α > 1, conditioned on the past and on its
good case (probability >= 1 - δ_i), is at most c_i(α) = ε_i (xi side: an (ε_i, δ_i)-DP pair is a
mixture of an ε_i-DP pair, Kairouz, Oh & Viswanath 2015) or α·ρ_i (rho side). The filter halts
before Σ ε_i > xi, Σ ρ_i > rho or Σ δ_i > delta, so for every α the predictable bounds satisfy
Σ c_i(α) <= xi + α·rho almost surely: the condition of the Rényi filter at each order (Feldman &
Zrnic 2021, Theorem 3.1) and of the approximate zCDP filter with predictable (ρ_i, δ_i)
(Whitehouse, Ramdas, Rogers & Wu 2023, whose proof bounds each order separately). The whole
interaction is therefore delta-approximately (xi, rho)-zCDP (D_α <= xi + α·rho), hence
(ε, δ)-DP by the conversion above, whatever the analyst's strategy.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from fractions import Fraction

from dpcurator._validation import check_probability, fail
from dpcurator.accounting.budget import Budget
from dpcurator.accounting.events import PrivacyEvent
from dpcurator.accounting.filter import Reservation
from dpcurator.core.measures import ZCDP, ApproxDP, Measure, readable
from dpcurator.core.numbers import fraction_up, to_fraction
from dpcurator.errors import BudgetExceededError

#: Default share of an (ε, δ) budget's ε kept for events charged by basic composition.
DEFAULT_PURE_SHARE = Fraction(1, 4)
#: Default share of the budget's δ kept for approximate events (partition selection).
DEFAULT_EVENT_DELTA_SHARE = Fraction(1, 2)


def zcdp_epsilon(rho: Fraction, delta: Fraction) -> Fraction:
    """ε (rounded up) such that ρ-zCDP implies (ε, δ)-DP (CKS20, Corollary 13)."""
    return ZCDP(rho).to_approx(delta).epsilon


def conditioning_epsilon(delta: Fraction) -> Fraction:
    """ln(1/(1 - δ)) rounded up: the ε paid for conditioning on a good case of mass 1 - δ."""
    return Fraction(0) if delta == 0 else fraction_up(-math.log1p(-float(delta)))


def largest_rho(epsilon: Fraction, delta: Fraction) -> Fraction:
    """The largest ρ (to a relative 2^-30, from below) with zcdp_epsilon(ρ, δ) <= ε.

    At a fixed order α > 1 the conversion is ε = ρα + c(α), c(α) = ln(1/(αδ))/(α-1) +
    ln(1 - 1/α) (CKS20, Proposition 12), so the largest ρ is max over α of (ε - c(α))/α, found
    by golden-section search over ln(α - 1) in floats; the result, lowered by 2^-30, is then
    checked exactly against :func:`zcdp_epsilon` (lowered again until it passes).
    """
    if epsilon <= 0:
        return Fraction(0)
    eps, d = float(epsilon), float(delta)

    def rho_at(log_am1: float) -> float:
        a = 1 + math.exp(log_am1)
        return (eps - math.log(1 / (a * d)) / (a - 1) - math.log1p(-1 / a)) / a

    lo, hi = -20.0, 20.0
    inv_phi = (math.sqrt(5) - 1) / 2
    for _ in range(100):
        c = hi - inv_phi * (hi - lo)
        e = lo + inv_phi * (hi - lo)
        if rho_at(c) > rho_at(e):
            hi = e
        else:
            lo = c
    rho = Fraction(max(rho_at((lo + hi) / 2), 0.0)) * (1 - Fraction(1, 2**30))
    while rho > 0 and zcdp_epsilon(rho, delta) > epsilon:
        rho *= 1 - Fraction(1, 2**20)
    return rho


@dataclass(frozen=True)
class Concentrated:
    """A spend (or budget) in the filter's native terms: ε on the basic side, ρ, and δ."""

    xi: Fraction
    rho: Fraction
    delta: Fraction

    def __str__(self) -> str:
        return (
            f"ρ = {readable(self.rho)}, basic ε = {readable(self.xi)}, δ = {readable(self.delta)}"
        )


class ConcentratedFilter:
    """A thread-safe, fully adaptive filter for mixed events (see the module docstring).

    Args:
        budget: a :class:`Budget` or ApproxDP with δ > 0, or a ZCDP measure (then every event
            is charged by its ρ and approximate events are refused unless ``delta`` is given).
        pure_share: the share of ε kept for the basic side (default 1/4; 0 puts all of ε into ρ).
        event_delta_share: the share of δ kept for approximate events (default 1/2).
        delta: with a ZCDP budget, a δ for approximate events (the total is then
            delta-approximately ρ-zCDP).

    Raises:
        ParameterError: a pure budget (use :class:`~dpcurator.accounting.PrivacyFilter`), shares
            outside [0, 1), or a budget too small to leave any ρ.
    """

    def __init__(
        self,
        budget: Budget | Measure,
        *,
        pure_share: object = DEFAULT_PURE_SHARE,
        event_delta_share: object = DEFAULT_EVENT_DELTA_SHARE,
        delta: object = 0,
    ) -> None:
        owner = "ConcentratedFilter"
        measure = budget.as_measure() if isinstance(budget, Budget) else budget
        check_probability(owner, "pure_share", pure_share, open_high=True)
        check_probability(owner, "event_delta_share", event_delta_share, open_high=True)
        check_probability(owner, "delta", delta, open_high=True)
        if isinstance(measure, ZCDP):
            self.budget: Measure = measure
            self.conversion_delta = Fraction(0)
            self.limits = Concentrated(Fraction(0), measure.rho, to_fraction(delta))
        elif isinstance(measure, ApproxDP) and measure.delta > 0:
            self.budget = measure
            event_delta = measure.delta * to_fraction(event_delta_share)
            self.conversion_delta = measure.delta - event_delta
            xi = measure.epsilon * to_fraction(pure_share)
            left = measure.epsilon - xi - conditioning_epsilon(event_delta)
            self.limits = Concentrated(xi, largest_rho(left, self.conversion_delta), event_delta)
        else:
            raise fail(
                owner,
                "budget",
                "an (ε, δ) budget with δ > 0 or a ZCDP budget",
                measure,
                "A pure ε budget uses PrivacyFilter (basic composition is optimal there).",
            )
        self._lock = threading.Lock()
        self._live: list[tuple[Reservation, Concentrated]] = []
        self._used = Concentrated(Fraction(0), Fraction(0), Fraction(0))  # sums of the live
        self._numbers = 0

    # -- charging --------------------------------------------------------------------------

    def _options(self, event: PrivacyEvent) -> list[Concentrated]:
        options = []
        approx = event.approx_cost()
        if approx is not None:
            options.append(Concentrated(approx.epsilon, Fraction(0), approx.delta))
        zcdp = event.approx_zcdp_cost()
        if zcdp is not None:
            options.append(Concentrated(Fraction(0), zcdp[0].rho, zcdp[1]))
        if not options:
            raise fail("ConcentratedFilter.reserve", "event", "an event with a cost", event)
        return options

    def _fraction(self, charge: Concentrated) -> Fraction:
        """The largest fraction of a part the charge uses (inf-like 2 when it cannot fit)."""
        used = self._used_locked()
        worst = Fraction(0)
        for spent, add, limit in (
            (used.xi, charge.xi, self.limits.xi),
            (used.rho, charge.rho, self.limits.rho),
            (used.delta, charge.delta, self.limits.delta),
        ):
            if add == 0:
                continue
            if spent + add > limit:
                return Fraction(2)
            worst = max(worst, add / limit)
        return worst

    def reserve(self, event: PrivacyEvent, *, description: str = "") -> Reservation:
        """Charge ``event`` on its cheaper side if it fits; else BudgetExceededError, nothing
        charged (the error names the event's (ε, δ) cost, or its ρ, and what remains)."""
        if not isinstance(event, PrivacyEvent):
            raise fail("ConcentratedFilter.reserve", "event", "a PrivacyEvent", event)
        options = self._options(event)
        with self._lock:
            ranked = sorted(options, key=lambda c: (self._fraction(c), c.xi))
            best = ranked[0]
            if self._fraction(best) > 1:
                approx = event.approx_cost()
                requested: Measure = approx if approx is not None else ZCDP(options[-1].rho)
                raise BudgetExceededError(requested, self._remaining_locked())
            self._numbers += 1
            reservation = Reservation(event, description, self._numbers, self)
            self._live.append((reservation, best))
            self._used = _plus(self._used, best, 1)
            return reservation

    def _cancel(self, reservation: Reservation) -> None:
        with self._lock:
            for charge in [c for r, c in self._live if r is reservation]:
                self._used = _plus(self._used, charge, -1)
            self._live = [(r, c) for r, c in self._live if r is not reservation]

    def replay(self, events: list[PrivacyEvent]) -> None:
        """Charge stored events again, in order (e.g. a ledger's history); each is committed.

        Raises BudgetExceededError at the first that does not fit (those before stay charged)."""
        for event in events:
            self.reserve(event, description="replayed").commit()

    # -- reports ---------------------------------------------------------------------------

    def events(self) -> tuple[PrivacyEvent, ...]:
        """The events of all live reservations, in order."""
        with self._lock:
            return tuple(r.event for r, _ in self._live)

    def _used_locked(self) -> Concentrated:
        return self._used

    def spent_native(self) -> Concentrated:
        """What has been charged: basic-side ε, ρ and the approximate events' δ."""
        with self._lock:
            return self._used_locked()

    def remaining_native(self) -> Concentrated:
        """What is left of each part."""
        used = self.spent_native()
        return Concentrated(
            self.limits.xi - used.xi, self.limits.rho - used.rho, self.limits.delta - used.delta
        )

    def _as_budget_measure(self, used: Concentrated) -> Measure:
        if isinstance(self.budget, ZCDP):
            return ZCDP(used.rho)
        epsilon = used.xi + conditioning_epsilon(used.delta)
        delta = used.delta
        if used.rho > 0:
            epsilon += zcdp_epsilon(used.rho, self.conversion_delta)
            delta += self.conversion_delta
        return ApproxDP(epsilon, delta)

    def spent(self) -> Measure:
        """The spend in the budget's measure: (ε, δ) from the conversion of the module
        docstring (or ρ for a ZCDP budget). ``spent_native`` gives the parts."""
        return self._as_budget_measure(self.spent_native())

    def _remaining_locked(self) -> Measure:
        used = self._used_locked()
        if isinstance(self.budget, ZCDP):
            return ZCDP(max(self.budget.rho - used.rho, Fraction(0)))
        spent = self._as_budget_measure(used)
        assert isinstance(spent, ApproxDP)  # an (ε, δ) budget: see _as_budget_measure
        assert isinstance(self.budget, ApproxDP)
        return ApproxDP(
            max(self.budget.epsilon - spent.epsilon, Fraction(0)),
            max(self.budget.delta - spent.delta, Fraction(0)),
        )

    def remaining(self) -> Measure:
        """Budget minus spent in the budget's measure, floored at 0 (indicative: an event fits
        when its charge fits its part; ``remaining_native`` gives the parts)."""
        with self._lock:
            return self._remaining_locked()

    def __repr__(self) -> str:
        return f"ConcentratedFilter(budget={self.budget}, limits=({self.limits}))"


def _plus(total: Concentrated, charge: Concentrated, sign: int) -> Concentrated:
    return Concentrated(
        total.xi + sign * charge.xi,
        total.rho + sign * charge.rho,
        total.delta + sign * charge.delta,
    )
