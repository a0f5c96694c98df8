"""Partition selection of Gaussian plans (dpcurator.mechanisms.gaussian_threshold) and one
selection shared by all the aggregates of a query, thresholding its count's own noise
(dpcurator.query.plan.planner.shared_selection_output): accounting by hand, the threshold's δ
against the exact discrete Gaussian tail, the release probability of a small group, neighbours."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import dpcurator as dpc
from dpcurator.accounting import ConcentratedEvent
from dpcurator.accounting.concentrated import largest_rho
from dpcurator.core.measures import ZCDP
from dpcurator.mechanisms import PartitionSelection
from dpcurator.mechanisms.gaussian_threshold import GaussianPartitionSelection, tail_bound_log
from dpcurator.query.caches import new_result_cache
from dpcurator.query.plan.planner import Plan
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

#: Significance level of the statistical test here (one binomial test, and its power check).
ALPHA_TEST = 1e-3

EPS, DLT = 1.0, 1e-6  # the query's (ε, δ), and as the exact Fractions the planner uses:
EPSILON, DELTA = Fraction(EPS), Fraction(DLT)
COUNT_SUM = "SELECT education, COUNT(*) AS n, SUM(income) AS s FROM people GROUP BY education"
SUM_ONLY = "SELECT education, SUM(income) AS s FROM people GROUP BY education"


def _metadata() -> dpc.Metadata:
    """The demo metadata with no public keys for education: GROUP BY education selects."""
    data = demo_metadata().to_dict()
    columns = {**data["columns"], "education": {"type": "string"}}  # type: ignore[dict-item]
    return dpc.Metadata.from_dict({**data, "columns": columns})


def _session(frame: pd.DataFrame | None = None, seed: int = RNG_SEED) -> dpc.Session:
    return dpc.Session(
        ENGINES["memory"].open(demo_frame() if frame is None else frame),
        _metadata(),
        budget=dpc.Budget(10**6, Fraction(1, 100)),
        accounting="concentrated",
        rng=SeededRng(seed),
        result_cache=new_result_cache(),
    )


def _gaussian_plan(sql: str) -> tuple[Plan, GaussianPartitionSelection, ConcentratedEvent]:
    plan = _session().plan(sql, epsilon=EPS, delta=DLT, noise="gaussian")
    assert isinstance(plan.selection, GaussianPartitionSelection)
    assert isinstance(plan.event, ConcentratedEvent)
    return plan, plan.selection, plan.event


def test_count_and_sum_spend_one_selection_on_the_count() -> None:
    """COUNT(*) and SUM per group (one row per person): one selection, thresholding the count's
    own noisy value; no separate person count, so ε is split between the two outputs only."""
    plan = _session().plan(COUNT_SUM, epsilon=EPS, delta=DLT, noise="laplace")
    count, total = plan.outputs
    assert isinstance(plan.selection, PartitionSelection)
    assert plan.selection_output == "n"
    assert [a.name for a in plan.exact.aggregates] == [p.exact for p in count.parts + total.parts]
    assert plan.selection_exact == count.parts[0].exact
    assert plan.selection.laplace == count.parts[0].mechanism
    assert plan.selection.epsilon == count.epsilon
    assert count.epsilon + total.epsilon == EPSILON


def test_shared_gaussian_selection_accounting_by_hand() -> None:
    """Gaussian COUNT+SUM at (1, 1e-6): the outputs take ρ_G = largest_rho(1, δ/2) (no ε share
    for the selection), the selection thresholds the count's own discrete Gaussian and adds no
    ρ, its tail costs the other δ/2: the query is δ/2-approximately ρ_G-zCDP and (1, δ)-DP."""
    plan, selection, event = _gaussian_plan(COUNT_SUM)
    rho = largest_rho(EPSILON, DELTA / 2)
    assert sum((p.rho for o in plan.outputs for p in o.parts), Fraction(0)) == rho
    assert selection.gaussian == plan.outputs[0].parts[0].mechanism
    assert (selection.tail_delta, selection.delta) == (DELTA / 2, DELTA / 2)
    assert selection.epsilon == 0
    assert event == ConcentratedEvent(rho, DELTA / 2, EPSILON, DELTA)


def test_separate_gaussian_selection_accounting_by_hand() -> None:
    """Gaussian SUM alone at (1, 1e-6): the selection has its share ε_sel = 1/2 and δ_sel = δ/2,
    half of it for the ρ_sel conversion and half for the tail; ρ_sel = 1/(2σ²) is within
    (ε_sel, δ/4) and the event adds it to the sum's ρ."""
    plan, selection, event = _gaussian_plan(SUM_ONLY)
    (total,) = plan.outputs
    assert selection.epsilon == total.epsilon == EPSILON / 2
    assert selection.rho == 1 / (2 * selection.gaussian.sigma**2)
    assert selection.rho <= largest_rho(EPSILON / 2, DELTA / 4)
    assert ZCDP(selection.rho).to_approx(DELTA / 4).epsilon <= EPSILON / 2
    assert total.parts[0].rho == largest_rho(EPSILON / 2, DELTA / 2)
    assert (selection.tail_delta, selection.delta) == (DELTA / 4, DELTA / 2)
    assert event == ConcentratedEvent(total.parts[0].rho + selection.rho, DELTA / 4, EPSILON, DELTA)
    assert not plan.selection_output
    assert plan.exact.aggregates[-1].kind == "count_persons"


def _exact_upper_tail(sigma: float, t: int) -> float:
    """P[Z >= t] for the discrete Gaussian, by summing its pmf (independent of the bound used)."""
    support = np.arange(-int(60 * sigma) - 2, int(60 * sigma) + 3)
    weights = np.exp(-0.5 * (support / sigma) ** 2)
    return float(weights[support >= t].sum() / weights.sum())


@pytest.mark.parametrize("sql", [COUNT_SUM, SUM_ONLY])
def test_the_threshold_costs_its_delta_and_not_much_more(sql: str) -> None:
    """A group only one neighbour has holds one person (count 1, g = 1): it is released with
    probability P[1 + Z >= τ], which must be <= the selection's tail δ; τ - 2 would exceed it
    (the rigorous tail bound costs at most one integer step)."""
    _, selection, _ = _gaussian_plan(sql)
    sigma = float(selection.gaussian.sigma)
    assert _exact_upper_tail(sigma, selection.threshold - 1) <= selection.tail_delta
    assert _exact_upper_tail(sigma, selection.threshold - 3) > selection.tail_delta


@pytest.mark.statistical
def test_release_probability_of_a_small_group() -> None:
    """A group of k = τ persons: the planned selection releases it in a fraction of 20,000
    independent draws that a two-sided binomial test at ALPHA_TEST finds equal to the exact
    P[k + Z >= τ]; power check: the probability under τ + 1 is rejected. Through the session
    (a demo table with such a group), every released count of the group is >= τ: the released
    count is the thresholded noisy value, not a fresh one."""
    _, selection, _ = _gaussian_plan(COUNT_SUM)
    tau, sigma = selection.threshold, float(selection.gaussian.sigma)
    runs = 20_000
    mask, _ = selection.select(np.full(runs, tau), SeededRng(11))
    released = int(mask.sum())
    assert stats.binomtest(released, runs, _exact_upper_tail(sigma, 0)).pvalue > ALPHA_TEST
    assert stats.binomtest(released, runs, _exact_upper_tail(sigma, 1)).pvalue < ALPHA_TEST
    frame = demo_frame()
    frame.loc[frame.index[:tau], "education"] = "rare"
    session = _session(frame, seed=11)
    seen = 0
    for _ in range(40):
        release = session.sql(COUNT_SUM, epsilon=EPS, delta=DLT, noise="gaussian")
        if ("rare",) in [key for key, _ in release.rows]:
            seen += 1
            assert release.value("n", ("rare",)).value >= tau
    assert seen > 0


def _observe(backend_frame: pd.DataFrame, sql: str) -> tuple[Observation, str]:
    """The neighbour harness's observation of a Gaussian release with partition selection, and
    its public record (mechanisms, events, noise text, cost)."""
    session = _session(backend_frame)
    release = session.sql(sql, epsilon=EPS, delta=DLT, noise="gaussian")
    plan = session.plan(sql, epsilon=EPS, delta=DLT, noise="gaussian")
    shape = release_shape(
        plan, release.group_columns, release.value_columns, release.rows, release.alpha
    )
    public = (release.mechanisms, release.events, release.noise, release.cost)
    return Observation("release", charge=repr(session), **shape), repr(public)


@pytest.mark.parametrize("sql", [COUNT_SUM, SUM_ONLY])
def test_gaussian_selection_is_the_same_on_neighbouring_tables(sql: str) -> None:
    """D and D minus the victim: only noisy values (and the data-selected keys) may differ; the
    Gaussian selection, its threshold, events, CI widths and charges are public."""
    seen, public = _observe(demo_frame(), sql)
    assert "discrete Gaussian + threshold" in public
    for neighbour in (Neighbour(VICTIM), Neighbour(VICTIM, "income=NaN")):
        other_seen, other_public = _observe(neighbour.frame(), sql)
        assert differences(seen, other_seen) == [], neighbour
        assert public == other_public, neighbour


def test_rigorous_tail_bound_is_above_the_exact_tail() -> None:
    """The bound the threshold uses is >= the exact discrete Gaussian tail at small and large σ
    (a bound below the truth would under-charge δ)."""
    for sigma in (0.3, 1.0, 6.6, 40.0):
        for t in range(1, int(8 * sigma) + 3):
            exact = _exact_upper_tail(sigma, t)
            if exact > 1e-300:
                assert np.log(exact) <= tail_bound_log(sigma, t) + 1e-12, (sigma, t)
