"""Helpers for tests that race threads against each other."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_in_threads(target: Callable[[], object], count: int) -> None:
    """Start ``count`` threads running ``target`` and wait until all have finished."""
    threads = [threading.Thread(target=target) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
