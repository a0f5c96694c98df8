"""Privacy-loss-distribution composition with Google's ``dp_accounting.pld``, rounded up.

Tighter than Rényi DP for a sequence fixed in advance; Gaussian events use the DISCRETE
Gaussian's own loss distribution (see :class:`PLDAccountant`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import ClassVar

from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld.common import DifferentialPrivacyParameters

from dpcurator._validation import check_positive, fail
from dpcurator.accounting.accountants import Accountant, _check_total_delta, _events, _unsupported
from dpcurator.accounting.calibration import DISCRETE_GAUSSIAN_EXACT_MAX_SIGMA
from dpcurator.accounting.events import (
    ComposedEvent,
    GaussianEvent,
    ParallelEvent,
    PrivacyEvent,
    RepeatedEvent,
)
from dpcurator.core.measures import ApproxDP
from dpcurator.core.numbers import float_down, float_up, fraction_up, to_fraction, widen_up

__all__ = ["PLDAccountant"]

#: Share of the target δ reserved for the truncated tails of discrete Gaussian PLDs.
_TRUNCATION_SHARE = 2.0**-10


def _discrete_gaussian_pld(
    event: GaussianEvent, interval: float
) -> tuple[pld_lib.PrivacyLossDistribution, float]:
    """The pessimistic PLD of one scalar discrete Gaussian release (CKS20), truncated to
    ±T = ±(20σ + Δ), and a bound on the mass outside: 2(σ²/T)e^(-T²/(2σ²)) (both tails, Mills'
    bound on the unnormalised sum; the normaliser is at least 1)."""
    owner = "PLDAccountant.total"
    if event.l2_sensitivity.denominator != 1:
        raise _unsupported(
            owner, event, "an integer sensitivity", "Use ZCDPAccountant or RDPAccountant."
        )
    if event.sigma > DISCRETE_GAUSSIAN_EXACT_MAX_SIGMA:
        raise _unsupported(
            owner, event, "σ <= 10^4 (a discrete pmf)", "Use ZCDPAccountant or RDPAccountant."
        )
    sigma = float_down(event.sigma)
    sensitivity = event.l2_sensitivity.numerator
    bound = math.ceil(20 * sigma) + sensitivity
    pld = pld_lib.from_discrete_gaussian_mechanism(
        sigma,
        sensitivity=sensitivity,
        truncation_bound=bound,
        pessimistic_estimate=True,
        value_discretization_interval=interval,
    )
    mass = 2 * sigma * sigma / bound * math.exp(-(bound * bound) / (2 * sigma * sigma))
    return pld, widen_up(mass)


class PLDAccountant(Accountant):
    """Privacy-loss-distribution composition (Koskela et al. 2020; Doroshenko et al. 2022).

    Backed by ``dp_accounting.pld`` with pessimistic discretisation (interval
    ``value_discretization_interval``), which rounds privacy losses up so the reported ε is an
    upper bound. Pure, Laplace and (ε, δ) events use the worst-case PLD of an (ε, δ)-DP
    mechanism (``from_privacy_parameters``; Kairouz, Oh & Viswanath 2015), valid for the
    discrete Laplace on any grid. Gaussian events are the DISCRETE Gaussian of
    :class:`~dpcurator.mechanisms.Gaussian` on a scalar integer release: their PLD is built from
    the discrete pmf (``from_discrete_gaussian_mechanism``; Canonne, Kamath & Steinke 2020), not
    from the continuous Gaussian, whose PLD under-states the discrete δ at small σ (σ = 1, Δ = 1:
    δ(0.9565) is 0.148, not 0.135). That pmf is truncated to ±(20σ + Δ); the truncated mass τ
    (at most 2(σ²/T)e^(-T²/2σ²) per side and release) changes δ by at most (1 + e^ε)·Στ, which is
    checked to be below 2^-10 δ and then covered by asking dp_accounting for δ(1 - 2^-10).
    Gaussian events need an integer sensitivity and σ <= 10^4
    (:data:`~dpcurator.accounting.calibration.DISCRETE_GAUSSIAN_EXACT_MAX_SIGMA`); others are
    refused (use ZCDPAccountant or RDPAccountant, proven in every regime). A vector release is
    not covered by the scalar PLD: account for it with zCDP. zCDP events have no PLD and are
    refused. Parallel parts must be identical or have an (ε, δ) cost (their worst). PLD bounds
    assume the sequence is fixed in advance: not for adaptive filters.
    """

    supports_adaptive: ClassVar[bool] = False

    def __init__(self, value_discretization_interval: object = 1e-4) -> None:
        check_positive(
            "PLDAccountant", "value_discretization_interval", value_discretization_interval
        )
        self.value_discretization_interval = float(
            to_fraction(value_discretization_interval, name="value_discretization_interval")
        )

    def _pld(self, event: PrivacyEvent) -> tuple[pld_lib.PrivacyLossDistribution, float]:
        """The event's PLD and the noise mass its truncation ignored (an upper bound)."""
        interval = self.value_discretization_interval
        if isinstance(event, RepeatedEvent):
            pld, mass = self._pld(event.event)
            return pld.self_compose(event.count), mass * event.count
        if isinstance(event, ComposedEvent):
            parts = [self._pld(part) for part in event.events]
            composed = parts[0][0]
            for pld, _ in parts[1:]:
                composed = composed.compose(pld)
            return composed, sum(mass for _, mass in parts)
        if isinstance(event, ParallelEvent) and len(set(event.events)) == 1:
            return self._pld(event.events[0])
        if isinstance(event, GaussianEvent):
            return _discrete_gaussian_pld(event, interval)
        cost = event.approx_cost()
        if cost is None:
            raise _unsupported(
                "PLDAccountant.total",
                event,
                "a privacy loss distribution",
                "zCDP events have none; use ZCDPAccountant or RDPAccountant.",
            )
        parameters = DifferentialPrivacyParameters(float_up(cost.epsilon), float_up(cost.delta))
        pld = pld_lib.from_privacy_parameters(parameters, value_discretization_interval=interval)
        return pld, 0.0

    def total(self, events: Iterable[PrivacyEvent], delta: object = None) -> ApproxDP:
        """The composed (ε, δ) at the given ``delta`` (required)."""
        if delta is None:
            raise fail("PLDAccountant.total", "delta", "a target δ in (0, 1)", delta)
        return self._approx_total(list(events), _check_total_delta("PLDAccountant.total", delta))

    def _approx_total(self, events: Sequence[PrivacyEvent], delta: Fraction) -> ApproxDP:
        composed = pld_lib.identity(
            value_discretization_interval=self.value_discretization_interval
        )
        truncated = 0.0
        for event in _events("PLDAccountant.total", events):
            pld, mass = self._pld(event)
            composed = composed.compose(pld)
            truncated += mass
        target = float_down(delta)
        epsilon = composed.get_epsilon_for_delta(target * (1 - _TRUNCATION_SHARE))
        if not math.isfinite(epsilon):
            raise fail("PLDAccountant.total", "delta", "larger than the events' own δ", delta)
        epsilon = max(float(epsilon), 0.0)
        if (
            truncated
            and (1 + math.exp(min(epsilon, 700.0))) * truncated > target * _TRUNCATION_SHARE
        ):
            raise fail(
                "PLDAccountant.total",
                "delta",
                "large enough to cover the truncated discrete Gaussian tails",
                delta,
                "Use ZCDPAccountant or RDPAccountant.",
            )
        return ApproxDP(fraction_up(epsilon, 8), delta)

    def __repr__(self) -> str:
        return f"PLDAccountant(value_discretization_interval={self.value_discretization_interval})"
