"""Robust L1 regression through Session.fit (issue 14; :mod:`dpcurator.query.fit.ptr`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.errors import DPError
from dpcurator.query.fit.core import plan_fit
from dpcurator.query.session import Session
from dpcurator.random import SeededRng

VICTIM = 4322
BOX: dict[str, Any] = {"lower": -20.0, "upper": 20.0}


def _metadata() -> dpc.Metadata:
    return dpc.Metadata.from_dict(
        {
            "table": "t",
            "person_column": "pid",
            "columns": {
                "pid": {"type": "int"},
                "x": {"type": "float", "lower": 0, "upper": 10},
                "y": {"type": "float", "lower": -100, "upper": 100},
            },
        }
    )


def _line(n: int, seed: int) -> pd.DataFrame:
    """y = 2 + 3x with heavy-tailed (Cauchy) errors: the L1 fit is robust to them."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 10, n)
    y = np.clip(2 + 3 * x + rng.standard_cauchy(n), -100, 100)
    return pd.DataFrame({"pid": np.arange(n), "x": x, "y": y})


def test_session_fit_recovers_the_line_through_heavy_tails() -> None:
    session = Session.from_data(
        _line(30_000, 0), metadata=_metadata(), budget=dpc.Budget(100, 1e-3), rng=SeededRng(2)
    )
    fit = session.fit("ptr_regression", y="y", x=["x"], epsilon=20.0, delta=1e-6, **BOX)
    assert fit.replied
    assert fit.value is not None
    np.testing.assert_allclose(fit.value, [2.0, 3.0], atol=0.5)
    assert fit.ci_low is not None
    assert fit.ci_high is not None
    assert np.all(fit.ci_low <= fit.value)
    assert np.all(fit.value <= fit.ci_high)
    assert session.spent().epsilon == 20  # type: ignore[union-attr]
    robust = plan_fit(_metadata(), "linear_regression", y="y", x=["x"], method="l1", epsilon=1.0,
                      delta=1e-6, **BOX)  # fmt: skip
    assert robust.kind == "ptr_regression"
    assert robust.terms == ("intercept", "x")


def test_refusals_are_free_and_name_the_parameter() -> None:
    session = Session.from_data(
        _line(100, 1), metadata=_metadata(), budget=dpc.Budget(100, 1e-3), rng=SeededRng(2)
    )
    cases = {
        "delta": {"delta": 0.0},
        "blocks": {"delta": 1e-6, "blocks": 1},
        "upper": {"delta": 1e-6, "lower": -1e308, "upper": 1e308},
        "epsilon": {"delta": 1e-6, "epsilon": 1e-300},
    }
    for name, options in cases.items():
        arguments: dict[str, Any] = {"epsilon": 1.0, **BOX, **options}
        with pytest.raises(DPError, match=name):
            session.fit("ptr_regression", y="y", x=["x"], **arguments)
    assert session.spent().epsilon == 0  # type: ignore[union-attr]


@pytest.mark.parametrize("engine", ["duckdb", "memory"])
def test_neighbours_see_the_same_charge_method_and_terms(engine: str) -> None:
    frame = pd.read_csv(dpc.demo_path("people.csv"))
    metadata = dpc.Metadata.from_yaml(dpc.demo_path("people.yaml"))
    fits = []
    for data in (frame, frame[frame["pid"] != VICTIM]):
        session = Session.from_data(
            data, metadata=metadata, budget=dpc.Budget(10, 1e-3), rng=SeededRng(5), engine=engine
        )
        fit = session.fit("ptr_regression", y="hours", x=["age"], epsilon=1.0, delta=1e-6,
                          blocks=50, lower=-100, upper=100)  # fmt: skip
        fits.append((fit, session.spent()))
    (first, spent), (second, other) = fits
    assert spent == other
    assert (first.cost, first.method, first.alpha) == (second.cost, second.method, second.alpha)
