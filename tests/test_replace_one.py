"""The replace-one neighbouring relation (bounded DP; issue 18 §2, dpcurator.query.privacy_unit)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.accounting import ZCDPEvent
from dpcurator.errors import ParameterError, UnsupportedQueryError
from dpcurator.query.metadata_check import check_metadata
from dpcurator.query.release.estimate import Estimate
from dpcurator.random import SeededRng

VICTIM = 4322
PEOPLE = pd.read_csv(dpc.demo_path("people.csv"))
N = len(PEOPLE)
META = replace(
    dpc.Metadata.from_yaml(dpc.demo_path("people.yaml")), neighbouring="replace_one", public_size=N
)


def _session(frame: pd.DataFrame) -> dpc.Session:
    return dpc.Session.from_data(
        frame, metadata=META, budget=dpc.Budget(epsilon=10), rng=SeededRng(3)
    )


def test_the_whole_table_count_is_the_public_n_free_and_exact() -> None:
    session = _session(PEOPLE.head(10))  # the data disagree with n: never checked by a query
    released = session.sql("SELECT COUNT(*) AS n, COUNT(DISTINCT pid) AS p FROM people", epsilon=1)
    assert released.rows[0][1] == (Estimate(N, N, N),) * 2
    assert session.spent() == dpc.PureDP(0)
    assert released.neighbouring == "replace_one"
    assert released.to_dict()["neighbouring"] == "replace_one"
    assert "replace-one" in released.summary()


def test_the_mean_divides_a_noisy_sum_by_n_with_sensitivity_upper_minus_lower() -> None:
    released = _session(PEOPLE).sql("SELECT AVG(income) AS m FROM people", epsilon=1.0)
    (use,) = released.mechanisms  # no noisy count: n is public
    assert use.statistic == "sum"
    assert use.sensitivity == pytest.approx(400_000 - 0)  # income in [0, 400000]: not 2·max


def test_grouped_counts_have_l1_sensitivity_two_and_selection_is_refused() -> None:
    session = _session(PEOPLE)
    (use,) = session.estimate("SELECT sex, COUNT(*) FROM people GROUP BY sex", epsilon=1).mechanisms
    assert use.sensitivity == 2
    (use,) = session.estimate("SELECT COUNT(*) FROM people WHERE age > 40", epsilon=1).mechanisms
    assert use.sensitivity == 1  # ungrouped: m, not 2m (tests/test_neighbouring_replace_one.py)
    with pytest.raises(UnsupportedQueryError, match="replace_one"):
        session.plan("SELECT hours, COUNT(*) FROM people GROUP BY hours", epsilon=1, delta=1e-6)


def test_replacing_one_person_changes_only_the_noisy_values() -> None:
    """Neighbour test under replace-one: the victim's row replaced by extremes (same n)."""
    changed = PEOPLE.copy()
    row = changed.pid == VICTIM
    changed.loc[row, "income"] = 400000.0
    changed.loc[row, "sex"] = "M"
    query = "SELECT sex, COUNT(*) AS n, AVG(income) AS m FROM people GROUP BY sex"
    releases = [_session(f).sql(query, epsilon=1.0) for f in (PEOPLE, changed)]
    seen = [(r.cost, r.mechanisms, [k for k, _ in r.rows], r.neighbouring) for r in releases]
    assert seen[0] == seen[1]


def test_replace_one_needs_a_public_size() -> None:
    with pytest.raises(ParameterError, match="public_size"):
        replace(META, public_size=None)
    data = {**META.to_dict(), "neighbouring": "replace_one", "public_size": 7}
    assert dpc.Metadata.from_dict(data).public_size == 7


def test_the_metadata_check_reports_a_public_size_the_data_disagree_with() -> None:
    assert "public_size" not in check_metadata(PEOPLE, META).format()
    report = check_metadata(PEOPLE.head(10), META).format()
    assert f"public_size = {N:,} but the data have 10 persons" in report


def _concentrated() -> dpc.Session:
    return dpc.Session.from_data(
        PEOPLE, metadata=META, budget=dpc.Budget(1, 1e-6), accounting="concentrated"
    )


def test_public_counts_cost_nothing_with_gaussian_noise_or_rho() -> None:
    """A whole-table count is the public n (no noise): ρ, Gaussian or automatic noise charge it
    nothing, alone or beside noisy outputs (it takes no ρ or ε share from them)."""
    session = _concentrated()
    count = "SELECT COUNT(*) AS n FROM people"
    for kwargs in ({"rho": 0.01}, {"epsilon": 0.5, "delta": 1e-7, "noise": "gaussian"}):
        released = session.sql(count, **kwargs)
        assert released.rows[0][1] == (Estimate(N, N, N),)
    assert session.spent() == dpc.ApproxDP(0, 0)
    noisy = "SUM(income) AS s, MEDIAN(age) AS m FROM people"
    with_count = session.plan(f"SELECT COUNT(*) AS n, {noisy}", rho=0.01)
    alone = session.plan(f"SELECT {noisy}", rho=0.01)
    assert with_count.event == alone.event == ZCDPEvent(Fraction(0.01))
    assert [o.epsilon for o in with_count.outputs] == [0, *(o.epsilon for o in alone.outputs)]
    assert [p.mechanism for o in with_count.outputs for p in o.parts] == [
        p.mechanism for o in alone.outputs for p in o.parts
    ]


def test_accuracy_first_gives_a_public_count_no_share() -> None:
    """Accuracy-first: the public n meets any target exactly and needs no budget, alone (free)
    or beside a noisy sum (the query costs what the sum alone costs)."""
    session = _session(PEOPLE)
    released = session.sql("SELECT COUNT(*) AS n FROM people", accuracy={"n": 0})
    assert released.rows[0][1] == (Estimate(N, N, N),)
    assert session.spent() == dpc.PureDP(0)
    both = session.plan(
        "SELECT COUNT(*) AS n, SUM(income) AS s FROM people", accuracy={"n": 1, "s": 1e5}
    )
    alone = session.plan("SELECT SUM(income) AS s FROM people", accuracy={"s": 1e5})
    assert both.cost == alone.cost
    assert [o.epsilon for o in both.outputs] == [0, alone.outputs[0].epsilon]
