"""What each query-layer interval is (issue 14, "Inference"): every value column says whether its
(1-α) interval covers the privacy noise only or also the sampling, and whether the statistic was
computed on values clamped to public bounds (clipping bias the interval does not include). Both
come from the plan (public), so neighbouring tables give the same descriptions.
"""

from __future__ import annotations

import json

import pandas as pd

import dpcurator as dpc
from dpcurator.query.session import Session
from dpcurator.random import SeededRng

ALL = (
    "SELECT COUNT(*) AS n, SUM(income) AS s, AVG(age) AS m, VARIANCE(age) AS v, "
    "STDDEV(age) AS sd, MEDIAN(income) AS med, HISTOGRAM(age, 20, 80, 3) AS h FROM people"
)


def _session(frame: pd.DataFrame | None = None) -> Session:
    return Session.from_data(
        pd.read_csv(dpc.demo_path("people.csv")) if frame is None else frame,
        metadata=dpc.Metadata.from_yaml(dpc.demo_path("people.yaml")),
        budget=dpc.Budget(100, 1e-3),
        rng=SeededRng(3),
    )


def _described(release: dpc.Release) -> dict[str, tuple[str, bool]]:
    return {c["name"]: (c["covers"], c["clamped"]) for c in release.to_dict()["columns"]}


def test_each_statistic_says_what_its_interval_covers_and_whether_values_were_clamped() -> None:
    release = _session().sql(ALL, epsilon=1)
    described = _described(release)
    assert {name: described[name] for name in ("n", "s", "m", "v", "sd", "med")} == {
        "n": ("noise", False),
        "s": ("noise", True),
        "m": ("noise", True),
        "v": ("noise", True),
        "sd": ("noise", True),
        "med": ("noise", True),
    }
    bins = [name for name in described if name.startswith("h")]
    assert len(bins) == 3
    assert {described[name] for name in bins} == {("noise", False)}  # open end bins: no clamp
    assert json.loads(json.dumps(release.to_dict()))["columns"][0]["name"] == "n"


def test_descriptions_are_public_on_neighbouring_tables() -> None:
    frame = pd.read_csv(dpc.demo_path("people.csv"))
    neighbour = frame[frame["pid"] != 4322]
    assert _described(_session(frame).sql(ALL, epsilon=1)) == _described(
        _session(neighbour).sql(ALL, epsilon=1)
    )


def test_a_fit_table_says_its_interval_covers_noise_and_sampling() -> None:
    table = _session().sql("SELECT REGRESS(income, age, hours) FROM people", epsilon=1, delta=1e-6)
    assert _described(table) == {
        "coefficient": ("noise+sampling", True),
        "p_value": (None, False),  # the Wald test of H0: coefficient = 0 (no interval)
    }
