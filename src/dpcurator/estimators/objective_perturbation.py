"""DP logistic regression by objective perturbation with an approximate minimiser, released on
a public grid, with noise + sampling intervals.

Rows are z = (1, u) with u the features clamped to public bounds and rescaled to [-1, 1]^d, so
‖z‖₂ <= ζ = √p and ‖z‖₁ <= p (p = d + 1), and labels y ∈ {0, 1}. The UNNORMALISED objective

    F_b(θ) = Σ_i ℓ(θ; z_i, y_i) + (Λ/2)‖θ‖² + bᵀθ,   ℓ = log(1 + e^(θᵀz)) - y·θᵀz,

is defined for add/remove neighbours without a known n. A person adds at most k rows.

**The release** (Approximate Minima Perturbation, Iyengar, Near, Song, Thakkar, Thakurta & Wang
2019, IEEE S&P, Algorithm 1, in unnormalised form):

1. b = s·G with G ∈ Z^p exact integer noise (discrete Gaussian for δ > 0, discrete Laplace for
   pure ε; CKS20 samplers) and s = 2^k the noise's public power-of-two step;
2. θ_a = :func:`~dpcurator.estimators.certified_solver.solve`: a point with a CERTIFIED bound
   ‖∇F_b(θ_a)‖ <= γ = 2^-20·max(min(√p, 2^10·Λ), Λ/16) (:data:`GRADIENT_BITS`; float-error
   margin; a public ``solver_steps`` budget, then a deterministic continuation; see there);
3. the release θ_out = h·(round(θ_a/h) + Z), Z ∈ Z^p exact discrete Gaussian (δ > 0) or discrete
   Laplace (pure ε) in units of the public grid h (:attr:`Perturbation.grid`). Every released
   coordinate is an integer multiple of h: the released float has exactly the output noise's
   resolution, and b is visible only through θ_out, blurred by Z at a scale far above s.

**Privacy guarantee** ((ε, δ)-DP, or ε-DP for δ = 0, add/remove of one person's <= k rows).
Budget split at plan time from public inputs only: ``hessian_share`` of ε for the interval's
Hessian; of the rest, ``jacobian_share`` for the ridge (ε_J), then :data:`OUTPUT_SHARE` of what
remains for the output noise (ε_out) and the rest for b (ε_b); δ_out = :data:`OUTPUT_DELTA_SHARE`·δ,
δ_b = δ - δ_out. Total ε_J + ε_b + ε_out + ε_H = ε, δ_b + δ_out = δ by basic composition.

*(i) The ideal continuous noise.* Let U be uniform on [-1/2, 1/2)^p, independent, never
sampled, and b̃ = s(G + U). b̃ has the piecewise-constant density ν̃(x) = P[G = round(x/s)]/s^p
and b = s·round(b̃/s). For every θ, ∇F_b̃(θ) = ∇F_b(θ) + (b̃ - b), so θ_a is a γ̃-approximate
minimiser of F_b̃ with γ̃ = γ + s√p/2: the algorithm IS "draw b̃ ~ ν̃, output a γ̃-approximate
minimiser of F_b̃", because the solver reads b̃ only through round(b̃/s). (b = s·G is exact in
floats for |G| < 2^53; the certificate adds ‖sG - fl(sG)‖ otherwise.)

*(ii) Objective perturbation with ν̃* (Chaudhuri, Monteleoni & Sarwate 2011, Theorem 9; Kifer,
Smith & Thakurta 2012, Theorem 2, whose argument is followed). Let t = argmin F_b̃ (exact, never
computed). For every t, b̃_D(t) = -∇L_D(t) - Λt is a bijection with Jacobian determinant
det(∇²L_D(t) + ΛI); ℓ's Hessian σ'zzᵀ has rank 1 and eigenvalue <= λ = p/4, so one person
multiplies it by at most (1 + λ/Λ)^k = e^(ε_J) (matrix determinant lemma; Λ is set from ε_J).
One person shifts b̃_D(t) by Δ = Σ_j c_j z_j, |c_j| <= 1 (ℓ's gradient is (σ(θᵀz) - y)z), so
‖Δ‖₂ <= kζ and ‖Δ‖₁ <= kp. Write v = b̃/s, g = round(v), g' = round(v + Δ/s); each coordinate
of g' - g is within 1 of Δ/s.

* pure ε: ν̃(x) ∝ exp(-‖g‖₁/β) with β the Laplace scale in units, so the log density ratio is
  at most ‖g' - g‖₁/β <= (kp/s + p)/β = ε_b for EVERY x (the grid accounting of
  :meth:`~dpcurator.mechanisms.Laplace.for_epsilon_floats` with sensitivity kp over p
  coordinates). With the Jacobian, t is (ε_J + ε_b)-DP.
* δ > 0: ν̃(x) ∝ exp(-‖g‖²/(2σ_u²)), σ_u = σ/s. With r = g - v, r' = g' - v - Δ/s (coordinates
  in [-1/2, 1/2]), ‖g'‖² - ‖g‖² <= 2vᵀΔ/s + 2‖v‖₁ + (‖Δ‖/s + √p/2)². The coordinates of v are
  independent, each the sum of a discrete Gaussian (sub-Gaussian with variance proxy σ_u²,
  CKS20 Corollary 9) and a uniform (proxy 1/4, Hoeffding's lemma), so every unit w has
  P[|wᵀv| > σ_v τ] <= 2 exp(-τ²/2), σ_v² = σ_u² + 1/4. A union bound over the k directions
  z_j/‖z_j‖ (fixed by the differing person; 63/64 of δ_b, τ = √(2 ln(128k/(63δ_b)))) and the
  p coordinates (δ_b/64, τ_c = √(2 ln(128p/δ_b))) gives with probability >= 1 - δ_b a log
  density ratio at most

      ε_b(σ) = (σ_v/σ_u)·(τ·kζ/σ + τ_c·p/σ_u) + (kζ + s√p/2)²/(2σ²),

  and σ is the smallest (up to 2^-12 relative) with ε_b(σ) <= ε_b (:func:`op_gaussian`; the
  term p/σ_u >= p·2^-31 makes ε_b below about 10^-8·p unreachable: refused at plan time). On the
  complementary set of t (probability <= δ_b) nothing is claimed, so t is (ε_J + ε_b, δ_b)-DP;
  the same holds with D and D' exchanged. (This shift Δ depends on t, which is why the loss is
  bounded through the fixed directions z_j and not by the zCDP conversion of a fixed shift.)

*(iii) The output step.* Given t and D, θ_a is determined (b̃ = b̃_D(t), then b and the
deterministic solver), and ‖θ_a - t‖ <= γ̃/Λ by Λ-strong convexity of F_b̃; so for neighbours
‖θ_a(D) - θ_a(D')‖ <= R = 2γ̃/Λ at every t, and after rounding to h by at most R/h + √p grid
units in L2, √p·R/h + p in L1. Z is calibrated to these integer sensitivities: discrete
Gaussian (ρ = Δ²/(2σ²)-zCDP, CKS20 Theorem 14, converted at δ_out by CKS20 Corollary 13,
:meth:`~dpcurator.mechanisms.Gaussian.for_approx`), or discrete Laplace (ε_out, GRS09).
Releasing t then θ_out is an adaptive composition; θ_out alone is post-processing.

*(iv) The interval's Hessian.* ``hessian_share`` of ε releases Σ σ'(θ_outᵀz)zzᵀ at the RELEASED
θ_out with Laplace noise (each upper-triangle entry a row adds lies in [-1/4, 1/4]: L1
sensitivity k·m/4 for m entries), as before.

*The certificate* is a proof obligation of (iii): if the solver and its continuation cannot
certify ‖∇F_b(θ_a)‖ <= γ (float error above γ: n times the per-row error, about 10^9 rows or
more), θ_a = 0 is used, and then (iii) holds only for the neighbours where both datasets fail
alike; the guarantee is stated for inputs the certificate covers. A public step cap below
what the data needs (``solver_steps``) only moves work to the continuation.

**Intervals** (noise + sampling; a parametric bootstrap in the spirit of Ferrando, Wang &
Sheldon 2022): linearising the first-order condition at the truth θ₀ gives
θ̂ - θ₀ ≈ -(H + ΛI)⁻¹(g + Λθ₀ + b) with g the score, ≈ N(0, H). The bootstrap draws g from
N(0, H_high), b afresh and a fresh output noise h·Z, and solves with H_low, where
H_low ⪯ H ⪯ H_high are the noisy Hessian minus / plus a bound of its noise's spectral norm,
eigenvalues clipped at 0; the interval is the basic bootstrap interval, widened to contain the
point estimate. With a public coefficient box the interval and the value are clamped to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, fail
from dpcurator.core.measures import ApproxDP, PureDP
from dpcurator.estimators.certified_solver import hessian_sum, solve
from dpcurator.estimators.release import Cost, FloatArray, noisy, standard_normals
from dpcurator.mechanisms import Gaussian, Laplace
from dpcurator.mechanisms._grid import GRID_BITS, add_noise, from_grid, grid_exponent, to_grid
from dpcurator.random import Rng

IntArray = npt.NDArray[np.int64]

#: Damped Newton steps of the solver before its certificate is checked (public).
SOLVER_STEPS = 30

#: Replicates of the parametric bootstrap.
BOOTSTRAP_REPLICATES = 2000

#: The ridge Λ is at least about λ·2^-RIDGE_FLOOR_BITS.
RIDGE_FLOOR_BITS = 20

#: The certified gradient norm is γ = 2^-GRADIENT_BITS·max(min(√p, 2^RIDGE_GRADIENT_BITS·Λ), Λ/16):
#: the output noise's sensitivity 2γ/Λ stays below 2^(1 - GRADIENT_BITS + RIDGE_GRADIENT_BITS)
#: when a huge ε makes the ridge Λ tiny, and γ stays above the solver's float error (which
#: grows with n and with Λ|θ| when a tiny ε makes Λ huge).
GRADIENT_BITS = 20
RIDGE_GRADIENT_BITS = 10

#: Share of the objective's ε (after the ridge's ``jacobian_share``) for the output noise.
OUTPUT_SHARE = Fraction(1, 32)

#: Share of δ for the output noise (δ > 0).
OUTPUT_DELTA_SHARE = Fraction(1, 8)

#: The output grid h is about 2^-OUTPUT_GRID_BITS of (2γ̃/Λ)/max(ε_out, 1): below the output
#: noise's scale and below its sensitivity.
OUTPUT_GRID_BITS = 10

Noise = Gaussian | Laplace


def _sqrt_up(value: int) -> Fraction:
    """A rational upper bound of √value (to 2^-30)."""
    return Fraction(math.isqrt(value * 4**30) + 1, 2**30)


def _up(value: float) -> float:
    """``value`` (a float computed with a few roundings) pushed up by a safe relative margin."""
    return value * (1 + 2.0**-40)


def _tail_split(delta: Fraction, rows: int, dimension: int) -> tuple[tuple[int, Fraction], ...]:
    """δ_b for the k directions and for the p coordinates (1/64 of it)."""
    return (rows, delta * Fraction(63, 64)), (dimension, delta / 64)


def _tail(count: int, delta: Fraction) -> float:
    """τ = √(2 ln(2·count/δ)), rounded up: count sub-Gaussian tails beyond τσ_v have
    probability <= δ together."""
    return _up(math.sqrt(_up(2 * math.log(_up(2 * count / float(delta))))))


def op_loss_bound(sigma: Fraction, delta: Fraction, rows: int, dimension: int) -> float:
    """ε_b(σ) of part (ii) of the module docstring, rounded up."""
    k, p = rows, dimension
    step = Fraction(2) ** grid_exponent(sigma)
    sigma_u = float(sigma / step)
    ratio = math.sqrt(1 + 0.25 / sigma_u**2)
    tau, tau_coords = (_tail(count, part) for count, part in _tail_split(delta, k, p))
    zeta = float(k * _sqrt_up(p))
    shift = zeta + float(step) * float(_sqrt_up(p)) / 2
    spread = tau * zeta / float(sigma) + tau_coords * p / sigma_u
    total = ratio * spread + shift**2 / (2 * float(sigma) ** 2)
    return _up(_up(total))


def op_gaussian(epsilon: Fraction, delta: Fraction, rows: int, dimension: int) -> Gaussian:
    """The discrete Gaussian of b for (ε_b, δ_b) (module docstring, part (ii))."""
    eps = float(epsilon)
    tau = math.sqrt(2 * math.log(2 * rows / float(delta)))
    zeta = float(rows * _sqrt_up(dimension))
    sigma = zeta * (tau + math.sqrt(tau**2 + 2 * eps)) / (2 * eps)
    for _ in range(1024):
        noise = Gaussian(Fraction(sigma))  # refuses σ beyond the exact sampler's range
        if op_loss_bound(noise.sigma, delta, rows, dimension) <= eps:
            return noise
        sigma *= 1 + 2.0**-12
    raise fail(
        "logistic_regression", "epsilon", "large enough for the noise's lattice (the share of "
        "the objective's noise must exceed about 1e-7 times (d + 1))", float(epsilon),
        "Ask for a larger epsilon.",
    )  # fmt: skip


def _step(noise: Noise) -> int:
    """The exponent of the noise's public lattice step s = 2^k."""
    return grid_exponent(noise.sigma if isinstance(noise, Gaussian) else noise.scale)


def _integers(noise: Noise, rng: Rng, size: int, unit: Fraction = Fraction(1)) -> IntArray:
    """``size`` exact integer draws of the noise, in units of ``unit``."""
    zeros = np.zeros(size, np.int64)
    if isinstance(noise, Gaussian):
        return Gaussian(noise.sigma / unit).release_integers(zeros, rng)
    return Laplace(noise.scale / unit).release_integers(zeros, rng)


@dataclass(frozen=True)
class Perturbation:
    """The public calibration of one release (from ε, δ, p, k and the step budget only).

    ``noise`` draws b (on the lattice 2^k, k = its grid exponent), ``output`` the output noise
    in units of the public grid ``grid``; ``gradient`` is the certified γ.
    """

    ridge: float
    noise: Noise
    hessian: Laplace
    output: Noise
    grid: float
    gradient: float
    steps: int
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
        solver_steps: int = SOLVER_STEPS,
    ) -> Perturbation:
        """Λ, the noise of b, the output noise and grid, the Hessian's noise (module docstring)."""
        k, p = rows_per_person, dimension
        check_int("logistic_regression", "solver_steps", solver_steps, minimum=0)
        eps_op = epsilon * (1 - hessian_share)
        eps_jac = eps_op * jacobian_share
        eps_out = (eps_op - eps_jac) * OUTPUT_SHARE
        eps_noise = eps_op - eps_jac - eps_out
        lam = p / 4
        # k·ln(1 + λ/Λ) < ε_J; a larger Λ only lowers that cost, and the floor keeps the
        # solve well conditioned at a huge ε.
        ridge = lam / math.expm1(min(float(eps_jac) / k, RIDGE_FLOOR_BITS * math.log(2)))
        ridge *= 1 + 2**-30
        noise: Noise
        if delta > 0:
            exact_delta = Fraction(delta)
            delta_out = exact_delta * OUTPUT_DELTA_SHARE
            noise = op_gaussian(eps_noise, exact_delta - delta_out, k, p)
        else:
            noise = Laplace.for_epsilon_floats(eps_noise, k * p, p)
        root = _sqrt_up(p)
        lam_exact = Fraction(ridge)
        gamma = (
            max(min(root, lam_exact * 2**RIDGE_GRADIENT_BITS), lam_exact / 16) / 2**GRADIENT_BITS
        )
        spread = 2 * (gamma + Fraction(2) ** _step(noise) * root / 2) / Fraction(ridge)
        exponent = grid_exponent(spread / max(eps_out, Fraction(1))) + GRID_BITS - OUTPUT_GRID_BITS
        units = spread / Fraction(2) ** exponent
        output: Noise
        if delta > 0:
            output = Gaussian.for_approx(eps_out, delta_out, units + root, dimension=p)
        else:
            output = Laplace.for_epsilon(eps_out, units * root + p)
        width = p * (p + 1) // 2
        hessian = Laplace.for_epsilon_floats(epsilon * hessian_share, Fraction(k * width, 4), width)
        cost: Cost = ApproxDP(epsilon, delta) if delta > 0 else PureDP(epsilon)
        grid = math.ldexp(1.0, exponent)
        return cls(ridge, noise, hessian, output, grid, float(gamma), solver_steps, p, cost)

    def lattice(self, rng: Rng, size: int) -> tuple[IntArray, FloatArray]:
        """``size`` noise vectors b = s·G: (G in lattice units, b as floats), shape (size, p)."""
        step = Fraction(2) ** _step(self.noise)
        units = _integers(self.noise, rng, size * self.dimension, step)
        values = np.ldexp(units.astype(np.float64), _step(self.noise))
        return units.reshape(size, self.dimension), values.reshape(size, self.dimension)

    def draw(self, rng: Rng, size: int) -> FloatArray:
        """``size`` noise vectors b, shape (size, p)."""
        return self.lattice(rng, size)[1]

    def output_noise(self, rng: Rng, size: int) -> FloatArray:
        """``size`` output noise vectors h·Z, shape (size, p) (for the bootstrap)."""
        units = _integers(self.output, rng, size * self.dimension).astype(np.float64)
        return np.ldexp(units, int(math.log2(self.grid))).reshape(size, self.dimension)


def release_coefficients(
    z: FloatArray, label: FloatArray, plan: Perturbation, rng: Rng
) -> tuple[FloatArray, FloatArray, bool]:
    """(θ_out on the grid, θ_a before the output noise, whether θ_a was certified).

    Only θ_out may leave the estimator; θ_a is returned for tests of the mechanism.
    """
    units, b = plan.lattice(rng, 1)
    gap = 0.0
    exact = bool(np.all(np.abs(units) < 2**53))
    if not exact:  # fl(s·G) is not s·G: the certificate must cover the difference
        step = Fraction(2) ** _step(plan.noise)
        diffs = [float(abs(Fraction(int(g)) * step - Fraction(float(x)))) for g, x in zip(
            units[0].tolist(), b[0].tolist(), strict=True)]  # fmt: skip
        gap = _up(math.sqrt(sum(d * d for d in diffs)))
    target = max(plan.gradient - gap, 0.0)
    theta, _, certified = solve(z, label, plan.ridge, b[0], target=target, steps=plan.steps)
    exponent = int(math.log2(plan.grid))
    noise = _integers(plan.output, rng, plan.dimension)
    released = from_grid(add_noise(to_grid(theta, exponent), noise), exponent)
    return released, theta, certified


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
    """(θ_out, bootstrap draws of θ₀), both in scaled coordinates (module docstring).

    ``z`` holds the rows (1, u) already clamped and bounded per person; never raises on values.
    """
    p = plan.dimension
    theta = release_coefficients(z, label, plan, rng)[0]
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
    draws = theta + np.einsum("rij,rj->ri", inverse, shifted) - plan.output_noise(rng, reps)
    return theta, np.asarray(draws, np.float64)


__all__ = [
    "OUTPUT_DELTA_SHARE",
    "OUTPUT_SHARE",
    "Perturbation",
    "hessian_sum",
    "perturbed_logistic",
    "release_coefficients",
]
