"""Synthesizers report progress (one call a round, fractions rising to 1, also logged on
``dpcurator.synth``) and sample the number of rows asked for (public), whatever the data."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.random import SeededRng
from dpcurator.synth.aim import aim
from dpcurator.synth.mst import mst
from dpcurator.synth.mwem import mwem
from tests.test_synth_synthesizers import META, _correlated, _zcdp_session

pytest.importorskip("mbi")


@pytest.fixture(scope="module")
def data() -> pd.DataFrame:
    return _correlated(1000)


def test_aim_reports_every_round_and_samples_rows(
    data: pd.DataFrame, caplog: pytest.LogCaptureFixture
) -> None:
    heard: list[tuple[str, float]] = []
    with caplog.at_level(logging.INFO, logger="dpcurator.synth"):
        result = aim(
            _zcdp_session(data),
            rho=1,
            rng=SeededRng(3),
            iters=50,
            round_iters=20,
            rows=123,
            progress=lambda message, done: heard.append((message, done)),
        )
    rounds = sum(1 for s in result.steps if s.kind == "select")
    assert sum(1 for m, _ in heard if m.startswith("AIM round")) == rounds
    done = [d for _, d in heard]
    assert done == sorted(done)
    assert done[-1] == 1.0
    assert len(caplog.records) == len(heard)
    assert len(result.frame) == 123


def test_mst_and_mwem_sample_rows_and_finish_at_one(data: pd.DataFrame) -> None:
    heard: list[float] = []
    made = mst(
        _zcdp_session(data),
        rho=1,
        rng=SeededRng(4),
        iters=50,
        rows=77,
        progress=lambda _m, done: heard.append(done),
    )
    assert len(made.frame) == 77
    assert heard[-1] == 1.0
    session = dpc.Session.from_data(data, metadata=META, budget=dpc.Budget(1))
    rounds: list[float] = []
    made = mwem(
        session,
        epsilon=1,
        rounds=5,
        columns=["a", "b"],
        rng=SeededRng(5),
        rows=55,
        progress=lambda _m, done: rounds.append(done),
    )
    assert len(made.frame) == 55
    assert len(rounds) == 5
