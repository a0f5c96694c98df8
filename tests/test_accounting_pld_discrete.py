"""PLDAccountant accounts discrete Gaussian events with the discrete pmf, never under-stating δ.

The reference δ is computed independently at 40 digits from the discrete Gaussian pmf: the
hockey-stick divergence sum over outputs of max(0, P(x) - e^ε Q(x)), with Q = P shifted by Δ.
For k identical releases the privacy loss ln P(z)/P(z - Δ) = (Δ² - 2zΔ)/(2σ²) is linear in z,
so the k-fold divergence depends on the sum of the k noise values only (a convolution).
"""

from __future__ import annotations

import math

import mpmath
import pytest

from dpcurator.accounting import GaussianEvent, PLDAccountant, RepeatedEvent
from dpcurator.errors import ParameterError


def exact_delta(sigma: float, sensitivity: int, epsilon: float, releases: int = 1) -> mpmath.mpf:
    """δ(ε) of ``releases`` discrete Gaussian releases (σ, Δ), by direct summation."""
    with mpmath.workdps(40):
        reach = math.ceil(14 * sigma) + sensitivity  # mass beyond: below 1e-42
        weights = [
            mpmath.exp(-(mpmath.mpf(z) ** 2) / (2 * mpmath.mpf(sigma) ** 2))
            for z in range(-reach, reach + 1)
        ]
        total = mpmath.fsum(weights)
        pmf = [w / total for w in weights]
        sums = pmf  # distribution of the sum of the noise values, offset -reach·releases
        for _ in range(releases - 1):
            longer = [mpmath.mpf(0)] * (len(sums) + len(pmf) - 1)
            for i, a in enumerate(sums):
                for j, b in enumerate(pmf):
                    longer[i + j] += a * b
            sums = longer
        offset = -reach * releases
        delta = mpmath.mpf(0)
        for index, mass in enumerate(sums):
            s = offset + index
            loss = (releases * sensitivity**2 - 2 * s * sensitivity) / (2 * mpmath.mpf(sigma) ** 2)
            delta += mass * max(mpmath.mpf(0), 1 - mpmath.exp(epsilon - loss))
        return delta


def test_reference_matches_the_known_value() -> None:
    # The finding: the continuous PLD claimed δ = 0.135 at ε = 0.9565 for σ = 1, Δ = 1.
    assert float(exact_delta(1.0, 1, 0.9565)) == pytest.approx(0.148, abs=5e-4)


@pytest.mark.parametrize(
    ("sigma", "sensitivity", "releases", "delta"),
    [
        (1.0, 1, 1, 0.135),
        (1.0, 1, 1, 1e-6),
        (0.7, 2, 1, 1e-3),
        (3.0, 1, 2, 1e-4),
        (2.0, 1, 4, 1e-6),
    ],
)
def test_pld_epsilon_is_valid_and_tight_for_the_discrete_gaussian(
    sigma: float, sensitivity: int, releases: int, delta: float
) -> None:
    event = GaussianEvent(sigma, sensitivity)
    events = [event] if releases == 1 else [RepeatedEvent(event, releases)]
    epsilon = float(PLDAccountant().total(events, delta=delta).epsilon)
    assert exact_delta(sigma, sensitivity, epsilon, releases) <= delta  # never under-stated
    assert exact_delta(sigma, sensitivity, epsilon - 0.01, releases) > delta  # and tight


@pytest.mark.parametrize(
    "event", [GaussianEvent(1, 1.5), GaussianEvent(20_000, 1)], ids=["fractional", "wide"]
)
def test_pld_refuses_gaussian_events_without_a_discrete_pmf(event: GaussianEvent) -> None:
    with pytest.raises(ParameterError, match="ZCDPAccountant or RDPAccountant"):
        PLDAccountant().total([event], delta=1e-6)
