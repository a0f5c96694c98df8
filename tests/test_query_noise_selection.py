"""Partition selection with Gaussian noise in the query layer (dpcurator.query.plan.noise; issue
18): ρ-costed queries with Gaussian thresholding, and the automatic Laplace/Gaussian choice counting
partition selection's threshold."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

import dpcurator as dpc
from dpcurator.accounting import ConcentratedEvent
from dpcurator.errors import ParameterError
from dpcurator.mechanisms import Gaussian, Laplace
from dpcurator.mechanisms.gaussian_threshold import GaussianPartitionSelection
from dpcurator.query.frontend.sql import parse_sql
from dpcurator.query.plan.noise import CHOICE_ALPHA, plan_with_noise
from dpcurator.query.plan.planner import Plan
from dpcurator.random import SeededRng
from tests.neighbour_queries import ENGINES, Neighbour, demo_frame, demo_metadata
from tests.neighbour_sql import VICTIM

#: hours has no public keys: GROUP BY hours needs DP partition selection.
SELECTED = "SELECT hours, COUNT(*) AS n, SUM(income) AS s FROM people GROUP BY hours"
RHO, DELTA = 0.05, 1e-7


def _plan(sql: str, metadata: dpc.Metadata | None = None, **cost: object) -> Plan:
    metadata = metadata or demo_metadata()
    return plan_with_noise(parse_sql(sql, metadata), metadata, **cost)  # type: ignore[arg-type]


def test_rho_with_delta_plans_gaussian_thresholding() -> None:
    """rho and delta: δ-approximately ρ-zCDP, charged as one ConcentratedEvent (ρ, δ); the
    selection's and the statistics' ρ add up to at most ρ."""
    plan = _plan("SELECT hours, SUM(income) AS s FROM people GROUP BY hours", rho=RHO, delta=DELTA)
    assert isinstance(plan.selection, GaussianPartitionSelection)
    assert plan.selection_output == ""  # its own person counts
    assert plan.event == ConcentratedEvent(Fraction(RHO), Fraction(DELTA))
    assert plan.cost == dpc.ZCDP(RHO)
    spent = plan.selection.rho + sum(p.rho for o in plan.outputs for p in o.parts)
    assert 0.999 * RHO < spent <= RHO
    assert all(isinstance(p.mechanism, Gaussian) for o in plan.outputs for p in o.parts)
    assert f"threshold {plan.selection.threshold}" in plan.noise
    # the selection thresholds the count output's own noise: no ρ of its own, all δ its tail
    shared = _plan("SELECT hours, COUNT(*) AS n FROM people GROUP BY hours", rho=RHO, delta=DELTA)
    assert shared.selection_output == "n"
    assert isinstance(shared.selection, GaussianPartitionSelection)
    assert shared.selection.tail_delta == Fraction(DELTA)
    assert shared.outputs[0].parts[0].rho == Fraction(RHO)


def test_rho_with_delta_on_public_keys_is_refused_free() -> None:
    with pytest.raises(ParameterError, match="partition selection"):
        _plan("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex", rho=RHO, delta=DELTA)


def _observe(frame_source: Neighbour | None, sql: str, **cost: object) -> tuple[object, ...]:
    """What an analyst sees of a ρ release with selection, except the noisy values and which
    keys pass the threshold: the outcome, charge, events, mechanisms, noise text, columns."""
    frame = demo_frame() if frame_source is None else frame_source.frame()
    session = dpc.Session(
        ENGINES["duckdb"].open(frame),
        demo_metadata(),
        budget=dpc.Budget(10, 1e-3),
        accounting="concentrated",
        rng=SeededRng(5),
    )
    try:
        release = session.sql(sql, **cost)  # type: ignore[arg-type]
    except Exception as exc:  # every exception is an observable outcome
        return type(exc).__name__, str(exc), repr(session)
    finally:
        session.close()
    plan = session.plan(sql, **cost)  # type: ignore[arg-type]
    assert isinstance(plan.selection, GaussianPartitionSelection)
    return (
        plan.selection.threshold,
        repr(session),
        release.events,
        release.mechanisms,
        release.noise,
        release.cost,
        release.group_columns,
        release.value_columns,
    )


@pytest.mark.parametrize(
    ("cost", "outcome"),
    [
        ({"rho": RHO, "delta": DELTA}, int),  # a release: its threshold first
        ({"rho": 0.5, "delta": 1e-4}, int),
        ({"rho": 1e30, "delta": DELTA}, "BudgetExceededError"),
    ],
)
def test_rho_selection_is_the_same_on_neighbouring_tables(
    cost: dict[str, object], outcome: object
) -> None:
    """D and D minus the victim: the threshold, the charge and the error classes are the same
    (only noisy values and which keys clear the threshold may differ)."""
    seen = _observe(None, SELECTED, **cost)
    assert seen[0] == outcome or type(seen[0]) is outcome
    assert seen == _observe(Neighbour(VICTIM), SELECTED, **cost)


def _reach(plan: Plan) -> float:
    """The selection's (1 - CHOICE_ALPHA) half-width plus its threshold (persons)."""
    selection = plan.selection
    if isinstance(selection, GaussianPartitionSelection):
        return selection.gaussian.ci_halfwidth(CHOICE_ALPHA) + selection.threshold
    assert selection is not None
    return selection.laplace.ci_halfwidth(CHOICE_ALPHA) + selection.threshold


@pytest.mark.parametrize(("groups", "family"), [(1, Laplace), (4, Gaussian)])
def test_automatic_choice_counts_the_selection_threshold(groups: int, family: type) -> None:
    """A person in up to g groups: the COUNT's noise is also the selection's. With g = 1 the
    Laplace threshold and interval are both smaller; with g = 4 the Gaussian's interval is 1.5x
    the Laplace one but its threshold is lower (50 against 60), and the rule (half-width plus
    threshold) picks it: it releases the smaller groups with their intervals."""
    metadata = replace(demo_metadata(), max_groups_per_person=groups)
    sql = "SELECT hours, COUNT(*) AS n FROM people GROUP BY hours"
    cost = {"epsilon": 1, "delta": 1e-6}
    laplace = _plan(sql, metadata, noise="laplace", **cost)
    gaussian = _plan(sql, metadata, noise="gaussian", **cost)
    auto = _plan(sql, metadata, **cost)
    assert isinstance(auto.outputs[0].parts[0].mechanism, family)
    assert "threshold" in auto.noise
    better = gaussian if _reach(gaussian) < _reach(laplace) else laplace
    assert isinstance(better.outputs[0].parts[0].mechanism, family)
