"""Accuracy targets for the whole-table MEAN under replace-one (dpcurator.query.plan.accuracy): the
mean is a noisy sum over the public n, so its interval's half-width is public and a target can
be met exactly; under add/remove (a noisy count in the denominator) it is still refused."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.errors import UnsupportedQueryError
from dpcurator.mechanisms import Gaussian, Laplace
from dpcurator.query.plan.accuracy import (
    gaussian_halfwidth,
    laplace_halfwidth,
    public_mean_width,
)
from dpcurator.random import SeededRng

PEOPLE = pd.read_csv(dpc.demo_path("people.csv"))
N = len(PEOPLE)
BASE = dpc.Metadata.from_yaml(dpc.demo_path("people.yaml"))
META = replace(BASE, neighbouring="replace_one", public_size=N)
ALPHA = 0.05


def _session(frame: pd.DataFrame, metadata: dpc.Metadata = META) -> dpc.Session:
    return dpc.Session.from_data(
        frame,
        metadata=metadata,
        budget=dpc.Budget(100, 1e-3),
        accounting="concentrated",
        rng=SeededRng(2),
    )


@pytest.mark.parametrize(
    ("column", "target", "noise"),
    [("age", 0.5, "laplace"), ("income", 50.0, "laplace"), ("age", 0.2, "gaussian")],
)
def test_the_mean_meets_its_target_at_the_smallest_cost(
    column: str, target: float, noise: str
) -> None:
    """The released interval is within ±target on both sides; a cost a relative 1e-6 lower
    would not meet it (the mean's interval computed as the release computes it)."""
    session = _session(PEOPLE)
    sql = f"SELECT AVG({column}) AS m FROM people"
    plan = session.plan(sql, accuracy={"m": target}, noise=noise, alpha=ALPHA)
    ((part,),) = [o.parts for o in plan.outputs]
    width = public_mean_width(part, N, ALPHA)
    if isinstance(part.mechanism, Laplace):
        below = laplace_halfwidth(part, float(part.epsilon) * (1 - 1e-6), width)
    else:
        assert isinstance(part.mechanism, Gaussian)
        below = gaussian_halfwidth(part, float(part.rho) * (1 - 1e-6), 1, width)
    assert below > target * N
    release = session.sql(sql, accuracy={"m": target}, noise=noise, alpha=ALPHA)
    ((_, (mean,)),) = release.rows
    assert mean.ci_low is not None
    assert mean.ci_high is not None
    assert max(mean.ci_high - mean.value, mean.value - mean.ci_low) <= target * (1 + 1e-9)


def test_the_cost_is_the_same_on_replace_one_neighbours() -> None:
    changed = PEOPLE.copy()
    changed.loc[changed.pid == 4322, "age"] = 90
    costs = [
        _session(f).sql("SELECT AVG(age) AS m FROM people", accuracy={"m": 1}).cost
        for f in (PEOPLE, changed)
    ]
    assert costs[0] == costs[1]


def test_an_add_remove_mean_target_is_still_refused_free() -> None:
    session = _session(PEOPLE, BASE)
    with pytest.raises(UnsupportedQueryError, match="No budget can meet"):
        session.sql("SELECT AVG(age) AS m FROM people", accuracy={"m": 1})
    with pytest.raises(UnsupportedQueryError, match="No budget can meet"):  # WHERE: a noisy count
        _session(PEOPLE).sql("SELECT AVG(age) AS m FROM people WHERE sex = 'F'", accuracy={"m": 1})
    assert str(session.spent()).startswith("spent: (ε = 0")
