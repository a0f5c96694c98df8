"""The SQL form of model fits: SELECT REGRESS(...) / LOGISTIC(...) (issue 14)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.errors import UnsupportedQueryError
from dpcurator.query.session import Session
from dpcurator.random import SeededRng


def _session(seed: int = 1) -> Session:
    meta = dpc.Metadata.from_yaml(dpc.demo_path("people.yaml"))
    frame = pd.read_csv(dpc.demo_path("people.csv"))
    return Session.from_data(
        frame, metadata=meta, budget=dpc.Budget(100, 1e-3), rng=SeededRng(seed)
    )


def test_regress_releases_the_session_fit_as_a_table() -> None:
    table = _session().sql("SELECT REGRESS(income, age, hours) FROM people", epsilon=1, delta=1e-6)
    fit = _session().fit("linear_regression", y="income", x=["age", "hours"], epsilon=1, delta=1e-6)
    frame = table.to_pandas()
    assert list(frame["term"]) == ["intercept", "age", "hours"]
    assert fit.value is not None
    np.testing.assert_allclose(frame["coefficient"], fit.value)
    assert table.cost == fit.cost


def test_logistic_takes_an_optional_coefficient_bound() -> None:
    table = _session().sql("SELECT LOGISTIC(employed, age, 0.5) AS m FROM people", epsilon=1)
    frame = table.to_pandas()
    assert list(frame["term"]) == ["intercept", "age"]
    assert frame["coefficient"].abs().max() <= 0.5


@pytest.mark.parametrize(
    ("sql", "needle"),
    [
        ("SELECT REGRESS(income, age), COUNT(*) AS n FROM people", "only item"),
        ("SELECT sex, REGRESS(income, age) FROM people GROUP BY sex", "only item"),
        ("SELECT REGRESS(income, age) FROM people GROUP BY sex", "GROUP BY"),
        ("SELECT REGRESS(income, age) FROM people WHERE age > 30", "WHERE"),
        ("SELECT REGRESS(income, age + 1) FROM people", "column names"),
        ("SELECT REGRESS(income) FROM people", "at least one feature"),
        ("SELECT LOGISTIC(employed, age, 'x') FROM people", "coefficient bound"),
        ("SELECT REGRESS(income, age) FROM other", "Unknown table"),
    ],
)
def test_unsupported_forms_are_refused_free_naming_the_function(sql: str, needle: str) -> None:
    session = _session()
    with pytest.raises(UnsupportedQueryError, match=needle):
        session.sql(sql, epsilon=1, delta=1e-6)
    assert session.spent().epsilon == 0


def test_a_fit_is_estimated_but_has_no_query_plan() -> None:
    session = _session()
    sql = "SELECT REGRESS(income, age) FROM people"
    estimate = session.estimate(sql, epsilon=1, delta=1e-6)
    assert estimate.to_dict()["terms"] == ["intercept", "age"]
    assert estimate.ci_halfwidths == {"coefficient": None}
    assert estimate.cost == session.sql(sql, epsilon=1, delta=1e-6).cost
    with pytest.raises(UnsupportedQueryError, match=r"REGRESS.*model fit.*Session.estimate"):
        session.plan(sql, epsilon=1)
    with pytest.raises(UnsupportedQueryError, match="noise"):
        session.estimate(sql, epsilon=1, delta=1e-6, noise="laplace")


def test_a_fit_name_inside_a_string_is_an_ordinary_query() -> None:
    release = _session().sql(
        "SELECT COUNT(*) AS n FROM people WHERE education = 'regress(x)'", epsilon=1
    )
    assert release.value_columns == ("n",)


def test_the_default_logistic_box_is_in_standardised_units() -> None:
    """A narrow feature (x in [0, 0.1]) with a steep slope (60 per unit: 3 over half the range)
    is fitted, not clamped at the old data-unit default |β| <= 10."""
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 0.1, 20_000)
    y = (rng.uniform(size=x.size) < 1 / (1 + np.exp(-60 * (x - 0.05)))).astype(int)
    meta = dpc.Metadata.from_dict(
        {"table": "t", "columns": {"x": {"type": "float", "lower": 0, "upper": 0.1},
                                   "y": {"type": "int", "lower": 0, "upper": 1}}}
    )  # fmt: skip
    session = Session.from_data(
        pd.DataFrame({"x": x, "y": y}), metadata=meta, budget=dpc.Budget(1e6), rng=SeededRng(2)
    )
    frame = session.sql("SELECT LOGISTIC(y, x) FROM t", epsilon=1e4).to_pandas()
    slope = float(frame.loc[frame["term"] == "x", "coefficient"].iloc[0])
    assert 40 < slope < 80
