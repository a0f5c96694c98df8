"""The per-handle cache of concentrated budgets' replays (issue 26 item 3) decides exactly as a
full replay: seeded random reservations and refunds spread over two ledger handles on one
SQLite file (two worker processes, each with its own cache), checked at every step against the
library filter replaying the live events in charge order (exact Fractions, no tolerance)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from dpcurator.accounting.concentrated import ConcentratedFilter
from dpcurator.accounting.events import ApproxEvent, PrivacyEvent, PureEvent, ZCDPEvent
from dpcurator.core.measures import ApproxDP
from dpcurator.errors import BudgetExceededError
from dpcurator.service.ledger import Ledger
from tests._service_helpers import event_request
from tests.service_fixtures import ledger_with_analysts

# Small budgets, so that refusals come within a few dozen steps.
GRANT = ApproxDP(Fraction(1, 2), Fraction(1, 10**6))
CAP = ApproxDP(Fraction(4, 5), Fraction(1, 10**6))
ANALYSTS = ("ana_0", "ana_1")
EVENTS: tuple[PrivacyEvent, ...] = (
    PureEvent(Fraction(1, 20)),
    PureEvent(Fraction(3, 20)),
    ZCDPEvent(Fraction(1, 500)),
    ApproxEvent(Fraction(1, 25), Fraction(1, 10**8)),
)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[tuple[Ledger, Ledger]]:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    first = Ledger(url)
    ledger_with_analysts(first, grant=GRANT, cap=CAP, analysts=len(ANALYSTS), accounting=None)
    second = Ledger(url)
    yield first, second
    first.close()
    second.close()


def _fits(budget: ApproxDP, events: list[PrivacyEvent], event: PrivacyEvent) -> bool:
    """The full replay's decision: the filter after ``events`` (in order) admits ``event``."""
    account = ConcentratedFilter(budget)
    account.replay(events)
    try:
        account.reserve(event)
    except BudgetExceededError:
        return False
    return True


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cached_decisions_equal_full_replays_across_two_workers(
    workers: tuple[Ledger, Ledger], seed: int
) -> None:
    rng = random.Random(seed)
    live: dict[int, tuple[str, PrivacyEvent]] = {}  # charge id -> (analyst, event)
    reserved: list[int] = []  # live charges still refundable
    outcomes = {"admitted": 0, "refused": 0, "refunded": 0}
    for _ in range(60):
        ledger = rng.choice(workers)
        if reserved and rng.random() < 0.2:  # a refund, by either worker
            charge_id = reserved.pop(rng.randrange(len(reserved)))
            ledger.cancel(charge_id)
            del live[charge_id]
            outcomes["refunded"] += 1
            continue
        analyst, event = rng.choice(ANALYSTS), rng.choice(EVENTS)
        history = [live[i] for i in sorted(live)]
        expected = _fits(GRANT, [e for a, e in history if a == analyst], event) and _fits(
            CAP, [e for _, e in history], event
        )
        try:
            charge_id = ledger.reserve(event_request(analyst, event)).charge_id
        except BudgetExceededError:
            assert not expected, "refused what a full replay admits"
            outcomes["refused"] += 1
            continue
        assert expected, "admitted what a full replay refuses"
        live[charge_id] = (analyst, event)
        reserved.append(charge_id)
        outcomes["admitted"] += 1
        # Both workers' views (their caches, extended) equal the full replay's, exactly.
        history = [live[i] for i in sorted(live)]
        cap = ConcentratedFilter(CAP)
        cap.replay([e for _, e in history])
        for worker in workers:
            assert worker.cap_view("d").spent == cap.spent()
    # The sequence exercised every branch: admissions, refusals and refunds.
    assert min(outcomes.values()) > 0, outcomes
