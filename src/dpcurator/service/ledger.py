"""The privacy ledger and audit log, stored with SQLAlchemy 2 (SQLite by default, or PostgreSQL).

The one operation that matters is :meth:`Ledger.reserve`: in a single write transaction it locks
the dataset row (the global cap) and the analyst's grant row, checks that the new cost fits BOTH,
adds it to both running totals and inserts the charge. Only then may the engine run. The
transaction is serialised by ``BEGIN IMMEDIATE`` on SQLite (one writer at a time) and by
``SELECT ... FOR UPDATE`` on PostgreSQL (rows locked in a fixed order: dataset, then grant), so two
concurrent requests can never both see the same remaining budget. A refused reservation rolls
back and changes nothing. On PostgreSQL a reservation without a request key (every query but a
retried one) runs the same steps as one statement, a function installed in the database (see
:mod:`dpcurator.service.ledger_postgres`), so the locks are not held across round trips. On
SQLite the same reservations and every completion run their statements on the raw ``sqlite3``
cursor (see :mod:`dpcurator.service.ledger_sqlite`), so the write lock is held for less time.

A query costs three short transactions: :meth:`Ledger.access` (read: the dataset row and the
caller's grant, to check visibility before any planning), :meth:`Ledger.reserve` (write: check both
budgets and insert the charge) and :meth:`Ledger.complete` (write: store the release).

Durability. SQLite runs in WAL mode with ``synchronous=NORMAL``: a committed transaction is in the
WAL file before ``COMMIT`` returns, so it survives the server process being killed at any point
(the crash test SIGKILLs the server under load), but the WAL is fsynced only at checkpoints, so an
OS crash or power loss may lose the last few commits (never corrupt the ledger). Where that matters,
use PostgreSQL (with its default ``synchronous_commit=on``). Writers wait for the lock up to
``busy_timeout``. PostgreSQL connections are pooled (``pool_size`` + ``max_overflow``).

On PostgreSQL the reservation alone commits without waiting for its WAL flush
(``SET LOCAL synchronous_commit = off``): it holds the dataset row's lock, which every query on
the dataset needs, so a flush inside it would queue all of them behind the disk (measured, with
the transaction of several statements: ~22% more queries/s without it). Nothing released is at
risk: no value leaves the server before :meth:`Ledger.complete` (or :meth:`Ledger.fail`) commits
with a flush, and a flush makes the whole WAL before it durable, the reservation included (the
WAL is written in order). A database crash in between can lose only reservations whose answers
were never sent.

Costs compose by basic sequential composition in (ε, δ): costs add exactly (Fractions stored as
text). A charge, once reserved, is never refunded: if the engine fails afterwards the charge stays
(``failed``), because the failure may already depend on the data.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeVar, cast

from sqlalchemy import (
    BindParameter,
    Connection,
    Dialect,
    Row,
    Table,
    bindparam,
    create_engine,
    event,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session as OrmSession

from dpcurator.core.measures import ApproxDP
from dpcurator.errors import BudgetExceededError, DPError, InternalInvariantError
from dpcurator.service import ledger_postgres
from dpcurator.service.errors import ConflictError, NotFoundError
from dpcurator.service.ledger_lease import (
    LEASE_SECONDS,
    LeaseKeeper,
    add_lease_column,
    check_claim,
)
from dpcurator.service.ledger_sqlite import RawStatement
from dpcurator.service.models import (
    AuditEvent,
    Base,
    Charge,
    Dataset,
    Grant,
    Principal,
    PublishedRelease,
    ServerSecret,
    Token,
    utcnow,
)

ROLES = ("owner", "analyst")
_ZERO = ApproxDP(0, 0)
SQLITE_BUSY_TIMEOUT_MS = 60_000
#: How often the background thread checkpoints the SQLite WAL into the database file.
SQLITE_CHECKPOINT_SECONDS = 1.0


@functools.lru_cache(maxsize=4096)
def cost_of(epsilon: str, delta: str) -> ApproxDP:
    """An exact cost from the text columns of the ledger (memoised: costs are immutable)."""
    return ApproxDP(Fraction(epsilon), Fraction(delta))


def _subtract(spent: ApproxDP, cost: ApproxDP) -> ApproxDP:
    return ApproxDP(spent.epsilon - cost.epsilon, spent.delta - cost.delta)


_Row = TypeVar("_Row")


def _found(row: _Row | None, what: str, key: object) -> _Row:
    """``row``, or :class:`NotFoundError` naming what was looked up."""
    if row is None:
        raise NotFoundError(f"No {what} with id {key!r}.")
    return row


def _remaining(total: ApproxDP, spent: ApproxDP) -> ApproxDP:
    return ApproxDP(max(total.epsilon - spent.epsilon, 0), max(total.delta - spent.delta, 0))


@dataclass(frozen=True)
class BudgetView:
    """A budget, what has been spent of it, and what remains (never negative)."""

    total: ApproxDP
    spent: ApproxDP

    @property
    def remaining(self) -> ApproxDP:
        """``total - spent``, floored at zero in each coordinate."""
        return _remaining(self.total, self.spent)


@dataclass(frozen=True)
class Access:
    """A dataset as one caller may use it: its row and, for analysts, their budget on it."""

    dataset: Dataset
    budget: BudgetView | None


@dataclass(frozen=True)
class ChargeRequest:
    """What :meth:`Ledger.reserve` needs to know about a release before it runs.

    ``request_key`` (an idempotency key chosen by the client) makes a retried request reuse its
    first charge instead of paying again. ``fingerprint`` identifies the question (normalised SQL
    and cost) for replay. ``charge_grant`` is false for owners, who spend only the global cap.
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


def _after(
    request: ChargeRequest, cap: Sequence[str], grant: Sequence[str | None]
) -> tuple[BudgetView | None, ApproxDP]:
    """Check ``request.cost`` against the dataset's cap and (if charged) the grant, given their
    locked (total ε, total δ, spent ε, spent δ); the grant's budget and the dataset's spending
    after the charge.

    Raises:
        BudgetExceededError: the cost does not fit the grant, or else the cap.
    """
    cost = request.cost
    budget = None
    if request.charge_grant:
        grant_view = _view(*cast("Sequence[str]", grant))
        if not (grant_view.spent + cost).fits_within(grant_view.total):
            raise BudgetExceededError(cost, grant_view.remaining, what="analyst's privacy budget")
        budget = BudgetView(grant_view.total, grant_view.spent + cost)
    cap_view = _view(*cap)
    if not (cap_view.spent + cost).fits_within(cap_view.total):
        if request.charge_grant:  # an analyst: the cap's remaining amount is not theirs to see
            raise CapExceededError(cost)
        raise BudgetExceededError(cost, cap_view.remaining, what="dataset's global privacy budget")
    return budget, cap_view.spent + cost


class CapExceededError(BudgetExceededError):
    """The dataset's global cap cannot cover an analyst's release; nothing was charged.

    Worded without the cap's remaining amount (``remaining`` is None): analysts see their own
    budget, never the global one (which the spending of other analysts moves).
    """

    def __init__(self, requested: ApproxDP) -> None:
        DPError.__init__(
            self,
            f"The dataset's global privacy budget cannot cover this release (it costs "
            f"{requested}). Nothing was charged. Ask the data owner to raise the dataset's cap.",
        )
        self.requested = requested
        self.remaining = None


def _configure_sqlite(engine: Engine) -> None:
    """Take over transaction control from pysqlite so that writers can use BEGIN IMMEDIATE."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")  # durable against process kill, see above
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        # No checkpoint inside a committing request (it stalls every writer for tens of ms):
        # the ledger's background thread checkpoints instead (see _Checkpointer).
        cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get("dpcurator_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


class _Checkpointer:
    """A daemon thread that copies the SQLite WAL back into the database every ``interval`` s.

    A PASSIVE checkpoint runs beside readers and writers without blocking them, so requests
    never pay for it (with SQLite's automatic checkpoint, the commit that crosses 1000 WAL pages
    checkpoints while holding the write lock). A final checkpoint runs on :meth:`stop`.
    """

    def __init__(self, engine: Engine, interval: float) -> None:
        self._engine = engine
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ledger-checkpoint", daemon=True)
        self._thread.start()

    def checkpoint(self) -> None:
        """Checkpoint as much of the WAL as no reader still needs (never blocks anyone)."""
        raw = self._engine.raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
            cursor.close()
        finally:
            raw.close()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            with suppress(Exception):  # a failed checkpoint is retried at the next tick
                self.checkpoint()

    def stop(self) -> None:
        """Stop the thread after a last checkpoint."""
        self._stop.set()
        self._thread.join()
        with suppress(Exception):
            self.checkpoint()


class _WriterLock:
    """One SQLite writer at a time, without polling.

    SQLite admits one writer; a writer that finds the database locked polls with sleeps of up
    to 100 ms (busy_timeout), the main source of tail latency under load. So writers queue
    first: the threads of a process on a lock, the processes (several server workers) on an
    advisory ``flock`` of a file beside the database; both wake the next waiter as soon as the
    holder leaves. busy_timeout remains the arbiter for any other process writing the file.
    """

    def __init__(self, database: str | None) -> None:
        self._lock = threading.RLock()
        self._depth = 0
        in_memory = database in (None, "", ":memory:")
        self._fd = None if in_memory else os.open(f"{database}.writer-lock", os.O_RDWR | os.O_CREAT)

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the write lock (re-entrant within a thread)."""
        with self._lock:
            self._depth += 1
            fd = self._fd if self._depth == 1 else None  # the outermost hold takes the file lock
            try:
                if fd is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                if fd is not None:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                self._depth -= 1

    def close(self) -> None:
        """Close the lock file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Ledger:
    """Budgets, charges, releases, tokens and the audit log in one relational database.

    Args:
        url: an SQLAlchemy URL, e.g. ``sqlite:///ledger.sqlite3`` (default dialect) or
            ``postgresql+psycopg://user@host/db``.
        boot_id: the identity of the running server, stored with each reservation it makes: a
            retried request whose reservation carries this id is still running (ConflictError);
            one carrying another id is still running there while its lease is live
            (ConflictError), and may be claimed and run here once it has expired (see
            :mod:`dpcurator.service.ledger_lease`). Every worker process of one server must
            share it (default: a new id for this process).
        lease_seconds: how long another server's claim on a reserved charge stays live without
            renewal; this ledger renews its own claims every third of it.
    """

    def __init__(
        self, url: str, *, boot_id: str | None = None, lease_seconds: float = LEASE_SECONDS
    ) -> None:
        self.url = url
        self.boot_id = boot_id or f"{os.getpid()}-{time.time_ns()}"
        self.lease_seconds = lease_seconds
        self._postgres = url.startswith("postgresql")
        self._write_lock: _WriterLock | None = None
        self._checkpointer: _Checkpointer | None = None
        if url.startswith("sqlite"):
            self._engine = create_engine(url, connect_args={"check_same_thread": False})
            _configure_sqlite(self._engine)
            self._write_lock = _WriterLock(self._engine.url.database)
            self._raw = _RawStatements(self._engine.dialect)  # the SQLite hot path only
        else:
            # No ping before each use (a round trip per transaction): a connection that a
            # database restart broke fails its request, and SQLAlchemy then discards the pool.
            self._engine = create_engine(url, pool_size=10, max_overflow=30, pool_recycle=1800)
        Base.metadata.create_all(self._engine)
        add_lease_column(self._engine, postgres=self._postgres)
        if self._postgres:
            ledger_postgres.install(self._engine)
        self._leases = LeaseKeeper(self._renew_claims, lease_seconds / 3)
        if url.startswith("sqlite"):
            self._checkpointer = _Checkpointer(self._engine, SQLITE_CHECKPOINT_SECONDS)

    def close(self) -> None:
        """Stop the lease and checkpoint threads and release every pooled database connection."""
        self._leases.stop()
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        if self._write_lock is not None:
            self._write_lock.close()
        self._engine.dispose()

    @contextmanager
    def _writer(self, write: bool) -> Iterator[None]:
        """Hold this process's SQLite write lock for a write transaction (else nothing)."""
        if write and self._write_lock is not None:
            with self._write_lock.hold():
                yield
        else:
            yield

    @contextmanager
    def _connection(self, *, write: bool) -> Iterator[Connection]:
        with self._writer(write), self._engine.connect() as conn:
            conn.execution_options(dpcurator_write=write)
            with conn.begin():
                yield conn

    @contextmanager
    def _statement(self, *, write: bool) -> Iterator[Connection]:
        """A connection for ONE statement, which is its own transaction: in autocommit mode on
        PostgreSQL (no BEGIN and COMMIT round trips), a transaction as usual on SQLite."""
        if not self._postgres:
            with self._connection(write=write) as conn:
                yield conn
            return
        with self._engine.connect() as conn:
            yield conn.execution_options(isolation_level="AUTOCOMMIT")

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[OrmSession]:
        with self._writer(write), self._engine.connect() as conn:
            conn.execution_options(dpcurator_write=write)
            with OrmSession(bind=conn, expire_on_commit=False) as session, session.begin():
                yield session

    @contextmanager
    def _raw_write(self) -> Iterator[sqlite3.Cursor]:
        """A ``BEGIN IMMEDIATE`` ... ``COMMIT`` on the raw ``sqlite3`` cursor of a pooled
        connection, rolled back on any error. The write lock is taken before the connection, as
        by every writer: a writer holding the lock may open a second connection, so a writer
        holding a connection must never wait for the lock (the pool could run dry)."""
        with self._writer(True), self._engine.connect() as conn:
            dbapi = conn.connection.dbapi_connection
            assert dbapi is not None
            cursor = cast("sqlite3.Cursor", dbapi.cursor())
            try:
                cursor.execute("BEGIN IMMEDIATE")
                try:
                    yield cursor
                except BaseException:
                    cursor.execute("ROLLBACK")
                    raise
                cursor.execute("COMMIT")
            finally:
                cursor.close()

    # -- principals and tokens --------------------------------------------------------------

    def create_principal(self, principal_id: str, name: str, role: str) -> Principal:
        """Add an owner or analyst; names are unique."""
        if role not in ROLES:
            raise ConflictError(f"The role must be one of {ROLES}. Got {role!r}.")
        with self._transaction(write=True) as s:
            if s.scalar(select(Principal).where(Principal.name == name)) is not None:
                raise ConflictError(f"A principal named {name!r} already exists.")
            principal = Principal(id=principal_id, name=name, role=role, created_at=utcnow())
            s.add(principal)
            s.add(_audit("principal_created", None, None, id=principal_id, name=name, role=role))
        return principal

    def principal(self, principal_id: str) -> Principal:
        """The principal with this id, or :class:`NotFoundError`."""
        with self._transaction(write=False) as s:
            return _found(s.get(Principal, principal_id), "analyst or owner", principal_id)

    def principals(self, role: str | None = None) -> list[Principal]:
        """Every principal (of one role, if given), oldest first."""
        query = select(Principal).order_by(Principal.created_at, Principal.id)
        if role is not None:
            query = query.where(Principal.role == role)
        with self._transaction(write=False) as s:
            return list(s.scalars(query))

    def add_token(
        self,
        token_id: str,
        principal_id: str,
        secret_hash: str,
        expires_at: Any = None,
        *,
        by: str | None = None,
    ) -> Token:
        """Store a new token (only the hash of its secret), audited as issued ``by`` an owner
        (None: by the server's operator, e.g. at start-up or from the command line)."""
        with self._transaction(write=True) as s:
            token = Token(
                token_id=token_id,
                principal_id=principal_id,
                secret_hash=secret_hash,
                created_at=utcnow(),
                expires_at=expires_at,
            )
            s.add(token)
            s.add(_audit("token_issued", by, None, token_id=token_id, principal=principal_id))
        return token

    def token(self, token_id: str) -> tuple[Token, Principal] | None:
        """The token with this public id and its principal, if any."""
        with self._transaction(write=False) as s:
            row = s.execute(
                select(Token, Principal)
                .join(Principal, Principal.id == Token.principal_id)
                .where(Token.token_id == token_id)
            ).first()
        return None if row is None else (row[0], row[1])

    def tokens(self, principal_id: str) -> list[Token]:
        """The tokens of a principal, oldest first."""
        with self._transaction(write=False) as s:
            return list(
                s.scalars(
                    select(Token)
                    .where(Token.principal_id == principal_id)
                    .order_by(Token.created_at, Token.token_id)
                )
            )

    def rehash_token(self, token_id: str, old_hash: str, new_hash: str) -> None:
        """Replace a token's stored hash, if it is still ``old_hash`` (a hash upgrade)."""
        with self._transaction(write=True) as s:
            token = s.get(Token, token_id)
            if token is not None and token.secret_hash == old_hash:
                token.secret_hash = new_hash

    def server_secret(self, name: str, make: Callable[[], str]) -> str:
        """The server secret ``name``, stored as ``make()`` on first use (the first writer wins
        when processes race)."""
        with suppress(IntegrityError), self._transaction(write=True) as s:
            if s.get(ServerSecret, name) is None:
                s.add(ServerSecret(name=name, value=make()))
        with self._transaction(write=False) as s:
            return _found(s.get(ServerSecret, name), "server secret", name).value

    def revoke_token(self, token_id: str, *, by: str) -> Token:
        """Mark a token revoked (idempotent); :class:`NotFoundError` if unknown."""
        with self._transaction(write=True) as s:
            token = _found(s.get(Token, token_id), "token", token_id)
            if token.revoked_at is None:
                token.revoked_at = utcnow()
                s.add(_audit("token_revoked", by, None, token_id=token_id))
        return token

    # -- datasets and grants ----------------------------------------------------------------

    def add_dataset(
        self,
        dataset_id: str,
        *,
        name: str,
        source: dict[str, Any],
        metadata_doc: dict[str, Any],
        cap: ApproxDP,
        replay_enabled: bool,
        by: str,
    ) -> Dataset:
        """Register a dataset with its global cap; ids are unique."""
        with self._transaction(write=True) as s:
            if s.get(Dataset, dataset_id) is not None:
                raise ConflictError(f"A dataset with id {dataset_id!r} already exists.")
            dataset = Dataset(
                id=dataset_id,
                name=name,
                source=source,
                metadata_doc=metadata_doc,
                cap_epsilon=str(cap.epsilon),
                cap_delta=str(cap.delta),
                spent_epsilon="0",
                spent_delta="0",
                replay_enabled=replay_enabled,
                created_at=utcnow(),
            )
            s.add(dataset)
            s.add(_audit("dataset_registered", by, dataset_id, cap=_cost_json(cap)))
        return dataset

    def dataset(self, dataset_id: str) -> Dataset:
        """The dataset with this id, or :class:`NotFoundError`."""
        with self._transaction(write=False) as s:
            return _found(s.get(Dataset, dataset_id), "dataset", dataset_id)

    def datasets(self) -> list[Dataset]:
        """Every registered dataset, by id."""
        with self._transaction(write=False) as s:
            return list(s.scalars(select(Dataset).order_by(Dataset.id)))

    def update_dataset(
        self, dataset_id: str, *, cap: ApproxDP | None, replay_enabled: bool | None, by: str
    ) -> Dataset:
        """Change the global cap and/or the replay switch of a dataset."""
        with self._transaction(write=True) as s:
            dataset = _found(
                s.get(Dataset, dataset_id, with_for_update=True), "dataset", dataset_id
            )
            detail: dict[str, Any] = {}
            if cap is not None:
                dataset.cap_epsilon, dataset.cap_delta = str(cap.epsilon), str(cap.delta)
                detail["cap"] = _cost_json(cap)
            if replay_enabled is not None:
                dataset.replay_enabled = replay_enabled
                detail["replay_enabled"] = replay_enabled
            s.add(_audit("dataset_updated", by, dataset_id, **detail))
        return dataset

    def set_grant(self, principal_id: str, dataset_id: str, budget: ApproxDP, *, by: str) -> Grant:
        """Give an analyst access to a dataset with this total budget (spending is kept)."""
        with self._transaction(write=True) as s:
            principal = s.get(Principal, principal_id)
            if principal is None or principal.role != "analyst":
                raise NotFoundError(f"No analyst with id {principal_id!r}.")
            if s.get(Dataset, dataset_id) is None:
                raise NotFoundError(f"No dataset with id {dataset_id!r}.")
            grant = s.get(Grant, (principal_id, dataset_id), with_for_update=True)
            if grant is None:
                grant = Grant(
                    principal_id=principal_id,
                    dataset_id=dataset_id,
                    spent_epsilon="0",
                    spent_delta="0",
                )
                s.add(grant)
            grant.budget_epsilon, grant.budget_delta = str(budget.epsilon), str(budget.delta)
            grant.updated_at = utcnow()
            s.add(
                _audit(
                    "budget_set", by, dataset_id, analyst=principal_id, budget=_cost_json(budget)
                )
            )
        return grant

    def grant(self, principal_id: str, dataset_id: str) -> Grant | None:
        """The grant of an analyst on a dataset, if any."""
        with self._transaction(write=False) as s:
            return s.get(Grant, (principal_id, dataset_id))

    def grants(self, *, principal_id: str | None = None) -> list[Grant]:
        """Grants, optionally of one analyst."""
        query = select(Grant).order_by(Grant.dataset_id, Grant.principal_id)
        if principal_id is not None:
            query = query.where(Grant.principal_id == principal_id)
        with self._transaction(write=False) as s:
            return list(s.scalars(query))

    def access(self, principal_id: str, dataset_id: str, *, owner: bool) -> Access:
        """The dataset and the caller's budget on it, in one read transaction.

        Raises :class:`NotFoundError` if the dataset is unknown or, for an analyst, not granted
        (an analyst without a grant does not learn that the dataset exists).
        """
        with self._statement(write=False) as conn:
            row = conn.execute(_SQL.access, {"p": principal_id, "d": dataset_id}).first()
        if row is None or (not owner and row.grant_budget_epsilon is None):
            raise NotFoundError(f"No dataset with id {dataset_id!r}.")
        *dataset, budget, budget_delta, spent, spent_delta = row
        view = None if owner else _view(budget, budget_delta, spent, spent_delta)
        return Access(Dataset(**dict(zip(_DATASET_COLUMNS, dataset, strict=True))), view)

    # -- the ledger proper ------------------------------------------------------------------

    def reserve(self, request: ChargeRequest) -> Reservation:
        """Charge ``request.cost`` atomically against the grant and the dataset cap.

        One write transaction of a few SQL statements (no ORM on this hot path): lock the dataset
        row, look up the request key, lock the grant row, check both budgets, update both running
        totals and insert the charge. A request without a key does all of it in one statement on
        PostgreSQL (see :mod:`dpcurator.service.ledger_postgres`), and on the raw cursor on SQLite
        (see :mod:`dpcurator.service.ledger_sqlite`).

        Raises:
            BudgetExceededError: the cost does not fit; nothing was changed.
            ConflictError: the request key was already used for a different request, or its
                first request is still computing (a live claim: see :meth:`hold_claim`).
            NotFoundError: unknown dataset, or the analyst has no grant on it.
        """
        if request.request_key is None:
            if self._postgres:
                return self._reserve_in_postgres(request)
            return self._reserve_in_sqlite(request)
        cost = request.cost
        who = {"p": request.principal_id, "d": request.dataset_id}
        with self._connection(write=True) as conn:
            if self._postgres:  # before any lock is taken; see Durability in the module docstring
                conn.execute(_SQL.commit_without_flush)
            # One statement locks the dataset row and, for an analyst, the grant row (in that
            # order, as everywhere); no row: unknown dataset, or no grant.
            lock = _SQL.lock_cap_and_grant if request.charge_grant else _SQL.lock_cap
            locked = conn.execute(lock, who).first()
            if locked is None:
                raise NotFoundError(f"No dataset with id {request.dataset_id!r}.")
            if request.request_key is not None:  # read under the lock: sees committed retries
                earlier = conn.execute(_SQL.by_key, {**who, "k": request.request_key}).first()
                if earlier is not None:
                    return self._reuse(conn, earlier, request)
            budget, dataset_spent = _after(request, locked[:4], locked[4:])
            charge = self._charge_row(request)
            charge_id = self._write_reservation(conn, who, charge, budget, dataset_spent)
        return Reservation(charge_id, cost, "reserved", None, False, budget)

    def _reserve_in_sqlite(self, request: ChargeRequest) -> Reservation:
        """:meth:`reserve` without a request key on SQLite: the same statements, run on the raw
        cursor (see :mod:`dpcurator.service.ledger_sqlite`)."""
        who = {"p": request.principal_id, "d": request.dataset_id}
        charge = self._charge_row(request)
        lock = self._raw.lock_cap_and_grant if request.charge_grant else self._raw.lock_cap
        with self._raw_write() as cursor:
            locked = lock.first(cursor, who)
            if locked is None:
                raise NotFoundError(f"No dataset with id {request.dataset_id!r}.")
            budget, dataset_spent = _after(request, locked[:4], locked[4:])
            if budget is not None:
                self._raw.grant_spent.run(cursor, {**who, **_spent_values(budget.spent)})
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
            "events": request.events,
            "status": "reserved",
            "claimed_by": self.boot_id,
            "claimed_at": None if request.request_key is None else now,
            "created_at": now,
        }

    def _reserve_in_postgres(self, request: ChargeRequest) -> Reservation:
        """:meth:`reserve` without a request key on PostgreSQL: one call of the function of
        :mod:`dpcurator.service.ledger_postgres`, in autocommit mode (one round trip)."""
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
        try:  # the same check in Python: words a refusal, and guards the database's arithmetic
            budget, _ = _after(request, totals[:4], totals[4:])
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
        grant: BudgetView | None,
        dataset_spent: ApproxDP,
    ) -> int:
        """Update the running totals and insert the charge; its id.

        On PostgreSQL one statement (the updates as data-modifying CTEs of the INSERT), so the
        row locks are held over one round trip fewer per total; elsewhere three statements.
        """
        if self._postgres:  # parameter names unlike any column's (see _Statements)
            params = {f"c_{name}": value for name, value in charge.items()}
            params |= {f"d_{k}": v for k, v in _spent_values(dataset_spent).items()}
            if grant is not None:
                params |= {f"g_{k}": v for k, v in _spent_values(grant.spent).items()}
            statement = _SQL.reserve_with_grant if grant is not None else _SQL.reserve_cap_only
            return int(conn.execute(statement, {**who, **params}).scalar_one())
        if grant is not None:
            conn.execute(_SQL.grant_spent, {**who, **_spent_values(grant.spent)})
        conn.execute(_SQL.dataset_spent, {**who, **_spent_values(dataset_spent)})
        return int(conn.execute(_SQL.insert_charge, charge).scalar_one())

    def _reuse(self, conn: Connection, earlier: Row[Any], request: ChargeRequest) -> Reservation:
        """Return the charge of a retried request; take its claim over if the claim expired
        (its server died: see :mod:`dpcurator.service.ledger_lease`)."""
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
            conn.execute(_SQL.claim, {"i": earlier.id, "b": self.boot_id, "t": now})
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
            charge = _found(s.get(Charge, charge_id), "charge", charge_id)
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
                found = conn.execute(_SQL.complete, params).first()
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
            conn.execute(_SQL.renew, {"ids": charge_ids, "b": self.boot_id, "t": utcnow()})

    def fail(self, charge_id: int, error: str) -> None:
        """Record that the engine failed after the reservation; the charge stands.

        ``error`` is shown to the analyst in the history: pass the constant
        :data:`~dpcurator.errors.ENGINE_FAILURE_MESSAGE`, never an engine's text. Like
        :meth:`complete`, only the server holding the charge's claim records it.
        """
        with self._transaction(write=True) as s:
            charge = _found(s.get(Charge, charge_id), "charge", charge_id)
            if charge.status == "reserved" and charge.claimed_by == self.boot_id:
                charge.status, charge.error, charge.completed_at = "failed", error, utcnow()

    def find_replay(self, principal_id: str, dataset_id: str, fingerprint: str) -> Charge | None:
        """The latest released answer of this principal to the same question, if any."""
        with self._transaction(write=False) as s:
            return s.scalar(
                select(Charge)
                .where(
                    Charge.principal_id == principal_id,
                    Charge.dataset_id == dataset_id,
                    Charge.fingerprint == fingerprint,
                    Charge.kind == "query",
                    Charge.status == "released",
                )
                .order_by(Charge.id.desc())
                .limit(1)
            )

    def charge_by_key(self, principal_id: str, request_key: str) -> Charge | None:
        """The charge (or replay) a principal made under a request key, if any."""
        with self._transaction(write=False) as s:
            return s.scalar(
                select(Charge).where(
                    Charge.principal_id == principal_id, Charge.request_key == request_key
                )
            )

    def record_replay(self, original: Charge, request_key: str | None) -> Charge:
        """Record that ``original`` was answered again from history, at zero cost; the entry.

        If a concurrent request recorded an entry under the same request key first, that entry
        is returned instead (the caller checks it answers the same question).
        """
        try:
            return self._insert_replay(original, request_key)
        except IntegrityError:
            earlier = (
                None
                if request_key is None
                else self.charge_by_key(original.principal_id, request_key)
            )
            if earlier is None:
                raise
            return earlier

    def _insert_replay(self, original: Charge, request_key: str | None) -> Charge:
        with self._transaction(write=True) as s:
            replay = Charge(
                principal_id=original.principal_id,
                dataset_id=original.dataset_id,
                kind="replay",
                request_key=request_key,
                fingerprint=original.fingerprint,
                query_text=original.query_text,
                epsilon="0",
                delta="0",
                events=[],
                status="released",
                replay_of=original.id,
                result=original.result,
                created_at=utcnow(),
                completed_at=utcnow(),
            )
            s.add(replay)
        return replay

    def charge(self, charge_id: int) -> Charge:
        """One ledger entry, or :class:`NotFoundError`."""
        with self._transaction(write=False) as s:
            return _found(s.get(Charge, charge_id), "charge", charge_id)

    def history(
        self, *, dataset_id: str | None = None, principal_id: str | None = None, limit: int = 100
    ) -> list[Charge]:
        """Ledger entries, newest first, optionally of one dataset and/or one principal."""
        query = select(Charge).order_by(Charge.id.desc()).limit(limit)
        if dataset_id is not None:
            query = query.where(Charge.dataset_id == dataset_id)
        if principal_id is not None:
            query = query.where(Charge.principal_id == principal_id)
        with self._transaction(write=False) as s:
            return list(s.scalars(query))

    def charged_total(self, dataset_id: str) -> ApproxDP:
        """The exact sum of the live charges on a dataset (equals the dataset's running total)."""
        with self._transaction(write=False) as s:
            rows = s.execute(
                select(Charge.epsilon, Charge.delta).where(
                    Charge.dataset_id == dataset_id, Charge.status != "cancelled"
                )
            ).all()
        total = _ZERO
        for epsilon, delta in rows:
            total = total + cost_of(epsilon, delta)
        return total

    def count_charges(self, dataset_id: str) -> int:
        """How many live charges (not replays, not cancelled) a dataset has."""
        with self._transaction(write=False) as s:
            count = s.scalar(
                select(func.count())
                .select_from(Charge)
                .where(
                    Charge.dataset_id == dataset_id,
                    Charge.kind != "replay",
                    Charge.status != "cancelled",
                )
            )
        return int(count or 0)

    # -- published releases and audit -------------------------------------------------------

    def publish(
        self, release_id: str, *, dataset_id: str, name: str, charge_id: int, results: list[Any]
    ) -> PublishedRelease:
        """Store a batch release (already charged) so that it can be read at no cost."""
        with self._transaction(write=True) as s:
            charge = _found(s.get(Charge, charge_id), "charge", charge_id)
            charge.status, charge.completed_at = "released", utcnow()
            charge.result = {"release_id": release_id, "results": results}
            release = PublishedRelease(
                id=release_id,
                dataset_id=dataset_id,
                name=name,
                charge_id=charge_id,
                results=results,
                created_by=charge.principal_id,
                created_at=utcnow(),
            )
            s.add(release)
        return release

    def release(self, release_id: str) -> PublishedRelease:
        """A published release, or :class:`NotFoundError`."""
        with self._transaction(write=False) as s:
            return _found(s.get(PublishedRelease, release_id), "release", release_id)

    def releases(self, dataset_id: str) -> list[PublishedRelease]:
        """The releases published on a dataset, newest first."""
        with self._transaction(write=False) as s:
            return list(
                s.scalars(
                    select(PublishedRelease)
                    .where(PublishedRelease.dataset_id == dataset_id)
                    .order_by(PublishedRelease.created_at.desc(), PublishedRelease.id)
                )
            )

    def audit(
        self, action: str, principal_id: str | None, dataset_id: str | None, **detail: Any
    ) -> None:
        """Append an event to the audit log."""
        with self._transaction(write=True) as s:
            s.add(_audit(action, principal_id, dataset_id, **detail))

    def audit_log(self, limit: int = 200) -> list[AuditEvent]:
        """The latest audit events, newest first."""
        with self._transaction(write=False) as s:
            return list(s.scalars(select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit)))


def grant_budget(grant: Grant) -> BudgetView:
    """The budget of a grant as exact costs."""
    return BudgetView(
        cost_of(grant.budget_epsilon, grant.budget_delta),
        cost_of(grant.spent_epsilon, grant.spent_delta),
    )


def dataset_budget(dataset: Dataset) -> BudgetView:
    """The global cap of a dataset as exact costs."""
    return BudgetView(
        cost_of(dataset.cap_epsilon, dataset.cap_delta),
        cost_of(dataset.spent_epsilon, dataset.spent_delta),
    )


def _view(total_epsilon: str, total_delta: str, spent_epsilon: str, spent_delta: str) -> BudgetView:
    return BudgetView(cost_of(total_epsilon, total_delta), cost_of(spent_epsilon, spent_delta))


def _spent_values(spent: ApproxDP) -> dict[str, str]:
    return {"spent_epsilon": str(spent.epsilon), "spent_delta": str(spent.delta)}


def _table(model: type[Base]) -> Table:
    table = model.__table__
    if not isinstance(table, Table):
        raise InternalInvariantError(f"{model.__name__} is not mapped to a table.")
    return table


#: The columns :meth:`Ledger.reserve` sets when it inserts a charge.
_DATASET_COLUMNS = tuple(column.name for column in _table(Dataset).columns)
_RESERVED_CHARGE_COLUMNS = (
    "principal_id",
    "dataset_id",
    "kind",
    "request_key",
    "fingerprint",
    "query_text",
    "epsilon",
    "delta",
    "events",
    "status",
    "claimed_by",
    "claimed_at",
    "created_at",
)


class _Statements:
    """The statements of the hot path, built once with bound parameters (no ORM per request)."""

    def __init__(self) -> None:
        datasets, grants, charges = _table(Dataset), _table(Grant), _table(Charge)
        d: BindParameter[str] = bindparam("d")
        p: BindParameter[str] = bindparam("p")
        cap = (datasets.c.cap_epsilon, datasets.c.cap_delta)
        spent = (datasets.c.spent_epsilon, datasets.c.spent_delta)
        grant_cols = (grants.c.budget_epsilon, grants.c.budget_delta)
        grant_spent = (grants.c.spent_epsilon, grants.c.spent_delta)
        is_grant = (grants.c.principal_id == p) & (grants.c.dataset_id == d)
        granted = [column.label(f"grant_{column.name}") for column in (*grant_cols, *grant_spent)]
        self.access = (  # the dataset, and the grant's columns (NULL without a grant)
            select(*datasets.columns, *granted)
            .select_from(datasets.outerjoin(grants, is_grant))
            .where(datasets.c.id == d)
        )
        self.lock_cap = select(*cap, *spent).where(datasets.c.id == d).with_for_update(of=datasets)
        self.lock_cap_and_grant = (
            select(*cap, *spent, *granted)
            .select_from(datasets.join(grants, is_grant))
            .where(datasets.c.id == d)
            .with_for_update(of=[datasets, grants])
        )
        self.by_key = select(
            *(
                charges.c[name]
                for name in (
                    "id",
                    "fingerprint",
                    "dataset_id",
                    "status",
                    "claimed_by",
                    "claimed_at",
                    "epsilon",
                    "delta",
                    "result",
                )
            )
        ).where((charges.c.principal_id == p) & (charges.c.request_key == bindparam("k")))
        self.grant_spent = update(grants).where(is_grant)
        self.dataset_spent = update(datasets).where(datasets.c.id == d)
        self.insert_charge = insert(charges).returning(charges.c.id)
        # PostgreSQL's one-statement reservation: the running totals are updated by CTEs.
        dataset_cte = (
            update(datasets)
            .where(datasets.c.id == d)
            .values(
                spent_epsilon=bindparam("d_spent_epsilon"), spent_delta=bindparam("d_spent_delta")
            )
            .cte("ds")
        )
        grant_cte = (
            update(grants)
            .where(is_grant)
            .values(
                spent_epsilon=bindparam("g_spent_epsilon"), spent_delta=bindparam("g_spent_delta")
            )
            .cte("gr")
        )
        # Every value is an explicit parameter whose name is no column's: SQLAlchemy would
        # otherwise also SET any column named like a parameter in the UPDATE CTEs.
        insert_named = (
            insert(charges)
            .values({name: bindparam(f"c_{name}") for name in _RESERVED_CHARGE_COLUMNS})
            .returning(charges.c.id)
        )
        self.reserve_cap_only = insert_named.add_cte(dataset_cte)
        self.reserve_with_grant = insert_named.add_cte(grant_cte, dataset_cte)
        # This transaction only (LOCAL): the next one on the pooled connection flushes again.
        self.commit_without_flush = text("SET LOCAL synchronous_commit = off")
        self.claim = (
            update(charges)
            .where(charges.c.id == bindparam("i"))
            .values(claimed_by=bindparam("b"), claimed_at=bindparam("t"))
        )
        mine = (charges.c.status == "reserved") & (charges.c.claimed_by == bindparam("b"))
        self.renew = (
            update(charges)
            .where(charges.c.id.in_(bindparam("ids", expanding=True)) & mine)
            .values(claimed_at=bindparam("t"))
        )
        self.complete = (
            update(charges)
            .where((charges.c.id == bindparam("i")) & mine)
            .values(status="released")
            .returning(*(column for column in charges.columns if column.name != "result"))
        )


_SQL = _Statements()


class _RawStatements:
    """The SQLite hot path's statements of :data:`_SQL`, compiled for the raw cursor with the
    parameters the ledger passes them."""

    def __init__(self, dialect: Dialect) -> None:
        spent = ("spent_epsilon", "spent_delta")
        self.lock_cap = RawStatement(_SQL.lock_cap, dialect, ())
        self.lock_cap_and_grant = RawStatement(_SQL.lock_cap_and_grant, dialect, ())
        self.grant_spent = RawStatement(_SQL.grant_spent, dialect, spent)
        self.dataset_spent = RawStatement(_SQL.dataset_spent, dialect, spent)
        self.insert_charge = RawStatement(_SQL.insert_charge, dialect, _RESERVED_CHARGE_COLUMNS)
        self.complete = RawStatement(_SQL.complete, dialect, ("result", "completed_at"))


def _cost_json(cost: ApproxDP) -> dict[str, str]:
    return {"epsilon": str(cost.epsilon), "delta": str(cost.delta)}


def _audit(
    action: str, principal_id: str | None, dataset_id: str | None, **detail: Any
) -> AuditEvent:
    return AuditEvent(
        at=utcnow(), principal_id=principal_id, action=action, dataset_id=dataset_id, detail=detail
    )
