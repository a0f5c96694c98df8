"""Gaussian noise and zCDP in the query layer (dpcurator.query.plan.noise): neighbouring tables, CI
coverage, the automatic choice of noise family, ρ costs and concentrated accounting."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from scipy import stats

import dpcurator as dpc
from dpcurator.accounting import ConcentratedEvent, PrivacyEvent, ZCDPEvent
from dpcurator.errors import BudgetExceededError, ParameterError, UnsupportedQueryError
from dpcurator.mechanisms import Gaussian, Laplace
from dpcurator.query.backends import Backend
from dpcurator.query.caches import new_result_cache
from dpcurator.random import SeededRng
from tests.neighbour_queries import (
    ENGINES,
    RNG_SEED,
    Neighbour,
    Observation,
    demo_frame,
    demo_metadata,
    differences,
    release_shape,
)
from tests.neighbour_sql import VICTIM

#: Significance level of the statistical tests here (each is one binomial test).
ALPHA_TEST = 1e-3

GAUSSIAN_QUERIES: tuple[tuple[str, dict[str, object]], ...] = (
    ("SELECT COUNT(*) AS n, AVG(age) AS a, VARIANCE(income) AS v FROM people", {}),
    ("SELECT sex, COUNT(*) AS n, SUM(income) AS s, MEDIAN(age) AS m FROM people GROUP BY sex", {}),
    ("SELECT HISTOGRAM(age, 18, 90, 6) AS h FROM people WHERE pid <> 4322", {}),
    ("SELECT region, AVG(hours) AS h FROM people GROUP BY region", {"rho": 0.01}),
    # age has no public keys: partition selection, half of δ, the other half for the Gaussian
    ("SELECT age, COUNT(*) AS n FROM people GROUP BY age", {}),
)


def _session(backend: Backend, **options: object) -> dpc.Session:
    return dpc.Session(
        backend,
        demo_metadata(),
        budget=dpc.Budget(1_000, Fraction(1, 1000)),
        accounting="concentrated",
        rng=SeededRng(RNG_SEED),
        **options,  # type: ignore[arg-type]
    )


def _observe(backend: Backend, sql: str, cost: dict[str, object]) -> tuple[Observation, str]:
    """What an analyst sees of a Gaussian release except the noisy numbers: the neighbour
    harness's observation (charge, columns, public keys, CI widths) and the release's
    mechanisms, events and noise text."""
    session = _session(backend)
    budget = cost or {"epsilon": 1.0, "delta": 1e-6}
    try:
        release = session.sql(sql, noise="gaussian", **budget)  # type: ignore[arg-type]
    except Exception as exc:  # every exception is an observable outcome
        return Observation(type(exc).__name__, str(exc), repr(session)), ""
    plan = session.plan(sql, noise="gaussian", **budget)  # type: ignore[arg-type]
    shape = release_shape(
        plan, release.group_columns, release.value_columns, release.rows, release.alpha
    )
    public = (release.mechanisms, release.events, release.noise, release.cost)
    return Observation("release", charge=repr(session), **shape), repr(public)


@pytest.mark.parametrize(("sql", "cost"), GAUSSIAN_QUERIES)
def test_gaussian_release_is_the_same_on_neighbouring_tables(
    sql: str, cost: dict[str, object]
) -> None:
    """D and D minus the victim (and D with the victim's row changed): only noisy values may
    differ; the plan, its Gaussian mechanisms, events, CI widths and charges are public."""
    config = ENGINES["duckdb"]
    base = config.open(demo_frame())
    try:
        seen, public = _observe(base, sql, cost)
        assert seen.outcome == "release", seen.detail
        assert "discrete Gaussian" in public
        for neighbour in (Neighbour(VICTIM), Neighbour(VICTIM, "income=NaN")):
            other = config.open(neighbour.frame())
            try:
                other_seen, other_public = _observe(other, sql, cost)
            finally:
                other.close()
            assert differences(seen, other_seen) == [], neighbour
            assert public == other_public, neighbour
    finally:
        base.close()


@pytest.mark.statistical
def test_gaussian_intervals_cover_at_the_declared_level() -> None:
    """2,000 Gaussian releases of a count and a float sum at σ ≈ 6 and 2^-k·σ ≈ 4e5: the (1-α)
    intervals (α = 0.2, so misses are frequent enough to test) must miss the exact value at
    most a fraction α of the time (one-sided binomial test at ALPHA_TEST); power check: the same
    releases with intervals of the half-width of α' = 0.4 miss too often and are rejected."""
    backend = ENGINES["memory"].open(demo_frame())
    session = dpc.Session(
        backend,
        demo_metadata(),
        budget=dpc.Budget(10**9, Fraction(1, 2)),
        rng=SeededRng(7),
        result_cache=new_result_cache(),
    )
    sql = "SELECT COUNT(*) AS n, SUM(income) AS s FROM people"
    alpha, runs = 0.2, 2_000
    plan = session.plan(sql, epsilon=1, delta=1e-6, noise="gaussian")
    exact = backend.compute(plan.exact).groups[()]
    truth = {  # the exact values the intervals cover: grid units times the grid step
        output.name: int(exact[output.parts[0].exact]) * 2.0 ** output.parts[0].grid_exponent  # type: ignore[call-overload]
        for output in plan.outputs
    }
    estimate = session.estimate(sql, epsilon=1, delta=1e-6, noise="gaussian", alpha=alpha)
    narrow = session.estimate(sql, epsilon=1, delta=1e-6, noise="gaussian", alpha=0.4)
    misses = {"n": 0, "s": 0}
    narrow_misses = {"n": 0, "s": 0}
    for _ in range(runs):
        release = session.sql(sql, epsilon=1, delta=1e-6, noise="gaussian", alpha=alpha)
        for name in misses:
            value = release.value(name)
            assert value.ci_low is not None
            assert value.ci_high is not None
            if not value.ci_low <= truth[name] <= value.ci_high:
                misses[name] += 1
            width = narrow.ci_halfwidths[name]
            assert width is not None
            if abs(value.value - truth[name]) > width:
                narrow_misses[name] += 1
    last = release.value("n")
    assert last.ci_high is not None
    assert estimate.ci_halfwidths["n"] == last.ci_high - last.value
    for name, missed in misses.items():
        assert stats.binomtest(missed, runs, alpha, alternative="greater").pvalue > ALPHA_TEST
        power = stats.binomtest(narrow_misses[name], runs, alpha, alternative="greater")
        assert power.pvalue < ALPHA_TEST, name


MANY = "SELECT " + ", ".join(f"COUNT(*) AS c{i}" for i in range(40)) + " FROM people"


def _halfwidth(session: dpc.Session, sql: str, noise: str) -> float:
    width = session.estimate(sql, epsilon=1, delta=1e-6, noise=noise).ci_halfwidths["c0"]
    assert width is not None
    return width


def test_automatic_choice_picks_the_narrower_family() -> None:
    """At (1, 1e-6): one count is narrower with Laplace (ln(2/α)/ε ≈ 3.0 against the Gaussian's
    ≈ 12), forty counts in one query with the Gaussian (Laplace pays 40/ε, the Gaussian
    sqrt(40)); the automatic plan is the narrower one and says so."""
    session = _session(ENGINES["memory"].open(demo_frame()))
    one = "SELECT COUNT(*) AS c0 FROM people"
    assert _halfwidth(session, one, "laplace") < _halfwidth(session, one, "gaussian")
    auto = session.plan(one, epsilon=1, delta=1e-6)
    assert isinstance(auto.outputs[0].parts[0].mechanism, Laplace)
    assert auto.noise.startswith("discrete Laplace (automatic)")
    assert _halfwidth(session, MANY, "gaussian") < _halfwidth(session, MANY, "laplace")
    auto = session.plan(MANY, epsilon=1, delta=1e-6)
    assert isinstance(auto.outputs[0].parts[0].mechanism, Gaussian)
    assert auto.noise.startswith("discrete Gaussian (automatic)")
    release = session.sql(MANY, epsilon=1, delta=1e-6)
    assert release.noise == auto.noise
    assert release.to_dict()["noise"] == auto.noise
    assert release.mechanisms[0].mechanism == "discrete Gaussian"
    # δ = 0: no Gaussian (it has no pure cost), whatever the number of aggregates
    pure = session.plan(MANY, epsilon=1)
    assert isinstance(pure.outputs[0].parts[0].mechanism, Laplace)


def test_l2_sensitivity_over_groups_and_rho_split() -> None:
    """A person in up to g = 4 groups (public keys): the count's L2 sensitivity is sqrt(4)·1,
    against 4 in L1; ρ = 0.02 split between a count and a mean's (count, sum) in proportion
    to their ε shares^(3/2), spent exactly, σ = Δ₂/sqrt(2ρ_j) rounded up."""
    metadata = demo_metadata()
    many_groups = dpc.Metadata.from_dict({**metadata.to_dict(), "max_groups_per_person": 4})
    session = dpc.Session(
        ENGINES["memory"].open(demo_frame()),
        many_groups,
        budget=dpc.ZCDP(1),
        accounting="concentrated",
    )
    sql = "SELECT region, COUNT(*) AS n, AVG(age) AS a FROM people GROUP BY region"
    rho = Fraction(0.02)
    plan = session.plan(sql, rho=0.02)
    parts = [p for o in plan.outputs for p in o.parts]
    assert [p.l2_squared for p in parts] == [4, 4, 4 * 36**2]
    assert sum((p.rho for p in parts), Fraction(0)) == rho
    weights = [Fraction(float(p.epsilon) ** 1.5) for p in parts]
    for part, weight in zip(parts, weights, strict=True):
        assert part.rho == rho * weight / sum(weights, Fraction(0))
        mechanism = part.mechanism
        assert isinstance(mechanism, Gaussian)
        assert mechanism.sigma**2 >= Fraction(part.l2_squared) / (2 * part.rho)
        assert float(mechanism.sigma) == pytest.approx(
            math.sqrt(part.l2_squared / (2 * part.rho)), rel=1e-12
        )
    assert plan.event == ZCDPEvent(rho)
    assert str(plan.cost) == "ρ = 0.02"


def test_rho_costs_and_concentrated_accounting() -> None:
    """A ρ query needs concentrated accounting (refused free under basic); under it, events are
    charged natively and shown as (ε, δ); an (ε, δ) Gaussian query carries both views. Only the
    accounting is checked, so 200 rows of D do (the row-by-row reference engine answers each of
    the 100 queries ~50 times faster than on all of D)."""
    frame = demo_frame().head(200)
    basic = dpc.Session(
        ENGINES["memory"].open(frame),
        demo_metadata(),
        budget=dpc.Budget(1, 1e-6),
        accounting="basic",
    )
    with pytest.raises(UnsupportedQueryError, match="accounting='concentrated'"):
        basic.sql("SELECT COUNT(*) AS n FROM people", rho=0.001)
    assert basic.spent().epsilon == 0  # type: ignore[union-attr]
    with pytest.raises(ParameterError, match="delta"):
        basic.sql("SELECT COUNT(*) AS n FROM people", epsilon=0.5, noise="gaussian")
    session = dpc.Session(
        ENGINES["memory"].open(frame),
        demo_metadata(),
        budget=dpc.Budget(1, 1e-6),
        accounting="concentrated",
        rng=SeededRng(3),
    )
    rho_part = session._filter.limits.rho  # type: ignore[attr-defined]
    share = rho_part / 200  # half of the Rényi route: room for the (ε, δ) query below
    for _ in range(100):
        release = session.sql("SELECT COUNT(*) AS n, AVG(age) AS a FROM people", rho=share)
    assert release.events == (ZCDPEvent(share),)
    assert PrivacyEvent.from_dict(release.to_dict()["events"][0]) == ZCDPEvent(share)
    with pytest.raises(BudgetExceededError):
        session.sql("SELECT COUNT(*) AS n FROM people", rho=rho_part / 2 + share)
    text = repr(session)
    for shown in ("spent: (ε = ", "remaining: (ε = ", "spent ρ = ", "basic ε = 0"):
        assert shown in text
    approx = session.sql(
        "SELECT COUNT(*) AS n FROM people", epsilon=0.2, delta=1e-7, noise="gaussian"
    )
    (event,) = approx.events
    assert isinstance(event, ConcentratedEvent)
    assert (event.epsilon, event.epsilon_delta) == (Fraction(0.2), Fraction(1e-7))
    assert event.rho > 0
    assert event.delta == 0


def test_automatic_choice_falls_back_to_laplace_when_no_gaussian_fits() -> None:
    """At ε = 1e-9 (the documented minimum) and δ = 1e-10 no ρ is left for a Gaussian: the
    automatic plan is Laplace and says why, where a refusal would lose a query Laplace answers;
    asking for the Gaussian by name is refused, free."""
    session = _session(ENGINES["memory"].open(demo_frame()))
    sql = "SELECT age, COUNT(*) AS n FROM people GROUP BY age"
    plan = session.plan(sql, epsilon=1e-9, delta=1e-10)
    assert isinstance(plan.outputs[0].parts[0].mechanism, Laplace)
    assert plan.noise == (
        "discrete Laplace (automatic): no discrete Gaussian can be built at this cost"
    )
    with pytest.raises(ParameterError, match="epsilon"):
        session.plan(sql, epsilon=1e-9, delta=1e-10, noise="gaussian")
