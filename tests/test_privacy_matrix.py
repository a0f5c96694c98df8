"""The conformance matrix (issue 29): every release kind × {add/remove, replace-one} × {one row a
person, r = 2 rows a person without an id, a person column with r = 2 and g = 2}, by brute force
on tiny neighbouring tables (:mod:`tests.privacy_matrix`: the losses of the recorded mechanism
inputs against the charge). A kind the library offers without a row here fails
:func:`test_every_release_kind_has_a_row`.
"""

from __future__ import annotations

import contextlib
import math
from decimal import Context, Decimal, localcontext
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.accounting import PureEvent
from dpcurator.core.measures import ZCDP, PureDP
from dpcurator.errors import BudgetExceededError, DomainError, UnsupportedQueryError
from dpcurator.estimators import hypothesis
from dpcurator.interactive import PrivateMultiplicativeWeights
from dpcurator.mechanisms import randomized_response
from dpcurator.mechanisms.randomized_response import KaryRandomizedResponse
from dpcurator.mining import ID3, PCA, GaussianNB, KMeans
from dpcurator.random import SeededRng
from dpcurator.service.stores.sparse import (
    SparseQuestion,
    _numeric_values,
    plan_sparse,
    sparse_flags,
)
from dpcurator.streams import ContinualSum, CorrelatedContinualSum, KaryContinualSum
from dpcurator.synth.aim import aim
from dpcurator.synth.fourier import plan_fourier, release_fourier
from dpcurator.synth.marginals import plan_marginals, release_marginals
from dpcurator.synth.mst import independent, mst
from dpcurator.synth.mwem import mwem
from tests.privacy_matrix import (
    LEVELS,
    RELATIONS,
    SEED,
    Engines,
    Kind,
    Tap,
    _base,
    audit,
    frame,
    loss,
    metadata,
    module_engines,  # noqa: F401 (the fixture engines)
    neighbours,
    within,
)


def _sql(text: str, **options: object) -> Kind:
    def release(session: dpc.Session, rng: SeededRng) -> object:
        return session.sql(text, **options)  # type: ignore[arg-type]

    budget = ", ".join(f"{k}={v}" for k, v in options.items())
    return Kind(f"sql: {text} [{budget}]", release)


def _persons(session: dpc.Session, rng: SeededRng) -> object:
    return session.sql("SELECT g, COUNT(DISTINCT pid) AS n FROM t GROUP BY g", epsilon=1.0)


def _bounds(session: dpc.Session, rng: SeededRng) -> object:
    with contextlib.suppress(DomainError):  # no bin cleared the threshold: charged, no answer
        return session.dp_bounds("x", epsilon=1.0)
    return None


def _fit(kind: str, **options: object) -> Kind:
    def release(session: dpc.Session, rng: SeededRng) -> object:
        return session.fit(kind, epsilon=1.0, **options)  # type: ignore[arg-type]

    # the sample-and-aggregate fits and PTR pay for r rows (no ids) or two sides by ε/steps
    blocked = kind != "linear_regression"
    seeds = 4 if kind == "sample_and_aggregate" else 1  # rows of one person in distinct blocks
    return Kind(f"fit: {kind} {sorted(options)}", release, total_only=blocked, seeds=seeds)


def _mining(name: str) -> Kind:
    def release(session: dpc.Session, rng: SeededRng) -> object:
        if name == "kmeans":
            return KMeans(2, epsilon=1.0, iterations=2).fit(session, rng, columns=["x", "y"])
        if name == "pca":
            return PCA(1, epsilon=1.0).fit(session, columns=["x", "y"])
        if name == "id3":
            return ID3(epsilon=1.0, max_depth=1).fit(session, columns=["g", "h"], label="y")
        return GaussianNB(epsilon=1.0).fit(session, columns=["x"], label="y")

    return Kind(f"mining: {name}", release)


def _verb(name: str, budget: str) -> Kind:
    """A Session verb that is a release kind of its own (dpcurator.api): a hypothesis test on the
    session's table (the engine's counts of public cells, or for the mean tests its histogram of
    the column on fine public bins, bounded per person by the metadata, then the test's own
    noise), at ε or at ρ (a ρ budget)."""
    amount: dict[str, Any] = {budget: 0.5}

    def release(session: dpc.Session, rng: SeededRng) -> object:
        if name == "chi2":
            return session.chi2(["g", "h"], simulations=9, **amount)
        if name == "chi2 goodness of fit":
            return session.chi2(["g"], probabilities=[1, 1, 1, 1], simulations=9, **amount)
        if name == "ttest":
            return session.ttest("x", mean=5.0, simulations=9, **amount)
        if name == "ttest welch":
            return session.ttest("x", by="g", groups=["a", "b"], simulations=9, **amount)
        if name == "ttest paired":
            return session.ttest("x", paired="y", simulations=9, **amount)
        if name == "ks":
            return session.ks("x", "y", cuts=[2.5, 5, 7.5], simulations=9, **amount)
        if name == "anova":
            return session.anova("x", "g", simulations=9, **amount)
        return session.proportions_ztest("y", "g", groups=["a", "b"], simulations=9, **amount)

    return Kind(f"session: {name} [{budget}]", release, budget=budget)


def _extreme_flag(block: object) -> object:
    """An adversarial user estimator of sample-and-aggregate: 10 when the block holds a row at
    the upper bound of x (only newcomers have one), else 0, so every block a newcomer's rows
    reach moves by the whole width of the box."""
    return np.array([10.0 if (np.asarray(block)[:, 0] >= 10).any() else 0.0])


def _synth(name: str) -> Kind:
    columns = ["g", "h"]

    def release(session: dpc.Session, rng: SeededRng) -> object:
        if name == "marginals":
            plan = plan_marginals(session, [columns], rho=0.5, columns=columns)
            return release_marginals(session, plan, rng=rng, iters=50)
        if name == "marginals_pure":
            plan = plan_marginals(session, [columns], epsilon=0.5, columns=columns)
            return release_marginals(session, plan, rng=rng, iters=50)
        if name == "fourier":
            return release_fourier(session, plan_fourier(session, [columns], rho=0.5), rng=rng)
        if name == "mst":  # ρ large enough that the common codes survive compression
            return mst(session, rho=20.0, columns=columns, rng=rng, iters=10)
        if name == "aim":
            return aim(session, rho=0.5, columns=columns, rng=rng, iters=50, round_iters=20)
        if name == "independent":
            return independent(session, rho=0.5, columns=columns, rng=rng)
        return mwem(session, epsilon=0.5, columns=columns, rounds=2, rng=rng)

    budget = "epsilon" if name in ("mwem", "marginals_pure") else "rho"
    return Kind(f"synth: {name}", release, budget=budget, amount=20.0 if name == "mst" else 2.0)


def _pmw(session: dpc.Session, rng: SeededRng) -> object:
    """Private multiplicative weights over g × h: its prior marginals at construction, then
    counting queries (the total first: a newcomer moves it by all of their rows; AboveThreshold
    tests and, above the threshold, a Laplace update) until
    the update budget is spent (a public refusal, free: its outcome is released)."""
    curator = PrivateMultiplicativeWeights(
        session, ["g", "h"], epsilon=1.0, max_updates=2, threshold=1.0, passes=2
    )
    answers = []
    for where in ({}, {"g": "a"}, {"h": ["v", "w"]}, {}, {"g": "b", "h": "v"}):
        with contextlib.suppress(BudgetExceededError):
            answers.append(curator.count(where))
    return answers


#: The sparse vector request of the rows: two counts and a sum (Δ is the largest, the sum's).
SPARSE_QUERIES = [
    "SELECT COUNT(*) AS n FROM t WHERE y = 1",
    "SELECT SUM(x) AS s FROM t",
    "SELECT COUNT(*) AS n FROM t WHERE g = 'a'",
    "SELECT COUNT(*) AS n FROM t WHERE h = 'z'",
]


def _sparse(numeric: bool) -> Kind:
    """Sparse vector (Sparse, and numeric sparse) as the service answers it
    (:func:`dpcurator.service.stores.sparse.answer_sparse`'s body on a library session, no HTTP: the
    library offers no other entry point): the plans, one charge of ε, the exact answers, then
    ``c`` AboveThreshold runs and, numeric, a Laplace value of each positive."""

    def release(session: dpc.Session, rng: SeededRng) -> object:
        question = SparseQuestion(SPARSE_QUERIES, 4.0, 2, Fraction(1), numeric=numeric)
        scalars, mechanism, values = plan_sparse(session, question)
        results = session.compute_exact(
            [s.exact for s in scalars], PureEvent(question.epsilon), description="sparse vector"
        )
        answers = [s.value(r) for s, r in zip(scalars, results, strict=True)]
        flags = sparse_flags(answers, mechanism, question.positives, rng)
        if values is None:
            return flags
        return flags, _numeric_values(answers, flags, values, rng)

    # the numeric values: one Laplace for c values, each Δ-sensitive at ε/c
    return Kind(f"sparse vector (numeric={numeric})", release, total_only=numeric)


#: Every release kind of the library, with the relations and units it supports.
KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in [
        _sql("SELECT COUNT(*) AS n FROM t WHERE y = 1", epsilon=1.0),
        _sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g", epsilon=1.0),
        _sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g", rho=0.5),
        _sql("SELECT SUM(x) AS s FROM t", epsilon=1.0),
        _sql("SELECT g, SUM(x) AS s FROM t GROUP BY g", epsilon=1.0),
        _sql("SELECT AVG(x) AS m FROM t", epsilon=1.0),
        _sql("SELECT g, AVG(x) AS m, VARIANCE(x) AS v FROM t GROUP BY g", epsilon=1.0),
        _sql("SELECT MEDIAN(x) AS q FROM t", epsilon=1.0),
        _sql("SELECT g, MEDIAN(x) AS q FROM t GROUP BY g", epsilon=1.0),
        _sql("SELECT HISTOGRAM(x, 0, 10, 4) AS hist FROM t", epsilon=1.0),
        Kind("sql: COUNT(DISTINCT pid)", _persons, levels=("person",)),
        _sql("SELECT g, SUM(x) AS s FROM t GROUP BY g", epsilon=1.0, clipping=0.2),
        Kind("dp_bounds", _bounds),
        _fit("linear_regression", y="x", x=["y"], delta=1e-6),
        _fit("logistic_regression", y="y", x=["x"], method="sample_and_aggregate", blocks=2,
             lower=-5, upper=5),
        _fit("mle", y="x", model="gaussian", lower=[0, 0.1], upper=[10, 10], blocks=2),
        _fit("sample_and_aggregate", x=["x"], estimator=_extreme_flag, lower=[0], upper=[10],
             blocks=4),
        _fit("ptr_regression", y="x", x=["y"], lower=-20, upper=20, blocks=2, delta=1e-6),
        _mining("kmeans"),
        _mining("pca"),
        _mining("id3"),
        _mining("naive_bayes"),
        _synth("marginals"),
        _synth("marginals_pure"),
        _synth("fourier"),
        _synth("mst"),
        _synth("aim"),
        _synth("independent"),
        _synth("mwem"),
        Kind("pmw", _pmw),
        *(_verb(name, budget)
          for name in ("chi2", "chi2 goodness of fit", "proportions_ztest", "ttest",
                       "ttest welch", "ttest paired", "ks", "anova")
          for budget in ("epsilon", "rho")),
        _sparse(numeric=False),
        _sparse(numeric=True),
    ]
}  # fmt: skip

CASES = [
    pytest.param(name, relation, level, id=f"{name}|{relation}|{level}")
    for name in KINDS
    for relation in RELATIONS
    for level in LEVELS
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "relation", "level"), CASES)
def test_release_kind_conforms(
    name: str, relation: str, level: str, monkeypatch: pytest.MonkeyPatch, engines: Engines
) -> None:
    """On every pair of worst-case neighbours, the release loses at most what it charges."""
    assert audit(KINDS[name], relation, level, monkeypatch, engines) == []


# ----------------------------------------------------------------------------------------------
# Outside the table: streams and local-model surveys. Hypothesis tests take arrays and a unit,
# not a session: their rows are at the end of this file (test_hypothesis_test_conforms).

#: A tiny stream of 8 time slots (two batches: 5 then 3 events), values in [0, 10], and each
#: event's person (user level caps every person at 2 events).
STREAM = (4.0, 10.0, 0.0, 7.5, 10.0, 2.0, 10.0, 1.0)
STREAM_PERSONS = (0, 1, 2, 1, 3, 1, 4, 5)


def _stream_neighbours(
    relation: str, level: str
) -> list[tuple[list[float], list[int | str], list[float], list[int | str]]]:
    """(values, persons) of the stream and its neighbours. The tree's clock is public, so a
    removed event leaves its slot holding the null value 0 (from a person of its own), and a
    replaced one holds 10 if it held 0, else 0 (a counter's event flips). Event level: one event
    (slots 0 or 2, 3, 6). User level:
    every event of person 1 (slots 1, 3, 5: three events, more than the cap of 2)."""
    values, persons = list(STREAM), list[int | str](STREAM_PERSONS)
    first = 2 if relation == "replace_one" else 0  # a 0 to replace by 10; a non-zero to remove
    slots = [[first], [3], [6]] if level == "event" else [[1, 3, 5]]
    pairs = []
    for chosen in slots:
        other, who = list(values), list(persons)
        for slot in chosen:
            if relation == "add_remove":
                other[slot], who[slot] = 0.0, f"empty {slot}"
            else:
                other[slot] = 10.0 if other[slot] == 0.0 else 0.0
        pairs.append((values, persons, other, who))
        if relation == "add_remove":  # and the other way round: the event added
            pairs.append((other, who, values, persons))
    return pairs


def _stream_draws(  # noqa: PLR0917 (the stream, its neighbour's data and the run's seed)
    counting: bool,
    level: str,
    values: list[float],
    persons: list[int | str],
    seed: int,
    patch: pytest.MonkeyPatch,
    *,
    replay: Any = None,
) -> tuple[Any, ContinualSum]:
    cap = 2 if level == "user" else None
    if counting:
        stream = ContinualSum.counter(1.0, 8, max_events_per_person=cap)
    else:
        stream = ContinualSum(1.0, 8, 0.0, 10.0, max_events_per_person=cap)
    rng = SeededRng(seed)
    who = persons if cap else None
    with patch.context() as scoped, Tap(replay).installed(scoped) as tap:
        stream.update(values[:5], rng, who[:5] if who else None)
        stream.update(values[5:], rng, who[5:] if who else None)
    return tap.draws, stream


@pytest.mark.parametrize("relation", RELATIONS)
@pytest.mark.parametrize("level", ["event", "user"])
@pytest.mark.parametrize("counting", [True, False], ids=["counter", "sum"])
def test_tree_stream_conforms(
    counting: bool, level: str, relation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The binary tree mechanism (:class:`~dpcurator.streams.ContinualSum`) on the stream's
    own neighbouring relation: one event added/removed or replaced (event level), all events of
    one person (user level, ``max_events_per_person=2``). Both streams run with the same seed
    (the second replaying the first's outputs); the recorded node sums' Laplace loss must fit
    the stream's ε (``epsilon_spent``), summed over both batches."""
    for index, (values, persons, other, who) in enumerate(_stream_neighbours(relation, level)):
        draws, stream = _stream_draws(counting, level, values, persons, index, monkeypatch)
        other_draws, _ = _stream_draws(
            counting, level, other, who, index, monkeypatch, replay=draws
        )
        observed = loss(draws, other_draws)
        assert observed.paired == len(draws) == 2 * stream.levels
        assert observed.laplace > 0, "the neighbours should differ in some node"
        assert within(PureDP(stream.epsilon_spent), observed), (index, observed)


def _new_stream(kind: str, counting: bool, cap: int | None) -> Any:
    """A stream of the new kinds (issue 27) on the 8-slot stream: ρ = 1/2 or ε = 1."""
    if kind == "correlated":
        if counting:
            return CorrelatedContinualSum.counter(0.5, 8, max_events_per_person=cap)
        return CorrelatedContinualSum(0.5, 8, 0.0, 10.0, max_events_per_person=cap)
    if counting:
        return KaryContinualSum.counter(1.0, 8, branching=3, max_events_per_person=cap)
    return KaryContinualSum(1.0, 8, 0.0, 10.0, branching=3, max_events_per_person=cap)


def _new_stream_draws(  # noqa: PLR0917 (the stream, its neighbour's data, the seed)
    kind: str,
    counting: bool,
    level: str,
    values: list[float],
    persons: list[int | str],
    seed: int,
    patch: pytest.MonkeyPatch,
    *,
    replay: Any = None,
) -> tuple[Any, Any]:
    cap = 2 if level == "user" else None
    rng = SeededRng(seed)
    who = persons if cap else None
    with patch.context() as scoped, Tap(replay).installed(scoped) as tap:
        stream = _new_stream(kind, counting, cap)  # built under the tap: its calibration recorded
        stream.update(values[:5], rng, who[:5] if who else None)
        stream.update(values[5:], rng, who[5:] if who else None)
    return tap.draws, stream


@pytest.mark.parametrize("relation", RELATIONS)
@pytest.mark.parametrize("level", ["event", "user"])
@pytest.mark.parametrize("counting", [True, False], ids=["counter", "sum"])
@pytest.mark.parametrize("kind", ["correlated", "kary"])
def test_new_stream_conforms(
    kind: str, counting: bool, level: str, relation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The correlated-noise stream (:class:`~dpcurator.streams.CorrelatedContinualSum`,
    discrete Gaussian on the integer lattice encoding of C x) and the k-ary tree
    (:class:`~dpcurator.streams.KaryContinualSum`, discrete Laplace node sums) on the streams'
    relation (one event, or all events of one person with ``max_events_per_person=2``): the
    recorded inputs' loss (‖F(x) − F(x′)‖²/(2σ²) summed over both batches, or the Laplace L1
    loss) must fit the stream's charge (``rho_spent`` as zCDP, ``epsilon_spent`` as pure DP),
    and no draw may move more than the sensitivity its mechanism was built for."""
    for index, (values, persons, other, who) in enumerate(_stream_neighbours(relation, level)):
        args = (kind, counting, level)
        draws, stream = _new_stream_draws(*args, values, persons, index, monkeypatch)
        other_draws, _ = _new_stream_draws(*args, other, who, index, monkeypatch, replay=draws)
        observed = loss(draws, other_draws)
        assert observed.paired == len(draws) == 2 * getattr(stream, "levels", 1)
        assert observed.overshoots == (), (index, observed.overshoots)
        if kind == "correlated":
            assert observed.rho > 0, "the neighbours should differ in some step"
            assert within(ZCDP(stream.rho_spent), observed), (index, observed)
        else:
            assert observed.laplace > 0, "the neighbours should differ in some node"
            assert within(PureDP(stream.epsilon_spent), observed), (index, observed)


def _exact_ln(ratio: Fraction) -> Decimal:
    with localcontext(Context(prec=60)):
        return (Decimal(ratio.numerator) / Decimal(ratio.denominator)).ln()


@pytest.mark.parametrize(("epsilon", "k"), [(1, 2), (Fraction(1, 2), 4), (3, 7), (1e-6, 3)])
def test_randomized_response_conforms(
    epsilon: object, k: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Local-model surveys (:mod:`dpcurator.service.stores.surveys`) are not a row of the table
    matrix: each respondent randomises their own answer before it reaches the server, which
    holds no table and charges no central budget, so the unit is the respondent and the
    relation is their true answer replaced by any other (local DP). The check is by exact
    probabilities: a tap on the coins of :meth:`KaryRandomizedResponse.randomize` records the
    truth's probability p and the number of other categories the shift is drawn from; the
    channel is then P[r | v] = p if r = v else (1 - p)/(k - 1), and the largest
    ln P[r | v] / P[r | v'] over every pair of answers and report must be at most ε (and
    within 10^-12 of it: the budget is used, not wasted)."""
    mechanism = KaryRandomizedResponse(epsilon, k)
    coins: list[Fraction] = []
    shifts: list[int] = []
    biased = randomized_response.bernoulli_rational

    def coin(rng: Any, numerator: int, denominator: int, size: int) -> Any:
        coins.append(Fraction(numerator, denominator))
        return biased(rng, numerator, denominator, size)

    monkeypatch.setattr(randomized_response, "bernoulli_rational", coin)
    rng = SeededRng(7)
    below = rng.integers_below

    def shift(bound: int, size: int) -> Any:
        shifts.append(bound)
        return below(bound, size)

    monkeypatch.setattr(rng, "integers_below", shift)
    reports = mechanism.randomize(np.arange(k, dtype=np.int64), rng)
    assert len(set(coins)) == 1
    assert set(shifts) == {k - 1}
    assert set(reports.tolist()) <= set(range(k))
    p = coins[0]
    channel = [[p if r == v else (1 - p) / shifts[0] for r in range(k)] for v in range(k)]
    worst = max(channel[v][r] / channel[w][r] for v in range(k) for w in range(k) for r in range(k))
    eps = Fraction(epsilon)  # type: ignore[arg-type]
    used = _exact_ln(worst)
    assert used <= Decimal(eps.numerator) / Decimal(eps.denominator)
    assert math.isclose(float(used), float(eps), rel_tol=1e-12)


# ----------------------------------------------------------------------------------------------
# Hypothesis tests (issue 27 item 2: dpcurator.estimators.hypothesis). They take arrays and a
# PrivacyUnit, not a session: each row runs the test on the columns of every pair of worst-case
# neighbours with the unit of the relation and level (metadata(...).unit), both runs seeded alike
# (the second replaying the first's outputs), and checks the recorded draws' loss against the
# test's ε and each draw against its calibration. A person column is refused (arrays carry no
# person ids), before any draw.

HYPOTHESIS_EPSILON = 1.0


def _hypothesis_release(
    name: str, table: pd.DataFrame, unit: Any, rng: SeededRng, budget: str = "epsilon"
) -> object:
    """Run the test ``name`` of the hypothesis package on the tiny table's columns, at ε or
    at ρ (``budget``) of HYPOTHESIS_EPSILON."""
    x, y, g, h = table["x"], table["y"], table["g"], table["h"]
    common: dict[str, Any] = {budget: HYPOTHESIS_EPSILON, "unit": unit, "simulations": 9}
    common["rng"] = rng
    bounded = {"lower": 0.0, "upper": 10.0} | common
    first, second = x[y == 1], x[y == 0]
    if name == "one_sample_t_test":
        return hypothesis.one_sample_t_test(x, mean=5.0, **bounded)
    if name == "paired_t_test":
        return hypothesis.paired_t_test(x, 10.0 * y, **bounded)
    if name == "welch_t_test":
        return hypothesis.welch_t_test(first, second, **bounded)
    if name == "one_way_anova":
        return hypothesis.one_way_anova(*(x[g == key] for key in "abcd"), **bounded)
    if name == "two_proportion_z_test":
        return hypothesis.two_proportion_z_test(y[g == "a"], y[g != "a"], **common)
    if name == "goodness_of_fit_test":
        return hypothesis.goodness_of_fit_test(g, list("abcd"), [0.25] * 4, **common)
    if name == "independence_test":
        return hypothesis.independence_test(g, h, list("abcd"), list("uvwz"), **common)
    return hypothesis.ks_test(first, second, edges=[2.5, 5.0, 7.5], **common)


def _hypothesis_draws(  # noqa: PLR0917 (one run of the row)
    name: str,
    table: pd.DataFrame,
    unit: Any,
    budget: str,
    patch: pytest.MonkeyPatch,
    replay: Any = None,
) -> list[Any]:
    with patch.context() as scoped, Tap(replay).installed(scoped) as tap:
        _hypothesis_release(name, table, unit, SeededRng(SEED), budget)
    return tap.draws


@pytest.mark.parametrize("budget", ["epsilon", "rho"])
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("relation", RELATIONS)
@pytest.mark.parametrize("name", sorted(hypothesis.TESTS))
def test_hypothesis_test_conforms(
    name: str, relation: str, level: str, budget: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every hypothesis test × relation × unit × {ε, ρ}: the loss on each pair of neighbours
    fits the charge (ε, or ρ-zCDP)."""
    unit = metadata(relation, level, len(_base(level))).unit
    if level == "person":
        table = frame(_base(level), level)
        with Tap().installed(monkeypatch) as tap:
            with pytest.raises(UnsupportedQueryError):
                _hypothesis_release(name, table, unit, SeededRng(SEED), budget)
            assert tap.draws == []
        return
    for index, (table, other) in enumerate(neighbours(relation, level)):
        draws = _hypothesis_draws(name, table, unit, budget, monkeypatch)
        other_draws = _hypothesis_draws(name, other, unit, budget, monkeypatch, replay=draws)
        observed = loss(draws, other_draws)
        assert observed.paired == len(draws) >= 1, index
        charge = ZCDP(HYPOTHESIS_EPSILON) if budget == "rho" else PureDP(HYPOTHESIS_EPSILON)
        assert within(charge, observed), (index, observed)
        assert observed.overshoots == (), (index, observed.overshoots)
