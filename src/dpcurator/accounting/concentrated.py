"""A fully adaptive privacy filter for mixed pure, (ε, δ) and zCDP events.

:class:`ConcentratedFilter` grants an (ε, δ) budget with δ > 0 (or a ρ budget). At construction,
from the public budget only, it fixes

* ``limits.delta`` = δ_E (half of δ by default) for the δ of approximate events (partition
  selection); the rest, ``conversion_delta`` = δ - δ_E, converts Rényi DP to (ε, δ) at the end;
* ε' = ε - ln(1/(1 - δ_E)) (rounded down): the logarithm pays for conditioning on the good case
  of approximate zCDP events (probability >= 1 - δ_E) on the Rényi route;
* an order ``order`` = α* > 1 (a rational) and ``bound`` = B, the largest Rényi divergence at α*
  that converts to (ε', conversion_delta): B = ε' - c(α*) with
  c(α) = [ln(1/δ) + α ln(1 - 1/α) - ln(α - 1)]/(α - 1) (Canonne, Kamath & Steinke 2020,
  Proposition 12), each logarithm rounded outwards, the rest exact. α* maximises B/α*, so a
  workload of Gaussian queries gets the ρ of the optimal zCDP conversion (:func:`largest_rho`).

Each event is charged by ONE of its views, chosen when it is reserved from public inputs (the
event and the charges so far): its ``approx_cost()`` (ε_i, δ_i), or its ``approx_zcdp_cost()``
(ρ_i, δ_i). On its good part (mass >= 1 - δ_i) event i's privacy loss L_i satisfies

* the (ε_i, δ_i) view: |L_i| <= ε_i pointwise, and D_α* <= c_i = min(ε_i, α*·ε_i²/2). An (ε, δ)
  pair is a post-processing of (ε, δ) randomized response (Kairouz, Oh & Viswanath 2015), so
  both distributions are mixtures, with the same weight 1 - δ, of an ε-DP pair (Murtagh & Vadhan
  2016, Lemma 3.2); ε-DP gives D_α <= ε and (ε²/2)-zCDP (Bun & Steinke 2016, Prop. 1.4);
* the (ρ_i, δ_i) view: D_α* <= c_i = α*·ρ_i, conditioned on a good event of mass >= 1 - δ_i
  (approximate zCDP; no pointwise bound).

The filter admits an event iff afterwards Σ δ_i <= δ_E and one of two routes holds:

* **basic**: every event so far was charged by its (ε, δ) view and Σ ε_i <= ε;
* **Rényi**: Σ c_i <= B.

Guarantee (fully adaptive: events, parameters and views may depend on every earlier release):
the whole interaction is (ε, δ)-DP. Proof sketch. Which route holds at the end is a function of
the transcript, so a set S of transcripts splits into S_b (basic) and S_r (Rényi), and the good
parts of all events carry all but at most δ_E of the mass. On S_b every factor is a same-weight
mixture of ε_i-DP pairs, so the good part of P on S_b is at most e^(Σ ε_i) <= e^ε times Q's. On
S_r, conditioned on the good parts, with L = Σ L_i and C = Σ c_i (predictable),
exp((α*-1)(L - C)) is a nonnegative supermartingale, so E[exp((α*-1)(L_T - C_T))] <= 1 at the
filter's stopping time T (the argument of Feldman & Zrnic 2021, Theorem 3.1; with approximate
events, Whitehouse, Ramdas, Rogers & Wu 2023), and CKS20's pointwise bound
(1 - e^(ε'-l))+ <= κ(α*, ε')·e^((α*-1)l) with C_T <= B bounds the hockey-stick divergence at
ε' on S_r by κ·e^((α*-1)B) = conversion_delta; removing the conditioning costs
ln(1/(1 - δ_E)) in ε. Together: P(S) <= e^ε Q(S) + conversion_delta + δ_E.

Why this design (at (1, 1e-6), δ_E = δ/2): it admits every sequence basic composition admits
(approximate events' δ up to δ_E): one pure query up to ε = 1, ten of 0.1; and Gaussian
workloads get ρ ≈ 0.0229 (100 queries: CI half-widths 3.3x narrower than Laplace at ε/100),
pure ones ρ-like costs (100 pure queries of 0.0214 each). The former fixed split of ε (a quarter
by basic composition, the rest by zCDP) allowed one pure query of 0.25, ten of 0.0625, a hundred
of 0.0176 and ρ ≈ 0.0134 (2.5x): this filter is at least as good in each case
(``benchmarks/accounting.py``). Mixed: after one pure 0.2, 100 Gaussian queries get
ρ ≈ 1.43e-4 each here and 1.34e-4 under the split; after one pure 0.25 (the split's whole
basic part), 1.22e-4 here against 1.34e-4, the one measured case where the split did better;
after one pure 0.5 the split refuses every Gaussian query. A ρ budget has no basic route:
events are charged by their ρ (pure ones by ε²/2) and the total is ρ-zCDP (delta-approximately,
with ``delta``).
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
from dpcurator.core.numbers import float_down, fraction_down, fraction_up, to_fraction
from dpcurator.errors import BudgetExceededError

#: Default share of the budget's δ kept for approximate events (partition selection).
DEFAULT_EVENT_DELTA_SHARE = Fraction(1, 2)
#: The largest denominator of the Rényi order α* (a rational, so charges add exactly).
ORDER_DENOMINATOR = 1_024


def zcdp_epsilon(rho: Fraction, delta: Fraction) -> Fraction:
    """ε (rounded up) such that ρ-zCDP implies (ε, δ)-DP (CKS20, Corollary 13)."""
    return ZCDP(rho).to_approx(delta).epsilon


def conditioning_epsilon(delta: Fraction) -> Fraction:
    """ln(1/(1 - δ)) rounded up: the ε paid for conditioning on a good case of mass 1 - δ."""
    return Fraction(0) if delta == 0 else fraction_up(-math.log1p(-float(delta)))


def conversion_cost(order: Fraction, delta: Fraction) -> Fraction:
    """c(α) = [ln(1/δ) + α ln(1 - 1/α) - ln(α - 1)]/(α - 1), rounded up: (α, τ)-RDP implies
    (τ + c(α), δ)-DP (CKS20, Proposition 12). Each logarithm is rounded outwards, the rest exact.
    """
    log_inverse_delta = fraction_up(-math.log(float_down(delta)))
    log_complement = fraction_up(math.log1p(-float_down(1 / order)))  # ln(1 - 1/α) < 0
    log_order_less_one = fraction_down(math.log(float_down(order - 1)))
    return (log_inverse_delta + order * log_complement - log_order_less_one) / (order - 1)


def _best_log_order(epsilon: float, delta: float) -> tuple[float, float]:
    """ln(α - 1) maximising ρ(α) = (ε - c(α))/α (golden-section search in floats; ρ(α) is
    unimodal), and that ρ."""

    def rho_at(log_am1: float) -> float:
        a = 1 + math.exp(log_am1)
        return (epsilon - math.log(1 / (a * delta)) / (a - 1) - math.log1p(-1 / a)) / a

    lo, hi = -20.0, 20.0
    inv_phi = (math.sqrt(5) - 1) / 2
    for _ in range(100):
        c = hi - inv_phi * (hi - lo)
        e = lo + inv_phi * (hi - lo)
        if rho_at(c) > rho_at(e):
            hi = e
        else:
            lo = c
    return (lo + hi) / 2, rho_at((lo + hi) / 2)


def largest_rho(epsilon: Fraction, delta: Fraction) -> Fraction:
    """The largest ρ (to a relative 2^-30, from below) with zcdp_epsilon(ρ, δ) <= ε.

    At a fixed order α > 1 the conversion is ε = ρα + c(α) (:func:`conversion_cost`), so the
    largest ρ is max over α of (ε - c(α))/α, found in floats; the result, lowered by 2^-30, is
    then checked exactly against :func:`zcdp_epsilon` (lowered again until it passes).
    """
    if epsilon <= 0:
        return Fraction(0)
    _, best = _best_log_order(float(epsilon), float(delta))
    rho = Fraction(max(best, 0.0)) * (1 - Fraction(1, 2**30))
    while rho > 0 and zcdp_epsilon(rho, delta) > epsilon:
        rho *= 1 - Fraction(1, 2**20)
    return rho


def renyi_order(epsilon: Fraction, delta: Fraction) -> Fraction:
    """The filter's order α*: the rational (denominator <= :data:`ORDER_DENOMINATOR`) nearest
    the order of the optimal conversion of ``largest_rho(epsilon, delta)``; at least 1 + 1/1024.
    """
    log_am1, _ = _best_log_order(float(epsilon), float(delta))
    order = Fraction(1 + math.exp(log_am1)).limit_denominator(ORDER_DENOMINATOR)
    return max(order, 1 + Fraction(1, ORDER_DENOMINATOR))


@dataclass(frozen=True)
class Concentrated:
    """A spend (or budget) in the filter's native terms: ``xi``, the ε of the basic route;
    ``rho``, the Rényi route in ρ units (the divergence at α* divided by α*: a Gaussian query
    costs its ρ, a pure ε costs min(ε/α*, ε²/2)); ``delta``, the approximate events' δ."""

    xi: Fraction
    rho: Fraction
    delta: Fraction

    def __str__(self) -> str:
        return (
            f"ρ = {readable(self.rho)}, basic ε = {readable(self.xi)}, δ = {readable(self.delta)}"
        )


@dataclass(frozen=True)
class _Charge:
    """One view of an event: what it adds to each part, whether it closes the basic route (a
    view without a pointwise ε bound), and its ρ-zCDP cost at every order (for reports)."""

    parts: Concentrated
    closes: bool
    zcdp: Fraction


class ConcentratedFilter:
    """A thread-safe, fully adaptive filter for mixed events (see the module docstring).

    Args:
        budget: a :class:`Budget` or ApproxDP with δ > 0, or a ZCDP measure (then every event
            is charged by its ρ and approximate events are refused unless ``delta`` is given).
        event_delta_share: the share of δ kept for approximate events (default 1/2).
        delta: with a ZCDP budget, a δ for approximate events (the total is then
            delta-approximately ρ-zCDP).

    Raises:
        ParameterError: a pure budget (use :class:`~dpcurator.accounting.PrivacyFilter`), a share
            outside [0, 1), or a budget too small to leave any Rényi bound.
    """

    def __init__(
        self,
        budget: Budget | Measure,
        *,
        event_delta_share: object = DEFAULT_EVENT_DELTA_SHARE,
        delta: object = 0,
    ) -> None:
        owner = "ConcentratedFilter"
        measure = budget.as_measure() if isinstance(budget, Budget) else budget
        check_probability(owner, "event_delta_share", event_delta_share, open_high=True)
        check_probability(owner, "delta", delta, open_high=True)
        self.order: Fraction | None = None
        self.bound = self._conversion = Fraction(0)
        if isinstance(measure, ZCDP):
            self.budget: Measure = measure
            self.conversion_delta = Fraction(0)
            self.limits = Concentrated(Fraction(0), measure.rho, to_fraction(delta))
        elif isinstance(measure, ApproxDP) and measure.delta > 0:
            self.budget = measure
            event_delta = measure.delta * to_fraction(event_delta_share)
            self.conversion_delta = measure.delta - event_delta
            left = measure.epsilon - conditioning_epsilon(event_delta)
            self.order = renyi_order(left, self.conversion_delta)
            self._conversion = conversion_cost(self.order, self.conversion_delta)
            self.bound = left - self._conversion
            if self.bound <= 0:
                raise fail(owner, "budget", "a budget leaving a Rényi bound > 0", measure)
            self.limits = Concentrated(measure.epsilon, self.bound / self.order, event_delta)
        else:
            raise fail(
                owner,
                "budget",
                "an (ε, δ) budget with δ > 0 or a ZCDP budget",
                measure,
                "A pure ε budget uses PrivacyFilter (basic composition is optimal there).",
            )
        self._lock = threading.Lock()
        self._live: list[tuple[Reservation, _Charge]] = []
        self._used = Concentrated(Fraction(0), Fraction(0), Fraction(0))  # sums of the live
        self._zcdp = Fraction(0)  # Σ of the live charges' ρ-zCDP costs (for reports)
        self._closed = self.order is None  # the basic route (never open for a ρ budget)
        self._numbers = 0

    def copy(self) -> ConcentratedFilter:
        """An independent filter in the same state (e.g. a cached replay to charge on)."""
        with self._lock:
            twin = object.__new__(ConcentratedFilter)
            twin.__dict__.update(self.__dict__)
            twin._lock = threading.Lock()
            twin._live = list(self._live)
            return twin

    # -- charging --------------------------------------------------------------------------

    def _options(self, event: PrivacyEvent) -> list[_Charge]:
        options = []
        approx = event.approx_cost()
        if approx is not None:
            eps = approx.epsilon
            rho = eps**2 / 2 if self.order is None else min(eps / self.order, eps**2 / 2)
            parts = Concentrated(eps, rho, approx.delta)
            options.append(_Charge(parts, closes=False, zcdp=eps**2 / 2))
        zcdp = event.approx_zcdp_cost()
        if zcdp is not None:
            rho, delta = zcdp[0].rho, zcdp[1]
            closes = rho > 0 or delta > 0  # a ρ = 0 release does not depend on the data
            options.append(_Charge(Concentrated(Fraction(0), rho, delta), closes, zcdp=rho))
        if not options:
            raise fail("ConcentratedFilter.reserve", "event", "an event with a cost", event)
        return options

    def _usage(self, used: Concentrated, closed: bool) -> Fraction:
        """The fraction of the budget ``used`` leaves spent: of the better route, or of δ (> 1:
        does not fit)."""
        routes = [_ratio(used.rho, self.limits.rho)]
        if not closed:
            routes.append(_ratio(used.xi, self.limits.xi))
        return max(min(routes), _ratio(used.delta, self.limits.delta))

    def reserve(self, event: PrivacyEvent, *, description: str = "") -> Reservation:
        """Charge ``event`` by its view that leaves the most budget, if one fits; else
        BudgetExceededError, nothing charged (naming the event's (ε, δ) cost, or its ρ)."""
        if not isinstance(event, PrivacyEvent):
            raise fail("ConcentratedFilter.reserve", "event", "a PrivacyEvent", event)
        options = self._options(event)
        with self._lock:
            ranked = sorted(
                (self._usage(_plus(self._used, c.parts, 1), self._closed or c.closes), c.closes, i)
                for i, c in enumerate(options)
            )
            usage, _, index = ranked[0]
            if usage > 1:
                approx = event.approx_cost()
                requested: Measure = approx if approx is not None else ZCDP(options[-1].parts.rho)
                raise BudgetExceededError(requested, self._remaining_locked())
            best = options[index]
            self._numbers += 1
            reservation = Reservation(event, description, self._numbers, self)
            self._live.append((reservation, best))
            self._used = _plus(self._used, best.parts, 1)
            self._zcdp += best.zcdp
            self._closed = self._closed or best.closes
            return reservation

    def _cancel(self, reservation: Reservation) -> None:
        with self._lock:
            for charge in [c for r, c in self._live if r is reservation]:
                self._used = _plus(self._used, charge.parts, -1)
                self._zcdp -= charge.zcdp
            self._live = [(r, c) for r, c in self._live if r is not reservation]
            self._closed = self.order is None or any(c.closes for _, c in self._live)

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

    def _spent_native_locked(self) -> Concentrated:
        used, limits = self._used, self.limits
        xi = limits.xi if self._closed else min(used.xi, limits.xi)
        return Concentrated(xi, min(used.rho, limits.rho), used.delta)

    def spent_native(self) -> Concentrated:
        """What has been charged to each part, each capped at its limit: all of the basic
        route once it is closed (an event was charged by its ρ view)."""
        with self._lock:
            return self._spent_native_locked()

    def remaining_native(self) -> Concentrated:
        """What is left of each part (an event fits when its charge fits one route and δ)."""
        used = self.spent_native()
        return Concentrated(
            self.limits.xi - used.xi, self.limits.rho - used.rho, self.limits.delta - used.delta
        )

    def _spent_locked(self) -> Measure:
        used = self._used
        if isinstance(self.budget, ZCDP):
            return ZCDP(used.rho)
        if used.rho == 0 and used.delta == 0:
            return ApproxDP(0, 0)
        # Each candidate is a valid accounting of the charged sequence taken as fixed.
        conditioning = conditioning_epsilon(used.delta)
        rho = zcdp_epsilon(self._zcdp, self.conversion_delta)
        assert self.order is not None  # an (ε, δ) budget
        renyi = self.order * used.rho + self._conversion
        epsilon = min(rho, renyi) + conditioning
        if not self._closed and used.xi <= epsilon:
            return ApproxDP(used.xi, used.delta)
        return ApproxDP(epsilon, used.delta + self.conversion_delta)

    def spent(self) -> Measure:
        """The spend in the budget's measure, indicative (the guarantee is the budget's, for
        the whole interaction): the smallest ε that the charged sequence, taken as fixed, has
        by basic composition (while the basic route is open: (Σ ε_i, Σ δ_i)), by zCDP (the
        conversion of Σ ρ_i, pure events as ε²/2) or by its divergence at α*, the last two
        plus the conditioning; ρ for a ZCDP budget. ``spent_native`` gives the parts."""
        with self._lock:
            return self._spent_locked()

    def _remaining_locked(self) -> Measure:
        spent = self._spent_locked()
        if isinstance(self.budget, ZCDP):
            assert isinstance(spent, ZCDP)  # a ZCDP budget: see _spent_locked
            return ZCDP(max(self.budget.rho - spent.rho, Fraction(0)))
        assert isinstance(spent, ApproxDP)
        assert isinstance(self.budget, ApproxDP)
        return ApproxDP(
            max(self.budget.epsilon - spent.epsilon, Fraction(0)),
            min(self.budget.delta - spent.delta, self.limits.delta - self._used.delta),
            note=self._delta_note(),
        )

    def _delta_note(self) -> str:
        """Why the δ left is at most ``limits.delta``, not the budget's δ, from the first
        release on: the rest is kept for the conversion of the whole interaction to (ε, δ)."""
        assert isinstance(self.budget, ApproxDP)
        return (
            f"δ left is what releases with δ > 0 can use: {readable(self.conversion_delta)} of "
            f"the budget's δ = {readable(self.budget.delta)} is kept for converting the whole "
            f"interaction to (ε, δ)-DP"
        )

    def remaining(self) -> Measure:
        """Budget minus spent in the budget's measure, floored at 0, with the δ approximate
        events may still use (indicative: an event fits when its charge fits a route and δ;
        ``remaining_native`` gives the parts).

        For an (ε, δ) budget the δ shown is at most ``limits.delta`` (δ_E, half of δ by
        default) even before any release: the other ``conversion_delta`` = δ - δ_E pays for
        converting the Rényi route to (ε, δ) at the end (module docstring). Its printed text
        says so (e.g. a budget of (20, 1e-5) shows δ = 5e-06 left)."""
        with self._lock:
            return self._remaining_locked()

    def __repr__(self) -> str:
        order = "" if self.order is None else f", order={self.order}"
        return f"ConcentratedFilter(budget={self.budget}, limits=({self.limits}){order})"


def _ratio(used: Fraction, limit: Fraction) -> Fraction:
    """``used / limit``, 0 when nothing is used, and 2 (does not fit) over a zero limit."""
    if used == 0:
        return Fraction(0)
    return used / limit if limit > 0 else Fraction(2)


def _plus(total: Concentrated, charge: Concentrated, sign: int) -> Concentrated:
    return Concentrated(
        total.xi + sign * charge.xi,
        total.rho + sign * charge.rho,
        total.delta + sign * charge.delta,
    )
