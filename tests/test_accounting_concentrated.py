"""ConcentratedFilter: mixed pure / Gaussian / (ε, δ) events under one fully adaptive filter."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dpcurator.accounting import (
    ApproxEvent,
    Budget,
    ConcentratedEvent,
    ConcentratedFilter,
    GaussianEvent,
    PrivacyEvent,
    PrivacyFilter,
    PureEvent,
)
from dpcurator.accounting.concentrated import largest_rho, zcdp_epsilon
from dpcurator.core.measures import ZCDP, ApproxDP
from dpcurator.errors import BudgetExceededError, ParameterError


def test_mixed_sequence_total_by_hand() -> None:
    """Budget (1, 1e-6), pure share 1/4, event δ share 1/2: parts ξ = 1/4, δ_events = 5e-7 and
    ρ = largest ρ with ε(ρ, 5e-7) <= 3/4 - ln(1/(1 - 5e-7)) (about 0.0105). The sequence: a pure
    0.2 (ξ side: its ρ, 0.02, does not fit), a Gaussian σ = 40 on Δ₂ = 1 (ρ side only), 20 pure
    0.01 (ρ side: 5e-5 is a smaller fraction of ρ than 0.01 of ξ) and an (ε = 0.04, δ = 2e-7)
    partition selection (ρ side: 0.0008/0.0105 < 0.04/0.25)."""
    flt = ConcentratedFilter(Budget(1, Fraction(1, 10**6)))
    delta_events = Fraction(1, 2 * 10**6)
    left = Fraction(3, 4) - Fraction(-math.log1p(-5e-7))
    assert flt.limits.xi == Fraction(1, 4)
    assert flt.limits.delta == delta_events
    assert abs(float(flt.limits.rho) - float(largest_rho(left, delta_events))) < 1e-12
    events: list[PrivacyEvent] = [PureEvent(Fraction(1, 5)), GaussianEvent(40, 1)]
    events += [PureEvent(Fraction(1, 100))] * 20
    events.append(ApproxEvent(Fraction(1, 25), Fraction(1, 5 * 10**6)))
    for event in events:
        flt.reserve(event).commit()
    native = flt.spent_native()
    rho = Fraction(1, 2 * 40**2) + 20 * Fraction(1, 100) ** 2 / 2 + Fraction(1, 25) ** 2 / 2
    assert native.xi == Fraction(1, 5)
    assert native.rho == rho
    assert native.delta == Fraction(1, 5 * 10**6)
    spent = flt.spent()
    assert isinstance(spent, ApproxDP)
    by_hand = (
        0.2 + -math.log1p(-2e-7) + ZCDP(rho).to_approx(delta_events).epsilon
    )  # ξ + conditioning + conversion
    assert float(spent.epsilon) == pytest.approx(float(by_hand), rel=1e-9)
    assert spent.delta == Fraction(1, 5 * 10**6) + delta_events
    assert spent.epsilon < 1


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


def test_basic_side_is_exact_at_its_boundary() -> None:
    flt = ConcentratedFilter(Budget(2, 1e-6), pure_share=Fraction(1, 2))
    flt.reserve(PureEvent(1)).commit()  # 1 on ξ (ε²/2 = 1/2 is far beyond ρ)
    assert flt.spent_native().xi == 1
    with pytest.raises(BudgetExceededError):
        flt.reserve(PureEvent(Fraction(1) + Fraction(1, 10**9)))


def test_cancel_frees_the_charge_and_replay_rebuilds_it() -> None:
    flt = ConcentratedFilter(ZCDP(1))
    reservation = flt.reserve(GaussianEvent(1, 1))
    reservation.cancel()
    assert flt.spent() == ZCDP(0)
    history = [GaussianEvent(2, 1), PureEvent(Fraction(1, 2))]
    flt.replay(history)
    assert flt.spent() == ZCDP(Fraction(1, 8) + Fraction(1, 8))
    assert flt.events() == tuple(history)


def test_many_small_queries_fit_where_basic_composition_refuses() -> None:
    budget = Budget(1, 1e-6)
    concentrated = ConcentratedFilter(budget, pure_share=0)
    basic = PrivacyFilter(budget)
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
        ConcentratedFilter(Budget(1, 1e-6), pure_share=1)


def test_concentrated_event_round_trip_and_views() -> None:
    event = ConcentratedEvent(Fraction(1, 100), Fraction(1, 10**7), Fraction(1, 2), 1e-6)
    assert PrivacyEvent.from_dict(event.to_dict()) == event
    assert event.zcdp_cost() is None  # δ > 0: only approximately zCDP
    assert event.approx_zcdp_cost() == (ZCDP(Fraction(1, 100)), Fraction(1, 10**7))
    assert event.approx_cost() == ApproxDP(Fraction(1, 2), 1e-6)
    assert ApproxEvent(1, 1e-6).approx_zcdp_cost() == (ZCDP(Fraction(1, 2)), Fraction(1e-6))
    assert zcdp_epsilon(Fraction(0), Fraction(1, 10)) == 0
