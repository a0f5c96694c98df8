"""Reservations on concentrated budgets in ONE PostgreSQL statement: a compare-and-set.

A reservation on concentrated budgets (:mod:`dpcurator.service.ledger.accounts`) asks each
budget's filter whether the event fits after the budget's history. Done under the dataset row's
lock inside a transaction (:meth:`~dpcurator.service.ledger.charges.LedgerCharges.reserve`), that
is about ten round trips with the lock held. Here the handle decides BEFORE locking anything, on
its cached replays of the budgets (or replays it reads afresh, without a lock), and then one call
of the function :data:`~dpcurator.service.ledger.postgres.REPLAYED` (in autocommit mode: one
transaction) locks the dataset row and the grant row, checks that the budgets are exactly those
the event was admitted against (the cap's and the grant's (ε, δ) and accounts) and that each
budget's history is exactly the one replayed (the number of its charges and of its cancelled
charges up to the last charge id the replay read, and no charge after it), and only then updates
the running totals and inserts the charge.

Why the decision is the one a full replay under the lock would make: charges are never deleted
and a status only ever becomes ``cancelled`` from ``reserved``, so under the locks equal numbers
mean the same charges with the same statuses up to that id, and none after it (the argument of
the replay cache, :func:`~dpcurator.service.ledger.accounts.replayed_position`); the filters are
deterministic functions of the budget and of that history. So the decision is the one the
locked transaction of the full path would make, reading the same rows under the same locks;
every reservation and refund holds the dataset row's lock, so nothing is charged or refunded
between the check and the write, which commit together (all or nothing). When the check fails
nothing is written: the handle learns the budgets as they are, reads the charges it missed, and
tries again, then hands over to the transaction above (which also decides and words every
refusal, and unknown datasets or grants). Budgets that are not all concentrated, and requests
with a request key, never come here.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import Connection, Engine

from dpcurator.accounting.concentrated import ConcentratedFilter
from dpcurator.accounting.events import PrivacyEvent
from dpcurator.errors import BudgetExceededError, ParameterError
from dpcurator.service.ledger import postgres as ledger_postgres
from dpcurator.service.ledger.accounts import (
    Replayed,
    ReplayKey,
    account_budget,
    cached_replay,
    concentrated_view,
    remember_replay,
    replayed_position,
)
from dpcurator.service.ledger.budgets import BudgetView

#: Calls of the function per reservation before handing over to the full transaction.
ATTEMPTS = 3

#: A connection for one autocommit statement (``write``: a writer's).
Statement = Callable[..., AbstractContextManager[Connection]]
#: The budgets of a (dataset id, principal id or None for an owner) as the function returns
#: them: the cap's ε, δ and account (None: no account, basic; ``''``: an (ε, δ) one; else its ρ),
#: then the same three of the grant (an analyst's reservation only).
Budgets = list[str | None]


def _keys(dataset_id: str, principal_id: str | None, budgets: Budgets) -> list[ReplayKey] | None:
    """The replay cache's key of each budget (the cap's, then the grant's), or None if one is
    basic (the full path admits those)."""
    keys: list[ReplayKey] = []
    for i, principal in ((0, None), (3, principal_id)):
        if i >= len(budgets):
            break
        epsilon, delta, account = budgets[i : i + 3]
        if account is None or epsilon is None or delta is None:
            return None
        keys.append((dataset_id, principal, account_budget(account or None, epsilon, delta)))
    return keys


class ReplayedReservations:
    """The compare-and-set reservations of one ledger handle (its ``engine``'s replay cache,
    and the budgets each of its datasets and grants had when it last looked)."""

    def __init__(self, engine: Engine, statement: Statement) -> None:
        self._engine = engine
        self._statement = statement
        self._budgets: dict[tuple[str, str | None], Budgets] = {}
        self._turns: dict[str, threading.Lock] = {}

    def reserve(
        self, charge: dict[str, Any], event: PrivacyEvent, *, charge_grant: bool
    ) -> tuple[int, BudgetView | None] | None:
        """Reserve ``charge`` (the new charge's row) of ``event``; the new charge's id and the
        grant's view after it (None for an owner), or None having changed nothing: the
        transaction of the full path must decide (a refusal, a basic budget, an unknown dataset
        or grant, or budgets that kept changing under it).

        The handle's reservations on one dataset take turns (a lock of this process): each would
        otherwise admit its event on the replays the others are about to change, and retry."""
        with self._turns.setdefault(charge["dataset_id"], threading.Lock()):
            done = self._reserve(charge, event, charge_grant=charge_grant)
        if done is None:
            return None
        charge_id, grant = done  # the grant's view is computed after the turn
        return charge_id, None if grant is None else concentrated_view(grant)

    def _reserve(
        self, charge: dict[str, Any], event: PrivacyEvent, *, charge_grant: bool
    ) -> tuple[int, ConcentratedFilter | None] | None:
        principal = charge["principal_id"] if charge_grant else None
        who = (charge["dataset_id"], principal)
        params = {**charge, "events": json.dumps(charge["events"]), "charge_grant": charge_grant}
        fresh = False
        for _ in range(ATTEMPTS):
            budgets = self._budgets.get(who, [])
            keys = _keys(who[0], principal, budgets)
            if keys is None:
                return None
            try:
                reads = self._replays(keys, fresh=fresh)
                filters = [read.account.copy() for read in reads]
                for account in filters:
                    account.reserve(event).commit()
            except (BudgetExceededError, ParameterError):
                return None
            params |= {
                "budgets": budgets,
                "last": [read.last_id for read in reads],
                "counted": [n for read in reads for n in (read.charges, read.cancelled, 0)],
            }
            with self._statement(write=True) as conn:
                row = conn.execute(ledger_postgres.REPLAYED_CALL, params).first()
            if row is None:
                return None
            charge_id, self._budgets[who] = row
            if charge_id is not None:
                self._settle(charge_id, keys, reads, filters)
                return charge_id, filters[-1] if charge_grant else None
            fresh = True
        return None

    def _replays(self, keys: list[ReplayKey], *, fresh: bool) -> list[Replayed]:
        """Each budget's replay: the cached one, or (``fresh``, or none cached) read now."""
        cached = [None if fresh else cached_replay(self._engine, key) for key in keys]
        if all(read is not None for read in cached):
            return [read for read in cached if read is not None]
        with self._statement(write=False) as conn:
            return [
                replayed_position(conn, budget, dataset_id, principal)
                for dataset_id, principal, budget in keys
            ]

    def _settle(
        self,
        charge_id: int,
        keys: list[ReplayKey],
        reads: list[Replayed],
        filters: list[ConcentratedFilter],
    ) -> None:
        """Cache each budget's filter with the committed charge ``charge_id`` in it."""
        for key, read, account in zip(keys, reads, filters, strict=True):
            if charge_id > read.last_id:
                after = Replayed(charge_id, read.charges + 1, read.cancelled, account)
                remember_replay(self._engine, key, after)
