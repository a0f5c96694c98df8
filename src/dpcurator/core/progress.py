"""Progress of long computations, reported to whoever listens in the current context.

A background job of the service (:mod:`dpcurator.service.jobs`) listens with :func:`listening`;
a long loop calls :func:`report` with its position. The position must be a function of public
inputs only (e.g. block ``b`` of a number of blocks the analyst asked for), never of the data:
whoever reads the progress is an analyst. Without a listener :func:`report` costs one context
variable read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Listener = Callable[[int, int], None]

_LISTENER: ContextVar[Listener | None] = ContextVar("dpcurator_progress", default=None)


def report(done: int, total: int) -> None:
    """Tell the listener (if any) that ``done`` of ``total`` steps are done."""
    listener = _LISTENER.get()
    if listener is not None:
        listener(done, total)


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Send the :func:`report` calls of this context (this thread) to ``listener``."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)
