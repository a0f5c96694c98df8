"""A bounded, thread-safe LRU mapping (plan, query-text and result caches)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from dpcurator._validation import fail

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """A bounded, thread-safe least-recently-used mapping.

    Args:
        maxsize: how many entries are kept (the least recently used is dropped first).
        maxweight: the most total weight kept, or None for no bound but ``maxsize``. The least
            recently used entries are dropped until the total fits; an entry heavier than
            ``maxweight`` on its own is not stored at all.
        weigh: the weight of an entry (key, value), e.g. how many values it holds; required
            with ``maxweight``. Callers whose hits must reveal nothing private weigh entries from
            public inputs only (what is kept, and so what hits, then depends on those alone).
    """

    def __init__(
        self,
        maxsize: int,
        *,
        maxweight: int | None = None,
        weigh: Callable[[K, V], int] | None = None,
    ) -> None:
        if not isinstance(maxsize, int) or isinstance(maxsize, bool) or maxsize < 1:
            raise fail("LruCache", "maxsize", "an int >= 1", maxsize)
        if maxweight is not None and (
            not isinstance(maxweight, int) or isinstance(maxweight, bool) or maxweight < 1
        ):
            raise fail("LruCache", "maxweight", "an int >= 1 or None", maxweight)
        if (maxweight is None) != (weigh is None):
            raise fail("LruCache", "weigh", "given exactly when maxweight is given", weigh)
        self.maxsize = maxsize
        self.maxweight = maxweight
        self._weigh = weigh
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.weight = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        """The value stored under ``key`` (now the most recently used), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self.hits += 1
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key``, dropping the least recently used entries while the
        cache holds more than ``maxsize`` entries or ``maxweight`` weight."""
        weight = 0 if self._weigh is None else self._weigh(key, value)
        if self.maxweight is not None and weight > self.maxweight:
            return
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self.weight -= previous[1]
            self._entries[key] = (value, weight)
            self.weight += weight
            while len(self._entries) > self.maxsize or (
                self.maxweight is not None and self.weight > self.maxweight
            ):
                _, (_, dropped) = self._entries.popitem(last=False)
                self.weight -= dropped
