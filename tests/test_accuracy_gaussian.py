"""Accuracy-first queries with discrete Gaussian noise (dpcurator.query.plan.accuracy; issue 18 §2):
the smallest ρ per aggregate meeting its exact (1-α) half-width, charged as zCDP, or with a δ
converted and compared with Laplace."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

import dpcurator as dpc
from dpcurator.accounting import ConcentratedEvent, ZCDPEvent
from dpcurator.errors import BudgetExceededError, UnsupportedQueryError
from dpcurator.mechanisms import Gaussian, Laplace
from dpcurator.mechanisms.gaussian_threshold import GaussianPartitionSelection
from dpcurator.query.plan.accuracy import Want, gaussian_halfwidth, smallest_rho, statistic_width
from dpcurator.query.plan.outputs import NoisyStatistic
from dpcurator.query.plan.planner import Plan
from dpcurator.random import SeededRng
from tests.neighbour_queries import ENGINES, demo_frame, demo_metadata

COUNT = "SELECT COUNT(*) AS n FROM people"
MANY = "SELECT " + ", ".join(f"COUNT(*) AS c{i}" for i in range(20)) + " FROM people"
MANY_TARGETS = {f"c{i}": 50 for i in range(20)}


@pytest.fixture
def session() -> dpc.Session:
    return dpc.Session(
        ENGINES["memory"].open(demo_frame()),
        demo_metadata(),
        budget=dpc.Budget(10, 1e-5),
        accounting="concentrated",
        rng=SeededRng(11),
    )


def _part(plan: Plan, index: int = 0) -> NoisyStatistic:
    (part,) = plan.outputs[index].parts
    return part


@pytest.mark.parametrize(("sql", "target"), [(COUNT, 50.0), (COUNT, 0.0), (COUNT, 3.5)])
def test_the_rho_is_the_smallest_meeting_the_target(
    session: dpc.Session, sql: str, target: float
) -> None:
    """The planned ρ meets the target with the exact discrete Gaussian half-width; ρ lowered by
    a relative 1e-6 does not (the bisection stops at a relative 2^-40)."""
    plan = session.plan(sql, accuracy={"n": target}, noise="gaussian", alpha=0.05)
    part = _part(plan)
    assert isinstance(part.mechanism, Gaussian)
    assert plan.event == ZCDPEvent(part.rho)
    assert plan.cost == dpc.ZCDP(part.rho)
    rho = float(part.rho)
    assert part.mechanism.ci_halfwidth(0.05) <= target
    assert gaussian_halfwidth(part, rho * (1 - 1e-6), 1, statistic_width(part, 0.05)) > target


def test_extreme_targets_take_bounded_work() -> None:
    """A huge target ends at the sampler's largest σ (2^31), not at ρ = 0, in bounded steps."""
    plan = dpc.Session(
        ENGINES["memory"].open(demo_frame()), demo_metadata(), budget=dpc.ZCDP(1)
    ).plan("SELECT SUM(income) AS s FROM people", accuracy={"s": 1e300}, noise="gaussian")
    part = _part(plan)
    width = statistic_width(part, 0.05)
    rho = smallest_rho(part, Want(1e300, 0.05, width), 1)
    assert 0 < rho < 1e-6
    assert math.isinf(gaussian_halfwidth(part, rho / 2, 1, width))


def test_estimate_shows_the_cost_and_the_release_charges_it(session: dpc.Session) -> None:
    estimate = session.estimate(COUNT, accuracy={"n": 50}, noise="gaussian")
    assert isinstance(estimate.cost, dpc.ZCDP)
    width = estimate.ci_halfwidths["n"]
    assert width is not None
    assert width <= 50
    assert "discrete Gaussian (requested)" in estimate.noise
    release = session.sql(COUNT, accuracy={"n": 50}, noise="gaussian")
    assert release.events == (ZCDPEvent(estimate.cost.rho),)
    (row,) = release.rows
    (value,) = row[1]
    assert value.ci_high is not None
    assert value.ci_high - value.value <= 50


def test_the_automatic_choice_is_the_cheaper_family_given_delta(session: dpc.Session) -> None:
    """With δ: one count is cheaper with Laplace, twenty counts with the Gaussian (its ρ adds up
    as 20 ρ_i, whose ε grows about like sqrt(20)); the plan says which and why."""
    for sql, targets, family in ((COUNT, {"n": 50}, Laplace), (MANY, MANY_TARGETS, Gaussian)):
        costs = {
            noise: session.plan(sql, accuracy=targets, delta=1e-6, noise=noise).cost
            for noise in ("laplace", "gaussian")
        }
        auto = session.plan(sql, accuracy=targets, delta=1e-6)
        assert isinstance(_part(auto).mechanism, family)
        chosen = costs["gaussian" if family is Gaussian else "laplace"]
        other = costs["laplace" if family is Gaussian else "gaussian"]
        assert chosen.epsilon < other.epsilon  # type: ignore[union-attr]
        assert "(automatic): meets the targets at" in auto.noise
    gaussian = session.plan(MANY, accuracy=MANY_TARGETS, delta=1e-6)
    assert isinstance(gaussian.event, ConcentratedEvent)
    assert gaussian.cost == dpc.ApproxDP(gaussian.event.epsilon, Fraction(1e-6))
    assert all(_part(gaussian, i).mechanism.ci_halfwidth(0.05) <= 50 for i in range(20))


def test_partition_selection_takes_a_share_of_rho_and_half_of_delta(session: dpc.Session) -> None:
    sql = "SELECT hours, SUM(age) AS s FROM people GROUP BY hours"
    plan = session.plan(sql, accuracy={"s": 200}, delta=1e-6, noise="gaussian")
    assert isinstance(plan.selection, GaussianPartitionSelection)
    assert isinstance(plan.event, ConcentratedEvent)
    statistic = _part(plan).rho
    assert plan.selection.rho <= statistic  # selection_weight 1, one output: an equal share
    assert plan.event.rho == 2 * statistic
    assert plan.event.delta == plan.selection.tail_delta == Fraction(1e-6) / 2
    assert plan.event.epsilon_delta == Fraction(1e-6)


def test_refusals_are_free_and_name_the_cost(session: dpc.Session) -> None:
    before = repr(session)
    with pytest.raises(UnsupportedQueryError, match="No budget can meet"):
        session.sql("SELECT AVG(age) AS a FROM people", accuracy={"a": 1}, noise="gaussian")
    assert repr(session) == before
    needed = session.estimate(COUNT, accuracy={"n": 0.5}, noise="gaussian").cost
    assert isinstance(needed, dpc.ZCDP)
    small = dpc.Session(
        ENGINES["memory"].open(demo_frame()), demo_metadata(), budget=dpc.ZCDP(needed.rho / 2)
    )
    with pytest.raises(
        BudgetExceededError, match=r"\(rho: \d\.\d+ asked, \d\.\d+ left\)"
    ) as refused:
        small.sql(COUNT, accuracy={"n": 0.5}, noise="gaussian")
    assert refused.value.requested == needed
    assert small.spent() == dpc.ZCDP(0)


@pytest.mark.parametrize("delta", [0, 1e-6])
def test_gaussian_accuracy_at_delta_zero_on_a_basic_budget_says_what_to_pass(delta: float) -> None:
    """Accuracy targets with Gaussian noise at δ = 0 cost a ρ, which a basic ε or (ε, δ) budget
    cannot charge: the free refusal names the targets and the ways out, not a ``rho`` the
    analyst never gave."""
    frame, metadata = demo_frame(), demo_metadata()
    budget = dpc.Budget(1, delta)
    basic = dpc.Session(ENGINES["memory"].open(frame), metadata, budget=budget, accounting="basic")
    before = repr(basic)
    with pytest.raises(UnsupportedQueryError) as refused:
        basic.sql(COUNT, accuracy={"n": 50}, noise="gaussian")
    text = str(refused.value)
    assert "rho" not in text
    assert text.startswith("Accuracy targets with noise='gaussian' and delta = 0 cost a ρ")
    for way_out in ("give delta > 0", "noise='laplace'", "accounting='concentrated'"):
        assert way_out in text
    assert repr(basic) == before
