"""Deterministic tests of the mechanisms: privacy maps, calibration, accuracy statements, errors.

References are computed independently with mpmath at 50 digits.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest

from dpcurator.errors import ParameterError
from dpcurator.mechanisms import (
    AboveThreshold,
    Gaussian,
    KaryRandomizedResponse,
    Laplace,
    RandomizedResponse,
    exponential_mechanism,
    partition_selection_threshold,
    permute_and_flip,
)
from dpcurator.mechanisms._grid import grid_exponent
from dpcurator.random import SeededRng

mpmath.mp.dps = 50


def discrete_laplace_tail(scale: Fraction, m: int) -> mpmath.mpf:
    """P[|Z| >= m] for m >= 1, from the pmf (1-p)/(1+p) p^|z| summed in closed form (60 digits,
    enough for scales up to 2^52)."""
    with mpmath.workdps(60):
        p = mpmath.exp(-mpmath.mpf(scale.denominator) / scale.numerator)
        return 2 * p**m / (1 + p)


@pytest.mark.parametrize(
    ("epsilon", "sensitivity"), [(1, 1), (0.5, 3), (Fraction(1, 3), 2), (7.5, 10)]
)
def test_laplace_privacy_map_is_exact(epsilon: float | Fraction, sensitivity: int) -> None:
    mech = Laplace.for_epsilon(epsilon, sensitivity)
    assert mech.scale == Fraction(sensitivity) / Fraction(epsilon)
    assert mech.epsilon(sensitivity) == Fraction(epsilon)
    assert mech.epsilon(2 * sensitivity) == 2 * Fraction(epsilon)


@pytest.mark.parametrize(
    ("epsilon", "sensitivity", "dimension"), [(1, 1, 1), (0.1, 100.0, 5), (3, 0.25, 1000)]
)
def test_laplace_float_release_accounts_for_grid_rounding(
    epsilon: float, sensitivity: float, dimension: int
) -> None:
    mech = Laplace.for_epsilon_floats(epsilon, sensitivity, dimension)
    assert mech.epsilon_for_floats(sensitivity, dimension) <= Fraction(epsilon)
    naive = Laplace.for_epsilon(epsilon, sensitivity)
    # Rounding to the grid inflates the sensitivity: the naive scale is not enough for floats.
    assert naive.epsilon_for_floats(sensitivity, dimension) > Fraction(epsilon)


def test_laplace_float_release_lands_on_public_grid() -> None:
    mech = Laplace(10)
    out = mech.release_floats(np.array([0.1, 1e6, -3.3]), rng=SeededRng(1))
    k = grid_exponent(mech.scale)
    assert np.all(np.ldexp(out, -k) == np.rint(np.ldexp(out, -k)))


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(1), Fraction(10), Fraction(1000, 3)])
@pytest.mark.parametrize("alpha", [0.05, 0.01, 1e-6])
def test_laplace_ci_halfwidth_is_the_smallest_valid(scale: Fraction, alpha: float) -> None:
    t = int(Laplace(scale).ci_halfwidth(alpha))
    assert discrete_laplace_tail(scale, t + 1) <= alpha
    if t > 0:
        assert discrete_laplace_tail(scale, t) > alpha


def discrete_gaussian_tail_above(sigma: float, t: int) -> mpmath.mpf:
    """P[|Z| > t] for the discrete Gaussian, by direct summation at 50 digits."""
    s2 = 2 * mpmath.mpf(sigma) ** 2
    limit = int(60 * sigma) + 10
    weights = [mpmath.exp(-(mpmath.mpf(z) ** 2) / s2) for z in range(limit)]
    total = weights[0] + 2 * mpmath.fsum(weights[1:])
    return 2 * mpmath.fsum(weights[t + 1 :]) / total


@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.7, 25.0])
@pytest.mark.parametrize("alpha", [0.05, 0.001])
def test_gaussian_ci_halfwidth_is_the_smallest_valid(sigma: float, alpha: float) -> None:
    t = int(Gaussian(sigma).ci_halfwidth(alpha))
    assert discrete_gaussian_tail_above(sigma, t) <= alpha
    if t > 0:
        assert discrete_gaussian_tail_above(sigma, t - 1) > alpha


def test_gaussian_large_sigma_halfwidth_is_conservative() -> None:
    # Above the exact-sum threshold the normal quantile plus one step is used.
    t = Gaussian(5000).ci_halfwidth(0.05)
    assert 1.959964 * 5000 <= t <= 1.959964 * 5000 + 2


def test_gaussian_zcdp_map_is_exact() -> None:
    mech = Gaussian.for_rho(Fraction(1, 2), 3)
    assert mech.rho(3) <= Fraction(1, 2)
    assert mech.sigma == pytest.approx(3.0, rel=1e-12)
    assert Gaussian(2).rho(1) == Fraction(1, 8)


def test_gaussian_float_release_charges_rounding() -> None:
    mech = Gaussian(4)
    assert mech.rho_for_floats(1, dimension=10) > mech.rho(1)


def test_permute_and_flip_picks_the_clear_winner() -> None:
    assert permute_and_flip([0, 5, 10_000, 3], epsilon=1, rng=SeededRng(0)) == 2
    assert exponential_mechanism([0, 5, 10_000], epsilon=1, rng=SeededRng(0)).tolist() == [2]


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"scores": [1.5, 2.0], "epsilon": 1}, "scores"),
        ({"scores": [], "epsilon": 1}, "scores"),
        ({"scores": [1, 2], "epsilon": -1}, "epsilon"),
        ({"scores": [1, 2], "epsilon": float("nan")}, "epsilon"),
        ({"scores": [1, 2], "epsilon": 1, "sensitivity": 0}, "sensitivity"),
    ],
)
def test_selection_rejects_bad_input(kwargs: dict[str, object], parameter: str) -> None:
    with pytest.raises(ParameterError, match=f"'{parameter}'"):
        permute_and_flip(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 2.5, 8.0])
@pytest.mark.parametrize("k", [2, 3, 10])
def test_randomized_response_never_exceeds_epsilon(epsilon: float, k: int) -> None:
    mech = KaryRandomizedResponse(epsilon, k)
    p = mpmath.mpf(mech.truth_probability.numerator) / mech.truth_probability.denominator
    q = (1 - p) / (k - 1)
    assert mpmath.log(p / q) <= epsilon
    # and it gives away almost nothing: within 1e-12 of the exact probability.
    exact = mpmath.exp(epsilon) / (mpmath.exp(epsilon) + k - 1)
    assert exact - p < 1e-12


def test_randomized_response_estimator_recovers_truth_at_high_epsilon() -> None:
    mech = RandomizedResponse(30)
    answers = np.arange(1000) % 4 == 0
    estimate = mech.estimate_proportion(mech.randomize(answers, rng=SeededRng(2)))
    assert estimate.estimate[0] == pytest.approx(0.25)


@pytest.mark.parametrize(("epsilon", "delta", "m"), [(1, 1e-6, 1), (0.5, 1e-9, 4), (2, 1e-3, 10)])
def test_partition_selection_threshold_bounds_delta_tightly(
    epsilon: float, delta: float, m: int
) -> None:
    selection = partition_selection_threshold(epsilon, delta, m)
    scale = selection.laplace.scale
    assert scale == Fraction(m) / Fraction(epsilon)
    p = mpmath.exp(-mpmath.mpf(scale.denominator) / scale.numerator)

    def leak(t: int) -> mpmath.mpf:  # m * P[Z >= t]
        return m * p**t / (1 + p)

    assert leak(selection.threshold - 1) <= delta
    assert leak(selection.threshold - 2) > delta


def test_partition_selection_needs_delta() -> None:
    with pytest.raises(ParameterError, match="'delta'"):
        partition_selection_threshold(1, 0, 1)


def test_above_threshold_finds_the_obvious_query() -> None:
    mech = AboveThreshold(epsilon=50, sensitivity=1, threshold=100)
    assert mech.first_above([1, 2, 3, 500, 1000], rng=SeededRng(4)) == 3
    assert mech.first_above_batch(np.array([1.0, 2, 3, 500, 1000]), rng=SeededRng(4)) == 3
    assert mech.first_above(iter([1, 2]), rng=SeededRng(4)) is None


@pytest.mark.parametrize(
    ("factory", "parameter"),
    [
        (lambda: Laplace(0), "scale"),
        (lambda: Laplace(-1.0), "scale"),
        (lambda: Laplace(float("nan")), "scale"),
        (lambda: Laplace(float("inf")), "scale"),
        (lambda: Laplace.for_epsilon(0, 1), "epsilon"),
        (lambda: Gaussian(0), "sigma"),
        (lambda: Gaussian.for_rho(-1, 1), "rho"),
        (lambda: KaryRandomizedResponse(1, 1), "categories"),
        (lambda: RandomizedResponse(float("nan")), "epsilon"),
        (lambda: AboveThreshold(1, 0, 3), "sensitivity"),
    ],
)
def test_constructors_reject_bad_parameters(factory: object, parameter: str) -> None:
    with pytest.raises(ParameterError, match=f"'{parameter}'"):
        factory()  # type: ignore[operator]
