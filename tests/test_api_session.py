"""The library's one API (dpcurator.api, issue 28 item 2): every Session verb charges the
session's filter exactly the cost it reports, refuses bad budget arguments free with a message
naming the parameter, converts (ε, δ) and ρ exactly, and returns the common release shape; the
test verbs compute what the array tests compute on the same counts (an oracle)."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.accounting import PrivacyFilter, ZCDPAccountant
from dpcurator.accounting.concentrated import largest_rho, zcdp_epsilon
from dpcurator.accounting.events import ConcentratedEvent
from dpcurator.api import Result, Session
from dpcurator.api.budget import PURE, ZCDP_ONLY, resolve
from dpcurator.api.means import RESOLUTION_BINS
from dpcurator.core.measures import ZCDP, ApproxDP, Measure, PureDP
from dpcurator.errors import DPError, UnsupportedQueryError
from dpcurator.estimators import hypothesis
from dpcurator.random import SeededRng

G = ["a", "b", "c"]
H = ["u", "v"]
META = dpc.Metadata.from_dict(
    {
        "table": "t",
        "columns": {
            "g": {"type": "string", "keys": G},
            "h": {"type": "string", "keys": H},
            "x": {"type": "float", "lower": 0.0, "upper": 10.0},
            "z": {"type": "float", "lower": -5.0, "upper": 5.0},
            "y": {"type": "int", "keys": [0, 1]},
            "free": {"type": "float"},
        },
    }
)


def _table(rows: int = 400, seed: int = 5) -> pd.DataFrame:
    """Made-up rows in which h and y depend on g (so the tests have power)."""
    draws = np.random.default_rng(seed)
    g = draws.choice(G, rows)
    h = np.where(draws.random(rows) < np.where(g == "a", 0.9, 0.2), "u", "v")
    y = (draws.random(rows) < np.where(g == "a", 0.8, 0.3)).astype(int)
    x = np.clip(draws.normal(np.where(g == "a", 2.0, 7.0), 1.0), 0, 10)
    z = draws.normal(0, 2, rows)
    return pd.DataFrame({"g": g, "h": h, "x": x, "z": z, "y": y, "free": z})


def _session(budget: Any = None, *, seed: int = 3, **kwargs: Any) -> Session:
    if budget is None and "budget_filter" not in kwargs:
        budget = dpc.Budget(20.0)
    return dpc.Session.from_data(
        _table(), metadata=META, budget=budget, rng=SeededRng(seed), **kwargs
    )


#: One call of each verb at ε = 1 (the hypothesis tests with few simulations: faster).
VERBS: dict[str, Callable[[Session], Result]] = {
    "kmeans": lambda s: s.kmeans(["x", "z"], 2, epsilon=1.0, iterations=2),
    "pca": lambda s: s.pca(["x", "z"], 1, epsilon=1.0),
    "naive_bayes": lambda s: s.naive_bayes(["x", "z"], "y", epsilon=1.0),
    "decision_tree": lambda s: s.decision_tree(["g", "h"], "y", epsilon=1.0, max_depth=1),
    "chi2": lambda s: s.chi2(["g", "h"], epsilon=1.0, simulations=49),
    "chi2 goodness of fit": lambda s: s.chi2(
        ["g"], probabilities=[1, 1, 1], epsilon=1.0, simulations=49
    ),
    "proportions_ztest": lambda s: s.proportions_ztest(
        "y", "g", groups=["a", "b"], epsilon=1.0, simulations=49
    ),
    "ttest": lambda s: s.ttest("x", mean=5.0, epsilon=1.0, simulations=49),
    "ttest welch": lambda s: s.ttest("x", by="h", epsilon=1.0, simulations=49),
    "ttest paired": lambda s: s.ttest("x", paired="z", epsilon=1.0, simulations=49),
    "ks": lambda s: s.ks("x", "h", cuts=[2.5, 5, 7.5], epsilon=1.0, simulations=49),
    "anova": lambda s: s.anova("z", "g", epsilon=1.0, simulations=49),
    "synthesize mwem": lambda s: s.synthesize("mwem", columns=["g", "h"], epsilon=1.0),
    "pmw": lambda s: s.pmw(["g", "h"], epsilon=1.0, max_updates=2, threshold=20.0),
}


def _epsilon(measure: Measure) -> Fraction:
    assert isinstance(measure, PureDP)
    return measure.epsilon


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_each_verb_charges_exactly_its_cost_and_has_the_common_shape(verb: str) -> None:
    with _session() as s:
        s.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)  # something already spent
        before, events = _epsilon(s.spent()), s._filter.events()
        result = VERBS[verb](s)
        assert _epsilon(s.spent()) - before == _epsilon(result.cost)
        assert 1 - Fraction(1, 10**9) < _epsilon(result.cost) <= 1
        assert s._filter.events() == (*events, *result.events)
        assert result.values
        assert result.summary().startswith(f"{result.kind} (cost: ε = ")
        frame = result.to_pandas()
        assert isinstance(frame, pd.DataFrame)
        assert len(frame) > 0
        assert frame.attrs["cost"] == str(result.cost)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda s: s.kmeans(["x"], 2, rho=0.5, iterations=1), "rho"),
        (lambda s: s.kmeans(["x"], 2, iterations=1), "epsilon"),
        (lambda s: s.kmeans(["x"], 2, epsilon=1, rho=0.5, iterations=1), "epsilon"),
        (lambda s: s.pca(["x", "z"], 1, epsilon=1.0, delta=1e-6), "delta"),
        (lambda s: s.chi2(["g", "h"], epsilon=-1.0), "epsilon"),
        (lambda s: s.chi2(["g", "h"], epsilon=1.0, delta=2.0), "delta"),
        (lambda s: s.chi2(["g", "h"], rho=0.1), "rho"),  # a pure ε budget cannot take ρ
        (lambda s: s.proportions_ztest("y", "g", groups=["a", "b"], epsilon=0), "epsilon"),
        (lambda s: s.synthesize("mwem", columns=["g", "h"], rho=0.5), "rho"),
        (lambda s: s.synthesize("mst", columns=["g", "h"], epsilon=1.0), "delta"),
        (lambda s: s.synthesize("mst", columns=["g", "h"], epsilon=1, delta=1e-6), "delta"),
        (lambda s: s.synthesize("gan", columns=["g", "h"], epsilon=1.0), "method"),
        (lambda s: s.pmw(["g"], epsilon=1, delta=1e-6, max_updates=1, threshold=9), "delta"),
    ],
)
def test_bad_budget_arguments_are_refused_free_naming_the_parameter(
    call: Callable[[Session], Result], name: str
) -> None:
    with _session() as s:
        with pytest.raises(DPError) as refusal:
            call(s)
        message = str(refusal.value)
        assert f"'{name}'" in message or f"{name} =" in message or f" {name} " in message
        assert "Fraction(" not in message
        assert "Event" not in message  # no internal class names
        assert s._filter.events() == ()


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.kmeans(["x"], 2, rho=0.5, iterations=1),
        lambda s: s.synthesize("mwem", columns=["g", "h"], rho=0.5),
        lambda s: s.pmw(["g"], rho=0.5, max_updates=1, threshold=9),
    ],
)
def test_a_pure_algorithm_refuses_rho_even_on_a_budget_that_takes_rho(
    call: Callable[[Session], Result],
) -> None:
    """ρ-zCDP implies no pure ε: a pure ε-DP verb refuses ``rho`` on a concentrated budget."""
    with _session(dpc.Budget(20.0, 1e-5)) as s:
        with pytest.raises(UnsupportedQueryError, match=r"pure ε-DP and rho = 0\.5"):
            call(s)
        assert s._filter.events() == ()


def test_rho_without_delta_on_a_basic_approximate_budget_is_refused_free() -> None:
    with _session(dpc.Budget(5.0, 1e-5), accounting="basic") as s:
        with pytest.raises(UnsupportedQueryError, match="give delta > 0"):
            s.chi2(["g", "h"], rho=0.1)
        with pytest.raises(DPError, match="'workload'"):  # MST picks its own marginals
            s.synthesize("mst", rho=1, delta=1e-6, workload=[["g", "h"]])
        assert s._filter.events() == ()


def test_refusals_of_the_algorithm_come_before_the_charge() -> None:
    with _session() as s:
        with pytest.raises(UnsupportedQueryError, match="'free'"):  # no public bounds
            s.kmeans(["free"], 2, epsilon=1.0, iterations=1)
        with pytest.raises(DPError, match="'groups'"):
            s.proportions_ztest("y", "g", epsilon=1.0)  # g has three keys: name two
        with pytest.raises(DPError, match="'probabilities'"):
            s.chi2(["g"], probabilities=[1, 1], epsilon=1.0)
        with pytest.raises(UnsupportedQueryError, match="'free'"):
            s.ttest("free", mean=0.0, epsilon=1.0)
        with pytest.raises(DPError, match="'mean'"):
            s.ttest("x", mean=1.0, by="h", epsilon=1.0)  # one-sample or two groups, not both
        with pytest.raises(DPError, match="'groups'"):
            s.ttest("x", by="g", epsilon=1.0)  # g has three keys: name two
        with pytest.raises(DPError, match="'groups'"):
            s.anova("x", "g", groups=["a", "nope"], epsilon=1.0)
        with pytest.raises(DPError, match="'paired'"):
            s.ttest("x", paired="z", by="h", epsilon=1.0)  # a pair is two columns of one row
        with pytest.raises(UnsupportedQueryError, match="'free'"):
            s.ttest("x", paired="free", epsilon=1.0)  # no public bounds
        with pytest.raises(DPError, match="'cuts'"):
            s.ks("x", "h", cuts=[5, 2.5], epsilon=1.0)
        with pytest.raises(UnsupportedQueryError, match="3 public keys"):
            s.ks("x", "g", cuts=[5], epsilon=1.0)
        assert s._filter.events() == ()


def test_a_rho_with_delta_on_a_basic_budget_is_charged_its_exact_conversion() -> None:
    rho, delta = Fraction(1, 10), Fraction(1, 10**6)
    with _session(dpc.Budget(5.0, 1e-5), accounting="basic") as s:
        result = s.chi2(["g", "h"], rho=rho, delta=delta, simulations=9)
    (event,) = result.events
    assert event == ConcentratedEvent(rho, epsilon=zcdp_epsilon(rho, delta), epsilon_delta=delta)
    assert s.spent() == ApproxDP(zcdp_epsilon(rho, delta), delta)
    assert result.detail.cost == ZCDP(rho)  # the test itself ran at exactly ρ


def test_a_zcdp_budget_is_charged_rho_and_epsilon_delta_become_the_largest_rho() -> None:
    with _session(budget_filter=PrivacyFilter(ZCDP(2), ZCDPAccountant())) as s:
        result = s.chi2(["g", "h"], rho=0.25, simulations=9)
        assert s.spent() == ZCDP(Fraction(1, 4)) == result.cost
        pure = s.chi2(["g", "h"], epsilon=0.5, simulations=9)  # ε-DP implies ε²/2-zCDP
        assert pure.cost == PureDP(Fraction(1, 2))
        assert s.spent() == ZCDP(Fraction(1, 4) + Fraction(1, 8))
        cost = resolve("v", s._filter, ZCDP_ONLY, epsilon=1.0, delta=1e-6, rho=None)
    epsilon, delta = Fraction(1), Fraction(1e-6)  # a float is the binary rational it holds
    assert cost.rho == largest_rho(epsilon, delta)
    assert zcdp_epsilon(cost.rho, delta) <= epsilon
    assert cost.delta == delta
    with _session() as s:
        assert resolve("v", s._filter, PURE, epsilon=0.5, delta=0, rho=None).epsilon == Fraction(
            1, 2
        )


@pytest.mark.parametrize("budget", ["epsilon", "rho"])
def test_the_test_verbs_compute_what_the_array_tests_compute_on_the_same_rows(
    budget: str,
) -> None:
    """An oracle: a row-level session releases the same counts the array test counts, with the
    same noise (same seed), so statistic and p-value are equal."""
    frame = _table()
    amount = {budget: 0.5}
    common: dict[str, Any] = {"simulations": 99, **amount}
    array_results = [
        hypothesis.independence_test(frame.g, frame.h, G, H, rng=SeededRng(8), **common),
        hypothesis.goodness_of_fit_test(frame.g, G, [1, 2, 1], rng=SeededRng(8), **common),
        hypothesis.two_proportion_z_test(
            frame.y[frame.g == "a"], frame.y[frame.g == "b"], rng=SeededRng(8), **common
        ),
    ]
    verbs: list[Callable[[Session], Result]] = [
        lambda s: s.chi2(["g", "h"], **common),
        lambda s: s.chi2(["g"], probabilities=[1, 2, 1], **common),
        lambda s: s.proportions_ztest("y", "g", groups=["a", "b"], **common),
    ]
    for verb, expected in zip(verbs, array_results, strict=True):
        zcdp = PrivacyFilter(ZCDP(5), ZCDPAccountant())
        opened = _session(seed=8) if budget == "epsilon" else _session(budget_filter=zcdp, seed=8)
        with opened as s:
            result = verb(s)
        assert result.values["statistic"] == expected.statistic
        assert result.values["p_value"] == expected.p_value
        assert result.detail.released == expected.released
        assert result.cost == expected.cost
    assert array_results[0].p_value < 0.05  # power: h depends on g in these rows


def _read_at_resolution(values: pd.Series, lower: float, upper: float) -> np.ndarray:
    """The values as the mean-test verbs read them: clamped, NaN at the midpoint, each at the
    midpoint of its bin among RESOLUTION_BINS equal bins of [lower, upper]."""
    bins = RESOLUTION_BINS
    clamped = np.clip(values.fillna((lower + upper) / 2).to_numpy(), lower, upper)
    index = np.minimum(np.floor((clamped - lower) / (upper - lower) * bins), bins - 1)
    return lower + (index + 0.5) * (upper - lower) / bins


@pytest.mark.parametrize("budget", ["epsilon", "rho"])
def test_the_mean_test_verbs_compute_what_the_array_tests_compute_at_their_resolution(
    budget: str,
) -> None:
    """An oracle: the array tests on the values at the verbs' resolution give the same statistic
    and p-value (same seed); the resolution moves the mean by far less than its noise."""
    frame = _table()
    x = _read_at_resolution(frame.x, 0.0, 10.0)
    z = _read_at_resolution(frame.z, -5.0, 5.0)
    common: dict[str, Any] = {"simulations": 99, budget: 0.5}
    expected = [
        hypothesis.one_sample_t_test(x, mean=5.0, lower=0, upper=10, rng=SeededRng(8), **common),
        hypothesis.welch_t_test(
            x[frame.h == "u"], x[frame.h == "v"], lower=0, upper=10, rng=SeededRng(8), **common
        ),
        hypothesis.one_way_anova(
            *(z[frame.g == key] for key in G), lower=-5, upper=5, rng=SeededRng(8), **common
        ),
    ]
    verbs: list[Callable[[Session], Result]] = [
        lambda s: s.ttest("x", mean=5.0, simulations=99, **{budget: 0.5}),
        lambda s: s.ttest("x", by="h", simulations=99, **{budget: 0.5}),
        lambda s: s.anova("z", "g", simulations=99, **{budget: 0.5}),
    ]
    _assert_verbs_give(verbs, expected, budget)
    assert abs(x.mean() - frame.x.mean()) < 10 / RESOLUTION_BINS


@pytest.mark.parametrize("budget", ["epsilon", "rho"])
def test_the_paired_and_ks_verbs_are_the_array_tests(budget: str) -> None:
    """``ttest(x, paired=z)`` is the one-sample t of the rows' x - z read at the resolution of
    [-5, 15] (the bounds of x - z from those of x and z), and ``ks`` the array KS test of x in
    h's two keys at the same cuts: same statistic, p-value and cost on the same seed."""
    frame = _table()
    diffs = np.clip(frame.x, 0, 10) - np.clip(frame.z, -5, 5)
    common: dict[str, Any] = {"simulations": 99, budget: 0.5}
    paired = hypothesis.one_sample_t_test(
        _read_at_resolution(diffs, -5.0, 15.0), mean=0.0, lower=-5, upper=15, rng=SeededRng(8),
        **common,
    )  # fmt: skip
    ks = hypothesis.ks_test(
        frame.x[frame.h == "u"], frame.x[frame.h == "v"], edges=[2.5, 5, 7.5], rng=SeededRng(8),
        **common,
    )  # fmt: skip
    verbs: list[Callable[[Session], Result]] = [
        lambda s: s.ttest("x", paired="z", **common),
        lambda s: s.ks("x", "h", cuts=[2.5, 5, 7.5], **common),
    ]
    _assert_verbs_give(verbs, [paired, ks], budget)


def test_the_sql_and_fit_releases_have_the_common_shape() -> None:
    with _session(dpc.Budget(20.0, 1e-5)) as s:
        grouped = s.sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g", epsilon=1.0)
        total = s.sql("SELECT COUNT(*) AS n, AVG(x) AS m FROM t", epsilon=1.0)
        fit = s.fit("linear_regression", y="x", x=["z"], epsilon=1.0, delta=1e-6)
    assert grouped.values == {"n": [estimates[0].value for _, estimates in grouped.rows]}
    low, high = grouped.intervals["n"]
    assert len(low) == len(high) == len(G)
    assert all(lo <= v <= hi for lo, v, hi in zip(low, grouped.values["n"], high, strict=True))
    assert isinstance(total.values["n"], float)
    assert total.intervals["m"][0] <= total.values["m"] <= total.intervals["m"][1]
    assert fit.values["value"] is fit.value
    assert fit.intervals["value"] == (fit.ci_low, fit.ci_high)
    assert list(fit.to_pandas().columns) == ["value", "ci_low", "ci_high"]
    assert fit.summary() == str(fit)


@pytest.mark.slow
def test_mst_at_epsilon_delta_on_a_basic_budget_is_charged_at_most_epsilon() -> None:
    delta = Fraction(1e-6)  # the float's exact value
    with _session(dpc.Budget(5.0, 1e-5), accounting="basic") as s:
        result = s.synthesize("mst", columns=["g", "h"], epsilon=2.0, delta=1e-6, rows=50)
    (event,) = result.events
    assert isinstance(event, ConcentratedEvent)
    assert event.rho <= largest_rho(Fraction(2), delta)
    assert s.spent() == ApproxDP(zcdp_epsilon(event.rho, delta), delta) == result.cost
    assert event.epsilon is not None
    assert event.epsilon <= 2
    assert len(result.to_pandas()) == 50


def _assert_verbs_give(
    verbs: list[Callable[[Session], Result]], oracles: list[Any], budget: str
) -> None:
    """Each verb, on a fresh session of seed 8 at ``budget`` (ε or ρ), gives its oracle's
    statistic, p-value and cost."""
    for verb, oracle in zip(verbs, oracles, strict=True):
        zcdp = PrivacyFilter(ZCDP(5), ZCDPAccountant())
        opened = _session(seed=8) if budget == "epsilon" else _session(budget_filter=zcdp, seed=8)
        with opened as s:
            result = verb(s)
        assert result.values["statistic"] == pytest.approx(oracle.statistic, rel=1e-9)
        assert result.values["p_value"] == oracle.p_value
        assert result.cost == oracle.cost
