"""Privacy events and budgets: costs, validation and exact JSON round trips."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest

from dpcurator.accounting.budget import Budget
from dpcurator.accounting.events import (
    ApproxEvent,
    GaussianEvent,
    LaplaceEvent,
    ParallelEvent,
    PrivacyEvent,
    PureEvent,
    RepeatedEvent,
    ZCDPEvent,
)
from dpcurator.core.measures import ZCDP, ApproxDP, PureDP
from dpcurator.errors import ParameterError


def test_pure_and_laplace_costs() -> None:
    assert PureEvent(Fraction(1, 3)).pure_cost() == PureDP(Fraction(1, 3))
    laplace = LaplaceEvent(4, 2)
    assert laplace.pure_cost() == PureDP(Fraction(1, 2))
    assert laplace.approx_cost() == ApproxDP(Fraction(1, 2), 0)
    assert laplace.zcdp_cost() == ZCDP(Fraction(1, 8))  # ε²/2


def test_approx_gaussian_zcdp_costs() -> None:
    approx = ApproxEvent(1, Fraction(1, 10**6))
    assert approx.pure_cost() is None
    assert approx.zcdp_cost() is None
    assert approx.approx_cost() == ApproxDP(1, Fraction(1, 10**6))
    assert ApproxEvent(2, 0).pure_cost() == PureDP(2)
    gauss = GaussianEvent(3, 2)
    assert gauss.zcdp_cost() == ZCDP(Fraction(4, 18))
    assert gauss.pure_cost() is None
    assert gauss.approx_cost() is None
    assert ZCDPEvent(Fraction(1, 5)).zcdp_cost() == ZCDP(Fraction(1, 5))


def test_parallel_is_worst_and_repeated_adds() -> None:
    parallel = ParallelEvent([PureEvent(1), LaplaceEvent(1, 3), PureEvent(Fraction(1, 2))])
    assert parallel.pure_cost() == PureDP(3)
    assert parallel.zcdp_cost() == ZCDP(Fraction(9, 2))
    mixed = ParallelEvent([ApproxEvent(1, Fraction(1, 100)), ApproxEvent(2, Fraction(1, 1000))])
    assert mixed.approx_cost() == ApproxDP(2, Fraction(1, 100))
    assert ParallelEvent([GaussianEvent(1, 1), PureEvent(1)]).pure_cost() is None
    repeated = RepeatedEvent(ApproxEvent(Fraction(1, 10), Fraction(1, 100)), 7)
    assert repeated.approx_cost() == ApproxDP(Fraction(7, 10), Fraction(7, 100))
    assert RepeatedEvent(GaussianEvent(2, 1), 4).zcdp_cost() == ZCDP(Fraction(1, 2))
    assert RepeatedEvent(ApproxEvent(0, Fraction(1, 2)), 2).approx_cost() is None  # δ would be 1


ALL_EVENTS: list[PrivacyEvent] = [
    PureEvent(0.1),
    ApproxEvent(Fraction(1, 3), 1e-7),
    LaplaceEvent(Fraction(10, 3), 2),
    GaussianEvent(2.5, 1),
    ZCDPEvent(Fraction(1, 7)),
    ParallelEvent([PureEvent(1), RepeatedEvent(GaussianEvent(3, 1), 2)]),
    RepeatedEvent(ParallelEvent([LaplaceEvent(1, 1)]), 5),
]


@pytest.mark.parametrize("event", ALL_EVENTS)
def test_json_round_trip_is_exact(event: PrivacyEvent) -> None:
    restored = PrivacyEvent.from_dict(json.loads(json.dumps(event.to_dict())))
    assert restored == event
    assert type(restored) is type(event)
    assert type(event).from_dict(event.to_dict()) == event


def test_from_dict_rejects_bad_input() -> None:
    with pytest.raises(ParameterError, match="known 'kind'"):
        PrivacyEvent.from_dict({"kind": "mystery"})
    with pytest.raises(ParameterError, match="'epsilon' parameter"):
        PrivacyEvent.from_dict({"kind": "pure", "epsilon": "abc"})
    with pytest.raises(ParameterError, match="'epsilon' parameter of PureEvent must be >= 0"):
        PrivacyEvent.from_dict({"kind": "pure", "epsilon": "-1/2"})
    with pytest.raises(ParameterError, match="a PureEvent dict"):
        PureEvent.from_dict(LaplaceEvent(1, 1).to_dict())
    with pytest.raises(ParameterError, match="'data' parameter"):
        PrivacyEvent.from_dict([1, 2])  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, True, None])
def test_events_reject_bad_numbers(bad: object) -> None:
    with pytest.raises(ParameterError, match="'epsilon' parameter of PureEvent"):
        PureEvent(bad)
    with pytest.raises(ParameterError, match="'scale' parameter of LaplaceEvent"):
        LaplaceEvent(bad, 1)
    with pytest.raises(ParameterError, match="'l2_sensitivity' parameter of GaussianEvent"):
        GaussianEvent(1, bad)
    with pytest.raises(ParameterError, match="'rho' parameter of ZCDPEvent"):
        ZCDPEvent(bad)


def test_structural_validation() -> None:
    with pytest.raises(ParameterError, match="'scale' parameter of LaplaceEvent must be > 0"):
        LaplaceEvent(0, 1)
    with pytest.raises(ParameterError, match="'delta' parameter of ApproxEvent"):
        ApproxEvent(1, 1)
    with pytest.raises(ParameterError, match="'events' parameter of ParallelEvent"):
        ParallelEvent([])
    with pytest.raises(ParameterError, match="'events' parameter of ParallelEvent"):
        ParallelEvent([PureDP(1)])  # type: ignore[list-item]
    with pytest.raises(ParameterError, match="'count' parameter of RepeatedEvent must be >= 1"):
        RepeatedEvent(PureEvent(1), 0)
    with pytest.raises(ParameterError, match="'event' parameter of RepeatedEvent"):
        RepeatedEvent(PureDP(1), 2)  # type: ignore[arg-type]


def test_events_are_frozen() -> None:
    event = PureEvent(1)
    with pytest.raises(AttributeError):
        event.epsilon = Fraction(2)  # type: ignore[misc]


def test_budget() -> None:
    assert Budget(1).as_measure() == PureDP(1)
    assert Budget(1, 1e-6).as_measure() == ApproxDP(1, 1e-6)
    assert Budget(Fraction(1, 2), 1e-6).epsilon == Fraction(1, 2)
    assert Budget(0).as_measure() == PureDP(0)
    assert str(Budget(1)) == "budget: ε = 1"
    assert str(Budget(0.5, 1e-6)) == "budget: (ε = 0.5, δ = 1e-06)"
    for bad_eps in [-1, math.nan, math.inf, "1"]:
        with pytest.raises(ParameterError, match="'epsilon' parameter of Budget"):
            Budget(bad_eps)
    for bad_delta in [1, -0.1, math.nan, 2]:
        with pytest.raises(ParameterError, match="'delta' parameter of Budget"):
            Budget(1, bad_delta)
