"""The exact (ε, δ) curve of the discrete Gaussian (CKS20 Theorem 7) against the definition.

The reference is the hockey-stick divergence δ(ε) = Σ_y max(0, P[x + Y = y] - e^ε P[x' + Y = y])
summed at 40 digits with mpmath — the definition of (ε, δ)-DP, not the theorem under test.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import pytest

from dpcurator.accounting.calibration import (
    discrete_gaussian_delta,
    discrete_gaussian_sigma_for_approx,
    gaussian_delta,
)
from dpcurator.errors import ParameterError
from dpcurator.mechanisms import Gaussian

mpmath.mp.dps = 40


def hockey_stick_delta(sigma: float, sensitivity: int, epsilon: float) -> mpmath.mpf:
    s2 = 2 * mpmath.mpf(sigma) ** 2
    reach = int(50 * sigma) + 20
    weight = {
        y: mpmath.exp(-(mpmath.mpf(y) ** 2) / s2) for y in range(-reach - sensitivity, reach + 1)
    }
    total = mpmath.fsum(weight[y] for y in range(-reach, reach + 1))
    factor = mpmath.exp(epsilon)
    return mpmath.fsum(
        max(0, (weight[y] - factor * weight[y - sensitivity]) / total)
        for y in range(-reach, reach + 1)
    )


@pytest.mark.parametrize(
    ("sigma", "sensitivity", "epsilon"),
    [(1.0, 1, 1.0), (0.5, 1, 0.3), (3.7, 1, 1.0), (2.0, 3, 0.5), (10.0, 2, 0.1), (6.0, 1, 0.0)],
)
def test_discrete_delta_is_tight_upper_bound_of_definition(
    sigma: float, sensitivity: int, epsilon: float
) -> None:
    ours = discrete_gaussian_delta(sigma, sensitivity, epsilon)
    exact = hockey_stick_delta(sigma, sensitivity, epsilon)
    assert ours >= exact
    assert ours <= exact + 5e-9  # the modelled float slack is 1e-9 of the two tails


def test_continuous_curve_would_understate_discrete_delta() -> None:
    """Why the mechanism does not use the continuous analytic Gaussian for discrete noise."""
    assert gaussian_delta(1.0, 1, 1.0) < hockey_stick_delta(1.0, 1, 1.0)


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-5), (0.3, 1e-7), (2.0, 1e-3)])
def test_sigma_for_approx_is_minimal(epsilon: float, delta: float) -> None:
    sigma = discrete_gaussian_sigma_for_approx(epsilon, delta, 1)
    assert hockey_stick_delta(float(sigma), 1, epsilon) <= delta
    assert hockey_stick_delta(float(sigma) * (1 - 1e-6), 1, epsilon) > delta


def test_gaussian_mechanism_uses_the_tighter_proven_route() -> None:
    scalar = Gaussian.for_approx(1, 1e-5, 1)
    vector = Gaussian.for_approx(1, 1e-5, 1, dimension=4)
    assert scalar.sigma < vector.sigma  # exact scalar curve beats the zCDP conversion
    assert scalar.epsilon(1, 1e-5) <= 1
    assert vector.epsilon(1, 1e-5, dimension=4) <= 1
    assert hockey_stick_delta(float(scalar.sigma), 1, 1.0) <= 1e-5


def test_exact_route_refuses_huge_sigma() -> None:
    with pytest.raises(ParameterError, match="'sigma'"):
        discrete_gaussian_delta(Fraction(10**6), 1, 1)
