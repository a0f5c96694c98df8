"""Issue 28 item 1: logistic fits stay inside the public coefficient box and say when it binds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
import dpcurator.estimators.logistic as logistic_module
from dpcurator.estimators.sample_aggregate import Box
from dpcurator.query.fit.core import (
    DEFAULT_COEFFICIENT_BOUND,
    FitRequest,
    run_fit,
    standardised_box,
)
from dpcurator.query.fit.release import fit_dict
from dpcurator.random import SeededRng


def _session(seed: int) -> dpc.Session:
    metadata = dpc.Metadata.from_yaml(dpc.demo_path("people.yaml"))
    data = pd.read_csv(dpc.demo_path("people.csv"))
    budget = dpc.Budget(epsilon=40, delta=1e-5)
    return dpc.Session.from_data(data, metadata=metadata, budget=budget, rng=SeededRng(seed))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_session_fit_logistic_stays_in_the_default_box(seed: int) -> None:
    # seed 1 gave an intercept interval of about [-1.8e5, 2.5e5] before the default box
    s = _session(seed)
    fit = s.fit("logistic_regression", y="employed", x=["age", "hours"], epsilon=0.5)
    meta = dpc.Metadata.from_yaml(dpc.demo_path("people.yaml"))
    features = [meta.column(name) for name in ("age", "hours")]
    low, high = standardised_box(features, DEFAULT_COEFFICIENT_BOUND)
    assert fit.value is not None
    assert fit.ci_low is not None
    assert fit.ci_high is not None
    assert np.all(fit.ci_low >= low)
    assert np.all(fit.ci_high <= high)
    assert np.all(fit.ci_low <= fit.value)
    assert np.all(fit.value <= fit.ci_high)
    assert fit.at_bound is not None
    assert fit.at_bound.shape == (3,)


def test_sql_logistic_flags_the_box_that_binds() -> None:
    s = _session(0)
    table = s.sql("SELECT LOGISTIC(employed, age, 1) FROM people", epsilon=1.0)
    frame = table.to_pandas()
    flags = dict(zip(frame["term"], frame["at_box_bound"], strict=True))
    assert flags["intercept"]  # the docs example: the box of 1 binds the intercept
    assert "warning" in table.summary()
    assert "intercept" in table.summary()
    assert "warning" in table._repr_html_()
    rows = table.to_dict()["rows"]
    assert [row["at_box_bound"] for row in rows] == list(frame["at_box_bound"])
    assert table.to_dict()["warnings"]


def test_fit_dict_carries_the_flag() -> None:
    s = _session(0)
    request = FitRequest("logistic_regression", y="employed", x=("age",), coef_bound=1.0)
    plan = request.plan(s.metadata, epsilon=1.0, delta=0.0)
    answer = fit_dict(plan, run_fit(s, plan, 0.05))
    assert answer["at_box_bound"]["intercept"] is True
    assert answer["warnings"]


def test_clamp_flags_exactly_the_changed_coordinates() -> None:
    box = Box(np.array([-1.0, -1.0]), np.array([1.0, 1.0]), np.zeros(2))
    value, low, high, bound = logistic_module.clamp_to_box(
        box, np.array([0.5, 0.2]), np.array([0.0, -3.0]), np.array([0.9, 0.4])
    )
    assert bound is not None
    assert bound.tolist() == [False, True]
    assert low.tolist() == [0.0, -1.0]
    assert value.tolist() == [0.5, 0.2]
    assert logistic_module.clamp_to_box(None, value, low, high)[3] is None


def test_a_fit_without_a_box_has_no_flag() -> None:
    # REGRESS has no coefficient box: no flag column, no warning (this once raised)
    s = _session(0)
    table = s.sql("SELECT REGRESS(income, age, hours) FROM people", epsilon=1.0, delta=1e-6)
    assert "at_box_bound" not in table.to_pandas().columns
    assert not table.warnings
