"""Privacy audits: empirical lower bounds on ε must not exceed the claimed ε (marker ``audit``).

Each audit runs a mechanism many times on two neighbouring inputs and bounds ε from below with
:func:`tests.stat_tools.epsilon_lower_bound` at confidence 1 - 1e-6. The same audit is run on a
deliberately broken mechanism (half the noise, or twice the ε it claims) and must flag it: that is
the power check that shows the audit can fail.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpcurator.mechanisms import Gaussian, Laplace, RandomizedResponse, exponential_mechanism
from dpcurator.random import SecureRng
from tests.stat_tools import epsilon_lower_bound

pytestmark = pytest.mark.audit

N = 1_000_000
EPSILON = 1.0


def audit_laplace(mechanism: Laplace) -> float:
    rng = SecureRng()
    x = mechanism.release_integers(np.zeros(N, dtype=np.int64), rng)
    x_prime = mechanism.release_integers(np.ones(N, dtype=np.int64), rng)
    return epsilon_lower_bound(x, x_prime)


def test_laplace_audit_respects_claim_and_flags_half_noise() -> None:
    honest = Laplace.for_epsilon(EPSILON, 1)
    assert honest.epsilon(1) == EPSILON
    assert audit_laplace(honest) <= EPSILON
    broken = Laplace(honest.scale / 2)  # claims EPSILON, delivers 2 * EPSILON
    assert audit_laplace(broken) > EPSILON


def audit_gaussian(mechanism: Gaussian, delta: float) -> float:
    rng = SecureRng()
    n = 2 * N
    x = mechanism.release_integers(np.zeros(n, dtype=np.int64), rng)
    x_prime = mechanism.release_integers(np.ones(n, dtype=np.int64), rng)
    return epsilon_lower_bound(x, x_prime, delta=delta)


def test_gaussian_audit_respects_claim_and_flags_half_noise() -> None:
    delta = 1e-5
    honest = Gaussian.for_approx(EPSILON, delta, 1)
    assert honest.epsilon(1, delta) <= Fraction(EPSILON) * (1 + Fraction(1, 10**9))
    assert audit_gaussian(honest, delta) <= EPSILON
    broken = Gaussian(honest.sigma / 2)
    assert audit_gaussian(broken, delta) > EPSILON


def audit_randomized_response(mechanism: RandomizedResponse) -> float:
    rng = SecureRng()
    x = mechanism.randomize(np.zeros(N, dtype=bool), rng).astype(np.int64)
    x_prime = mechanism.randomize(np.ones(N, dtype=bool), rng).astype(np.int64)
    return epsilon_lower_bound(x, x_prime)


def test_randomized_response_audit_respects_claim_and_flags_double_epsilon() -> None:
    assert audit_randomized_response(RandomizedResponse(EPSILON)) <= EPSILON
    assert audit_randomized_response(RandomizedResponse(2 * EPSILON)) > EPSILON


def audit_exponential(epsilon_used: float) -> float:
    """Neighbours shift every score by the sensitivity in opposite directions (the tight case)."""
    candidates = 1000
    scores_x = np.ones(candidates, dtype=np.int64)
    scores_x[0] = 0
    scores_x_prime = np.zeros(candidates, dtype=np.int64)
    scores_x_prime[0] = 1
    rng = SecureRng()
    n = 2 * N
    chose_first_x = exponential_mechanism(scores_x, epsilon_used, 1, rng, size=n) == 0
    chose_first_x_prime = exponential_mechanism(scores_x_prime, epsilon_used, 1, rng, size=n) == 0
    return epsilon_lower_bound(chose_first_x.astype(np.int64), chose_first_x_prime.astype(np.int64))


def test_exponential_mechanism_audit_respects_claim_and_flags_double_epsilon() -> None:
    assert audit_exponential(EPSILON) <= EPSILON
    assert audit_exponential(2 * EPSILON) > EPSILON
