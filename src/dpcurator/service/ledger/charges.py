"""The life of a charge: reserved against both budgets at once, then completed, failed or cancelled.

:meth:`LedgerCharges.reserve` checks a release's cost against the analyst's grant and the
dataset's global cap and adds it to both in one write transaction (see the module docstring of
:mod:`dpcurator.service.ledger`); only then may the engine run. The server computing a charge
with a request key holds a claim on it, renewed while it computes
(:mod:`dpcurator.service.ledger.lease`), and only the claimant may record its outcome.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row

from dpcurator.accounting.events import PrivacyEvent
from dpcurator.core.measures import ApproxDP
from dpcurator.errors import BudgetExceededError, InternalInvariantError
from dpcurator.service.errors import ConflictError, NotFoundError
from dpcurator.service.ledger import postgres as ledger_postgres
from dpcurator.service.ledger.accounts import (
    accounts_of,
    charge_event,
    migrate_events,
)
from dpcurator.service.ledger.admission import Settlement, admit
from dpcurator.service.ledger.budgets import (
    BudgetView,
    cost_of,
    dataset_budget,
    grant_budget,
)
from dpcurator.service.ledger.database import LedgerDatabase, found
from dpcurator.service.ledger.lease import LEASE_SECONDS, LeaseKeeper, check_claim
from dpcurator.service.ledger.replayed import ReplayedReservations
from dpcurator.service.ledger.statements import SQL, RawStatements
from dpcurator.service.models import Charge, Dataset, Grant, utcnow


def _subtract(spent: ApproxDP, cost: ApproxDP) -> ApproxDP:
    return ApproxDP(spent.epsilon - cost.epsilon, spent.delta - cost.delta)


@dataclass(frozen=True)
class ChargeRequest:
    """What :meth:`Ledger.reserve` needs to know about a release before it runs.

    ``request_key`` (an idempotency key chosen by the client) makes a retried request reuse its
    first charge instead of paying again. ``fingerprint`` identifies the question (normalised SQL
    and cost) for replay. ``charge_grant`` is false for owners, who spend only the global cap.
    ``events`` holds the release's event (``to_dict``) and ``cost`` its (ε, δ) cost ((0, 0) for a
    ρ-only event); anything else is charged as the basic event of ``cost`` (see
    :func:`~dpcurator.service.ledger.accounts.charge_event`).
    """

    principal_id: str
    dataset_id: str
    kind: str
    query_text: str
    fingerprint: str
    cost: ApproxDP
    events: list[Any]
    request_key: str | None = None
    charge_grant: bool = True

    @classmethod
    def owner_release(
        cls,
        principal_id: str,
        dataset_id: str,
        *,
        kind: str,
        text: str,
        cost: ApproxDP,
        events: list[Any],
    ) -> ChargeRequest:
        """An owner's release charged to the dataset's global cap only (no grant, no request
        key), identified by ``text`` and fingerprinted by the SHA-256 of its UTF-8 bytes."""
        return cls(
            principal_id=principal_id,
            dataset_id=dataset_id,
            kind=kind,
            query_text=text,
            fingerprint=hashlib.sha256(text.encode()).hexdigest(),
            cost=cost,
            events=events,
            charge_grant=False,
        )

    @functools.cached_property
    def event(self) -> PrivacyEvent:
        """The one event this request charges."""
        return charge_event(self.events, self.cost)


@dataclass(frozen=True)
class Reservation:
    """A reserved charge. ``reused`` is true when an earlier charge with the same key was found.

    ``budget`` is the caller's grant right after this charge (None for owners and reused charges).
    """

    charge_id: int
    cost: ApproxDP
    status: str
    result: dict[str, Any] | None
    reused: bool
    budget: BudgetView | None = None


class _Concentrated(Exception):  # noqa: N818  # a control-flow signal, not an error
    """A fast path found a concentrated budget: reserve in a transaction that replays events."""


def _spent_values(spent: ApproxDP) -> dict[str, str]:
    return {"spent_epsilon": str(spent.epsilon), "spent_delta": str(spent.delta)}


class LedgerCharges(LedgerDatabase):
    """Reservations and their outcomes, claimed by the server ``boot_id`` (the arguments are
    those of :class:`~dpcurator.service.ledger.Ledger`)."""

    def __init__(
        self, url: str, *, boot_id: str | None = None, lease_seconds: float = LEASE_SECONDS
    ) -> None:
        super().__init__(url)
        migrate_events(self._engine, postgres=self._postgres)
        self.boot_id = boot_id or f"{os.getpid()}-{time.time_ns()}"
        self.lease_seconds = lease_seconds
        if url.startswith("sqlite"):
            self._raw = RawStatements(self._engine.dialect)  # the SQLite hot path only
        self._leases = LeaseKeeper(self._renew_claims, lease_seconds / 3)
        #: Datasets found with a concentrated budget: their reservations skip the fast paths
        #: (which would only find that again and hand over); the full path admits any budget.
        self._concentrated_datasets: set[str] = set()
        #: On PostgreSQL, their reservations without a request key are first tried as one
        #: compare-and-set statement (see :mod:`dpcurator.service.ledger.replayed`).
        self._replayed = ReplayedReservations(self._engine, self._statement)

    def close(self) -> None:
        """Stop the lease thread, then close the database (see :meth:`LedgerDatabase.close`)."""
        self._leases.stop()
        super().close()

    def reserve(self, request: ChargeRequest) -> Reservation:
        """Charge the request's event atomically against the grant and the dataset cap.

        One write transaction of a few SQL statements (no ORM on this hot path): lock the dataset
        row, look up the request key, lock the grant row, check both budgets, update both running
        totals and insert the charge. A basic budget adds (ε, δ) costs; a concentrated one
        replays its events through its filter (:mod:`dpcurator.service.ledger.accounts`), in the
        same transaction. A request without a key on basic budgets does all of it in one
        statement on PostgreSQL (see :mod:`dpcurator.service.ledger.postgres`), and on the raw
        cursor on SQLite (see :mod:`dpcurator.service.ledger.sqlite`); those paths find a
        concentrated budget under the dataset's lock and hand over, having changed nothing.
        On PostgreSQL a request without a key on concentrated budgets is first admitted on the
        handle's replays and written by one statement that checks they are still exact
        (:mod:`dpcurator.service.ledger.replayed`), which hands over here if they are not.

        Raises:
            BudgetExceededError: the cost does not fit; nothing was changed.
            ParameterError: a ρ-only event on a basic budget; nothing was changed.
            ConflictError: the request key was already used for a different request, or its
                first request is still computing (a live claim: see :meth:`hold_claim`).
            NotFoundError: unknown dataset, or the analyst has no grant on it.
        """
        fast = request.dataset_id not in self._concentrated_datasets
        fast = fast and request.event.approx_cost() is not None  # else: concentrated, or refused
        if fast and request.request_key is None:
            try:
                if self._postgres:
                    return self._reserve_in_postgres(request)
                return self._reserve_in_sqlite(request)
            except _Concentrated:  # skip the fast paths for this dataset from now on
                self._concentrated_datasets.add(request.dataset_id)
        if self._postgres and request.request_key is None and not fast:
            done = self._replayed.reserve(
                self._charge_row(request), request.event, charge_grant=request.charge_grant
            )
            if done is not None:
                return Reservation(done[0], request.cost, "reserved", None, False, done[1])
        cost = request.cost
        settlement = Settlement()
        who = {"p": request.principal_id, "d": request.dataset_id}
        with self._connection(write=True) as conn:
            if self._postgres:  # before any lock is taken (Durability in dpcurator.service.ledger)
                conn.execute(SQL.commit_without_flush)
            # One statement locks the dataset row and, for an analyst, the grant row (in that
            # order, as everywhere); no row: unknown dataset, or no grant.
            lock = SQL.lock_cap_and_grant if request.charge_grant else SQL.lock_cap
            locked = conn.execute(lock, who).first()
            if locked is None:
                raise NotFoundError(f"No dataset with id {request.dataset_id!r}.")
            if request.request_key is not None:  # read under the lock: sees committed retries
                earlier = conn.execute(SQL.by_key, {**who, "k": request.request_key}).first()
                if earlier is not None:
                    return self._reuse(conn, earlier, request)
            grant = request.principal_id if request.charge_grant else None
            accounts = accounts_of(conn, request.dataset_id, grant)
            budget, grant_spent, dataset_spent = admit(
                conn, request, locked[:4], locked[4:], accounts, settlement=settlement
            )
            charge = self._charge_row(request)
            charge_id = self._write_reservation(conn, who, charge, grant_spent, dataset_spent)
        budget = settlement.settle(self._engine, charge_id, budget)  # committed
        return Reservation(charge_id, cost, "reserved", None, False, budget)

    def _reserve_in_sqlite(self, request: ChargeRequest) -> Reservation:
        """:meth:`reserve` without a request key on SQLite: the same statements, run on the raw
        cursor (see :mod:`dpcurator.service.ledger.sqlite`)."""
        who = {"p": request.principal_id, "d": request.dataset_id}
        charge = self._charge_row(request)
        lock = self._raw.lock_cap_and_grant if request.charge_grant else self._raw.lock_cap
        with self._raw_write() as cursor:
            locked = lock.first(cursor, who)
            if locked is None:
                raise NotFoundError(f"No dataset with id {request.dataset_id!r}.")
            if self._raw.concentrated.first(cursor, who) is not None:
                raise _Concentrated  # rolled back: nothing written
            budget, grant_spent, dataset_spent = admit(None, request, locked[:4], locked[4:], {})
            if grant_spent is not None:
                self._raw.grant_spent.run(cursor, {**who, **_spent_values(grant_spent)})
            self._raw.dataset_spent.run(cursor, {**who, **_spent_values(dataset_spent)})
            inserted = self._raw.insert_charge.first(cursor, charge)
        assert inserted is not None
        return Reservation(int(inserted[0]), request.cost, "reserved", None, False, budget)

    def _charge_row(self, request: ChargeRequest) -> dict[str, Any]:
        """The new charge row of a reservation (claimed now if it has a request key)."""
        now = utcnow()
        return {
            "principal_id": request.principal_id,
            "dataset_id": request.dataset_id,
            "kind": request.kind,
            "request_key": request.request_key,
            "fingerprint": request.fingerprint,
            "query_text": request.query_text,
            "epsilon": str(request.cost.epsilon),
            "delta": str(request.cost.delta),
            "events": [request.event.to_dict()],
            "status": "reserved",
            "claimed_by": self.boot_id,
            "claimed_at": None if request.request_key is None else now,
            "created_at": now,
        }

    def _reserve_in_postgres(self, request: ChargeRequest) -> Reservation:
        """:meth:`reserve` without a request key on PostgreSQL: one call of the function of
        :mod:`dpcurator.service.ledger.postgres`, in autocommit mode (one round trip)."""
        charge = self._charge_row(request)
        params = {
            **charge,
            "events": json.dumps(charge["events"]),
            "charge_grant": request.charge_grant,
        }
        with self._statement(write=True) as conn:
            row = conn.execute(ledger_postgres.RESERVE_CALL, params).first()
        if row is None:
            raise NotFoundError(f"No dataset with id {request.dataset_id!r}.")
        charge_id, *totals = row
        if charge_id == -1:
            raise _Concentrated
        try:  # the same check in Python: words a refusal, and guards the database's arithmetic
            budget, _, _ = admit(None, request, totals[:4], totals[4:], {})
        except BudgetExceededError:
            if charge_id is None:
                raise
            raise InternalInvariantError(
                f"The ledger database reserved charge {charge_id}, which does not fit."
            ) from None
        if charge_id is None:
            raise InternalInvariantError("The ledger database refused a cost that fits.")
        return Reservation(charge_id, request.cost, "reserved", None, False, budget)

    def _write_reservation(
        self,
        conn: Connection,
        who: dict[str, str],
        charge: dict[str, Any],
        grant_spent: ApproxDP | None,
        dataset_spent: ApproxDP,
    ) -> int:
        """Update the running totals and insert the charge; its id.

        On PostgreSQL one statement (the updates as data-modifying CTEs of the INSERT), so the
        row locks are held over one round trip fewer per total; elsewhere three statements.
        """
        if self._postgres:  # parameter names unlike any column's (see Statements)
            params = {f"c_{name}": value for name, value in charge.items()}
            params |= {f"d_{k}": v for k, v in _spent_values(dataset_spent).items()}
            if grant_spent is not None:
                params |= {f"g_{k}": v for k, v in _spent_values(grant_spent).items()}
            statement = SQL.reserve_with_grant if grant_spent is not None else SQL.reserve_cap_only
            return int(conn.execute(statement, {**who, **params}).scalar_one())
        if grant_spent is not None:
            conn.execute(SQL.grant_spent, {**who, **_spent_values(grant_spent)})
        conn.execute(SQL.dataset_spent, {**who, **_spent_values(dataset_spent)})
        return int(conn.execute(SQL.insert_charge, charge).scalar_one())

    def _reuse(self, conn: Connection, earlier: Row[Any], request: ChargeRequest) -> Reservation:
        """Return the charge of a retried request; take its claim over if the claim expired
        (its server died: see :mod:`dpcurator.service.ledger.lease`)."""
        if earlier.fingerprint != request.fingerprint or earlier.dataset_id != request.dataset_id:
            raise ConflictError(
                f"The request key {request.request_key!r} was already used for a different "
                "request. Use a fresh key for every new question."
            )
        if earlier.status == "reserved":
            now = utcnow()
            check_claim(
                request.request_key,
                earlier.claimed_by,
                earlier.claimed_at,
                boot_id=self.boot_id,
                now=now,
                lease_seconds=self.lease_seconds,
            )
            conn.execute(SQL.claim, {"i": earlier.id, "b": self.boot_id, "t": now})
        return Reservation(
            earlier.id,
            cost_of(earlier.epsilon, earlier.delta),
            earlier.status,
            earlier.result,
            reused=True,
        )

    def cancel(self, charge_id: int) -> None:
        """Refund a reservation whose release failed before any noise was drawn.

        The entry stays in the ledger (status ``cancelled``, cost kept for the record) but its
        cost leaves both running totals. Only ``reserved`` charges can be cancelled.
        """
        with self._transaction(write=True) as s:
            charge = found(s.get(Charge, charge_id), "charge", charge_id)
            dataset = s.get(Dataset, charge.dataset_id, with_for_update=True)
            if charge.status != "reserved" or dataset is None:
                raise ConflictError(
                    f"Charge {charge_id} is {charge.status}; it cannot be refunded."
                )
            cost = cost_of(charge.epsilon, charge.delta)
            grant = s.get(Grant, (charge.principal_id, charge.dataset_id), with_for_update=True)
            if grant is not None and charge.kind == "query":
                left = _subtract(grant_budget(grant).spent, cost)
                grant.spent_epsilon, grant.spent_delta = str(left.epsilon), str(left.delta)
            left = _subtract(dataset_budget(dataset).spent, cost)
            dataset.spent_epsilon, dataset.spent_delta = str(left.epsilon), str(left.delta)
            charge.status, charge.completed_at = "cancelled", utcnow()

    def complete(self, charge_id: int, result: dict[str, Any]) -> Charge:
        """Store the released values of a reserved charge (its cost is unchanged); the entry.

        One ``UPDATE ... RETURNING`` statement (every column but the result, which the caller
        holds: not decoded again); the returned entry is detached from any session. Only the
        server holding the charge's claim can complete it: a charge already completed, or
        taken over by another server after this one's lease expired, raises ConflictError and
        stores nothing (so one charge is never released twice).
        """
        params = {"i": charge_id, "b": self.boot_id, "result": result, "completed_at": utcnow()}
        row: dict[str, Any] | None
        if self._postgres:
            with self._statement(write=True) as conn:
                found = conn.execute(SQL.complete, params).first()
            row = None if found is None else dict(found._mapping)
        else:
            with self._raw_write() as cursor:
                values = self._raw.complete.first(cursor, params)
            row = (
                None
                if values is None
                else dict(zip(self._raw.complete.columns, values, strict=True))
            )
        if row is None:
            raise ConflictError(
                f"Charge {charge_id} is not reserved by this server any more (completed, or "
                "taken over by another server); its answer was not released here."
            )
        return Charge(**row, result=result)

    def hold_claim(self, charge_id: int) -> None:
        """Keep renewing this server's claim on a reserved charge while it is computed."""
        self._leases.hold(charge_id)

    def drop_claim(self, charge_id: int) -> None:
        """Stop renewing the claim on a charge (its computation ended)."""
        self._leases.drop(charge_id)

    def _renew_claims(self, charge_ids: list[int]) -> None:
        with self._statement(write=True) as conn:
            conn.execute(SQL.renew, {"ids": charge_ids, "b": self.boot_id, "t": utcnow()})

    def fail(self, charge_id: int, error: str) -> None:
        """Record that the engine failed after the reservation; the charge stands.

        ``error`` is shown to the analyst in the history: pass the constant
        :data:`~dpcurator.errors.ENGINE_FAILURE_MESSAGE`, never an engine's text. Like
        :meth:`complete`, only the server holding the charge's claim records it.
        """
        with self._transaction(write=True) as s:
            charge = found(s.get(Charge, charge_id), "charge", charge_id)
            if charge.status == "reserved" and charge.claimed_by == self.boot_id:
                charge.status, charge.error, charge.completed_at = "failed", error, utcnow()
