"""A deterministic solver of the perturbed logistic objective with a certified gradient bound.

Approximate Minima Perturbation (Iyengar, Near, Song, Thakkar, Thakurta & Wang 2019, IEEE S&P,
Algorithm 1) needs a point θ whose EXACT gradient of

    F(θ) = Σ_i ℓ(θ; z_i, y_i) + (Λ/2)‖θ‖² + bᵀθ,   ℓ = log(1 + e^(θᵀz)) - y·θᵀz,

has norm at most a public γ; F is Λ-strongly convex, so then ‖θ - θ*‖ <= γ/Λ for the exact
minimiser θ*. :func:`solve` returns such a point together with a rigorous upper bound of
‖∇F(θ)‖ computed by :func:`gradient_bound`.

**The certificate** (:func:`gradient_bound`). The gradient is evaluated in floating point with
every sum of n terms taken by ``math.fsum`` (correctly rounded), and a bound of the float error
is added coordinate-wise, using |z_ij| <= 1 nowhere (the bound uses the actual rows):

* ηᵢ = zᵢᵀθ by a dot product of p terms: error <= p·u·Σ_j|z_ij θ_j|/(1 - p·u), u = 2^-53; the
  residual σ(η) - y is 1/4-Lipschitz in η, so it moves by at most a quarter of that;
* the residual itself (``expit``, computed as -expit(-η) when y = 1 so it is relatively
  accurate): relative error <= :data:`EXPIT_ULPS` ulps (ASSUMPTION: scipy's expit is
  1/(1 + exp(-x)) with the C library's exp, accurate to about one ulp; 120 ulps is far above
  it), plus an absolute 2^-1000 per row for underflow;
* the products rᵢ·z_ij, Λθ_j and the final fsum: one rounding each (<= u relative).

All of these are below Σ_i |z_ij|(2^-46·|rᵢ| + 2^-53·p·Σ_j|z_ij θ_j|) + 2^-46·(Λ|θ_j| + |g_j|)
(2^-46 = 128 u covers the residual's and the roundings' ulps, 2^-53 the quarter of η's error
with room); that sum is itself computed with a relative error below n·u <= 1/2 (n <= 2^52), so
the bound doubles both constants. The returned number is (‖ĝ‖ + ‖E‖)(1 + 2^-40) >= ‖∇F(θ)‖,
or +inf when anything is not finite.

**The solver** (:func:`solve`): a deterministic damped Newton method from θ = 0 for a public
number of ``steps`` (fewer when no step lowers the float gradient any more; each step solves
with the exact Hessian Σσ'zzᵀ + ΛI, which is positive definite, and backtracks at most
:data:`BACKTRACKS` times on the merit ‖∇F‖, for which the Newton direction is a descent
direction since ∇²F ⪰ ΛI), then checks the certificate. If it is
not reached, the same method CONTINUES from that point, with the accurate (fsum) gradient, for
at most :data:`CONTINUATION_STEPS` steps, stopping at the first certified point (or when a
step makes no progress); if even that
fails (only when n times the float error of one row exceeds γ, i.e. datasets of the order of
10^9 rows or more, or non-finite arithmetic) the data-independent point θ = 0 is returned with
``certified`` False. Nothing here raises on a data value.
"""

from __future__ import annotations

import math
import warnings
from itertools import chain

import numpy as np
from scipy.special import expit

from dpcurator.estimators.release import FloatArray

#: The relative error of scipy's expit the certificate allows (an assumption, see above).
EXPIT_ULPS = 120

#: Halvings of a Newton step tried before a step is abandoned.
BACKTRACKS = 40

#: Further Newton steps (accurate gradient) when the public step budget did not certify.
CONTINUATION_STEPS = 200

_ERROR_SCALE = 2.0**-45
_ETA_SCALE = 2.0**-52
_TINY = 2.0**-1000


def residuals(theta: FloatArray, z: FloatArray, label: FloatArray) -> FloatArray:
    """σ(zᵢᵀθ) - yᵢ, computed as -σ(-η) when yᵢ = 1 (relatively accurate)."""
    eta = z @ theta
    return np.asarray(np.where(label > 0.5, -expit(-eta), expit(eta)), np.float64)


def hessian_sum(theta: FloatArray, z: FloatArray) -> FloatArray:
    """Σ σ'(θᵀz) z zᵀ (the logistic loss's Hessian, without the ridge)."""
    prob = expit(z @ theta)
    return np.asarray((z * (prob * (1 - prob))[:, None]).T @ z, np.float64)


def gradient_bound(
    theta: FloatArray, z: FloatArray, label: FloatArray, ridge: float, b: FloatArray
) -> tuple[FloatArray, float]:
    """(the accurately summed gradient ĝ of F at θ, a rigorous upper bound of ‖∇F(θ)‖).

    Total: non-finite values give the bound +inf (module docstring for the error analysis).
    """
    p = theta.shape[0]
    with np.errstate(all="ignore"):
        res = residuals(theta, z, label)
        terms = z * res[:, None]
        ridge_terms = ridge * theta
        grad = np.array(
            [
                math.fsum(chain(terms[:, j].tolist(), (float(ridge_terms[j]), float(b[j]))))
                if np.all(np.isfinite(terms[:, j]))
                else math.inf
                for j in range(p)
            ]
        )
        size = np.abs(z) @ np.abs(theta)
        weight = _ERROR_SCALE * np.abs(res) + _ETA_SCALE * p * size
        spread = np.abs(z).T @ weight + _ERROR_SCALE * (np.abs(ridge_terms) + np.abs(grad))
        error = spread + z.shape[0] * _TINY
        total = (float(np.linalg.norm(grad)) + float(np.linalg.norm(error))) * (1 + 2.0**-40)
    if not (math.isfinite(total) and np.all(np.isfinite(theta))):
        return grad, math.inf
    return grad, total


def _gradient(
    theta: FloatArray, z: FloatArray, label: FloatArray, ridge: float, b: FloatArray
) -> FloatArray:
    """∇F(θ) by BLAS (fast, uncertified)."""
    return np.asarray(z.T @ residuals(theta, z, label) + ridge * theta + b, np.float64)


def _newton_step(
    theta: FloatArray,
    z: FloatArray,
    label: FloatArray,
    ridge: float,
    b: FloatArray,
    *,
    grad: FloatArray,
) -> FloatArray:
    """One damped Newton step on the merit ‖∇F‖ (θ itself when no trial improves it)."""
    p = theta.shape[0]
    hessian = hessian_sum(theta, z) + ridge * np.eye(p)
    if not (np.all(np.isfinite(hessian)) and np.all(np.isfinite(grad))):
        return theta
    try:
        direction = np.linalg.solve(hessian, grad)
    except np.linalg.LinAlgError:
        return theta
    merit = float(np.linalg.norm(grad))
    step = 1.0
    for _ in range(BACKTRACKS):
        trial = theta - step * direction
        if float(np.linalg.norm(_gradient(trial, z, label, ridge, b))) < (1 - 1e-4 * step) * merit:
            return np.asarray(trial, np.float64)
        step /= 2
    return theta


def solve(
    z: FloatArray, label: FloatArray, ridge: float, b: FloatArray, *, target: float, steps: int
) -> tuple[FloatArray, float, bool]:
    """(θ, a certified bound of ‖∇F(θ)‖, whether it is <= ``target``) (module docstring)."""
    theta = np.zeros(z.shape[1])
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for _ in range(steps):
            fast = _gradient(theta, z, label, ridge, b)
            moved = _newton_step(theta, z, label, ridge, b, grad=fast)
            if moved is theta:  # no trial step lowered the float gradient: converged
                break
            theta = moved
        grad, bound = gradient_bound(theta, z, label, ridge, b)
        for _ in range(CONTINUATION_STEPS):
            if bound <= target:
                return theta, bound, True
            moved = _newton_step(theta, z, label, ridge, b, grad=grad)
            if moved is theta:  # no progress possible: the certificate cannot be reached
                break
            theta = moved
            grad, bound = gradient_bound(theta, z, label, ridge, b)
    if bound <= target:
        return theta, bound, True
    zero = np.zeros(z.shape[1])
    return zero, gradient_bound(zero, z, label, ridge, b)[1], False


__all__ = ["gradient_bound", "hessian_sum", "residuals", "solve"]
