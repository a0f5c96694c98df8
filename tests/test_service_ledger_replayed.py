"""The one-statement reservation on concentrated PostgreSQL budgets loses no update.

:mod:`dpcurator.service.ledger.replayed` admits an event on the handle's cached replays before
locking anything, and one function call writes the charge only if, under the rows' locks, the
budgets' histories are still the ones replayed. Two handles (two worker processes' ledgers), both
already holding fresh replays, race one more request than the dataset's concentrated cap admits:
exactly the admissible number must be charged, most of them by the one-statement path.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from fractions import Fraction

import pytest

from dpcurator.accounting.concentrated import ConcentratedFilter
from dpcurator.accounting.events import ZCDPEvent
from dpcurator.core.measures import ApproxDP
from dpcurator.errors import BudgetExceededError
from dpcurator.service.ledger import Ledger
from dpcurator.service.ledger.replayed import ReplayedReservations
from tests._service_helpers import event_request, race
from tests.service_fixtures import fresh_postgres_url, ledger_with_analysts, postgres_server

__all__ = ["postgres_server"]

pytestmark = pytest.mark.postgres

CAP = ApproxDP(1, Fraction(1, 10**6))
GRANT = ApproxDP(10, Fraction(1, 10**3))  # far above the cap: the cap binds
EVENT = ZCDPEvent(Fraction(1, 1000))


def _admissible(budget: ApproxDP) -> int:
    """How many copies of EVENT the library's filter admits on ``budget``."""
    account = ConcentratedFilter(budget)
    admitted = 0
    while True:
        try:
            account.reserve(EVENT).commit()
        except BudgetExceededError:
            return admitted
        admitted += 1


@pytest.fixture
def workers(postgres_server: str) -> Iterator[tuple[Ledger, Ledger]]:
    """Two handles on one fresh PostgreSQL ledger whose cap and grants are concentrated."""
    url = fresh_postgres_url(postgres_server)
    first = Ledger(url)
    ledger_with_analysts(first, grant=GRANT, cap=CAP, analysts=2, accounting=None)
    second = Ledger(url)
    yield first, second
    first.close()
    second.close()


def test_racing_one_statement_reservations_charge_exactly_what_the_cap_admits(
    workers: tuple[Ledger, Ledger], monkeypatch: pytest.MonkeyPatch
) -> None:
    admissible = _admissible(CAP)
    assert 10 < admissible < 40  # a race of a few dozen threads
    written = []
    lock = threading.Lock()
    reserve = ReplayedReservations.reserve

    def counted(self: ReplayedReservations, *args: object, **kwargs: object) -> object:
        done = reserve(self, *args, **kwargs)  # type: ignore[arg-type]
        if done is not None:
            with lock:
                written.append(done[0])
        return done

    monkeypatch.setattr(ReplayedReservations, "reserve", counted)
    warm_up = [(worker, f"ana_{i}") for worker in workers for i in range(2)]
    for worker, analyst in warm_up:  # every handle knows the budgets and has replayed them
        worker.reserve(event_request(analyst, EVENT))
    racing = admissible - len(warm_up) + 1  # one more than fits
    outcomes = race(
        lambda i: workers[i % 2].reserve(event_request(f"ana_{i // 2 % 2}", EVENT)),
        threads=racing,
    )
    assert outcomes.count("ok") == admissible - len(warm_up)
    assert outcomes.count("refused") == 1
    assert len(written) > racing // 2  # the one-statement path wrote most charges
    fresh = ConcentratedFilter(CAP)
    for _ in range(admissible):
        fresh.reserve(EVENT).commit()
    for worker in workers:
        assert worker.cap_view("d").spent == fresh.spent()
