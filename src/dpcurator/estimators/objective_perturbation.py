"""DP logistic regression by objective perturbation, with noise + sampling intervals.

Rows are z = (1, u) with u the features clamped to public bounds and rescaled to [-1, 1]^d, so
‖z‖₂ <= √p (p = d + 1), and labels y ∈ {0, 1}. The release is the minimiser

    θ̂ = argmin_θ  Σ_i ℓ(θ; z_i, y_i) + (Λ/2)‖θ‖² + bᵀθ,   ℓ = log(1 + e^(θᵀz)) - y·θᵀz,

of the UNNORMALISED objective (so it is defined for add/remove neighbours without a known n).

**Privacy guarantee** (Chaudhuri, Monteleoni & Sarwate 2011, Theorem 9; Kifer, Smith & Thakurta
2012, Theorem 2, whose argument is followed): ℓ is convex and twice differentiable, its gradient
(σ(θᵀz) - y)z has norm <= ζ = √p and its Hessian σ'(θᵀz)zzᵀ has rank 1 and eigenvalue
<= λ = p/4. For a fixed output θ the noise is b(θ) = -∇L(θ) - Λθ, a bijection; adding a person
with at most k rows shifts b(θ) by at most kζ and multiplies the Jacobian's determinant by
det(I + A⁻¹E) <= (1 + λ/Λ)^k, A ⪰ ΛI (matrix determinant lemma, one rank-1 term at a time). So:

* pure ε: b has density ∝ exp(-ε_b‖b‖/(kζ)) (:class:`~dpcurator.mechanisms.gamma_norm.
  GammaNormVector`) and ε = ε_b + k·ln(1 + λ/Λ): ``jacobian_share`` of ε fixes Λ;
* (ε, δ): b is Gaussian (discrete Gaussian on the grid 2^-30 σ) with σ calibrated for (ε_b, δ)
  at L2 sensitivity kζ (the zCDP conversion of Canonne, Kamath & Steinke 2020, valid for the
  continuous Gaussian), and the same Jacobian term.

Then ``hessian_share`` of ε releases the Hessian Σ σ'(θ̂ᵀz)zzᵀ at the RELEASED θ̂ with Laplace
noise (each upper-triangle entry a row adds lies in [-1/4, 1/4]: L1 sensitivity k·m/4 for m
entries), for the interval only; the total is ε (and δ) by basic composition. The guarantee
holds for the exact minimiser and continuous noise: see the floating-point caveat of
:mod:`dpcurator.mechanisms.gamma_norm`. The solver is deterministic (scipy's trust-region Newton
method, at most :data:`SOLVER_STEPS` iterations) and total: a non-converged solve returns its
last iterate, never an exception.

**Intervals** (noise + sampling; a parametric bootstrap in the spirit of Ferrando, Wang &
Sheldon 2022): linearising the first-order condition at the truth θ₀ gives
θ̂ - θ₀ ≈ -(H + ΛI)⁻¹(g + Λθ₀ + b) with g the score, ≈ N(0, H). The bootstrap draws g from
N(0, H_high) and b afresh, and solves with H_low, where H_low ⪯ H ⪯ H_high are the noisy
Hessian minus / plus a bound of its noise's spectral norm (1 - α/4, union bound over the
entries), eigenvalues clipped at 0; the interval is the basic bootstrap interval at 3α/8 per
side. So a noisy Hessian cannot make the interval too narrow. With a public coefficient box the
interval and the value are clamped to it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import optimize
from scipy.special import expit

from dpcurator.core.measures import ApproxDP, PureDP
from dpcurator.estimators.release import Cost, FloatArray, noisy, standard_normals
from dpcurator.mechanisms import Gaussian, Laplace
from dpcurator.mechanisms.gamma_norm import GammaNormVector
from dpcurator.random import Rng

#: Trust-region Newton iterations of the solver.
SOLVER_STEPS = 100

#: Replicates of the parametric bootstrap.
BOOTSTRAP_REPLICATES = 2000

#: The ridge Λ is at least about λ·2^-RIDGE_FLOOR_BITS.
RIDGE_FLOOR_BITS = 20


def _sqrt_up(value: int) -> Fraction:
    """A rational upper bound of √value (to 2^-30)."""
    return Fraction(math.isqrt(value * 4**30) + 1, 2**30)


@dataclass(frozen=True)
class Perturbation:
    """The public calibration of one objective-perturbation release (from ε, δ, p, k only)."""

    ridge: float
    noise: GammaNormVector | Gaussian
    hessian: Laplace
    dimension: int
    cost: Cost

    @classmethod
    def of(
        cls,
        epsilon: Fraction,
        delta: float,
        dimension: int,
        *,
        rows_per_person: int,
        jacobian_share: Fraction,
        hessian_share: Fraction,
    ) -> Perturbation:
        """Λ, the noise of b and the Hessian's Laplace noise for (ε, δ) (module docstring)."""
        k, p = rows_per_person, dimension
        eps_op = epsilon * (1 - hessian_share)
        eps_jac = float(eps_op * jacobian_share)
        eps_noise = eps_op * (1 - jacobian_share)
        lam = p / 4
        # k·ln(1 + λ/Λ) < ε_jac; a larger Λ only lowers that cost, and the floor keeps the
        # solve well conditioned at a huge ε.
        ridge = lam / math.expm1(min(eps_jac / k, RIDGE_FLOOR_BITS * math.log(2)))
        ridge *= 1 + 2**-30
        zeta = k * _sqrt_up(p)
        noise: GammaNormVector | Gaussian
        if delta > 0:
            noise = Gaussian.for_approx(eps_noise, delta, zeta, dimension=p)
        else:
            noise = GammaNormVector(eps_noise / zeta, p)
        width = p * (p + 1) // 2
        hessian = Laplace.for_epsilon_floats(epsilon * hessian_share, Fraction(k * width, 4), width)
        cost: Cost = ApproxDP(epsilon, delta) if delta > 0 else PureDP(epsilon)
        return cls(ridge, noise, hessian, p, cost)

    def draw(self, rng: Rng, size: int) -> FloatArray:
        """``size`` noise vectors b, shape (size, p)."""
        if isinstance(self.noise, GammaNormVector):
            return self.noise.draw(rng, size)
        zeros = np.zeros(size * self.dimension)
        return self.noise.release_floats(zeros, rng).reshape(size, self.dimension)


def _objective(
    theta: FloatArray, z: FloatArray, label: FloatArray, ridge: float, b: FloatArray
) -> tuple[float, FloatArray]:
    eta = z @ theta
    value = np.sum(np.logaddexp(0.0, eta) - label * eta) + ridge / 2 * theta @ theta + b @ theta
    gradient = z.T @ (expit(eta) - label) + ridge * theta + b
    return float(value), np.asarray(gradient, np.float64)


def hessian_sum(theta: FloatArray, z: FloatArray) -> FloatArray:
    """Σ σ'(θᵀz) z zᵀ (the logistic loss's Hessian, without the ridge)."""
    prob = expit(z @ theta)
    return np.asarray((z * (prob * (1 - prob))[:, None]).T @ z, np.float64)


def minimise(z: FloatArray, label: FloatArray, ridge: float, b: FloatArray) -> FloatArray:
    """The perturbed objective's minimiser (trust-region Newton; total: the last iterate)."""
    p = z.shape[1]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        result = optimize.minimize(
            _objective, np.zeros(p), args=(z, label, ridge, b), jac=True, method="trust-exact",
            hess=lambda th, *_: hessian_sum(th, z) + ridge * np.eye(p),
            options={"maxiter": SOLVER_STEPS, "gtol": 1e-9},
        )  # fmt: skip
    theta = np.asarray(result.x, np.float64)
    return np.where(np.isfinite(theta), theta, 0.0)


def normals(rng: Rng, reps: int, p: int) -> FloatArray:
    """(reps, p) approximately standard normal draws (for the bootstrap only)."""
    return standard_normals(rng, reps * p).reshape(reps, p)


def _symmetric(upper: FloatArray, size: int) -> FloatArray:
    """Symmetric matrices (..., size, size) from their upper triangles (..., m)."""
    out = np.zeros((*upper.shape[:-1], size, size))
    out[..., *np.triu_indices(size)] = upper
    return out + np.swapaxes(np.triu(out, 1), -1, -2)


def perturbed_logistic(
    z: FloatArray, label: FloatArray, plan: Perturbation, alpha: float, rng: Rng
) -> tuple[FloatArray, FloatArray]:
    """(θ̂, bootstrap draws of θ₀), both in scaled coordinates (module docstring).

    ``z`` holds the rows (1, u) already clamped and bounded per person; never raises on values.
    """
    p = plan.dimension
    theta = minimise(z, label, plan.ridge, plan.draw(rng, 1)[0])
    width = p * (p + 1) // 2
    exact = hessian_sum(theta, z)[np.triu_indices(p)]
    released = noisy(plan.hessian, plan.hessian.scale, exact, rng)
    reps = BOOTSTRAP_REPLICATES
    again = noisy(plan.hessian, plan.hessian.scale, np.zeros(reps * width), rng)
    values, vectors = np.linalg.eigh(_symmetric(released - again.reshape(reps, width), p))
    values = np.maximum(values, 0.0)
    score = np.einsum("rij,rj->ri", vectors * np.sqrt(values)[:, None, :], normals(rng, reps, p))
    shifted = score + plan.ridge * theta + plan.draw(rng, reps)
    floor = plan.ridge * 2.0**-20  # a Hessian near 0 gives a huge but finite interval
    inverse = (vectors / np.maximum(values, floor)[:, None, :]) @ vectors.transpose(0, 2, 1)
    draws = theta + np.einsum("rij,rj->ri", inverse, shifted)
    return theta, np.asarray(draws, np.float64)


__all__ = ["Perturbation", "hessian_sum", "minimise", "perturbed_logistic"]
