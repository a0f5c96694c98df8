"""Sessions on real DuckDB over PUMS: limits, budget order, public keys, injection, statistics."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import dpcurator.query.frontend.builder as qb
from dpcurator.accounting import Budget, PrivacyFilter
from dpcurator.core.measures import ApproxDP, PureDP
from dpcurator.errors import BudgetExceededError, DomainError, UnsupportedQueryError
from dpcurator.mechanisms import Laplace
from dpcurator.query.backends import Backend, open_backend
from dpcurator.query.frontend.row_expressions import col
from dpcurator.query.ir import AggregatePlan, ExactResult
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from dpcurator.random import SeededRng
from tests.proxy_backend import ProxyBackend
from tests.stat_tools import ALPHA, chi_square_pvalue

HUGE = 1e9  # noise is exactly 0 with probability > 1 - 1e-300 per value


class CountingBackend(ProxyBackend):
    """A spy around a real backend: counts compute() calls."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.calls = 0

    def compute(self, plan: AggregatePlan) -> ExactResult:
        self.calls += 1
        return self.inner.compute(plan)


@pytest.fixture
def pums(shared_data: Path) -> Path:
    return shared_data / "pums_smartnoise"


@pytest.fixture
def frame(pums: Path) -> pd.DataFrame:
    return pd.read_csv(pums / "PUMS.csv")


@pytest.fixture
def meta(pums: Path) -> Metadata:
    return Metadata.from_yaml(pums / "PUMS.yaml")


def _session(pums: Path, meta: Metadata, epsilon: float = 1e12, **kwargs: object) -> Session:
    return Session.from_data(
        str(pums / "PUMS.csv"),
        metadata=meta,
        budget=Budget(epsilon, 1e-6),
        **kwargs,  # type: ignore[arg-type]
    )


def test_huge_epsilon_equals_the_exact_answers(
    pums: Path, meta: Metadata, frame: pd.DataFrame
) -> None:
    session = _session(pums, meta, rng=SeededRng(11))
    release = session.sql(
        "SELECT COUNT(*) AS n, SUM(income) AS total, AVG(income) AS mean, MEDIAN(age) AS med, "
        "MIN(age) AS lo, MAX(age) AS hi, VARIANCE(age) AS var FROM PUMS.PUMS WHERE age >= 30",
        epsilon=HUGE,
    )
    adults = frame[frame.age >= 30]
    assert release.value("n").value == len(adults)
    assert release.value("total").value == adults.income.sum()
    assert release.value("mean").value == pytest.approx(adults.income.mean(), rel=1e-12)
    assert release.value("med").value == adults.age.median()
    assert release.value("lo").value == adults.age.min()
    assert release.value("hi").value == adults.age.max()
    assert release.value("var").value == pytest.approx(adults.age.var(), rel=1e-9)
    mean = release.value("mean")
    assert mean.ci_low is not None
    assert mean.ci_high is not None
    assert mean.ci_low == pytest.approx(adults.income.mean(), rel=1e-12)
    assert mean.ci_high == pytest.approx(adults.income.mean(), rel=1e-12)


def test_fluent_builder_matches_sql(pums: Path, meta: Metadata, frame: pd.DataFrame) -> None:
    session = _session(pums, meta, rng=SeededRng(2))
    query = session.table("PUMS").filter(col("age") >= 18).agg(qb.count(), qb.mean("income"))
    release = session.release(query, epsilon=HUGE)
    assert release.value("count").value == len(frame)
    assert release.value("mean_income").value == pytest.approx(frame.income.mean(), rel=1e-12)


def test_public_keys_release_every_group_including_empty_ones(
    pums: Path, frame: pd.DataFrame
) -> None:
    meta = Metadata.from_dict(
        {
            "table": "PUMS",
            "columns": {
                "age": {"type": "int", "lower": 0, "upper": 100},
                "sex": {"type": "int", "keys": [0, 1, 2]},
                "income": {"type": "float", "lower": 0, "upper": 500000},
            },
        }
    )
    session = _session(pums, meta, rng=SeededRng(3))
    release = session.sql(
        "SELECT sex, COUNT(*) AS n FROM PUMS WHERE age < 0 GROUP BY sex ORDER BY sex DESC",
        epsilon=HUGE,
    )
    assert [key for key, _ in release.rows] == [(2,), (1,), (0,)]
    assert all(values[0].value == 0 for _, values in release.rows)
    table = session.sql(
        "SELECT sex, COUNT(*) AS n FROM PUMS GROUP BY sex", epsilon=HUGE
    ).to_pandas()
    assert table.n.tolist() == [*frame.groupby("sex").size().tolist(), 0]


def test_partition_selection_on_data_keys(pums: Path, meta: Metadata, frame: pd.DataFrame) -> None:
    session = _session(pums, meta, rng=SeededRng(4))
    with pytest.raises(UnsupportedQueryError, match="delta > 0"):
        session.sql("SELECT race, COUNT(*) FROM PUMS GROUP BY race", epsilon=1)
    assert session.spent() == ApproxDP(0, 0)
    release = session.sql(
        "SELECT race, COUNT(*) AS n FROM PUMS GROUP BY race", epsilon=HUGE, delta=1e-7
    )
    sizes = frame.groupby("race").size()
    released = {key[0]: values[0].value for key, values in release.rows}
    # a group is released only if its person count reaches the threshold (>= 2, even at huge ε)
    threshold = session.plan(
        "SELECT race, COUNT(*) FROM PUMS GROUP BY race", epsilon=HUGE, delta=1e-7
    ).selection
    assert threshold is not None
    assert threshold.threshold == 2
    # PUMS.yaml declares race a string column, so its keys come back as strings.
    assert released == {str(race): n for race, n in sizes.items() if n >= 2}
    assert sizes.min() == 1  # so the rule is exercised
    assert release.cost == ApproxDP(HUGE, 1e-7)


def test_a_refused_query_charges_nothing_and_touches_no_data(pums: Path, meta: Metadata) -> None:
    spy = CountingBackend(open_backend(str(pums / "PUMS.csv"), table="PUMS"))
    session = Session(spy, meta, budget=Budget(1.0))
    session.sql("SELECT COUNT(*) FROM PUMS", epsilon=0.75)
    assert spy.calls == 1
    with pytest.raises(BudgetExceededError):
        session.sql("SELECT COUNT(*) FROM PUMS", epsilon=0.5)
    with pytest.raises(DomainError, match="bounds"):
        session.release(session.table().agg(qb.sum_(col("age") / col("age"))), epsilon=0.1)
    with pytest.raises(UnsupportedQueryError):
        session.sql("SELECT age FROM PUMS", epsilon=0.1)
    assert spy.calls == 1
    assert session.remaining() == PureDP(0.25)
    assert session.spent() == PureDP(0.75)


def test_external_budget_filter_and_estimate(pums: Path, meta: Metadata) -> None:
    budget_filter = PrivacyFilter(Budget(2.0))
    spy = CountingBackend(open_backend(str(pums / "PUMS.csv"), table="PUMS"))
    session = Session(spy, meta, budget_filter=budget_filter)
    estimate = session.estimate(
        "SELECT COUNT(*) AS n, AVG(age) AS a, MEDIAN(age) m FROM PUMS", epsilon=1
    )
    assert estimate.cost == PureDP(1)
    # the count's share of ε = 1: weights 1, 1.6934 (mean) and 1 (median), planner docstring
    third = Laplace.for_epsilon(Fraction(5_000, 18_467), 1)
    assert estimate.ci_halfwidths["n"] == third.ci_halfwidth(0.05)
    assert estimate.ci_halfwidths["a"] is None
    assert spy.calls == 0
    assert budget_filter.spent() == PureDP(0)
    json.dumps(estimate.to_dict())


def test_release_to_dict_is_json(pums: Path, meta: Metadata) -> None:
    session = _session(pums, meta, rng=SeededRng(6))
    release = session.sql(
        "SELECT married, COUNT(*) AS n, STDDEV(age) AS sd, HISTOGRAM(age, 0, 100, 4) AS h "
        "FROM PUMS GROUP BY married",
        epsilon=10,
        delta=5e-7,  # the δ a (1e12, 1e-6) budget keeps for approximate events by default
    )
    data = json.loads(json.dumps(release.to_dict()))
    assert data["cost"]["epsilon"] == 10
    assert data["alpha"] == 0.05
    assert data["value_columns"][-4:] == ["h<25", "h[25,50)", "h[50,75)", "h>=75"]
    assert data["ci_level"] == 0.95
    assert {m["mechanism"] for m in data["mechanisms"]} >= {"discrete Laplace"}
    assert all(m["scale"] is None or m["scale"] > 0 for m in data["mechanisms"])
    assert list(release.to_pandas().columns[:4]) == ["married", "n", "n_ci_low", "n_ci_high"]


def test_injection_attempts_are_harmless(pums: Path, meta: Metadata) -> None:
    # PUMS.yaml declares sex a string; the CSV holds digits, so the frame is typed as declared.
    frame = pd.read_csv(pums / "PUMS.csv").astype({"sex": str})
    backend = open_backend(frame, table="PUMS")
    session = Session(backend, meta, budget=Budget(1e12), rng=SeededRng(7))
    for sql in (
        "SELECT COUNT(*) AS n FROM PUMS WHERE sex = '1''; DROP TABLE PUMS; --'",
        "SELECT COUNT(*) AS n FROM PUMS WHERE sex = '' OR '1'='1'",
        "SELECT COUNT(*) AS n FROM PUMS -- ; DROP TABLE PUMS",
    ):
        session.sql(sql, epsilon=1)
    with pytest.raises(UnsupportedQueryError):
        session.sql("SELECT COUNT(*) FROM PUMS; DROP TABLE PUMS", epsilon=1)
    assert "PUMS" in backend.tables()
    assert session.sql("SELECT COUNT(*) AS n FROM PUMS", epsilon=HUGE).value("n").value == 1000


def test_dp_bounds_spend_budget_and_update_metadata(pums: Path, shared_data: Path) -> None:
    meta = Metadata.from_dict(
        {"table": "PUMS", "columns": {"income": {"type": "float"}, "age": {"type": "int"}}}
    )
    session = _session(pums, meta, epsilon=1e10, rng=SeededRng(8))
    with pytest.raises(DomainError, match="dp_bounds"):
        session.sql("SELECT SUM(income) FROM PUMS", epsilon=1)
    assert session.dp_bounds("income", epsilon=1e9) == (0.0, 524288.0)
    assert session.metadata.column("income").upper == 524288.0
    assert session.spent() == ApproxDP(1e9, 0)
    session.sql("SELECT SUM(income) FROM PUMS", epsilon=1)


# ----------------------------------------------------------------------------------------------
# Statistical tests (alpha = 1e-6 each, with power checks), seeded.

COUNTS_PER_QUERY = 50
QUERIES = 120


def _discrete_laplace_pmf(scale: float, support: np.ndarray) -> np.ndarray:
    p = math.exp(-1 / scale)
    pmf: np.ndarray = (1 - p) / (1 + p) * p ** np.abs(support)
    return pmf


@pytest.mark.statistical
def test_noisy_count_errors_and_ci_coverage(pums: Path, meta: Metadata) -> None:
    # Seeded (issue 24 item 9): each test below is one deterministic run at ALPHA.
    session = _session(pums, meta, rng=SeededRng(2024))
    sql = "SELECT " + ", ".join(f"COUNT(*) AS c{i}" for i in range(COUNTS_PER_QUERY)) + " FROM PUMS"
    plan = session.plan(sql, epsilon=COUNTS_PER_QUERY)
    scale = 1.0
    assert plan.outputs[0].parts[0].mechanism == Laplace(scale)
    errors, covered = [], 0
    for _ in range(QUERIES):
        release = session.sql(sql, epsilon=COUNTS_PER_QUERY)
        for _, estimates in release.rows:
            for e in estimates:
                errors.append(e.value - 1000)
                assert e.ci_low is not None
                assert e.ci_high is not None
                covered += e.ci_low <= 1000 <= e.ci_high
    sample = np.asarray(errors, dtype=np.int64)
    support = np.arange(-12, 13)
    observed = np.array(
        [np.sum(sample <= support[0])]
        + [np.sum(sample == z) for z in support[1:-1]]
        + [np.sum(sample >= support[-1])]
    )

    def expected(b: float) -> np.ndarray:
        pmf = _discrete_laplace_pmf(b, support)
        tail = _discrete_laplace_pmf(b, np.array([support[-1]]))[0] / (1 - math.exp(-1 / b))
        pmf[0] = pmf[-1] = tail
        return pmf

    assert chi_square_pvalue(observed, expected(scale)) > ALPHA
    for factor in (0.75, 1.25):  # power: the same sample rejects a wrong scale
        assert chi_square_pvalue(observed, expected(scale * factor)) < ALPHA
    n = sample.size
    halfwidth = plan.outputs[0].parts[0].mechanism.ci_halfwidth(0.05)
    p = math.exp(-1 / scale)
    exact_coverage = 1 - 2 * p ** (halfwidth + 1) / (1 + p)
    assert exact_coverage >= 0.95
    assert stats.binomtest(covered, n, exact_coverage).pvalue > ALPHA
    assert stats.binomtest(covered, n, 0.90).pvalue < ALPHA  # power: a wrong rate is rejected


def test_builtin_demo_dataset() -> None:
    demo = Path(__file__).resolve().parents[1] / "src" / "dpcurator" / "demo"
    meta = Metadata.from_yaml(demo / "people.yaml")
    session = Session.from_data(
        str(demo / "people.csv"), metadata=meta, budget=Budget(1e12), rng=SeededRng(9)
    )
    frame = pd.read_csv(demo / "people.csv")
    release = session.sql(
        "SELECT sex, COUNT(*) AS n, AVG(income) AS mean_income, MEDIAN(age) AS med_age, "
        "AVG(hours) AS mean_hours FROM people WHERE age >= 18 GROUP BY sex",
        epsilon=HUGE,
    )
    table = release.to_pandas().set_index("sex")
    groups = frame.groupby("sex")
    assert table.n.to_dict() == groups.size().to_dict()
    for sex, expected in groups.income.mean().items():
        # float sums are exact on the grid 2^-3 used for [0, 400000]: half a step per row at most
        assert table.at[str(sex), "mean_income"] == pytest.approx(expected, abs=2.0**-4)
    for sex, expected in groups.hours.mean().items():  # NULLs skipped, as in SQL AVG
        assert table.at[str(sex), "mean_hours"] == pytest.approx(expected, rel=1e-9)
    by_region = session.release(
        session.table().group_by("region", "employed").agg(qb.count(), qb.mean("hours")),
        epsilon=1.0,
    )
    assert len(by_region.rows) == 8


@pytest.mark.parametrize("engine", ["duckdb", "memory"])
def test_group_by_a_small_bounded_int_column_releases_every_key(engine: str) -> None:
    """age (int in [18, 90], no declared keys) has the public keys 18..90: every one is released,
    even ages absent from the data, without partition selection (δ = 0)."""
    demo = Path(__file__).resolve().parents[1] / "src" / "dpcurator" / "demo"
    meta = Metadata.from_yaml(demo / "people.yaml")
    session = Session.from_data(
        str(demo / "people.csv"), metadata=meta, budget=Budget(1e12), engine=engine
    )
    frame = pd.read_csv(demo / "people.csv")
    release = session.sql(
        "SELECT age, COUNT(*) AS n FROM people WHERE age <> 50 GROUP BY age", epsilon=HUGE
    )
    counts = {key[0]: estimates[0].value for key, estimates in release.rows}
    assert list(counts) == list(range(18, 91))
    expected = frame[frame.age != 50].groupby("age").size()
    assert counts == {age: float(expected.get(age, 0)) for age in range(18, 91)}
    assert counts[50] == 0
