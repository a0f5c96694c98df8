"""Concentrated ledger budgets: the default for δ > 0, and the per-handle cache of replayed
filters (service/ledger/accounts.py) agrees with a full replay across two handles on one file."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from dpcurator.accounting.concentrated import ConcentratedFilter
from dpcurator.accounting.events import (
    ApproxEvent,
    ConcentratedEvent,
    PrivacyEvent,
    PureEvent,
    ZCDPEvent,
)
from dpcurator.accounting.filter import Reservation
from dpcurator.core.measures import ApproxDP
from dpcurator.service.ledger import Ledger
from dpcurator.service.ledger.budgets import BudgetView
from dpcurator.service.ledger.charges import ChargeRequest
from tests._service_helpers import event_request
from tests.service_fixtures import ledger_with_analysts

GRANT = ApproxDP(1, Fraction(1, 10**6))
CAP = ApproxDP(3, Fraction(1, 10**5))
EVENTS: tuple[PrivacyEvent, ...] = (
    ZCDPEvent(Fraction(1, 10**4)),
    PureEvent(Fraction(1, 100)),
    ConcentratedEvent(Fraction(1, 10**4), 0, Fraction(1, 50), Fraction(1, 10**8)),
    ApproxEvent(Fraction(1, 100), Fraction(1, 10**8)),
)


def _request(event: PrivacyEvent) -> ChargeRequest:
    return event_request("ana_0", event)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.sqlite3'}"


@pytest.fixture
def workers(url: str) -> Iterator[tuple[Ledger, Ledger]]:
    """Two handles on one SQLite file (two worker processes' ledgers), each with its cache."""
    first = Ledger(url)
    ledger_with_analysts(first, grant=GRANT, cap=CAP, accounting=None)
    second = Ledger(url)
    yield first, second
    first.close()
    second.close()


def _same(view: BudgetView | None, reference: ConcentratedFilter) -> None:
    assert view is not None
    assert view.native is not None
    assert (view.spent, view.native.spent) == (reference.spent(), reference.spent_native())


def test_new_budgets_with_delta_are_concentrated_and_pure_ones_basic(url: str) -> None:
    ledger = Ledger(url)
    try:
        ledger_with_analysts(ledger, grant=GRANT, cap=ApproxDP(3, 0), accounting=None)
        assert ledger.cap_view("d").accounting == "basic"
        view = ledger.grant_view("ana_0", "d")
        assert view is not None
        assert view.accounting == "concentrated"
        ledger.set_grant("ana_0", "d", ApproxDP(2, Fraction(1, 10**6)), by="own_1")
        view = ledger.grant_view("ana_0", "d")  # an existing grant keeps its accounting
        assert view is not None
        assert view.accounting == "concentrated"
    finally:
        ledger.close()


def test_cached_replays_agree_with_full_replays_across_two_workers(
    workers: tuple[Ledger, Ledger], url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Charges alternate between two handles and one old charge is cancelled meanwhile; every
    third step both handles' views (cached, incremental) equal a fresh handle's (empty cache)
    and the library filter's after the live events; and a reservation replays only the charges
    its handle has not read yet, per budget (the grant's and the cap's), unless a cancellation
    made its cache stale."""
    replays = []
    reserve = ConcentratedFilter.reserve

    def counted(self: ConcentratedFilter, event: PrivacyEvent, **options: str) -> Reservation:
        replays.append(event)
        return reserve(self, event, **options)

    monkeypatch.setattr(ConcentratedFilter, "reserve", counted)
    live: dict[int, PrivacyEvent] = {}
    unseen = [0, 0]  # charges each handle has not replayed yet
    stale = [False, False]  # a cancellation each handle has not read yet
    for step in range(12):
        w = step % 2
        replays.clear()
        event = EVENTS[step % len(EVENTS)]
        live[workers[w].reserve(_request(event)).charge_id] = event
        if not stale[w]:  # one replay per unseen charge, and the new event, per budget
            assert len(replays) == 2 * (unseen[w] + 1), step
        unseen[w], stale[w] = 0, False  # its own charge is cached once committed
        unseen[1 - w] += 1
        if step == 5:
            cancelled = min(live)
            workers[1].cancel(cancelled)
            del live[cancelled]
            stale = [True, True]
        if step % 3 != 2:
            continue
        fresh = Ledger(url)
        try:
            for ledger in (*workers, fresh):
                grant = ConcentratedFilter(GRANT)
                grant.replay([live[i] for i in sorted(live)])
                _same(ledger.grant_view("ana_0", "d"), grant)
                cap = ConcentratedFilter(CAP)
                cap.replay([live[i] for i in sorted(live)])
                _same(ledger.cap_view("d"), cap)
        finally:
            fresh.close()
        unseen, stale = [0, 0], [False, False]
