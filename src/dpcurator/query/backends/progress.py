"""Progress of the long steps of opening a table: log lines for a server, a bar for a person.

Opening a table of 10^8 rows takes seconds to minutes per step (loading the private copy,
counting its cube, a bounding column's first use). :func:`open_step` logs each step's start and
end with its time on ``dpcurator.engine`` (INFO), a line with the engine's progress every
:data:`LOG_EVERY` seconds while a step runs (a server's log shows a long open advancing), and,
given a terminal stream, redraws one line there (``Opening 't': loading ... [####    ] 42% 3.1 s``)
every :data:`DRAW_EVERY` seconds. The engine's progress is polled from another thread (DuckDB's
``query_progress``, a percentage or -1 when unknown). Nothing here depends on the data beyond
the time a step takes, which only the data owner sees.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from dpcurator.query.backends.base import ENGINE_LOG

#: Seconds between two progress lines of one step in the log.
LOG_EVERY = 10.0
#: Seconds between two redraws of a terminal's progress line.
DRAW_EVERY = 0.25
_WIDTH = 20  # characters of the bar


def _line(table: str, name: str, percent: float, elapsed: float) -> str:
    """The progress line of a step: a bar when the percentage is known (>= 0)."""
    if percent < 0:
        return f"Opening {table!r}: {name} ... {elapsed:.1f} s"
    filled = round(_WIDTH * min(percent, 100.0) / 100)
    bar = "#" * filled + " " * (_WIDTH - filled)
    return f"Opening {table!r}: {name} [{bar}] {percent:3.0f}% {elapsed:.1f} s"


def progress_stream(progress: bool | None) -> TextIO | None:
    """Where progress lines go: stderr if ``progress`` is True, or if it is None and stderr is
    a terminal (a script's redirected output or a test's gets none); else nowhere."""
    if progress is None:
        progress = sys.stderr is not None and sys.stderr.isatty()
    return sys.stderr if progress else None


@contextmanager
def open_step(
    table: str, name: str, percent: Callable[[], float], stream: TextIO | None = None
) -> Iterator[None]:
    """Report one step of opening ``table`` while it runs (see the module docstring).

    ``percent`` is the engine's progress of the running statement (a percentage, or -1 when
    unknown); ``stream`` (e.g. ``sys.stderr`` on a terminal) gets a redrawn progress line that
    ends with the step's time.
    """
    ENGINE_LOG.info("Opening %r: %s ...", table, name)
    start = time.perf_counter()
    stop = threading.Event()

    def watch() -> None:
        """Until ``stop`` is set: redraw the line on ``stream``, log the progress now and then."""
        logged = start
        while not stop.wait(DRAW_EVERY):
            now, done = time.perf_counter(), percent()
            if stream is not None:
                stream.write("\r" + _line(table, name, done, now - start))
                stream.flush()
            if now - logged >= LOG_EVERY:
                logged = now
                shown = f"{done:.0f}%" if done >= 0 else "running"
                ENGINE_LOG.info("Opening %r: %s: %s after %.0f s.", table, name, shown, now - start)

    watcher = threading.Thread(target=watch, name=f"dpcurator open {table}", daemon=True)
    watcher.start()
    finished = False
    try:
        yield
        finished = True
    finally:
        stop.set()
        watcher.join()
        if stream is not None and not finished:
            stream.write("\n")  # keep the last progress line; the error follows it
    elapsed = time.perf_counter() - start
    if stream is not None:
        stream.write(f"\r{_line(table, name, 100.0, elapsed)}, done\n")
        stream.flush()
    ENGINE_LOG.info("Opening %r: %s done in %.2f s.", table, name, elapsed)
