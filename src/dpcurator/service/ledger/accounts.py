"""Events in the ledger, and budgets accounted by replaying them (issue 18 §1).

Every charge stores the privacy event of its release (``charges.events``: a list holding one
:meth:`~dpcurator.accounting.events.PrivacyEvent.to_dict`), not only its (ε, δ) sum, so accounting
can improve without rewriting history. :func:`charge_event` reads it back; a charge whose stored
events are missing, several, undecodable or disagree with its (ε, δ) columns counts as the
:class:`PureEvent`/:class:`ApproxEvent` of those columns (what basic composition charged).
:func:`migrate_events` rewrites such rows of a ledger made before events were stored, once.

A budget (an analyst's grant, or a dataset's global cap, ``principal_id = ''``) with a row in
``budget_accounts`` is **concentrated**: its charges' events, in order, are replayed through a
:class:`~dpcurator.accounting.ConcentratedFilter` of the budget ((ε, δ) with δ > 0, or ρ), and a new
event is admitted iff the filter admits it after them (:func:`replayed`). The filter is fully
adaptive (Whitehouse, Ramdas, Rogers & Wu 2023; see :mod:`dpcurator.accounting.concentrated`), so
the whole history of the budget is (ε, δ)-DP (or ρ-zCDP) whatever the analyst's strategy. The
replay runs inside the reservation's write transaction, under the same row locks as basic
reservations, so concurrent requests never see the same remaining budget. Its views are chosen
from the events alone, so a replay repeats the choices made when they were reserved. Budgets
without a row keep basic composition of their (ε, δ) columns (every budget of a ledger made
before accounts existed); new budgets with δ > 0 (or ρ) are concentrated unless told otherwise.

Each ledger handle (its engine, so each worker process) caches the replayed filter of each
budget with the last charge id it read, and the number of charges (not replays) and of cancelled
charges up to that id (:func:`replayed_history`). Charges are never deleted and their status only
ever becomes ``cancelled`` from ``reserved``, so both numbers only grow along the database's
history: a later read finding the same numbers has the same charges up to that id, and replays
only the charges after it. Any difference (a cancellation, a late commit, an older snapshot)
replays the whole history. A reservation caches its budgets' filters with its own charge in
them once it has committed (:class:`~dpcurator.service.ledger.admission.Settlement`), so with one
worker the next reservation replays no history at all, only checks the two numbers (an
index-only count, ``ix_charge_budget``) and charges its own event.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction

from sqlalchemy import (
    Connection,
    Engine,
    ForeignKey,
    String,
    bindparam,
    case,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.sql import Executable
from sqlalchemy.sql.elements import ColumnElement

from dpcurator.accounting.concentrated import ConcentratedFilter
from dpcurator.accounting.events import ApproxEvent, PrivacyEvent, PureEvent
from dpcurator.core.measures import ZCDP, ApproxDP
from dpcurator.errors import BudgetExceededError, DPError, ParameterError
from dpcurator.service.ledger.budgets import BudgetView, Cost, NativeView, cost_of
from dpcurator.service.models import Base, Charge, utcnow

#: The ``principal_id`` of a dataset's global cap in ``budget_accounts``.
CAP = ""
#: The name under which :func:`migrate_events` records that it ran.
EVENTS_MIGRATION = "charge_events_v1"
_ZERO = ApproxDP(0, 0)


class BudgetAccount(Base):
    """A budget accounted by replaying events (concentrated): a grant (``principal_id``) or a
    dataset's cap (``principal_id = ''``). ``rho`` is set for a ρ budget; otherwise the budget is
    the (ε, δ) of the grant's or dataset's columns."""

    __tablename__ = "budget_accounts"

    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), primary_key=True)
    principal_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    rho: Mapped[str | None] = mapped_column(String(200), default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class LedgerMigration(Base):
    """A one-time rewrite of the ledger that has been applied (by name)."""

    __tablename__ = "ledger_migrations"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    applied_at: Mapped[datetime] = mapped_column(default=utcnow)


def basic_event(cost: ApproxDP) -> PrivacyEvent:
    """The event of a cost known only by its (ε, δ): pure if δ = 0."""
    return PureEvent(cost.epsilon) if cost.delta == 0 else ApproxEvent(cost.epsilon, cost.delta)


def basic_cost(event: PrivacyEvent) -> ApproxDP:
    """What basic composition of (ε, δ) charges for ``event``: its (ε, δ) cost, or (0, 0) for
    an event with none (a ρ-only release, which only a concentrated budget admits)."""
    cost = event.approx_cost()
    return _ZERO if cost is None else cost


def charge_event(events: object, cost: ApproxDP) -> PrivacyEvent:
    """The one event of a charge from its ``events`` column and (ε, δ) columns (see the module
    docstring: anything but one decodable event agreeing with the columns is their basic
    event)."""
    if isinstance(events, list) and len(events) == 1:
        try:
            event = PrivacyEvent.from_dict(events[0])
        except DPError:
            return basic_event(cost)
        if basic_cost(event) == cost:
            return event
    return basic_event(cost)


def migrate_events(engine: Engine, *, postgres: bool) -> None:
    """Give every charge of a ledger made before events were stored its one event (once; safe
    when several servers start at once). Costs and running totals are unchanged."""
    with engine.connect() as conn:
        conn.execution_options(dpcurator_write=True)  # BEGIN IMMEDIATE on SQLite
        with conn.begin():
            if postgres:
                conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:n))"), {"n": "events"})
            done = conn.execute(
                select(LedgerMigration.name).where(LedgerMigration.name == EVENTS_MIGRATION)
            ).first()
            if done is not None:
                return
            rows = conn.execute(select(Charge.id, Charge.events, Charge.epsilon, Charge.delta))
            for charge_id, events, epsilon, delta in list(rows):
                event = charge_event(events, cost_of(epsilon, delta))
                if events != [event.to_dict()]:
                    conn.execute(
                        update(Charge)
                        .where(Charge.id == charge_id)
                        .values(events=[event.to_dict()])
                    )
            conn.execute(insert(LedgerMigration).values(name=EVENTS_MIGRATION, applied_at=utcnow()))


def account_budget(rho: str | None, epsilon: str, delta: str) -> Cost:
    """The budget of a concentrated account: ρ if set, else the (ε, δ) columns."""
    return ZCDP(Fraction(rho)) if rho is not None else cost_of(epsilon, delta)


def _charges_of(*, grant: bool) -> list[ColumnElement[bool]]:
    """The conditions selecting the charges of a budget (parameters ``d``, and ``p`` for a
    grant): every charge on the dataset but replays (the cap), or those of one principal."""
    conditions = [Charge.dataset_id == bindparam("d"), Charge.kind != "replay"]
    if grant:
        conditions.append(Charge.principal_id == bindparam("p"))
    return conditions


def _statements(grant: bool) -> tuple[Executable, Executable]:
    """A budget's two replay statements, built once (parameters ``d``, ``p``, ``last``): the
    number of its charges and of its cancelled charges up to ``last``, and its charges after."""
    conditions = _charges_of(grant=grant)
    cancelled = func.count(case((Charge.status == "cancelled", 1)))
    counted = select(func.count(), cancelled).where(*conditions, Charge.id <= bindparam("last"))
    after = (
        select(Charge.id, Charge.status, Charge.events, Charge.epsilon, Charge.delta)
        .where(*conditions, Charge.id > bindparam("last"))
        .order_by(Charge.id)
    )
    return counted, after


#: The replay statements of a cap (False) and of a grant (True).
_REPLAY_STATEMENTS = {grant: _statements(grant) for grant in (False, True)}
#: The concentrated accounts among a dataset's cap and one grant (``p``: the cap's id to ask
#: for the cap alone).
_ACCOUNTS = select(BudgetAccount.principal_id, BudgetAccount.rho).where(
    BudgetAccount.dataset_id == bindparam("d"),
    BudgetAccount.principal_id.in_([CAP, bindparam("p")]),
)


class OverdrawnError(BudgetExceededError):
    """A concentrated budget's own history does not fit it (e.g. it was lowered)."""


@dataclass(frozen=True)
class Replayed:
    """A budget's filter after its charges up to ``last_id``: ``charges`` of them (any status,
    not replays), ``cancelled`` of those cancelled. A cached one is never charged on (readers
    get copies)."""

    last_id: int
    charges: int
    cancelled: int
    account: ConcentratedFilter


#: A cached replay's budget: (dataset id, principal id or None for the cap, budget).
ReplayKey = tuple[str, str | None, Cost]
_REPLAYS: weakref.WeakKeyDictionary[Engine, dict[ReplayKey, Replayed]] = weakref.WeakKeyDictionary()
_REPLAYS_LOCK = threading.Lock()


def replayed_history(
    conn: Connection, budget: Cost, dataset_id: str, principal_id: str | None
) -> ConcentratedFilter:
    """A new :class:`ConcentratedFilter` of ``budget`` after the budget's live charges (the
    cap's, ``principal_id`` None, or a grant's), read on ``conn``: the handle's cached replay
    and the charges after it when it is still valid (see the module docstring), else all.

    Raises:
        ParameterError: a budget the filter cannot hold.
        OverdrawnError: the charges do not fit the budget.
    """
    return replayed_position(conn, budget, dataset_id, principal_id).account.copy()


def replayed_position(
    conn: Connection, budget: Cost, dataset_id: str, principal_id: str | None
) -> Replayed:
    """:func:`replayed_history` with the position it was read to: the last charge id read and
    the numbers of charges and cancelled charges up to it. The returned filter is the
    caller's own (not the cached one), and may be charged on and passed to
    :func:`remember_replay` once the transaction that read it has committed."""
    key: ReplayKey = (dataset_id, principal_id, budget)
    counted, after = _REPLAY_STATEMENTS[principal_id is not None]
    params = {"d": dataset_id, "p": principal_id}
    with _REPLAYS_LOCK:
        cached = _REPLAYS.get(conn.engine, {}).get(key)
    stale = None
    if cached is not None:
        numbers = conn.execute(counted, {**params, "last": cached.last_id}).one()
        if tuple(numbers) != (cached.charges, cached.cancelled):
            stale, cached = cached, None
    if cached is None:
        cached = Replayed(0, 0, 0, ConcentratedFilter(budget))
    account = cached.account.copy()
    last_id, charges, cancelled_charges = cached.last_id, cached.charges, cached.cancelled
    for charge_id, status, events, epsilon, delta in conn.execute(
        after, {**params, "last": last_id}
    ):
        last_id, charges = charge_id, charges + 1
        if status == "cancelled":
            cancelled_charges += 1
            continue
        try:
            account.reserve(charge_event(events, cost_of(epsilon, delta))).commit()
        except BudgetExceededError as exc:
            raise OverdrawnError(exc.requested, account.remaining()) from None
    if last_id > cached.last_id or stale is not None:
        replay = Replayed(last_id, charges, cancelled_charges, account)
        remember_replay(conn.engine, key, replay, stale=stale)
        account = account.copy()
    return Replayed(last_id, charges, cancelled_charges, account)


def cached_replay(engine: Engine, key: ReplayKey) -> Replayed | None:
    """The handle's cached replay of the budget ``key``, if any (never charge on its filter:
    copy it). Whether the database still holds that history is for the caller to check."""
    with _REPLAYS_LOCK:
        return _REPLAYS.get(engine, {}).get(key)


def remember_replay(
    engine: Engine, key: ReplayKey, replay: Replayed, *, stale: Replayed | None = None
) -> None:
    """Cache ``replay`` as the handle's replay of the budget ``key`` unless the cache already
    holds a later one (other than ``stale``, one found out of date, which is replaced).
    ``replay`` must describe the database as committed: its charges up to ``last_id`` are
    ``charges`` rows (``cancelled`` of them cancelled) whose live events, in id order, are the
    filter's. A later read that counts other numbers replays all (module docstring), so a
    charge committed afterwards below ``last_id`` is never missed."""
    with _REPLAYS_LOCK:
        replays = _REPLAYS.setdefault(engine, {})
        cached = replays.get(key)
        if cached is None or cached is stale or cached.last_id < replay.last_id:
            replays[key] = replay


def concentrated_view(account: ConcentratedFilter) -> BudgetView:
    """The budget view of a replayed filter: total, spend in the budget's measure, and parts."""
    total, spent = account.budget, account.spent()
    assert isinstance(total, ApproxDP | ZCDP)  # the filter's budget: (ε, δ) or ρ
    assert isinstance(spent, ApproxDP | ZCDP)
    return BudgetView(total, spent, NativeView(account.limits, account.spent_native()))


def account_view(
    conn: Connection, budget: Cost, dataset_id: str, principal_id: str | None
) -> BudgetView:
    """The view of a concentrated budget after its charges (see :func:`replayed_history`; all
    of it spent if they overdraw it, e.g. when a cancelled charge changed the views chosen
    after it)."""
    try:
        return concentrated_view(replayed_history(conn, budget, dataset_id, principal_id))
    except OverdrawnError:
        limits = ConcentratedFilter(budget).limits
        return BudgetView(budget, budget, NativeView(limits, limits))


def accounts_of(
    conn: Connection, dataset_id: str, principal_id: str | None
) -> dict[str, str | None]:
    """The concentrated accounts among a dataset's cap and (if given) one grant: principal id
    (``''`` for the cap) to its ρ (None for an (ε, δ) budget)."""
    rows = conn.execute(
        _ACCOUNTS, {"d": dataset_id, "p": CAP if principal_id is None else principal_id}
    )
    return {str(principal): rho for principal, rho in rows}


def check_account_budget(budget: Cost, accounting: str | None) -> bool:
    """Whether a budget is concentrated (``accounting`` None: the default, concentrated for a
    budget with δ > 0 or a ρ, basic for a pure ε); raises ParameterError naming ``accounting``
    if it cannot be (a pure ε budget composes optimally by basic composition)."""
    if accounting is None:
        return isinstance(budget, ZCDP) or budget.delta > 0
    if accounting not in ("basic", "concentrated"):
        raise ParameterError(f"accounting must be 'basic' or 'concentrated'. Got {accounting!r}.")
    if isinstance(budget, ZCDP):
        return True
    if accounting == "concentrated" and budget.delta == 0:
        raise ParameterError(
            "accounting='concentrated' needs a budget with delta > 0 (or a rho budget); a pure "
            "epsilon budget is accounted optimally by basic composition."
        )
    return accounting == "concentrated"


def charge_cost(charge: Charge) -> Cost:
    """What a charge costs as shown to its analyst: its (ε, δ), or the ρ of a ρ-only event."""
    cost = cost_of(charge.epsilon, charge.delta)
    event = charge_event(charge.events, cost)
    zcdp = event.approx_zcdp_cost()
    if event.approx_cost() is None and zcdp is not None:
        return zcdp[0]
    return cost
