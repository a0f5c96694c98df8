"""Whether a charge fits: a release's event checked against the analyst's grant and the
dataset's global cap, given their locked totals.

A basic budget adds (ε, δ) costs exactly (basic sequential composition) and refuses a ρ-only
event; a concentrated one replays the budget's history through its filter
(:mod:`dpcurator.service.ledger.accounts`) and asks it to admit the event. An analyst's refusal by
the cap never names the cap's remaining amount (:class:`CapExceededError`). Nothing here writes:
:mod:`dpcurator.service.ledger.charges` calls :func:`admit` under the rows' locks and then
writes the totals it returns; :func:`check_fits` answers an estimate without locking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast

from sqlalchemy import Connection, Engine

from dpcurator.accounting.concentrated import ConcentratedFilter
from dpcurator.accounting.events import PrivacyEvent
from dpcurator.core.measures import ApproxDP
from dpcurator.errors import BudgetExceededError, DPError, ParameterError
from dpcurator.service.errors import NotFoundError
from dpcurator.service.ledger.accounts import (
    CAP,
    Replayed,
    ReplayKey,
    account_budget,
    accounts_of,
    basic_cost,
    concentrated_view,
    remember_replay,
    replayed_position,
)
from dpcurator.service.ledger.budgets import BasicView, BudgetView, Cost, budget_view
from dpcurator.service.ledger.statements import SQL


class Admitted(Protocol):
    """What the admission reads of a :class:`~dpcurator.service.ledger.charges.ChargeRequest`."""

    @property
    def principal_id(self) -> str: ...
    @property
    def dataset_id(self) -> str: ...
    @property
    def charge_grant(self) -> bool: ...
    @property
    def event(self) -> PrivacyEvent: ...


def _basic_fits(view: BasicView, event: PrivacyEvent, what: str) -> ApproxDP:
    """The spending of a basic budget after ``event`` (its (ε, δ) cost added), if it fits.

    Raises:
        ParameterError: the event has no (ε, δ) cost (a ρ-only release), which basic
            composition of (ε, δ) cannot charge; nothing was charged.
        BudgetExceededError: the cost does not fit.
    """
    cost = event.approx_cost()
    if cost is None:
        raise ParameterError(
            f"The {what} composes (ε, δ) costs by basic composition, and this release costs "
            f"only a ρ ({_requested(event)}); nothing was charged. Ask for an epsilon "
            "(and delta) cost, or for a budget with concentrated accounting."
        )
    if not (view.spent + cost).fits_within(view.total):
        raise BudgetExceededError(cost, view.remaining, what=what)
    return view.spent + cost


def _requested(event: PrivacyEvent) -> Cost:
    """The cost of an event as a refusal names it: (ε, δ) if it has one, else its ρ."""
    approx = event.approx_cost()
    if approx is not None:
        return approx
    zcdp = event.approx_zcdp_cost()
    assert zcdp is not None  # the filter refused an event without any cost already
    return zcdp[0]


def _concentrated_fits(
    conn: Connection,
    budget: Cost,
    request: Admitted,
    event: PrivacyEvent,
    what: str,
    *,
    settlement: Settlement | None = None,
) -> ConcentratedFilter:
    """A concentrated budget's filter after ``event``, if the filter admits it after the
    budget's history (the cap's: every live charge on the dataset; a grant's: its analyst's),
    read on ``conn`` (the handle's cached replay extended by the charges after it). With
    ``settlement``, the filter is also kept there, to be cached once the charge commits.

    Raises:
        BudgetExceededError: the filter refuses it (or the history alone overdraws the budget).
    """
    principal = None if what == _CAP else request.principal_id
    try:
        read = replayed_position(conn, budget, request.dataset_id, principal)
        read.account.reserve(event).commit()
    except BudgetExceededError as exc:
        raise BudgetExceededError(_requested(event), exc.remaining, what=what) from None
    if settlement is not None:
        settlement.replays.append(((request.dataset_id, principal, budget), read))
    return read.account


@dataclass
class Settlement:
    """What a reservation on concentrated budgets leaves for after its transaction commits:
    caching each budget's filter with the new charge in it, so that the handle's next
    reservation replays only the charges other handles made meanwhile (none with one worker),
    and the grant's budget view (an (ε, δ) conversion of the filter's spend, computed outside
    the ledger's lock).

    Each replay was read inside the reserving transaction, under the dataset's lock, up to its
    last charge id L; the new charge's id X > L was inserted in the same transaction, so at its
    commit the budget's charges up to X are those read and the new one (on SQLite, one writer at
    a time, nothing else can be there; on PostgreSQL a charge inserted concurrently below X and
    committed later changes the count a later read checks, which then replays all: see
    :mod:`dpcurator.service.ledger.accounts`).
    """

    replays: list[tuple[ReplayKey, Replayed]] = field(default_factory=list)
    grant: ConcentratedFilter | None = None

    def settle(
        self, engine: Engine, charge_id: int, budget: BudgetView | None
    ) -> BudgetView | None:
        """Cache the replays with charge ``charge_id`` (committed) in them; the grant's view
        (``budget``, or the concentrated grant's)."""
        for key, read in self.replays:
            if charge_id > read.last_id:
                after = Replayed(charge_id, read.charges + 1, read.cancelled, read.account)
                remember_replay(engine, key, after)
        return budget if self.grant is None else concentrated_view(self.grant)


_GRANT = "analyst's privacy budget"
_CAP = "dataset's global privacy budget"


def admit(
    conn: Connection | None,
    request: Admitted,
    cap: Sequence[str],
    grant: Sequence[str | None],
    accounts: dict[str, str | None],
    *,
    settlement: Settlement | None = None,
) -> tuple[BudgetView | None, ApproxDP | None, ApproxDP]:
    """Check the request's event against the dataset's cap and (if charged) the grant, given
    their locked (total ε, total δ, spent ε, spent δ) and which of them are concentrated
    (``accounts``, replayed on ``conn``); the grant's budget view after the charge, and the
    grant's and the dataset's (ε, δ) running totals after it (a concentrated budget keeps the
    sum of its charges' (ε, δ) costs too, for the record). With ``settlement``, a concentrated
    grant's view is left to :meth:`Settlement.settle` (None here), which also caches the
    filters once the charge is committed.

    Raises:
        BudgetExceededError: the event does not fit the grant, or else the cap.
        ParameterError: a ρ-only event on a basic budget.
    """
    event = request.event
    cost = basic_cost(event)
    budget: BudgetView | None = None
    grant_spent = None
    if request.charge_grant:
        columns = budget_view(*cast("Sequence[str]", grant))
        grant_spent = columns.spent + cost
        if request.principal_id in accounts:
            assert conn is not None  # the fast paths never see a concentrated budget
            total = account_budget(accounts[request.principal_id], str(grant[0]), str(grant[1]))
            fitted = _concentrated_fits(conn, total, request, event, _GRANT, settlement=settlement)
            if settlement is None:
                budget = concentrated_view(fitted)
            else:
                settlement.grant = fitted
        else:
            budget = BasicView(columns.total, _basic_fits(columns, event, _GRANT))
    columns = budget_view(*cap)
    if CAP in accounts:
        assert conn is not None
        try:
            total = account_budget(accounts[CAP], cap[0], cap[1])
            _concentrated_fits(conn, total, request, event, _CAP, settlement=settlement)
        except BudgetExceededError:
            if request.charge_grant:  # an analyst: the cap's remaining amount is not theirs
                raise CapExceededError(_requested(event)) from None
            raise
    else:
        try:
            _basic_fits(columns, event, _CAP)
        except BudgetExceededError:
            if request.charge_grant:
                raise CapExceededError(_requested(event)) from None
            raise
    return budget, grant_spent, columns.spent + cost


def check_fits(conn: Connection, request: Admitted) -> bool:
    """Whether :meth:`~dpcurator.service.ledger.charges.LedgerCharges.reserve` would admit the
    request now (read on ``conn``, nothing locked or written: an estimate's answer, which a
    later reservation decides)."""
    who = {"p": request.principal_id, "d": request.dataset_id}
    read = SQL.peek_cap_and_grant if request.charge_grant else SQL.peek_cap
    totals = conn.execute(read, who).first()
    if totals is None:
        raise NotFoundError(f"No dataset with id {request.dataset_id!r}.")
    grant = request.principal_id if request.charge_grant else None
    try:
        admit(conn, request, totals[:4], totals[4:], accounts_of(conn, request.dataset_id, grant))
    except (BudgetExceededError, ParameterError):
        return False
    return True


class CapExceededError(BudgetExceededError):
    """The dataset's global cap cannot cover an analyst's release; nothing was charged.

    Worded without the cap's remaining amount (``remaining`` is None): analysts see their own
    budget, never the global one (which the spending of other analysts moves).
    """

    def __init__(self, requested: Cost) -> None:
        DPError.__init__(
            self,
            f"The dataset's global privacy budget cannot cover this release (it costs "
            f"{requested}). Nothing was charged. Ask the data owner to raise the dataset's cap.",
        )
        self.requested = requested
        self.remaining = None
