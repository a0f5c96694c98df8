"""Privacy filter semantics: atomic charge-before-release, refusals change nothing, threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from fractions import Fraction

import pytest

from dpcurator.accounting.accountants import BasicAccountant, ZCDPAccountant
from dpcurator.accounting.accountants_advanced import AdvancedCompositionAccountant
from dpcurator.accounting.accountants_pld import PLDAccountant
from dpcurator.accounting.budget import Budget
from dpcurator.accounting.events import (
    ApproxEvent,
    GaussianEvent,
    LaplaceEvent,
    PrivacyEvent,
    PureEvent,
)
from dpcurator.accounting.filter import BudgetFilter, PrivacyFilter, PrivacyOdometer
from dpcurator.core.measures import ZCDP, ApproxDP, Measure, PureDP
from dpcurator.errors import BudgetExceededError, InternalInvariantError, ParameterError
from tests.concurrency import run_in_threads

TENTH = PureEvent(Fraction(1, 10))


def test_exact_fit_then_refusal_changes_nothing() -> None:
    ledger = PrivacyFilter(Budget(1))
    for _ in range(10):
        ledger.reserve(TENTH, description="count")
    assert ledger.spent() == PureDP(1)
    assert ledger.remaining() == PureDP(0)
    before = ledger.events()
    with pytest.raises(BudgetExceededError) as info:
        ledger.reserve(PureEvent(Fraction(1, 1000)))
    assert info.value.requested == PureDP(Fraction(1, 1000))
    assert info.value.remaining == PureDP(0)
    assert ledger.events() == before
    assert ledger.spent() == PureDP(1)


def test_error_carries_requested_and_remaining() -> None:
    ledger = PrivacyFilter(Budget(1, 1e-6))
    ledger.reserve(LaplaceEvent(2, 1))  # ε = 1/2
    with pytest.raises(BudgetExceededError, match="Nothing was charged") as info:
        ledger.reserve(ApproxEvent(Fraction(3, 4), 1e-7))
    assert info.value.requested == ApproxDP(Fraction(3, 4), 1e-7)
    assert info.value.remaining == ApproxDP(Fraction(1, 2), 1e-6)
    assert len(ledger.events()) == 1


def test_invalid_event_changes_nothing() -> None:
    ledger = PrivacyFilter(Budget(1))
    with pytest.raises(ParameterError, match="pure ε cost"):
        ledger.reserve(GaussianEvent(1, 1))
    with pytest.raises(ParameterError, match=r"'event' parameter of PrivacyFilter\.reserve"):
        ledger.reserve(PureDP(1))  # type: ignore[arg-type]
    assert ledger.events() == ()


def test_cancel_only_before_commit() -> None:
    ledger = PrivacyFilter(Budget(Fraction(3, 10)))
    first = ledger.reserve(TENTH)
    second = ledger.reserve(TENTH)
    second.cancel()  # the engine failed before noise was drawn
    second.cancel()  # idempotent
    assert second.state == "cancelled"
    assert ledger.events() == (TENTH,)
    first.commit()
    with pytest.raises(InternalInvariantError, match="charge is final"):
        first.cancel()
    assert ledger.spent() == PureDP(Fraction(1, 10))
    with pytest.raises(InternalInvariantError, match="cancelled already"):
        second.commit()


class SlowAccountant(BasicAccountant):
    """Widens the check-then-record window so that a missing lock would overspend."""

    def fits(
        self, events: Iterable[PrivacyEvent], new_event: PrivacyEvent, budget: Measure
    ) -> bool:
        checked = list(events)
        time.sleep(0.002)
        return super().fits(checked, new_event, budget)


def test_concurrent_reservations_never_overspend() -> None:
    ledger = PrivacyFilter(Budget(1), SlowAccountant())
    barrier = threading.Barrier(64)
    outcomes: list[bool] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        try:
            ledger.reserve(TENTH)
            ok = True
        except BudgetExceededError:
            ok = False
        with lock:
            outcomes.append(ok)

    run_in_threads(worker, 64)
    assert outcomes.count(True) == 10
    assert outcomes.count(False) == 54
    assert ledger.spent() == PureDP(1)


def test_zcdp_filter_and_protocol() -> None:
    ledger: BudgetFilter = PrivacyFilter(ZCDP(Fraction(1, 2)), ZCDPAccountant())
    ledger.reserve(GaussianEvent(1, 1))  # ρ = 1/2
    assert ledger.remaining() == ZCDP(0)
    with pytest.raises(BudgetExceededError):
        ledger.reserve(GaussianEvent(100, 1))


def test_approx_budget_with_zcdp_accountant() -> None:
    ledger = PrivacyFilter(Budget(1, 1e-6), ZCDPAccountant())
    count = 0
    while True:
        try:
            ledger.reserve(GaussianEvent(20, 1))
        except BudgetExceededError:
            break
        count += 1
    spent = ledger.spent()
    assert isinstance(spent, ApproxDP)
    assert spent.epsilon <= 1
    assert ZCDPAccountant().total([GaussianEvent(20, 1)] * (count + 1), 1e-6).epsilon > 1


def test_non_adaptive_accountants_need_explicit_promise() -> None:
    with pytest.raises(ParameterError, match="fixed_sequence=True"):
        PrivacyFilter(Budget(1, 1e-5), AdvancedCompositionAccountant(1e-6))
    with pytest.raises(ParameterError, match="fixed_sequence=True"):
        PrivacyFilter(Budget(1, 1e-5), PLDAccountant())
    ledger = PrivacyFilter(
        Budget(1, 1e-5), AdvancedCompositionAccountant(1e-6), fixed_sequence=True
    )
    ledger.reserve(TENTH)
    with pytest.raises(ParameterError, match="'budget' parameter of PrivacyFilter"):
        PrivacyFilter(1.0)  # type: ignore[arg-type]


def test_odometer_tracks_spend() -> None:
    odometer = PrivacyOdometer()
    for _ in range(30):
        odometer.reserve(TENTH)
    assert odometer.spent() == PureDP(3)
    zcdp = PrivacyOdometer(ZCDPAccountant())
    zcdp.reserve(GaussianEvent(1, 1))
    zcdp.reserve(TENTH).cancel()
    assert zcdp.spent() == ZCDP(Fraction(1, 2))
    assert zcdp.events() == (GaussianEvent(1, 1),)
