"""ConcentratedFilter: mixed pure / Gaussian / (ε, δ) events under one fully adaptive filter
(a basic route or a Rényi filter at one order α*)."""

from __future__ import annotations

import math
import random
from decimal import Decimal, localcontext
from fractions import Fraction

import pytest

import dpcurator as dpc
from dpcurator.accounting import (
    ApproxEvent,
    Budget,
    ConcentratedEvent,
    ConcentratedFilter,
    GaussianEvent,
    PrivacyEvent,
    PrivacyFilter,
    PureEvent,
    ZCDPEvent,
)
from dpcurator.accounting.concentrated import (
    conditioning_epsilon,
    conversion_cost,
    largest_rho,
    zcdp_epsilon,
)
from dpcurator.core.measures import ZCDP, ApproxDP
from dpcurator.errors import BudgetExceededError, ParameterError

BUDGET = Budget(1, Fraction(1, 10**6))
HALF_DELTA = Fraction(1, 2 * 10**6)


def _cks_delta(order: Fraction, tau: Fraction, epsilon: Fraction) -> Decimal:
    """δ of CKS20 Proposition 12 for (α, τ)-RDP at ε, to 50 digits:
    exp((α-1)(τ-ε))/(α-1) · (1 - 1/α)^α."""
    with localcontext() as ctx:
        ctx.prec = 50
        a = Decimal(order.numerator) / Decimal(order.denominator)
        t = Decimal(tau.numerator) / Decimal(tau.denominator)
        e = Decimal(epsilon.numerator) / Decimal(epsilon.denominator)
        return ((a - 1) * (t - e)).exp() / (a - 1) * ((1 - 1 / a).ln() * a).exp()


def _left() -> Fraction:
    return 1 - conditioning_epsilon(HALF_DELTA)


def test_conversion_by_hand() -> None:
    """(1, 1e-6): δ_E = δ_conv = 5e-7, ε' = 1 - ln(1/(1 - 5e-7)); α* ≈ 23.26 and B ≈ 0.5334
    with (α*, B)-RDP => (ε', 5e-7)-DP by CKS20 Prop. 12 (checked to 50 digits, and tight to
    1e-9), and the Rényi route's ρ = B/α* is the optimal zCDP conversion's (≈ 0.02294)."""
    flt = ConcentratedFilter(BUDGET)
    assert flt.order is not None
    assert flt.limits.delta == flt.conversion_delta == HALF_DELTA
    assert flt.limits.xi == 1  # the basic route: all of ε
    assert abs(float(flt.order) - 23.2565) < 1e-3
    assert abs(float(flt.bound) - 0.53344) < 1e-4
    delta = _cks_delta(flt.order, flt.bound, _left())
    assert delta <= Decimal(5) / Decimal(10**7)
    assert delta >= Decimal(5) / Decimal(10**7) * (1 - Decimal(10) ** -9)
    assert flt.limits.rho == flt.bound / flt.order
    assert flt.limits.rho >= largest_rho(_left(), HALF_DELTA) * (1 - Fraction(1, 10**6))
    assert abs(float(flt.limits.rho) - 0.0229374) < 1e-6


def test_single_pure_query_and_a_hundred_gaussian_ones() -> None:
    """One pure query may spend all of ε (the basic route; the former ε split allowed 0.25),
    and 100 Gaussian queries share ρ ≈ 0.0229: their 95% CI half-widths are >= 3x narrower than
    those of Laplace at ε = 1/100 (the former split's ρ ≈ 0.0134 gave 2.5x)."""
    single = ConcentratedFilter(BUDGET)
    single.reserve(PureEvent(1)).commit()
    assert single.spent() == ApproxDP(1, 0)
    with pytest.raises(BudgetExceededError):
        ConcentratedFilter(BUDGET).reserve(PureEvent(1 + Fraction(1, 10**9)))
    many = ConcentratedFilter(BUDGET)
    share = Fraction(229, 10**6)  # 0.0229 / 100
    for _ in range(100):
        many.reserve(ZCDPEvent(share)).commit()
    laplace = 100 * math.log(1 / 0.05)  # scale Δ/ε = 100, P(|noise| > w) = exp(-w/b)
    gaussian = 1.959964 / math.sqrt(2 * float(share))  # σ = Δ/sqrt(2ρ)
    assert laplace / gaussian >= 3


def _views(event: PrivacyEvent, order: Fraction) -> list[tuple[Fraction | None, Fraction]]:
    """(ε or None, Rényi divergence at α*) of each view of an event (the test's own costs)."""
    views: list[tuple[Fraction | None, Fraction]] = []
    approx = event.approx_cost()
    if approx is not None:
        eps = approx.epsilon
        views.append((eps, min(eps, order * eps**2 / 2)))
    zcdp = event.approx_zcdp_cost()
    if zcdp is not None:
        views.append((None, order * zcdp[0].rho))
    return views


def _delta(event: PrivacyEvent) -> Fraction:
    """The δ of an event's views (the random events here have the same δ in each)."""
    zcdp = event.approx_zcdp_cost()
    assert zcdp is not None
    return zcdp[1]


def _random_event(rng: random.Random) -> PrivacyEvent:
    eps = Fraction(rng.randint(1, 400), 1000)
    delta = Fraction(rng.randint(0, 3), 10**8)  # the same δ in every view of an event
    kind = rng.randrange(5)
    if kind == 0:
        return PureEvent(eps)
    if kind == 1:
        return ApproxEvent(eps, delta)
    if kind == 2:
        return ZCDPEvent(eps**2 / 8)
    if kind == 3:
        return GaussianEvent(rng.randint(1, 50), 1)
    return ConcentratedEvent(eps**2 / 6, delta, eps, delta)


def test_never_admits_a_sequence_outside_both_routes() -> None:
    """Random mixed sequences (seeded; a refused event is skipped): after every admission the
    events' δ fits δ_E and either they all have an (ε, δ) view with Σ ε <= ε, or the sum of
    their smallest divergences at α* is <= B, B recomputed independently (CKS20 Prop. 12 to 50
    digits); all exact."""
    rng = random.Random(20231)
    admitted_by_renyi_only = 0
    for _ in range(60):
        flt = ConcentratedFilter(BUDGET)
        assert flt.order is not None
        order = flt.order
        assert _cks_delta(order, flt.bound, _left()) <= Decimal(5) / Decimal(10**7)
        events: list[PrivacyEvent] = []
        for _ in range(40):
            event = _random_event(rng)
            try:
                flt.reserve(event).commit()
            except BudgetExceededError:
                continue
            events.append(event)
            views = [_views(e, order) for e in events]
            assert sum(_delta(e) for e in events) <= HALF_DELTA
            basic = (
                all(v[0][0] is not None for v in views)
                and sum(v[0][0] for v in views if v[0][0] is not None) <= BUDGET.epsilon
            )
            renyi = sum(min(c for _, c in v) for v in views) <= flt.bound
            assert basic or renyi
            admitted_by_renyi_only += renyi and not basic
    assert admitted_by_renyi_only > 0  # the Rényi route was exercised


def test_mixed_sequence_total_by_hand() -> None:
    """A pure 0.2, a Gaussian σ = 40 on Δ₂ = 1 (it closes the basic route), 20 pure 0.01 and an
    (ε = 0.04, δ = 2e-7) partition selection: in ρ units min(ε/α*, ε²/2) per (ε, δ) event and ρ
    per Gaussian; the spend is the smaller of the sequence's zCDP conversion (pure ε as ε²/2) and
    its conversion at α*, plus the conditioning."""
    flt = ConcentratedFilter(BUDGET)
    order = flt.order
    assert order is not None
    events: list[PrivacyEvent] = [PureEvent(Fraction(1, 5)), GaussianEvent(40, 1)]
    events += [PureEvent(Fraction(1, 100))] * 20
    events.append(ApproxEvent(Fraction(1, 25), Fraction(1, 5 * 10**6)))
    for event in events:
        flt.reserve(event).commit()
    rho = (
        Fraction(1, 5) / order
        + Fraction(1, 2 * 40**2)
        + 20 * Fraction(1, 100) ** 2 / 2
        + Fraction(1, 25) ** 2 / 2
    )
    native = flt.spent_native()
    assert native == type(native)(flt.limits.xi, rho, Fraction(1, 5 * 10**6))  # basic closed
    spent = flt.spent()
    zcdp = Fraction(1, 50) + Fraction(1, 3200) + 20 * Fraction(1, 20000) + Fraction(1, 1250)
    renyi = order * rho + conversion_cost(order, HALF_DELTA)
    by_hand = min(zcdp_epsilon(zcdp, HALF_DELTA), renyi)
    by_hand += conditioning_epsilon(Fraction(1, 5 * 10**6))
    assert spent == ApproxDP(by_hand, Fraction(1, 5 * 10**6) + HALF_DELTA)
    assert spent.epsilon < 1


def test_a_gaussian_event_closes_the_basic_route() -> None:
    """A ρ > 0 view closes the basic route (a ρ = 0 release does not); δ for approximate events
    is δ_E, which ``remaining`` shows and a refusal names."""
    flt = ConcentratedFilter(BUDGET)
    flt.reserve(ZCDPEvent(0)).commit()
    assert flt.remaining() == ApproxDP(1, HALF_DELTA)
    with pytest.raises(BudgetExceededError, match="delta: 1e-06 asked, 5e-07 left"):
        flt.reserve(ApproxEvent(Fraction(1, 10), Fraction(1, 10**6)))
    flt.reserve(PureEvent(Fraction(1, 2))).commit()  # basic route and Rényi route both fit
    flt.reserve(ZCDPEvent(Fraction(1, 10**6))).commit()  # Rényi: 0.5 + α*·1e-6 <= B
    with pytest.raises(BudgetExceededError):  # basic would fit, but it is closed
        flt.reserve(PureEvent(Fraction(2, 5)))
    assert flt.remaining_native().xi == 0


def test_refuses_exactly_at_the_boundary() -> None:
    """ρ budget 1/2: ρ events fill it exactly, and the next smallest event is refused, free."""
    flt = ConcentratedFilter(ZCDP(Fraction(1, 2)))
    for _ in range(4):
        flt.reserve(ConcentratedEvent(Fraction(1, 8))).commit()
    assert flt.spent() == ZCDP(Fraction(1, 2))
    with pytest.raises(BudgetExceededError):
        flt.reserve(ConcentratedEvent(Fraction(1, 10**12)))
    assert len(flt.events()) == 4
    # pure events enter as ε²/2: ε = 1 is exactly ρ = 1/2
    fresh = ConcentratedFilter(ZCDP(Fraction(1, 2)))
    fresh.reserve(PureEvent(1)).commit()
    assert fresh.remaining() == ZCDP(0)


def test_basic_route_is_exact_at_its_boundary() -> None:
    flt = ConcentratedFilter(Budget(2, 1e-6))
    flt.reserve(PureEvent(2)).commit()  # all of ε (> B: only the basic route)
    with pytest.raises(BudgetExceededError):
        flt.reserve(PureEvent(Fraction(1, 10**9)))


def test_cancel_frees_the_charge_and_replay_rebuilds_it() -> None:
    flt = ConcentratedFilter(BUDGET)
    reservation = flt.reserve(GaussianEvent(10, 1))
    reservation.cancel()
    assert flt.spent() == ApproxDP(0, 0)
    assert flt.remaining_native().xi == flt.limits.xi  # the basic route is open again
    history = [GaussianEvent(20, 1), PureEvent(Fraction(1, 20))]
    flt.replay(history)
    assert flt.spent_native().rho == Fraction(1, 800) + Fraction(1, 800)
    assert flt.events() == tuple(history)
    twin = flt.copy()
    twin.reserve(PureEvent(Fraction(1, 100))).commit()
    assert flt.events() == tuple(history)  # the copy is independent


def test_many_small_queries_fit_where_basic_composition_refuses() -> None:
    concentrated = ConcentratedFilter(BUDGET)
    basic = PrivacyFilter(BUDGET)
    for _ in range(200):
        concentrated.reserve(PureEvent(Fraction(1, 100))).commit()
    for _ in range(100):
        basic.reserve(PureEvent(Fraction(1, 100))).commit()
    with pytest.raises(BudgetExceededError):
        basic.reserve(PureEvent(Fraction(1, 100)))


def test_pure_budgets_and_bad_shares_are_refused() -> None:
    with pytest.raises(ParameterError, match="PrivacyFilter"):
        ConcentratedFilter(Budget(1))
    with pytest.raises(ParameterError):
        ConcentratedFilter(BUDGET, event_delta_share=1)
    with pytest.raises(ParameterError, match="Rényi bound"):
        ConcentratedFilter(Budget(Fraction(1, 10), Fraction(1, 2)))  # ln(1/(1 - 1/4)) > 0.1


def test_session_default_accounting_follows_the_budget() -> None:
    """δ > 0: the concentrated filter by default; pure ε: basic composition."""
    frame = dpc.demo_path("people.csv")
    metadata = dpc.Metadata.from_yaml(dpc.demo_path("people.yaml"))
    approx = dpc.Session.from_data(frame, metadata=metadata, budget=BUDGET)
    assert isinstance(approx._filter, ConcentratedFilter)
    pure = dpc.Session.from_data(frame, metadata=metadata, budget=Budget(1))
    assert isinstance(pure._filter, PrivacyFilter)
    basic = dpc.Session.from_data(frame, metadata=metadata, budget=BUDGET, accounting="basic")
    assert isinstance(basic._filter, PrivacyFilter)


def test_concentrated_event_round_trip_and_views() -> None:
    event = ConcentratedEvent(Fraction(1, 100), Fraction(1, 10**7), Fraction(1, 2), 1e-6)
    assert PrivacyEvent.from_dict(event.to_dict()) == event
    assert event.zcdp_cost() is None  # δ > 0: only approximately zCDP
    assert event.approx_zcdp_cost() == (ZCDP(Fraction(1, 100)), Fraction(1, 10**7))
    assert event.approx_cost() == ApproxDP(Fraction(1, 2), 1e-6)
    assert ApproxEvent(1, 1e-6).approx_zcdp_cost() == (ZCDP(Fraction(1, 2)), Fraction(1e-6))
    assert zcdp_epsilon(Fraction(0), Fraction(1, 10)) == 0
