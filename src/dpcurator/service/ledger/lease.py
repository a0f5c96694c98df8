"""Leases on the charges of requests that carry an idempotency key.

A request with a key may be retried, possibly on another server sharing the ledger. Its charge,
while ``reserved``, is CLAIMED by the server computing it: ``claimed_by`` (that server's boot id)
and ``claimed_at`` (when the claim was made or last renewed). A retry finding the charge:

* claimed by its own server, or claimed elsewhere less than ``lease_seconds`` ago: the first
  request is still computing; the retry is answered 409 (ConflictError) and runs nothing;
* claimed elsewhere longer ago (that server died mid-computation): the retry takes the claim over
  and computes the release itself. The charge was paid once and is released once.

The claimant renews its claims while it computes: a :class:`LeaseKeeper` thread per ledger renews
every live claim of the process in one ``UPDATE`` every ``lease_seconds / 3``, so a request costs
nothing more than adding and removing its charge id from a set (short requests never see a
renewal). A server whose claim was taken over cannot release its answer any more (the completion
is conditional on the claim), so two servers never both release one charge.

Clocks: the claim's age is judged by the retrying server's clock against the claimant's
``claimed_at``; servers sharing a ledger need clocks in step to well within ``lease_seconds``
(the default, 30 s, leaves a wide margin over NTP's milliseconds).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.exc import OperationalError

from dpcurator.service.errors import ConflictError

#: How long a claim stays live without renewal (seconds).
LEASE_SECONDS = 30.0
_LOG = logging.getLogger("dpcurator.service")


def add_lease_column(engine: Engine, *, postgres: bool) -> None:
    """Add ``charges.claimed_at`` to a ledger created before leases existed (idempotent, safe
    when several servers start at once)."""
    with engine.connect() as conn:
        if _has_lease_column(conn):
            return
    if postgres:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE charges ADD COLUMN IF NOT EXISTS claimed_at TIMESTAMP"))
        return
    try:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE charges ADD COLUMN claimed_at DATETIME"))
    except OperationalError:  # another server added it first ("duplicate column name")
        with engine.connect() as conn:
            if not _has_lease_column(conn):
                raise


def _has_lease_column(conn: Connection) -> bool:
    return any(column["name"] == "claimed_at" for column in inspect(conn).get_columns("charges"))


def check_claim(
    request_key: str | None,
    claimed_by: str,
    claimed_at: datetime | None,
    *,
    boot_id: str,
    now: datetime,
    lease_seconds: float,
) -> None:
    """Raise ConflictError if a reserved charge's claim is live (see the module docstring).

    A claim without ``claimed_at`` was made by a server predating leases and counts as expired.
    """
    live = claimed_at is not None and now - claimed_at < timedelta(seconds=lease_seconds)
    if claimed_by == boot_id or live:
        raise ConflictError(f"The request with key {request_key!r} is still running. Retry later.")


class LeaseKeeper:
    """Renews the claims of the charges this process is computing (see the module docstring).

    Args:
        renew: renews the claims on these charge ids (one statement).
        interval: seconds between renewals (a third of the lease).
    """

    def __init__(self, renew: Callable[[list[int]], None], interval: float) -> None:
        self._renew = renew
        self._interval = interval
        self._held: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, charge_id: int) -> None:
        """Keep renewing the claim on ``charge_id`` until :meth:`drop`."""
        with self._lock:
            self._held[charge_id] = self._held.get(charge_id, 0) + 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ledger-leases", daemon=True)
                self._thread.start()

    def drop(self, charge_id: int) -> None:
        """Stop renewing the claim on ``charge_id``."""
        with self._lock:
            count = self._held.pop(charge_id, 0) - 1
            if count > 0:
                self._held[charge_id] = count

    def held(self) -> list[int]:
        """The charge ids whose claims are being renewed."""
        with self._lock:
            return sorted(self._held)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            held = self.held()
            if held:
                try:
                    self._renew(held)
                except Exception:  # retried at the next tick, well within the lease
                    _LOG.exception("renewing the claims on charges %s failed", held)

    def stop(self) -> None:
        """Stop the renewal thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
