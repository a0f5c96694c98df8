"""Refused queries: a bounded audit record, and a per-analyst rate limit.

A query refused for lack of budget charges nothing but still costs the server a write
transaction (the reservation that finds the budget short) and an audit row. An analyst with no
budget left could otherwise fill the ledger as fast as the server answers (measured: 143 MB of
audit rows in 20 s, each holding the full SQL text). So:

* the audit row keeps at most :data:`AUDITED_SQL_CHARS` characters of the SQL, with the SHA-256
  of the whole text and its length (enough to recognise a query; the text itself is the
  analyst's, not private data);
* each analyst may be refused at most :data:`REFUSAL_BURST` times in a row, refilled at
  :data:`REFUSALS_PER_SECOND` (a token bucket, per server process). Past that, their queries are
  answered 429 with ``Retry-After`` before anything is planned or written, until the bucket has
  refilled. At most ``REFUSAL_BURST + REFUSALS_PER_SECOND * t`` refusals are written in ``t``
  seconds (20 in 20 s), a few kilobytes.

Whether a query is refused for budget depends only on the budgets (public to the analyst), so
the limiter's state reveals nothing about the data.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from dpcurator.service.errors import RateLimitedError

#: The most characters of a refused query's SQL kept in its audit row.
AUDITED_SQL_CHARS = 2_000
#: How many refusals in a row an analyst may have before being rate limited.
REFUSAL_BURST = 10
#: How fast the allowance refills (refusals per second).
REFUSALS_PER_SECOND = 0.5
_MAX_TRACKED = 10_000


class RefusalsLimitedError(RateLimitedError):
    """An analyst was refused too often recently; retry after ``retry_after`` seconds."""


def audited_sql(sql: str) -> dict[str, Any]:
    """The audit record of a query's SQL: a bounded prefix, its length and its SHA-256."""
    return {
        "sql": sql[:AUDITED_SQL_CHARS],
        "sql_chars": len(sql),
        "sql_sha256": hashlib.sha256(sql.encode("utf-8")).hexdigest(),
    }


class RefusalLimiter:
    """A token bucket of refusals per analyst (see the module docstring).

    Args:
        burst: refusals allowed in a row.
        per_second: the refill rate.
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(
        self,
        burst: int = REFUSAL_BURST,
        per_second: float = REFUSALS_PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.per_second = per_second
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # principal -> (tokens, at)
        self._lock = threading.Lock()

    def _tokens(self, principal_id: str, now: float) -> float:
        tokens, at = self._buckets.get(principal_id, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - at) * self.per_second)

    def check(self, principal_id: str) -> None:
        """Raise :class:`RefusalsLimitedError` if the analyst has no refusal left right now."""
        now = self._clock()
        with self._lock:
            if principal_id not in self._buckets:
                return
            tokens = self._tokens(principal_id, now)
        if tokens < 1:
            wait = math.ceil((1 - tokens) / self.per_second)
            raise RefusalsLimitedError(
                f"Too many queries of this analyst were refused recently (more than "
                f"{self.burst} in a row, refilled at {self.per_second} per second). "
                f"Retry after {wait} s.",
                retry_after=wait,
            )

    def spend(self, principal_id: str) -> None:
        """Count one refusal of the analyst."""
        now = self._clock()
        with self._lock:
            tokens = self._tokens(principal_id, now)
            if len(self._buckets) >= _MAX_TRACKED:  # forget the analysts whose buckets are full
                self._buckets = {
                    p: (t, at)
                    for p, (t, at) in self._buckets.items()
                    if t + (now - at) * self.per_second < self.burst
                }
            self._buckets[principal_id] = (tokens - 1, now)
