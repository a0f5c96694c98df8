"""Rényi DP composition (Mironov 2017) with Google's ``dp_accounting``, valid adaptively."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import ClassVar

import numpy as np
from dp_accounting import NeighboringRelation, RandomizedResponseDpEvent, ZCDpEvent
from dp_accounting.dp_event import DpEvent, GaussianDpEvent
from dp_accounting.rdp.rdp_privacy_accountant import (
    DEFAULT_RDP_ORDERS,
    RdpAccountant,
    compute_epsilon,
)

from dpcurator._validation import fail
from dpcurator.accounting.accountants import Accountant, _check_total_delta, _events, _unsupported
from dpcurator.accounting.events import (
    ComposedEvent,
    GaussianEvent,
    ParallelEvent,
    PrivacyEvent,
    RepeatedEvent,
    ZCDPEvent,
)
from dpcurator.core.measures import ApproxDP
from dpcurator.core.numbers import float_down, float_up, fraction_up, widen_down

__all__ = ["RDPAccountant"]


def _rr_noise(epsilon: Fraction) -> float:
    """The noise parameter 2/(1+e^ε) of binary ε-randomized response, rounded down (less noise)."""
    eps = float_up(epsilon)
    return max(widen_down(2 * math.exp(-eps) / (1 + math.exp(-eps)), 8), 0.0)


class RDPAccountant(Accountant):
    """Rényi DP composition (Mironov 2017) with Google's ``dp_accounting`` RDP accountant.

    Each event's curve on ``orders`` (default: dp_accounting's) comes from
    ``dp_accounting.rdp.RdpAccountant``: Gaussian noise gives α Δ²/(2σ²), exact for the
    continuous Gaussian and an upper bound for the discrete one (Canonne, Kamath & Steinke 2020,
    Theorem 4); zCDP events give ρα; pure and Laplace events are charged as binary
    ε-randomized response, whose output pair every ε-DP mechanism is a post-processing of
    (Kairouz, Oh & Viswanath 2015, Section 2), so by data processing its Rényi divergence bounds
    theirs, including the discrete Laplace on any grid. Repetitions multiply a curve; parallel
    parts take the pointwise worst. The (ε, δ) conversion is dp_accounting's ``compute_epsilon``
    (Canonne, Kamath & Steinke 2020 / Asoodeh et al. 2021), rounded up. Valid adaptively (Feldman
    & Zrnic 2021). Events with δ > 0 have no Rényi curve and are refused.
    """

    supports_adaptive: ClassVar[bool] = True

    def __init__(self, orders: Sequence[float] = tuple(DEFAULT_RDP_ORDERS)) -> None:
        self.orders = tuple(float(order) for order in orders)
        if not self.orders or any(not order > 1 for order in self.orders):
            raise fail("RDPAccountant", "orders", "a non-empty sequence of orders > 1", orders)

    def _event_curve(self, event: PrivacyEvent) -> np.ndarray:
        if isinstance(event, RepeatedEvent):
            repeated: np.ndarray = event.count * self._event_curve(event.event)
            return repeated
        if isinstance(event, ComposedEvent):
            summed: np.ndarray = np.sum([self._event_curve(part) for part in event.events], axis=0)
            return summed
        if isinstance(event, ParallelEvent):
            worst: np.ndarray = np.max([self._event_curve(part) for part in event.events], axis=0)
            return worst
        dp_event: DpEvent
        pure = event.pure_cost()
        if isinstance(event, GaussianEvent):
            dp_event = GaussianDpEvent(float_down(event.sigma / event.l2_sensitivity))
        elif isinstance(event, ZCDPEvent):
            dp_event = ZCDpEvent(float_up(event.rho))
        elif pure is not None:
            dp_event = RandomizedResponseDpEvent(_rr_noise(pure.epsilon), num_buckets=2)
        else:
            raise _unsupported(
                "RDPAccountant.total", event, "a Rényi DP curve", "Events with δ > 0 have none."
            )
        accountant = RdpAccountant(
            list(self.orders), neighboring_relation=NeighboringRelation.REPLACE_ONE
        )
        accountant.compose(dp_event)
        curve: np.ndarray = accountant.rdp
        return curve

    def curve(self, events: Iterable[PrivacyEvent]) -> np.ndarray:
        """The composed Rényi DP curve ε(α) on :attr:`orders` (curves add; Mironov 2017)."""
        total = np.zeros(len(self.orders))
        for event in _events("RDPAccountant.total", events):
            total = total + self._event_curve(event)
        return total

    def total(self, events: Iterable[PrivacyEvent], delta: object = None) -> ApproxDP:
        """The composed (ε, δ) at the given ``delta`` (required)."""
        if delta is None:
            raise fail("RDPAccountant.total", "delta", "a target δ in (0, 1)", delta)
        return self._approx_total(list(events), _check_total_delta("RDPAccountant.total", delta))

    def _approx_total(self, events: Sequence[PrivacyEvent], delta: Fraction) -> ApproxDP:
        epsilon, _ = compute_epsilon(list(self.orders), self.curve(events), float_down(delta))
        return ApproxDP(fraction_up(max(float(epsilon), 0.0), 8), delta)

    def __repr__(self) -> str:
        return f"RDPAccountant(orders=<{len(self.orders)} orders>)"
