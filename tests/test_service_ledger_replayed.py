"""The one-statement reservation on concentrated PostgreSQL budgets loses no update.

:mod:`dpcurator.service.ledger.replayed` admits an event on the handle's cached replays before
locking anything, and one function call writes the charge only if, under the rows' locks, the
budgets' histories are still the ones replayed. Four handles (four worker processes' ledgers),
each holding a replay of the same history with one event left in the dataset's concentrated cap,
each ask for that event while the test holds the dataset row's lock; once it lets go, exactly one
of them must be charged (the others then see its charge: a lost update would charge all four).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from fractions import Fraction

import pytest
from sqlalchemy import Connection, create_engine, text

from dpcurator.accounting.concentrated import ConcentratedFilter
from dpcurator.accounting.events import ZCDPEvent
from dpcurator.core.measures import ApproxDP
from dpcurator.errors import BudgetExceededError
from dpcurator.service.ledger import Ledger
from dpcurator.service.ledger.replayed import ReplayedReservations
from tests._service_helpers import event_request, library_admits
from tests.service_fixtures import fresh_postgres_url, ledger_with_analysts, postgres_server

__all__ = ["postgres_server"]

pytestmark = pytest.mark.postgres

CAP = ApproxDP(1, Fraction(1, 10**6))
GRANT = ApproxDP(10, Fraction(1, 10**3))  # far above the cap: the cap binds
EVENT = ZCDPEvent(Fraction(1, 1000))


HANDLES = 4


@pytest.fixture
def handles(postgres_server: str) -> Iterator[list[Ledger]]:
    """Four handles on one fresh PostgreSQL ledger whose cap and grants (one analyst each,
    ``ana_0`` ...) are concentrated."""
    url = fresh_postgres_url(postgres_server)
    opened = [Ledger(url)]
    ledger_with_analysts(opened[0], grant=GRANT, cap=CAP, analysts=HANDLES, accounting=None)
    opened += [Ledger(url) for _ in range(HANDLES - 1)]
    yield opened
    for ledger in opened:
        ledger.close()


def _wait_for_lock_waiters(conn: Connection, count: int) -> None:
    """Poll (no sleep) until ``count`` sessions of this database wait for a row lock."""
    waiting = text(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND datname = current_database()"
    )
    deadline = time.monotonic() + 30
    while conn.execute(waiting).scalar_one() < count:
        assert time.monotonic() < deadline, "the reservations never queued on the lock"


def test_reservations_queued_on_the_dataset_lock_charge_only_the_last_admissible_event(
    handles: list[Ledger], monkeypatch: pytest.MonkeyPatch
) -> None:
    admissible = library_admits(CAP, EVENT)
    assert HANDLES < admissible < 100
    written = []
    reserve = ReplayedReservations.reserve

    def counted(self: ReplayedReservations, *args: object, **kwargs: object) -> object:
        done = reserve(self, *args, **kwargs)  # type: ignore[arg-type]
        if done is not None:
            written.append(done[0])
        return done

    monkeypatch.setattr(ReplayedReservations, "reserve", counted)
    for i, ledger in enumerate(handles):  # each handle learns the budgets
        ledger.reserve(event_request(f"ana_{i}", EVENT))
    for _ in range(admissible - HANDLES - 1):  # then one event is left
        handles[0].reserve(event_request("ana_0", EVENT))
    assert len(written) == admissible - 1  # all by the one-statement path
    for i, ledger in enumerate(handles):  # every handle replays the same, current history
        ledger.cap_view("d")
        ledger.grant_view(f"ana_{i}", "d")
    engine = create_engine(handles[0].url)
    try:
        with engine.connect() as blocker:
            blocker.execute(text("SELECT 1 FROM datasets WHERE id = 'd' FOR UPDATE"))
            outcomes: list[str] = []

            def attempt(i: int) -> None:
                try:
                    handles[i].reserve(event_request(f"ana_{i}", EVENT))
                    outcomes.append("ok")
                except BudgetExceededError:
                    outcomes.append("refused")

            threads = [threading.Thread(target=attempt, args=(i,)) for i in range(HANDLES)]
            for thread in threads:
                thread.start()
            _wait_for_lock_waiters(blocker, HANDLES)
            blocker.commit()  # lets go of the dataset row
            for thread in threads:
                thread.join()
    finally:
        engine.dispose()
    assert sorted(outcomes) == ["ok"] + ["refused"] * (HANDLES - 1)
    assert len(written) == admissible
    fresh = ConcentratedFilter(CAP)
    for _ in range(admissible):
        fresh.reserve(EVENT).commit()
    for ledger in handles:
        assert ledger.cap_view("d").spent == fresh.spent()
