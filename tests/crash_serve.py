"""``dpcurator serve`` that kills itself (SIGKILL) at one point of a stream-events request.

``python -m tests.crash_serve serve ...`` with ``DPCURATOR_TEST_CRASH=before:N`` or ``after:N``:
the N-th write transaction of the ledger opened while ``POST /v1/streams/{id}/events`` is being
answered is the crash point; ``before`` kills the process once the transaction's statements ran
but before it commits, ``after`` right after it committed. Nothing else is changed, so the
process dies as a real crash would: no rollback, no ``finally``, no lease released. Used by
``tests/test_service_streams_crash.py`` (issue 24, item 2).
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from dpcurator.cli import main
from dpcurator.service.ledger.database import LedgerDatabase

_PHASE, _, _NUMBER = os.environ.get("DPCURATOR_TEST_CRASH", "none:0").partition(":")
_TARGET = int(_NUMBER)
_counter = itertools.count(1)
_lock = threading.Lock()
_inside = threading.local()


def _in_events_request() -> bool:
    """Whether the calling thread is answering ``POST /v1/streams/{id}/events``."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "post_events" and code.co_filename.endswith(
            os.path.join("routes", "streams.py")
        ):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _wrap(name: str, is_write: Callable[[dict[str, Any]], bool]) -> None:
    original: Callable[..., AbstractContextManager[Any]] = getattr(LedgerDatabase, name)

    @contextmanager
    def wrapped(self: LedgerDatabase, *args: Any, **kwargs: Any) -> Iterator[Any]:
        outermost = not getattr(_inside, "active", False)
        if not (outermost and is_write(kwargs) and _in_events_request()):
            with original(self, *args, **kwargs) as inner:
                yield inner
            return
        with _lock:
            number = next(_counter)
        _inside.active = True
        try:
            with original(self, *args, **kwargs) as inner:
                yield inner
                if _PHASE == "before" and number == _TARGET:
                    _die()
        finally:
            _inside.active = False
        if _PHASE == "after" and number == _TARGET:
            _die()

    setattr(LedgerDatabase, name, wrapped)


def install() -> None:
    """Wrap the ledger's write transactions (only in the crashing server's process)."""
    for name in ("_connection", "_transaction", "_statement"):
        _wrap(name, lambda kwargs: bool(kwargs.get("write")))
    _wrap("_raw_write", lambda _kwargs: True)


if __name__ == "__main__":
    install()
    sys.exit(main(sys.argv[1:]))
