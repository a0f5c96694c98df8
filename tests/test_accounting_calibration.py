"""Calibration against independent closed forms (Fraction, mpmath at 50 digits)."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath as mp
import pytest
from scipy.special import log_ndtr

from dpcurator.accounting.calibration import (
    _LOG_NDTR_ERROR,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_rho,
    gaussian_sigma_for_approx,
    gaussian_sigma_for_rho,
    laplace_epsilon,
    laplace_scale,
)
from dpcurator.errors import ParameterError

mp.mp.dps = 50


def reference_delta(sigma: float, sensitivity: float, epsilon: float) -> mp.mpf:
    """Balle & Wang 2018, Theorem 8, in 50-digit arithmetic."""
    s, d, e = mp.mpf(sigma), mp.mpf(sensitivity), mp.mpf(epsilon)
    return mp.ncdf(d / (2 * s) - e * s / d) - mp.exp(e) * mp.ncdf(-d / (2 * s) - e * s / d)


def test_laplace_exact() -> None:
    assert laplace_scale(Fraction(1, 2), 3) == Fraction(6)
    assert laplace_epsilon(6, 3) == Fraction(1, 2)
    assert laplace_epsilon(laplace_scale(0.3, 7), 7) == Fraction(0.3)
    assert isinstance(laplace_scale(1, 1), Fraction)


def test_gaussian_rho_and_inverse() -> None:
    assert gaussian_rho(2, 1) == Fraction(1, 8)
    assert gaussian_rho(Fraction(3, 2), 3) == Fraction(2)
    for rho, sens in [(Fraction(1, 3), 1), (Fraction(1, 2), 1), (0.01, 2.5), (7, 3)]:
        sigma = gaussian_sigma_for_rho(rho, sens)
        target = Fraction(sens) ** 2 / (2 * Fraction(rho))
        assert sigma**2 >= target  # never less noise than asked for
        previous = Fraction(math.nextafter(float(sigma), 0.0))
        assert previous**2 < target  # and the smallest float that works
        assert gaussian_rho(sigma, sens) <= Fraction(rho)


CASES = [(1, 1, 1), (3, 1, 0.5), (10, 1, 1), (0.5, 1, 3), (100, 1, 0.01), (2, 1, 0), (1, 1, 20)]


@pytest.mark.parametrize(("sigma", "sens", "eps"), CASES)
def test_gaussian_delta_is_tight_upper_bound(sigma: float, sens: float, eps: float) -> None:
    exact = reference_delta(sigma, sens, eps)
    computed = gaussian_delta(sigma, sens, eps)
    assert computed >= exact
    assert computed <= exact * (1 + mp.mpf("1e-6"))


def test_gaussian_delta_scale_invariant_and_monotone() -> None:
    assert gaussian_delta(2, 1, 1) == pytest.approx(gaussian_delta(20, 10, 1), rel=1e-9)
    assert gaussian_delta(2, 1, 1) > gaussian_delta(2, 1, 2) > gaussian_delta(3, 1, 2)


def test_log_ndtr_error_model_holds() -> None:
    """The documented error model of scipy's log_ndtr, checked against mpmath."""
    for x in [-300.0, -40.0, -10.0, -3.3, -0.7, 0.0, 0.5, 2.0, 5.0, 8.0]:
        exact = mp.log(mp.ncdf(x))
        error = abs(mp.mpf(float(log_ndtr(x))) - exact)
        assert error <= _LOG_NDTR_ERROR * max(1, abs(exact))


@pytest.mark.parametrize(("eps", "delta", "sens"), [(1, 1e-6, 1), (0.1, 1e-9, 2), (5, 1e-3, 0.5)])
def test_sigma_for_approx_round_trip(eps: float, delta: float, sens: float) -> None:
    sigma = gaussian_sigma_for_approx(eps, delta, sens)
    assert isinstance(sigma, Fraction)
    assert gaussian_delta(sigma, sens, eps) <= delta
    assert reference_delta(float(sigma), sens, eps) <= delta
    assert gaussian_delta(float(sigma) * (1 - 1e-9), sens, eps) > delta


def test_gaussian_epsilon_against_mpmath_root() -> None:
    sigma, sens, delta = 4, 1, 1e-6
    root = mp.findroot(lambda e: reference_delta(sigma, sens, e) - delta, 1.0)
    eps = gaussian_epsilon(sigma, sens, delta)
    assert eps >= root
    assert eps <= root * (1 + mp.mpf("1e-9"))
    assert gaussian_epsilon(1000, 1, 0.5) == 0  # δ already met at ε = 0


BAD = [0, -1.0, math.nan, math.inf, True, "1"]


@pytest.mark.parametrize("bad", BAD)
def test_rejects_bad_parameters(bad: object) -> None:
    calls = [
        (lambda: laplace_scale(bad, 1), "epsilon"),
        (lambda: laplace_scale(1, bad), "l1_sensitivity"),
        (lambda: laplace_epsilon(bad, 1), "scale"),
        (lambda: gaussian_rho(bad, 1), "sigma"),
        (lambda: gaussian_sigma_for_rho(bad, 1), "rho"),
        (lambda: gaussian_delta(1, bad, 1), "l2_sensitivity"),
        (lambda: gaussian_sigma_for_approx(bad, 1e-6, 1), "epsilon"),
        (lambda: gaussian_epsilon(bad, 1, 1e-6), "sigma"),
    ]
    for call, name in calls:
        with pytest.raises(ParameterError, match=f"'{name}' parameter"):
            call()


@pytest.mark.parametrize("bad", [0, 1, 1.5, -1e-9, math.nan])
def test_rejects_bad_delta(bad: float) -> None:
    with pytest.raises(ParameterError, match="'delta' parameter of gaussian_sigma_for_approx"):
        gaussian_sigma_for_approx(1, bad, 1)
    with pytest.raises(ParameterError, match="'delta' parameter of gaussian_epsilon"):
        gaussian_epsilon(1, 1, bad)


def test_gaussian_delta_rejects_negative_epsilon() -> None:
    with pytest.raises(ParameterError, match="'epsilon' parameter of gaussian_delta must be >= 0"):
        gaussian_delta(1, 1, -0.5)
