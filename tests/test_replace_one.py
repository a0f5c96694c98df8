"""The replace-one neighbouring relation (bounded DP; issue 18 §2, dpcurator.query.neighbouring)."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.errors import ParameterError, UnsupportedQueryError
from dpcurator.query.metadata_check import check_metadata
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
    assert released.rows[0][1] == (dpc.query.release.Estimate(N, N, N),) * 2
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
    assert use.sensitivity == 2
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
