"""The owner's utility report (dpcurator.synth.report): labelled owner-only, TVD that tells a
faithful synthetic table from an unrelated one, ML efficacy, embedded plots."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.accounting import PureEvent
from dpcurator.synth.common import synthetic
from dpcurator.synth.domain import SynthDomain
from dpcurator.synth.report import NOTICE, utility_html, utility_summary

pytest.importorskip("sklearn")

META = dpc.Metadata.from_dict(
    {
        "table": "t",
        "columns": {
            "a": {"type": "int", "keys": [0, 1, 2]},
            "b": {"type": "int", "keys": [0, 1, 2]},
            "y": {"type": "bool"},
        },
    }
)


def _frame(seed: int, n: int = 3000, *, linked: bool = True) -> pd.DataFrame:
    gen = np.random.default_rng(seed)  # declared seeds 1, 2
    a = gen.integers(0, 3, n)
    b = np.where(gen.random(n) < 0.9, a, gen.integers(0, 3, n)) if linked else gen.integers(0, 3, n)
    y = (b == 2) if linked else gen.random(n) < 0.5
    return pd.DataFrame({"a": a, "b": b, "y": y})


def test_report_separates_faithful_from_unrelated_and_is_owner_only() -> None:
    real = _frame(1)
    domain = SynthDomain.from_metadata(META)
    event = PureEvent(1)
    faithful = synthetic(domain.encode(_frame(2)), domain, "test", event, [])
    unrelated = synthetic(domain.encode(_frame(2, linked=False)), domain, "test", event, [])
    good = utility_summary(real, faithful, target="y")
    bad = utility_summary(real, unrelated, target="y")
    assert good["notice"] == NOTICE
    assert good["mean_tvd"]["2-way"] < 0.05 < bad["mean_tvd"]["2-way"]
    assert good["ml_efficacy"]["efficacy_loss"] < 0.05 < bad["ml_efficacy"]["efficacy_loss"]
    assert good["correlation"]["synthetic"][0][1] > 0.5 > bad["correlation"]["synthetic"][0][1]
    page = utility_html(good)
    assert "NOT differentially private" in page
    assert page.count("data:image/png;base64,") == 2
