"""The ledger's database: its engine, the SQLite settings, and the transactions of every operation.

On SQLite: WAL mode with ``synchronous=NORMAL`` (see Durability in :mod:`dpcurator.service.ledger`),
``BEGIN IMMEDIATE`` for writers, one writer at a time without polling (:class:`_WriterLock`) and
the WAL checkpointed by a background thread (:class:`_Checkpointer`). On PostgreSQL: a pool of
connections, and one-statement operations in autocommit mode. The tables (and PostgreSQL's
reservation function, :mod:`dpcurator.service.ledger.postgres`) are created when missing.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Any, TypeVar, cast

from sqlalchemy import Connection, ForeignKey, LargeBinary, String, create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.orm import Session as OrmSession

from dpcurator.service.errors import NotFoundError
from dpcurator.service.ledger import epoch as ledger_epoch
from dpcurator.service.ledger import postgres as ledger_postgres
from dpcurator.service.ledger.health import OutageWatch
from dpcurator.service.ledger.lease import add_lease_column
from dpcurator.service.models import Base, utcnow

SQLITE_BUSY_TIMEOUT_MS = 60_000
#: How often the background thread checkpoints the SQLite WAL into the database file.
SQLITE_CHECKPOINT_SECONDS = 1.0


_Row = TypeVar("_Row")


class PmwMode(Base):
    """A private multiplicative weights mode of a dataset (:mod:`dpcurator.service.stores.pmw`):
    public parameters, the charge paid when it opened, the curator's PRIVATE state (exact
    histogram, synthetic distribution, open sparse-vector run) and the public counters."""

    __tablename__ = "pmw_modes"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), index=True)
    params: Mapped[dict[str, Any]]
    charge_id: Mapped[int] = mapped_column(ForeignKey("charges.id"))
    state: Mapped[bytes] = mapped_column(LargeBinary)
    updates_used: Mapped[int] = mapped_column(default=0)
    queries_answered: Mapped[int] = mapped_column(default=0)
    created_by: Mapped[str] = mapped_column(ForeignKey("principals.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class SyntheticRelease(Base):
    """A published synthetic table or set of contingency tables
    (:mod:`dpcurator.service.stores.synth`): public request, the charge paid before it ran, the
    job's status and progress, and the released table (Parquet; post-processing, free to read)."""

    __tablename__ = "synthetic_releases"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), index=True)
    kind: Mapped[str] = mapped_column(String(20))
    params: Mapped[dict[str, Any]]
    charge_id: Mapped[int] = mapped_column(ForeignKey("charges.id"))
    public: Mapped[bool] = mapped_column(default=False)
    status: Mapped[str] = mapped_column(String(20), default="running")
    progress: Mapped[dict[str, Any]]
    rows: Mapped[int | None] = mapped_column(default=None)
    data: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    created_by: Mapped[str] = mapped_column(ForeignKey("principals.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


def found(row: _Row | None, what: str, key: object) -> _Row:
    """``row``, or :class:`NotFoundError` naming what was looked up."""
    if row is None:
        raise NotFoundError(f"No {what} with id {key!r}.")
    return row


def _configure_sqlite(engine: Engine) -> None:
    """Take over transaction control from pysqlite so that writers can use BEGIN IMMEDIATE."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        # Durable against the process being killed (see Durability in dpcurator.service.ledger).
        cursor.execute("PRAGMA synchronous=NORMAL")
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


class LedgerDatabase:
    """The ledger's database at an SQLAlchemy ``url`` (see
    :class:`~dpcurator.service.ledger.Ledger`) and the transactions its operations run in."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._postgres = url.startswith("postgresql")
        self._write_lock: _WriterLock | None = None
        self._checkpointer: _Checkpointer | None = None
        if url.startswith("sqlite"):
            self._engine = create_engine(url, connect_args={"check_same_thread": False})
            _configure_sqlite(self._engine)
            self._write_lock = _WriterLock(self._engine.url.database)
        else:
            # No ping before each use (a round trip per transaction): a connection that a
            # database restart broke fails its request, and SQLAlchemy then discards the pool.
            self._engine = create_engine(url, pool_size=10, max_overflow=30, pool_recycle=1800)
        Base.metadata.create_all(self._engine)
        add_lease_column(self._engine, postgres=self._postgres)
        ledger_epoch.install(self._engine, postgres=self._postgres)
        self._outages = OutageWatch(self._engine.url.get_backend_name())
        database = self._engine.url.database
        local = not self._postgres and database not in (None, "", ":memory:")
        self._epoch_path = database if local else None
        self._epoch_readers = threading.local()
        self._epoch_lock = threading.Lock()
        self._epoch_connections: list[sqlite3.Connection] = []
        if self._postgres:
            ledger_postgres.install(self._engine)
        if url.startswith("sqlite"):
            self._checkpointer = _Checkpointer(self._engine, SQLITE_CHECKPOINT_SECONDS)

    def close(self) -> None:
        """Stop the checkpoint thread and release every pooled database connection."""
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        if self._write_lock is not None:
            self._write_lock.close()
        with self._epoch_lock:
            for reader in self._epoch_connections:
                reader.close()
            self._epoch_connections.clear()
        self._engine.dispose()

    @contextmanager
    def _writer(self, write: bool) -> Iterator[None]:
        """Hold this process's SQLite write lock for a write transaction (else nothing)."""
        if write and self._write_lock is not None:
            with self._write_lock.hold():
                yield
        else:
            yield

    @property
    def epoch_reads_are_local(self) -> bool:
        """Whether :meth:`revocation_epoch` reads a local file (SQLite: microseconds, never
        waiting for a writer, so it may run on the event loop) rather than a server."""
        return self._epoch_path is not None

    def revocation_epoch(self) -> int:
        """The revocation epoch (:mod:`dpcurator.service.ledger.epoch`): one primary-key read
        that takes no lock. On SQLite each thread reads on a connection of its own, opened once
        outside the pool (~5 µs instead of ~100 µs through a pooled connection); in WAL mode a
        reader never waits for a writer. On PostgreSQL one autocommit statement."""
        with self._outages.watch(write=False):
            if self._epoch_path is None:
                with self._engine.connect() as conn:
                    auto = conn.execution_options(isolation_level="AUTOCOMMIT")
                    return int(auto.exec_driver_sql(ledger_epoch.READ_EPOCH).scalar_one())
            reader: sqlite3.Connection | None = getattr(self._epoch_readers, "conn", None)
            if reader is None:
                reader = sqlite3.connect(
                    self._epoch_path, isolation_level=None, check_same_thread=False
                )
                reader.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
                self._epoch_readers.conn = reader
                with self._epoch_lock:
                    self._epoch_connections.append(reader)
            # fetchall: the statement runs to its end, so no read transaction stays open (one
            # would pin the WAL: no checkpoint could pass it).
            rows = reader.execute(ledger_epoch.READ_EPOCH).fetchall()
            return int(rows[0][0])

    @contextmanager
    def _connection(self, *, write: bool) -> Iterator[Connection]:
        with self._outages.watch(write=write), self._writer(write), self._engine.connect() as conn:
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
        with self._outages.watch(write=write), self._engine.connect() as conn:
            yield conn.execution_options(isolation_level="AUTOCOMMIT")

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[OrmSession]:
        with self._outages.watch(write=write), self._writer(write), self._engine.connect() as conn:
            conn.execution_options(dpcurator_write=write)
            with OrmSession(bind=conn, expire_on_commit=False) as session, session.begin():
                yield session

    @contextmanager
    def _raw_write(self) -> Iterator[sqlite3.Cursor]:
        """A ``BEGIN IMMEDIATE`` ... ``COMMIT`` on the raw ``sqlite3`` cursor of a pooled
        connection, rolled back on any error. The write lock is taken before the connection, as
        by every writer: a writer holding the lock may open a second connection, so a writer
        holding a connection must never wait for the lock (the pool could run dry)."""
        with self._outages.watch(write=True), self._writer(True), self._engine.connect() as conn:
            dbapi = conn.connection.dbapi_connection
            assert dbapi is not None
            cursor = cast("sqlite3.Cursor", dbapi.cursor())
            try:
                cursor.execute("BEGIN IMMEDIATE")
                try:
                    yield cursor
                except BaseException:
                    if dbapi.in_transaction:  # SQLite rolls back by itself on a full disk
                        cursor.execute("ROLLBACK")
                    raise
                cursor.execute("COMMIT")
            finally:
                cursor.close()
