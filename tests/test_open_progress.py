"""Opening a table shows its progress: a redrawn line on a terminal (``Session.from_data(...,
progress=True)``, on by default only when stderr is a terminal) and progress lines in the log
while a long step runs (what a server prints)."""

from __future__ import annotations

import io
import logging
import time

import pytest

import dpcurator as dpc
from dpcurator.query.backends import progress

DEMO = dpc.demo_path("people.csv")


def _metadata() -> dpc.Metadata:
    return dpc.Metadata.from_yaml(dpc.demo_path("people.yaml"))


@pytest.mark.parametrize("shown", [True, False, None])
def test_from_data_draws_progress_on_stderr_when_asked(
    capsys: pytest.CaptureFixture[str], shown: bool | None
) -> None:
    """progress=True draws each step's line on stderr, ending with its time; False draws
    nothing, and so does the default when stderr is not a terminal (as under pytest)."""
    with dpc.Session.from_data(DEMO, metadata=_metadata(), budget=dpc.Budget(1.0), progress=shown):
        pass
    captured = capsys.readouterr()
    assert captured.out == ""
    if not shown:
        assert captured.err == ""
        return
    lines = captured.err.split("\n")[:-1]  # each ends with \n; redraws start with \r
    assert any(
        line.startswith("\rOpening 'people': loading the private copy") and line.endswith(", done")
        for line in lines
    ), captured.err
    assert all(line.startswith("\rOpening 'people': ") for line in lines), captured.err


def test_a_long_step_redraws_its_bar_and_logs_its_progress(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """While a step runs, the terminal line is redrawn with the engine's percentage and the log
    gets a progress line now and then; an unknown percentage (-1) shows the time only."""
    monkeypatch.setattr(progress, "DRAW_EVERY", 0.01)
    monkeypatch.setattr(progress, "LOG_EVERY", 0.02)
    stream = io.StringIO()
    percents = iter([-1.0])
    caplog.set_level(logging.INFO, logger="dpcurator.engine")

    def logged_progress() -> bool:
        return any("loading: 42% after" in r.getMessage() for r in caplog.records)

    with progress.open_step("t", "loading", lambda: next(percents, 42.0), stream):
        deadline = time.monotonic() + 10
        while not logged_progress() and time.monotonic() < deadline:
            time.sleep(0.01)
    drawn = stream.getvalue()
    assert "\rOpening 't': loading ... " in drawn  # the unknown percentage
    assert "\rOpening 't': loading [########            ]  42% " in drawn
    assert drawn.endswith(", done\n")
    messages = [r.getMessage() for r in caplog.records if r.name == "dpcurator.engine"]
    assert messages[0] == "Opening 't': loading ..."
    assert any(m.startswith("Opening 't': loading: 42% after ") for m in messages), messages
    assert messages[-1].startswith("Opening 't': loading done in ")


def test_a_failed_step_ends_its_line(caplog: pytest.LogCaptureFixture) -> None:
    """A step that raises leaves its last line ended (the error starts on a new line) and
    logs no completion."""
    stream = io.StringIO()
    caplog.set_level(logging.INFO, logger="dpcurator.engine")
    with pytest.raises(RuntimeError), progress.open_step("t", "loading", lambda: -1.0, stream):
        raise RuntimeError("boom")
    assert stream.getvalue().endswith("\n")
    assert not any("done in" in r.getMessage() for r in caplog.records)
