"""Hypothesis tests in SQL (issue 27 item 2): ``SELECT TTEST(x, g) FROM t`` and its kin.

* every test runs through :meth:`Session.sql`, charges exactly its ε and reports a p-value;
* the SQL path is the library's test: on the same data and seed it releases the same noisy
  statistics and p-value as the array function (so the library's type-I checks carry over);
* refusals (no public keys, no bounds, mixed SELECT, δ, ρ, accuracy, ...) are free and name the
  parameter;
* type-I error <= α at n ∈ {100, 10^4} and ε ∈ {0.1, 1} for the SQL tests' post-processing
  (the library path the SQL release calls), with power at an alternative.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.core.numbers import to_fraction
from dpcurator.errors import DPError
from dpcurator.estimators import hypothesis as ht
from dpcurator.estimators.hypothesis.chi_square import independence_result
from dpcurator.estimators.hypothesis.core import Setup, release_counts
from dpcurator.estimators.hypothesis.means import one_sample_result, welch_result
from dpcurator.estimators.hypothesis.moments import noisy_moments
from dpcurator.query.privacy_unit import PrivacyUnit
from dpcurator.random import SeededRng
from tests.test_estimators_hypothesis_tests import rate_above, rate_at_most

LEVEL = 0.05
TOLERANCE = 0.03

META = {
    "table": "t",
    "columns": {
        "x": {"type": "float", "lower": 0, "upper": 10},
        "g": {"type": "string", "keys": ["a", "b"]},
        "h": {"type": "string", "keys": ["u", "v", "w"]},
        "y": {"type": "int", "lower": 0, "upper": 1},
        "free": {"type": "string"},
        "raw": {"type": "float"},
    },
}


def _table(n: int = 400, seed: int = 0, shift: float = 0.0) -> pd.DataFrame:
    gen = np.random.default_rng(seed)
    g = gen.choice(["a", "b"], n)
    x = np.clip(gen.normal(5, 2, n) + shift * (g == "a"), 0, 10)
    return pd.DataFrame({
        "x": x, "g": g, "h": gen.choice(["u", "v", "w"], n), "y": gen.integers(0, 2, n),
        "free": "z", "raw": x,
    })  # fmt: skip


def _session(table: pd.DataFrame, seed: int = 1, **meta: Any) -> dpc.Session:
    metadata = dpc.Metadata.from_dict({**META, **meta})
    return dpc.Session.from_data(
        table, metadata=metadata, budget=dpc.Budget(10.0), rng=SeededRng(seed)
    )


QUERIES = {
    "SELECT TTEST(x, g) FROM t": "two-sample t (Welch)",
    "SELECT TTEST(x, 5.0, 'less') FROM t": "one-sample t",
    "SELECT TTEST(x - y) FROM t": "paired t",
    "SELECT ANOVA(x, h) FROM t": "one-way ANOVA",
    "SELECT PROPTEST(y, g) FROM t": "two-proportion z",
    "SELECT CHI2(g, h) FROM t": "chi-square independence",
    "SELECT CHI2(h, 0.2, 0.3, 0.5) FROM t": "chi-square goodness of fit",
    "SELECT KS(x, g, 2.5, 5, 7.5) FROM t": "two-sample Kolmogorov-Smirnov (binned)",
}


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_each_test_releases_and_charges_its_epsilon(query: str) -> None:
    with _session(_table()) as session:
        estimate = session.estimate(query, epsilon=0.5)
        release = session.sql(query, epsilon=0.5)
        assert session.spent().epsilon == estimate.cost.epsilon == 0.5
    body = release.to_dict()
    test = body["test"]
    assert test["name"] == QUERIES[query]
    assert 0 < test["p_value"] <= 1
    figures = {row["group"]["figure"]: row["values"]["value"]["value"] for row in body["rows"]}
    assert figures["p_value"] == test["p_value"]
    assert figures["statistic"] == test["statistic"]
    assert sum(m["epsilon"] for m in body["mechanisms"]) == pytest.approx(0.5)
    assert "p-value" in str(release)


def test_the_sql_path_is_the_library_test() -> None:
    """Same data and seed: the SQL release's noisy statistics and p-value are the library's
    (the engine computes the exact statistics; the noise and the null are the same code)."""
    table = _table(600, seed=3, shift=0.3)
    with _session(table, seed=7) as session:
        t = session.sql("SELECT TTEST(x, g) FROM t", epsilon=1.0).to_dict()["test"]
    first, second = table.x[table.g == "a"], table.x[table.g == "b"]
    library = ht.welch_t_test(first, second, lower=0, upper=10, epsilon=1.0, rng=SeededRng(7))
    assert t["statistic"] == pytest.approx(library.statistic, rel=1e-9)
    assert t["p_value"] == library.p_value
    assert t["released"]["n"] == list(library.released["n"])
    with _session(table, seed=8) as session:
        chi = session.sql("SELECT CHI2(g, h) FROM t", epsilon=1.0).to_dict()["test"]
    expected = ht.independence_test(
        table.g, table.h, ["a", "b"], ["u", "v", "w"], epsilon=1.0, rng=SeededRng(8)
    )
    assert chi["released"]["table (row-major)"] == list(expected.released["table (row-major)"])
    assert (chi["statistic"], chi["p_value"]) == (expected.statistic, expected.p_value)


REFUSED = {
    "SELECT TTEST(x, h) FROM t": "has 3 public keys",
    "SELECT TTEST(x, free) FROM t": "declare 'keys' for 'free'",
    "SELECT TTEST(raw, g) FROM t": "declare lower and upper for 'raw'",
    "SELECT TTEST(x, 20) FROM t": "in the bounds [0, 10]",
    "SELECT TTEST(x - y, 20) FROM t": "in the bounds [-1, 10]",
    "SELECT TTEST(x - raw) FROM t": "declare lower and upper for 'raw'",
    "SELECT TTEST(x - 1) FROM t": "TTEST(x - y, mean)",
    "SELECT TTEST(x - y, g) FROM t": "TTEST(x - y, mean)",
    "SELECT TTEST(x, g), COUNT(*) FROM t": "must be the only item",
    "SELECT TTEST(x, g) FROM t WHERE x > 1": "with WHERE is not supported",
    "SELECT TTEST(x, g, 'sideways') FROM t": "'greater' or 'less'",
    "SELECT CHI2(h, 0.5, 0.5) FROM t": "3 probabilities > 0",
    "SELECT KS(x, g, 5, 2) FROM t": "increasing finite cut points",
    "SELECT PROPTEST(free, g) FROM t": "0/1 or bool column",
    "SELECT ANOVA(x) FROM t": "ANOVA takes ANOVA(x, g)",
    "SELECT g, COUNT(*) FROM t WHERE ANOVA(x, g) > 1 GROUP BY g": "must be the only item",
}


@pytest.mark.parametrize("query", sorted(REFUSED))
def test_refusals_are_free_and_say_what_to_change(query: str) -> None:
    with _session(_table(50)) as session:
        with pytest.raises(DPError, match=re.escape(REFUSED[query])):
            session.sql(query, epsilon=1.0)
        assert session.spent().epsilon == 0


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"epsilon": 1.0, "delta": 1e-6}, "delta"),
        ({"rho": 0.5}, "rho"),
        ({"accuracy": {"value": 1.0}}, "accuracy"),
        ({"epsilon": 1.0, "clipping": 0.1}, "clipping"),
    ],
)
def test_options_a_test_cannot_honour_are_refused_free(options: dict[str, Any], named: str) -> None:
    with _session(_table(50)) as session:
        with pytest.raises(DPError, match=named):
            session.sql("SELECT TTEST(x, g) FROM t", **options)
        with pytest.raises(DPError, match="hypothesis test, not a query plan"):
            session.plan("SELECT TTEST(x, g) FROM t", epsilon=1.0)
        assert session.spent().epsilon == 0


def test_a_person_column_is_served_with_its_contribution_bound() -> None:
    """User-level: the engine bounds each person (r rows in g groups) and the noise is scaled by
    the unit's count_l1 (2 rows a person here), unlike the array tests, which refuse it."""
    table = _table(200).assign(pid=np.arange(200) // 3)
    meta = {**META, "columns": {**META["columns"], "pid": {"type": "int"}}}
    metadata = dpc.Metadata.from_dict(
        {**meta, "person_column": "pid", "max_rows_per_person": 2, "max_groups_per_person": 1}
    )
    with dpc.Session.from_data(table, metadata=metadata, budget=dpc.Budget(2.0)) as session:
        test = session.sql("SELECT CHI2(g, h) FROM t", epsilon=1.0).to_dict()["test"]
        assert test["noise"]["table (row-major)"] == 2.0  # Δ = r·min(g, cells) = 2, ε = 1
        assert sum(test["released"]["table (row-major)"]) < 200 - 20  # persons bounded to 2 rows


def test_the_paired_form_is_the_library_paired_test() -> None:
    """``TTEST(x - w)`` on two columns bounded in [0, 10] is the library's paired t-test (the
    differences' bounds [-10, 10] come from the columns' public bounds): same noisy statistics
    and p-value on the same seed; ``TTEST(x - w, d, side)`` names its H0."""
    gen = np.random.default_rng(4)
    x = np.clip(gen.normal(5, 2, 500), 0, 10)
    frame = pd.DataFrame({"x": x, "w": np.clip(x - 0.2 + gen.normal(0, 1, 500), 0, 10)})
    bounded = {"type": "float", "lower": 0, "upper": 10}
    metadata = dpc.Metadata.from_dict({"table": "t", "columns": {"x": bounded, "w": bounded}})
    with dpc.Session.from_data(frame, metadata=metadata, budget=dpc.Budget(3.0),
                               rng=SeededRng(7)) as session:  # fmt: skip
        paired = session.sql("SELECT TTEST(x - w) FROM t", epsilon=1.0).to_dict()["test"]
        side = session.sql("SELECT TTEST(x - w, 0.5, 'less') FROM t", epsilon=1.0)
        assert session.spent().epsilon == pytest.approx(2.0)
    library = ht.paired_t_test(frame.x, frame.w, lower=0, upper=10, epsilon=1.0, rng=SeededRng(7))
    for name, values in library.released.items():  # the engine sums on a fine grid
        assert paired["released"][name] == pytest.approx(list(values), rel=1e-6)
    assert paired["statistic"] == pytest.approx(library.statistic, rel=1e-6)
    assert paired["p_value"] == library.p_value
    assert paired["null"] == "mean of x - w = 0 (two-sided)"
    assert side.to_dict()["test"]["null"] == "mean of x - w = 0.5 (less)"
    assert side.result is not None
    assert side.result.p_value < 0.05  # the mean difference is about 0.2 < 0.5


# ----------------------------------------------------------------------------------------------
# Type-I error and power of the SQL tests' post-processing (the library path SQL calls)


def _welch_p(n: int, eps: float, shift: float, gen: np.random.Generator, rng: SeededRng) -> float:
    """TTEST's release from exact per-group statistics (as the engine returns them)."""
    groups = [np.clip(gen.normal(5 + shift * (j == 0), 2, n), 0, 10) - 5 for j in range(2)]
    exact = (
        np.array([n, n], np.int64),
        np.array([u.sum() for u in groups]),
        np.array([(u * u - 12.5).sum() for u in groups]),
    )
    setup = Setup(to_fraction(eps), False, PrivacyUnit(), 99, rng)
    return welch_result(
        noisy_moments(setup, exact, 5.0, 5.0), setup, "two-sided", ("a", "b")
    ).p_value


def _chi2_p(n: int, eps: float, shift: float, gen: np.random.Generator, rng: SeededRng) -> float:
    """CHI2(a, b)'s release from exact cell counts of a 3×2 table."""
    a = gen.choice(3, n, p=[0.2, 0.3, 0.5])
    b = (gen.random(n) < 0.4 + shift * (a == 2)).astype(int)
    counts = np.bincount(a * 2 + b, minlength=6).reshape(3, 2)
    setup = Setup(to_fraction(eps), False, PrivacyUnit(), 99, rng)
    table, noise = release_counts(setup, counts)
    return independence_result(table, noise, setup).p_value


def _paired_p(n: int, eps: float, shift: float, gen: np.random.Generator, rng: SeededRng) -> float:
    """TTEST(x - w)'s release from the exact moments of the differences of two columns bounded
    in [0, 10] (so in [-10, 10]: centre 0, half-width 10), correlated pairs."""
    x = np.clip(gen.normal(5, 2, n), 0, 10)
    diffs = x - np.clip(x - shift + gen.normal(0, 1, n), 0, 10)
    exact = (np.array([n], np.int64), np.array([diffs.sum()]), np.array([(diffs**2 - 50).sum()]))
    setup = Setup(to_fraction(eps), False, PrivacyUnit(), 99, rng)
    return one_sample_result("paired t", noisy_moments(setup, exact, 0.0, 10.0), 0.0, setup,
                             "two-sided").p_value  # fmt: skip


#: (name, run, alternative effect at which power is checked, n, ε) — the alternatives are sized
#: so that the DP test's power at α = 0.05 is well above 0.5 at that n and ε.
GRID = [(n, eps) for n in (100, 10_000) for eps in (0.1, 1.0)]
RUNS = {
    "TTEST": (_welch_p, {100: 1.5, 10_000: 0.15}),
    "TTEST paired": (_paired_p, {100: 1.5, 10_000: 0.1}),
    "CHI2": (_chi2_p, {100: 0.45, 10_000: 0.05}),
}
REPS = 120


@pytest.mark.statistical
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RUNS))
def test_type_one_error_and_power_over_n_and_epsilon(name: str) -> None:
    """Under H0 at n ∈ {100, 10^4}, ε ∈ {0.1, 1}: rejections at α = 0.05 <= α + TOLERANCE (a
    one-sided binomial test at the suite's ALPHA); at the alternative: power > 0.5 where the
    noise leaves room for it (ε = 1, and n = 10^4 at ε = 0.1)."""
    run, effects = RUNS[name]
    gen, rng = np.random.default_rng(5), SeededRng(5)
    for n, eps in GRID:
        nulls = sum(run(n, eps, 0.0, gen, rng) <= LEVEL for _ in range(REPS))
        assert rate_at_most(nulls, REPS, LEVEL + TOLERANCE), (n, eps, nulls)
        if eps == 1.0 or n == 10_000:
            alternatives = sum(run(n, eps, effects[n], gen, rng) <= LEVEL for _ in range(REPS // 3))
            assert rate_above(alternatives, REPS // 3, 0.5), (n, eps, alternatives)
