"""The ledger stores events and accounts concentrated budgets by replaying them (issue 18 §1):
old ledgers migrate with their totals unchanged, Gaussian releases compose in zCDP, the filter's
decisions equal the library's, and concurrent reservations never overspend (SQLite and
PostgreSQL)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest

from dpcurator.accounting.events import ConcentratedEvent, ZCDPEvent
from dpcurator.core.measures import ZCDP, ApproxDP
from dpcurator.errors import BudgetExceededError, ParameterError
from dpcurator.service.errors import ConflictError
from dpcurator.service.ledger import Ledger
from dpcurator.service.ledger.budgets import dataset_budget, grant_budget
from tests._service_helpers import event_request, ledger_url, library_admits, race
from tests.service_fixtures import ledger_with_analysts, postgres_server

__all__ = ["ledger_url", "postgres_server"]

REPO = Path(__file__).resolve().parents[1]
#: The last commit whose ledger stored (ε, δ) sums only (no events table, no accounts).
OLD_LEDGER_COMMIT = "c09b93b"
BUDGET = ApproxDP(1, Fraction(1, 10**6))
#: A Gaussian count calibrated to (ε, δ) = (0.02, 1e-8): also 1e-4-zCDP.
GAUSSIAN = ConcentratedEvent(Fraction(1, 10**4), 0, Fraction(1, 50), Fraction(1, 10**8))


@pytest.fixture
def ledger(ledger_url: str) -> Iterator[Ledger]:
    opened = Ledger(ledger_url)
    yield opened
    opened.close()


CAP = ApproxDP(100, Fraction(1, 10**3))


def _concentrated_cap(ledger: Ledger) -> None:
    """Make the dataset's cap concentrated (a ρ-only event needs it, as well as its grant)."""
    ledger.update_dataset("d", cap=CAP, replay_enabled=None, by="own_1", accounting="concentrated")


def _concentrated_analyst(ledger: Ledger, budget: ApproxDP | ZCDP = BUDGET) -> str:
    (analyst,) = ledger_with_analysts(ledger, grant=ApproxDP(1, 0), cap=CAP)
    _concentrated_cap(ledger)
    ledger.set_grant(analyst, "d", budget, by="own_1", accounting="concentrated")
    return analyst


def test_a_concentrated_grant_admits_what_the_library_filter_admits(ledger: Ledger) -> None:
    """Gaussian releases compose in zCDP: 145 of them fit (ε, δ) = (1, 1e-6) where basic
    composition admits 50, exactly the count of the library's ConcentratedFilter."""
    analyst = _concentrated_analyst(ledger)
    expected = library_admits(BUDGET, GAUSSIAN)
    assert expected > 2 * 50
    for _ in range(expected):
        ledger.reserve(event_request(analyst, GAUSSIAN))
    with pytest.raises(BudgetExceededError, match="analyst's privacy budget"):
        ledger.reserve(event_request(analyst, GAUSSIAN))
    view = ledger.grant_view(analyst, "d")
    assert view is not None
    assert view.accounting == "concentrated"
    assert view.native is not None
    assert view.native.spent.rho <= view.native.limits.rho
    assert view.spent.fits_within(BUDGET)  # type: ignore[arg-type]
    # The (ε, δ) running totals still sum the charges' (ε, δ) costs, for the record.
    assert ledger.charged_total("d") == ApproxDP(Fraction(expected, 50), Fraction(expected, 10**8))


def test_rho_costs_need_a_concentrated_budget(ledger: Ledger) -> None:
    """A ρ-only event is refused free on a basic grant or cap, and charged to a ρ grant."""
    (basic,) = ledger_with_analysts(ledger, grant=BUDGET, cap=CAP)
    ledger.create_principal("ana_rho", "rho analyst", "analyst")
    ledger.set_grant("ana_rho", "d", ZCDP(Fraction(1, 10)), by="own_1")
    with pytest.raises(ParameterError, match=r"global privacy budget .* only a ρ"):
        ledger.reserve(event_request("ana_rho", ZCDPEvent(Fraction(1, 100))))
    _concentrated_cap(ledger)
    with pytest.raises(ParameterError, match=r"analyst's privacy budget .* only a ρ"):
        ledger.reserve(event_request(basic, ZCDPEvent(Fraction(1, 100))))
    assert ledger.count_charges("d") == 0
    for _ in range(10):
        ledger.reserve(event_request("ana_rho", ZCDPEvent(Fraction(1, 100))))
    with pytest.raises(BudgetExceededError) as refused:
        ledger.reserve(event_request("ana_rho", ZCDPEvent(Fraction(1, 100))))
    assert refused.value.remaining == ZCDP(0)
    view = ledger.grant_view("ana_rho", "d")
    assert view is not None
    assert (view.total, view.spent) == (ZCDP(Fraction(1, 10)), ZCDP(Fraction(1, 10)))


def test_a_concentrated_cap_binds_owners_and_analysts(ledger: Ledger) -> None:
    """The cap replays every charge on the dataset (the PostgreSQL one-statement path and the
    SQLite raw path hand over to the replay), and an analyst's refusal hides the cap."""
    (analyst,) = ledger_with_analysts(ledger, grant=CAP, cap=BUDGET)
    ledger.update_dataset(
        "d", cap=BUDGET, replay_enabled=None, by="own_1", accounting="concentrated"
    )
    owner_event = replace(event_request("own_1", GAUSSIAN), charge_grant=False)
    expected = library_admits(BUDGET, GAUSSIAN)
    for i in range(expected):
        ledger.reserve(owner_event if i % 2 else event_request(analyst, GAUSSIAN))
    with pytest.raises(BudgetExceededError, match="global") as refused:
        ledger.reserve(event_request(analyst, GAUSSIAN))
    assert refused.value.remaining is None
    with pytest.raises(BudgetExceededError, match="global"):
        ledger.reserve(owner_event)
    assert ledger.cap_view("d").native is not None


def test_a_cancelled_charge_leaves_the_replay(ledger: Ledger) -> None:
    analyst = _concentrated_analyst(ledger, ZCDP(Fraction(1, 10)))
    kept = ledger.reserve(event_request(analyst, ZCDPEvent(Fraction(1, 20))))
    refunded = ledger.reserve(event_request(analyst, ZCDPEvent(Fraction(1, 20))))
    ledger.cancel(refunded.charge_id)
    ledger.complete(kept.charge_id, {})
    view = ledger.grant_view(analyst, "d")
    assert view is not None
    assert view.spent == ZCDP(Fraction(1, 20))
    ledger.reserve(event_request(analyst, ZCDPEvent(Fraction(1, 20))))


def test_a_budget_below_its_history_is_refused(ledger: Ledger) -> None:
    analyst = _concentrated_analyst(ledger, ZCDP(Fraction(1, 10)))
    ledger.reserve(event_request(analyst, ZCDPEvent(Fraction(1, 20))))
    with pytest.raises(ConflictError, match="do not fit"):
        ledger.set_grant(analyst, "d", ZCDP(Fraction(1, 40)), by="own_1")
    view = ledger.grant_view(analyst, "d")
    assert view is not None
    assert view.total == ZCDP(Fraction(1, 10))
    with pytest.raises(ParameterError, match="delta > 0"):
        ledger.set_grant(analyst, "d", ApproxDP(1, 0), by="own_1", accounting="concentrated")


def test_concurrent_reservations_on_a_concentrated_grant_never_overspend(
    ledger: Ledger,
) -> None:
    """40 threads race for a grant that admits 20 of their events: exactly 20 are charged."""
    budget = ZCDP(Fraction(1, 5))
    analyst = _concentrated_analyst(ledger, budget)
    event = ZCDPEvent(Fraction(1, 100))
    assert library_admits(budget, event) == 20
    outcomes = race(
        lambda i: ledger.reserve(event_request(analyst, event, key=f"k{i}" if i % 3 == 0 else None))
    )
    assert outcomes.count("ok") == 20
    view = ledger.grant_view(analyst, "d")
    assert view is not None
    assert view.spent == budget


#: Runs on OLD_LEDGER_COMMIT's source, so it names that commit's modules (``ledger_charges``).
_OLD_LEDGER_SCRIPT = """
import sys
from fractions import Fraction
from dpcurator.core.measures import ApproxDP
from dpcurator.service.ledger import Ledger
from dpcurator.service.ledger_charges import ChargeRequest

ledger = Ledger(sys.argv[1])
ledger.create_principal("own_1", "owner", "owner")
ledger.add_dataset("d", name="d", source={}, metadata_doc={}, cap=ApproxDP(5, Fraction(1, 10**5)),
                   replay_enabled=False, by="own_1")
ledger.create_principal("ana_0", "analyst", "analyst")
ledger.set_grant("ana_0", "d", ApproxDP(2, Fraction(1, 10**6)), by="own_1")

def request(cost, events, grant=True):
    return ChargeRequest(principal_id="ana_0" if grant else "own_1", dataset_id="d",
                         kind="query" if grant else "batch", query_text="q", fingerprint="q",
                         cost=cost, events=events, charge_grant=grant)

ledger.reserve(request(ApproxDP(Fraction(1, 4), 0), [{"kind": "pure", "epsilon": "1/4"}]))
ledger.reserve(request(ApproxDP(Fraction(1, 3), Fraction(1, 10**7)), []))
cancelled = ledger.reserve(request(ApproxDP(Fraction(1, 2), 0), []))
ledger.cancel(cancelled.charge_id)
ledger.reserve(request(ApproxDP(1, Fraction(1, 10**6)), [{"epsilon": "1", "delta": "1/1000000"}],
                       grant=False))
ledger.close()
"""


def _old_ledger(url: str, tmp_path: Path) -> None:
    """A ledger written by the code of OLD_LEDGER_COMMIT (its source checked out from git)."""
    old = tmp_path / "old"
    old.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", OLD_LEDGER_COMMIT, "src/dpcurator"],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        pytest.skip("the old ledger's source needs this repository's git history")
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
    subprocess.run(
        [sys.executable, "-c", _OLD_LEDGER_SCRIPT, url],
        check=True,
        env={"PYTHONPATH": str(old / "src"), "PATH": "/usr/bin:/bin"},
    )


def test_a_ledger_of_the_previous_schema_migrates_with_its_budgets_unchanged(
    ledger_url: str, tmp_path: Path
) -> None:
    """Old charges become PureEvent/ApproxEvent rows (a stored pure event is kept), the running
    totals and remaining budgets are identical, and the ledger charges on as before."""
    _old_ledger(ledger_url, tmp_path)
    ledger = Ledger(ledger_url)
    try:
        grant = ledger.grant("ana_0", "d")
        assert grant is not None
        assert grant_budget(grant).remaining == ApproxDP(
            2 - Fraction(1, 4) - Fraction(1, 3), Fraction(9, 10**7)
        )
        assert dataset_budget(ledger.dataset("d")).remaining == ApproxDP(
            5 - Fraction(1, 4) - Fraction(1, 3) - 1, Fraction(1, 10**5) - Fraction(11, 10**7)
        )
        view = ledger.grant_view("ana_0", "d")
        assert view == grant_budget(grant)  # still basic composition
        events = [json.dumps(c.events) for c in reversed(ledger.history(dataset_id="d"))]
        assert events == [
            '[{"kind": "pure", "epsilon": "1/4"}]',
            '[{"kind": "approx", "epsilon": "1/3", "delta": "1/10000000"}]',
            '[{"kind": "pure", "epsilon": "1/2"}]',
            '[{"kind": "approx", "epsilon": "1", "delta": "1/1000000"}]',
        ]
        # The owner may account the old grant by replaying its events, if they fit the filter
        # (1/4 + 1/3 of ε do not fit ε = 1/2 by basic composition, nor its Rényi bound).
        with pytest.raises(ConflictError, match="do not fit"):
            ledger.set_grant(
                "ana_0", "d", ApproxDP(Fraction(1, 2), 1e-6), by="own_1", accounting="concentrated"
            )
        ledger.set_grant(
            "ana_0", "d", ApproxDP(4, Fraction(1, 10**6)), by="own_1", accounting="concentrated"
        )
        ledger.reserve(event_request("ana_0", GAUSSIAN))
    finally:
        ledger.close()
    Ledger(ledger_url).close()  # a second start finds the migration done
