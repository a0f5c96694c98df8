"""Buffered Linear Toeplitz (BLT) factorizations of the prefix-sum matrix: their norms.

The releases of a continual count are the prefix sums A x of the stream x, where A is the T × T
lower-triangular all-ones matrix. A factorization mechanism (Li, Miklau, Hay, McGregor & Rastogi
2015; Denisov, McMahan, Rush, Smith & Thakurta 2022) writes A = B C, releases y = C x + z with
Gaussian z, and answers B y = A x + B z. The privacy cost is set by the largest column norm of
C (the L2 sensitivity of C x to one event), the error of release t by the norm of row t of B.
The square-root factorization C = B = A^(1/2) (a lower-triangular Toeplitz matrix with
c_k = binom(2k, k) / 4^k) is within an additive constant of the best possible worst-step error
(Fichtenberger, Henzinger & Upadhyay 2023; Henzinger, Upadhyay & Upadhyay 2023).

A BLT (Dvijotham, McMahan, Pillutla, Steinke & Thakurta 2024) is the lower-triangular Toeplitz C
with c_0 = 1 and c_k = Σ_i ω_i θ_i^(k-1) for k >= 1: d buffers S_i(t + 1) = θ_i S_i(t) + x_t give
(C x)_t = x_t + Σ_i ω_i S_i(t) in O(d) memory and time per step, and C^(-1) is the same recursion
solved for x (w_t = y_t - Σ_i ω_i W_i(t), W_i(t + 1) = θ_i W_i(t) + w_t). With d of the order of
log T buffers, fitted decays θ_i and weights ω_i bring the worst-step variance factor
max_t ‖B_t‖² · max_j ‖C_j‖² within a fraction of a percent of the square-root factorization's
(``benchmarks/streams_blt_design.py`` fits the table
:data:`dpcurator.streams._blt_table.BLT_TABLE`).

This module has the norms: exact upper bounds for privacy (:func:`column_norm_squared_bound`, in
Fractions), and floating-point values for design and accuracy (:func:`column_norm_squared`,
:func:`row_norm_squared`, the latter by doubling on the (d+1)-state recursion of B, O(d³ log T)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt
from scipy.special import digamma

__all__ = [
    "coefficients",
    "column_norm_squared",
    "column_norm_squared_bound",
    "power_floor",
    "row_norm_squared",
    "sqrt_factor_norm_squared",
]

#: Bits kept by :func:`power_floor` (each squaring rounds down at this precision).
_POWER_BITS = 160
#: Terms summed explicitly by :func:`sqrt_factor_norm_squared` before the asymptotic tail.
_SQRT_EXPLICIT = 2**16

FloatArray = npt.NDArray[np.float64]


def power_floor(base: Fraction, exponent: int) -> Fraction:
    """A lower bound on base**exponent for 0 <= base <= 1 (repeated squaring, each product
    rounded down to ``_POWER_BITS`` bits, so every step only decreases)."""
    one = 1 << _POWER_BITS
    x = base.numerator * one // base.denominator
    result = one
    n = exponent
    while n:
        if n & 1:
            result = result * x >> _POWER_BITS
        n >>= 1
        if n:
            x = x * x >> _POWER_BITS
    return Fraction(result, one)


def column_norm_squared_bound(
    thetas: Sequence[Fraction], omegas: Sequence[Fraction], horizon: int
) -> Fraction:
    """An exact upper bound on max_j ‖C e_j‖² over the first ``horizon`` steps (Fractions).

    With every ω_i >= 0 and 0 < θ_i < 1 the entries c_k are positive, so the longest column,
    the first, has the largest norm: 1 + Σ_{k=1}^{T-1} (Σ_i ω_i θ_i^(k-1))², which is
    1 + Σ_{i,j} ω_i ω_j (1 - (θ_i θ_j)^(T-1)) / (1 - θ_i θ_j); the powers are bounded below by
    :func:`power_floor`, so the result is never below the true norm.
    """
    if any(w < 0 for w in omegas) or any(not 0 < t < 1 for t in thetas):
        raise ValueError("a BLT needs weights >= 0 and decays in (0, 1)")
    total = Fraction(1)
    for ti, wi in zip(thetas, omegas, strict=True):
        for tj, wj in zip(thetas, omegas, strict=True):
            ratio = ti * tj
            total += wi * wj * (1 - power_floor(ratio, horizon - 1)) / (1 - ratio)
    return total


def column_norm_squared(lam: FloatArray, omega: FloatArray, horizon: int) -> float:
    """‖C e_1‖² over ``horizon`` steps for θ_i = exp(-λ_i) (floating point, for design)."""
    s = lam[:, None] + lam[None, :]
    geometric = np.expm1(-(horizon - 1) * s) / np.expm1(-s)
    return 1.0 + float(omega @ geometric @ omega)


def _decoder(theta: FloatArray, omega: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(M, h, g) with b_t = h M^t g the coefficients of B = A C^(-1): the state is
    (U_t, 1) with U_(t+1) = N U_t + 1, N = diag(θ) - 1 ω^T, and b_t = 1 - ω·U_t."""
    d = theta.size
    m = np.zeros((d + 1, d + 1))
    m[:d, :d] = np.diag(theta) - np.outer(np.ones(d), omega)
    m[:d, d] = 1.0
    m[d, d] = 1.0
    h = np.concatenate((-omega, [1.0]))
    g = np.zeros(d + 1)
    g[d] = 1.0
    return m, h, g


def row_norm_squared(theta: FloatArray, omega: FloatArray, time: int) -> float:
    """‖B_t‖² = Σ_{k<t} b_k² for the release at ``time``, θ_i the decays (floating point, by
    doubling: O(d³ log t))."""
    m, h, g = _decoder(theta, omega)
    total = np.zeros_like(m)  # Σ over the terms taken so far of M^k g g^T M^kT
    shift = np.eye(g.size)  # M^(terms taken so far)
    block, power = np.outer(g, g), m.copy()  # the block of 2^j terms and M^(2^j)
    n = time
    while n:
        if n & 1:
            total += shift @ block @ shift.T
            shift = shift @ power
        n >>= 1
        if n:
            block = block + power @ block @ power.T
            power = power @ power
    return float(h @ total @ h)


def coefficients(
    theta: FloatArray, omega: FloatArray, horizon: int
) -> tuple[FloatArray, FloatArray]:
    """The first ``horizon`` coefficients (c_k, b_k) of C and B (explicit, O(horizon · d))."""
    c = np.empty(horizon)
    b = np.empty(horizon)
    c[0] = b[0] = 1.0
    encoder = np.zeros(theta.size)  # impulse through the C recursion
    decoder = np.zeros(theta.size)  # impulse through the C^(-1) recursion
    encoder += 1.0
    w0 = 1.0
    decoder += w0
    prefix = w0
    for k in range(1, horizon):
        c[k] = float(omega @ encoder)
        encoder *= theta
        w = -float(omega @ decoder)
        decoder = theta * decoder + w
        prefix += w
        b[k] = prefix
    return c, b


def sqrt_factor_norm_squared(horizon: int) -> float:
    """Σ_{k<T} c_k² for the square-root factorization, c_k = binom(2k, k) / 4^k (explicit up to
    2^16 terms, then c_k² = (1 - 1/(4k) + O(k^-2)) / (πk) summed by the digamma function)."""
    n = min(horizon, _SQRT_EXPLICIT)
    k = np.arange(1, n)
    c = np.concatenate(([1.0], np.exp(np.cumsum(np.log((2 * k - 1) / (2 * k))))))
    total = float((c**2).sum())
    if horizon > n:
        head = float(digamma(horizon) - digamma(n)) / math.pi
        total += head - (1 / n - 1 / horizon) / (4 * math.pi)
    return total
