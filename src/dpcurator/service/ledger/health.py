"""Ledger outages: told apart from bugs, answered 503 with ``Retry-After``, logged once each.

When the ledger's database cannot be reached (PostgreSQL down or refusing connections, a broken
connection) or cannot be written (a full disk, a read-only file, an I/O error, a lock not granted
within the busy timeout), every ledger operation raises :class:`LedgerUnavailableError` instead
of the driver's exception. The app answers it 503 with ``Retry-After`` and its own problem type
(``urn:dpcurator:problem:ledger-unavailable``), not 500.

What is charged does not change: each ledger operation is one transaction, so an operation that
fails this way wrote nothing (a reservation that fails charged nothing; a completion that fails
leaves its reservation charged and unreleased, as an engine failure after the charge does).

An outage is logged once when the first operation fails (a warning naming the database and the
driver's one-line reason) and once when an operation next succeeds (a write, if a write failed:
a full disk still serves reads), with how long it lasted and how many operations failed
meanwhile; not once per request.

Which errors count: SQLite's BUSY, LOCKED, NOMEM, READONLY, IOERR, FULL, CANTOPEN and
PROTOCOL result codes (a syntax error or a missing table stays a bug: 500); on PostgreSQL any
error before the server answered (no SQLSTATE), an invalidated connection, and SQLSTATE classes
08 (connection exception), 53 (insufficient resources: disk full, out of memory or
connections), 57P (the server shutting down or starting up) and 58 (system error).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import DBAPIError

from dpcurator.errors import DPError

#: Seconds a client is told to wait before retrying.
RETRY_AFTER_SECONDS = 5
_LOG = logging.getLogger("dpcurator.service.ledger")
#: SQLite's primary result codes of a database that cannot be reached or written.
_SQLITE_UNAVAILABLE = {5, 6, 7, 8, 10, 13, 14, 15}
_POSTGRES_CLASSES = ("08", "53", "57P", "58")


class LedgerUnavailableError(DPError):
    """The ledger's database cannot be reached or written now; retry after ``retry_after``
    seconds. Nothing was charged by the operation that failed."""

    def __init__(self, message: str, *, retry_after: int = RETRY_AFTER_SECONDS) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` (a SQLAlchemy or driver exception) means the database is unreachable or
    unwritable, rather than a bug in a statement."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorcode", None)
        return code is not None and code & 0xFF in _SQLITE_UNAVAILABLE
    module = type(orig).__module__
    if module.startswith("psycopg"):
        sqlstate = getattr(orig, "sqlstate", None)
        name = type(orig).__name__
        if sqlstate is None:  # failed before the server answered (refused, closed, lost)
            return name in ("OperationalError", "InterfaceError")
        return str(sqlstate).startswith(_POSTGRES_CLASSES)
    return False


def _reason(exc: BaseException) -> str:
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    lines = str(orig).strip().splitlines()
    return f"{type(orig).__name__}: {lines[0] if lines else ''}"


class OutageWatch:
    """Turns the database errors of one ledger handle into :class:`LedgerUnavailableError` and
    logs each outage once (when it starts and when it ends)."""

    def __init__(self, database: str) -> None:
        self._database = database
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._failed = 0
        self._writes_failed = False

    @property
    def down(self) -> bool:
        """Whether the last operation failed for want of the database."""
        return self._down_since is not None

    @contextmanager
    def watch(self, *, write: bool) -> Iterator[None]:
        """Run one ledger operation (``write``: one that writes); its database errors that mean
        an outage are re-raised as :class:`LedgerUnavailableError` (any other exception passes
        unchanged). Once a write failed, only a write that succeeds ends the outage (a full
        disk still serves reads)."""
        try:
            yield
        except (DBAPIError, sqlite3.Error) as exc:
            if not unavailable(exc):
                raise
            self._failure(exc, write)
            raise LedgerUnavailableError(
                "The privacy ledger is unavailable; nothing was charged by this request. "
                f"Retry in {RETRY_AFTER_SECONDS} s."
            ) from exc
        if self._down_since is not None:  # read without the lock: the common case is cheap
            self._recovered(write)

    def _failure(self, exc: BaseException, write: bool) -> None:
        with self._lock:
            self._failed += 1
            self._writes_failed = self._writes_failed or write
            if self._down_since is not None:
                return
            self._down_since = time.monotonic()
        _LOG.warning(
            "ledger unavailable (%s: %s); answering 503 until it recovers",
            self._database,
            _reason(exc),
        )

    def _recovered(self, write: bool) -> None:
        with self._lock:
            if self._down_since is None or (self._writes_failed and not write):
                return
            lasted, failed = time.monotonic() - self._down_since, self._failed
            self._down_since, self._failed, self._writes_failed = None, 0, False
        _LOG.warning(
            "ledger available again (%s) after %.1f s; %d operations failed meanwhile",
            self._database,
            lasted,
            failed,
        )
