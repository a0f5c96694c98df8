"""No overspend of concentrated ledger budgets under concurrency (issue 18 follow-up).

Concentrated budgets (the default for δ > 0) take no fast reservation path: each reservation
replays the budget's events through its filter inside the write transaction, from each handle's
cache (service/ledger/accounts.py). 100 reservations race from two ledger handles (two worker
processes' ledgers) on one database, for two analysts whose grants and the dataset's cap are all
concentrated; afterwards a replay from scratch of the admitted events, in ledger order, must
admit every one of them, refuse every request that was refused, and agree with the ledger's
views. Run on a SQLite file and on PostgreSQL (``-m postgres``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from fractions import Fraction

import pytest

from dpcurator.accounting.concentrated import ConcentratedFilter
from dpcurator.accounting.events import ConcentratedEvent, PrivacyEvent, PureEvent, ZCDPEvent
from dpcurator.core.measures import ApproxDP
from dpcurator.errors import BudgetExceededError
from dpcurator.service.ledger import Ledger
from dpcurator.service.ledger.accounts import charge_event
from dpcurator.service.ledger.budgets import cost_of
from tests._service_helpers import event_request, ledger_url, race
from tests.service_fixtures import ledger_with_analysts, postgres_server

__all__ = ["ledger_url", "postgres_server"]

GRANT = ApproxDP(1, Fraction(1, 10**6))  # about 45 of the events below each
CAP = ApproxDP(1, Fraction(1, 10**5))  # about 56 in all: the cap binds before both grants
EVENTS: tuple[PrivacyEvent, ...] = (
    ZCDPEvent(Fraction(1, 2000)),
    PureEvent(Fraction(1, 100)),
    ConcentratedEvent(Fraction(1, 2000), 0, Fraction(1, 20), Fraction(1, 10**8)),
)
REQUESTS = 100


def _analyst(i: int) -> str:
    return "ana_1" if i % 3 == 2 else "ana_0"


def _admits(account: ConcentratedFilter, event: PrivacyEvent) -> bool:
    """Whether ``account`` admits ``event`` now (asked on a copy: nothing is spent)."""
    try:
        account.copy().reserve(event)
    except BudgetExceededError:
        return False
    return True


@pytest.fixture
def workers(ledger_url: str) -> Iterator[tuple[Ledger, Ledger]]:
    """Two handles on one ledger database, each with its own replay cache."""
    first = Ledger(ledger_url)
    ledger_with_analysts(first, grant=GRANT, cap=CAP, analysts=2, accounting=None)
    second = Ledger(ledger_url)
    yield first, second
    first.close()
    second.close()


def test_racing_reservations_admit_exactly_what_the_filters_admit(
    workers: tuple[Ledger, Ledger], ledger_url: str
) -> None:
    admitted: list[int] = []
    lock = threading.Lock()

    def attempt(i: int) -> None:
        request = event_request(_analyst(i), EVENTS[i % len(EVENTS)])
        workers[i % 2].reserve(request)
        with lock:
            admitted.append(i)

    outcomes = race(attempt, threads=REQUESTS)
    assert len(outcomes) == REQUESTS
    assert 0 < outcomes.count("ok") < REQUESTS
    fresh = Ledger(ledger_url)
    try:
        charges = sorted(fresh.history(dataset_id="d", limit=10 * REQUESTS), key=lambda c: c.id)
        assert len(charges) == len(admitted)
        grants = {a: ConcentratedFilter(GRANT) for a in ("ana_0", "ana_1")}
        cap = ConcentratedFilter(CAP)
        for charge in charges:  # a replay from scratch admits every admitted event, in order
            event = charge_event(charge.events, cost_of(charge.epsilon, charge.delta))
            grants[charge.principal_id].reserve(event).commit()
            cap.reserve(event).commit()
        for i in set(range(REQUESTS)) - set(admitted):  # and refuses every refused request
            event = EVENTS[i % len(EVENTS)]
            assert not (_admits(grants[_analyst(i)], event) and _admits(cap, event))
        for ledger in (*workers, fresh):
            for analyst, reference in grants.items():
                view = ledger.grant_view(analyst, "d")
                assert view is not None
                assert view.spent == reference.spent()
            assert ledger.cap_view("d").spent == cap.spent()
    finally:
        fresh.close()
