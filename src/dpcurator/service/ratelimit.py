"""Failed sign-ins counted per key (a client address, a token id) in a sliding window.

The counts only ever turn a *failed* sign-in into a 429 (with ``Retry-After``): a token that
verifies is never refused because of failures, its own or anyone's, so an attacker cannot lock a
victim out by failing in its name. Memory stays bounded: past ``max_keys`` keys, the keys without
a failure in the window are dropped (and, if still too many, all of them).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

DEFAULT_MAX_KEYS = 10_000


@dataclass(frozen=True)
class Failure:
    """What recording one failure found: the failures of its key in the window (this one
    included), whether the key is now over the limit, and in how many seconds it may retry."""

    count: int
    limited: bool
    retry_after: int


class FailureWindow:
    """At most ``limit`` failures per key in any ``window`` seconds (thread-safe)."""

    def __init__(self, limit: int, window: float, *, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        self.limit = limit
        self.window = window
        self.max_keys = max_keys
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> deque[float]:
        failures = self._failures.setdefault(key, deque())
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        return failures

    def limited(self, key: str) -> Failure | None:
        """The state of ``key`` if it is over the limit now (nothing is recorded), else None."""
        now = time.monotonic()
        with self._lock:
            failures = self._failures.get(key)
            if failures is None:
                return None
            failures = self._recent(key, now)
            if len(failures) < self.limit:
                return None
            return Failure(len(failures), True, self._retry_after(failures, now))

    def record(self, key: str) -> Failure:
        """Count one failure of ``key`` now."""
        now = time.monotonic()
        with self._lock:
            if key not in self._failures and len(self._failures) >= self.max_keys:
                self._failures = {
                    k: v for k, v in self._failures.items() if v and v[-1] > now - self.window
                }
                if len(self._failures) >= self.max_keys:
                    self._failures.clear()
            failures = self._recent(key, now)
            failures.append(now)
            return Failure(
                len(failures), len(failures) > self.limit, self._retry_after(failures, now)
            )

    def _retry_after(self, failures: deque[float], now: float) -> int:
        """Seconds until one more failure would be within the limit (0 if it is now)."""
        if len(failures) < self.limit:
            return 0
        return max(1, int(failures[-self.limit] + self.window - now) + 1)


class EventBudget:
    """At most ``limit`` events per ``window`` seconds in all (bounds the audit of failures)."""

    def __init__(self, limit: int, window: float) -> None:
        self.limit = limit
        self.window = window
        self._started = time.monotonic()
        self._used = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Whether one more event fits in the current window (and count it if so)."""
        now = time.monotonic()
        with self._lock:
            if now - self._started >= self.window:
                self._started, self._used = now, 0
            if self._used >= self.limit:
                return False
            self._used += 1
            return True
