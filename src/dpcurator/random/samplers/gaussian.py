"""The discrete Gaussian, sampled exactly (CKS20 Algorithm 3).

A discrete Laplace proposal accepted by a Bernoulli(exp(-γ)) trial whose rational exponent is
computed exactly in 64-bit arithmetic, with a Python-integer fallback where it does not fit. See
:mod:`dpcurator.random.samplers` for the guarantees and the timing caveat.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Final

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, check_positive, fail
from dpcurator.random.rng import Rng
from dpcurator.random.samplers.bernoulli import (
    _I64_MAX,
    _U64_MAX,
    IntArray,
    UIntArray,
    _bexp_parts,
    _bexp_python,
)
from dpcurator.random.samplers.chunks import CHUNK, in_chunks
from dpcurator.random.samplers.laplace import (
    _SCALAR_MAX,
    _discrete_laplace_core,
    _discrete_laplace_python,
)

__all__ = ["MAX_SIGMA", "discrete_gaussian"]

#: Largest discrete Gaussian σ: the acceptance test keeps its denominator 2σ² below 2^64.
MAX_SIGMA: Final = 2**31
#: Bounds of the vectorised exact path of the Gaussian acceptance test (see _quadratic_parts).
_FAST_X: Final = 2**53
_FAST_Q: Final = 2.0**40


def _gaussian_parameters(sigma: object) -> tuple[int, int, int]:
    """(t, c, L) such that CKS20 Algorithm 3 with σ'² = c·t/L >= σ² (equal when representable)
    has the acceptance exponent (L|Y| - c)² / (2·c·t·L) with denominator D = 2ctL < 2^64."""
    owner = "discrete_gaussian"
    exact = Fraction(check_positive(owner, "sigma", sigma))  # floats are exact binary rationals
    if exact > MAX_SIGMA:
        raise fail(owner, "sigma", "<= 2**31 (so that 2σ² fits the 64-bit acceptance test)", sigma)
    variance = exact * exact
    t = math.floor(exact) + 1
    u = variance / t  # σ²/t = c/L
    c, big_l = u.numerator, u.denominator
    if 2 * c * t * big_l <= _U64_MAX:
        return t, c, big_l
    # Round σ²/t UP to c/L with L a power of two, as fine as the 64-bit denominator allows
    # (D = 2ctL ~ 2σ²L², so L ~ 2^31.5/σ; start above that and halve until D fits).
    big_l = 1 << max(0, 33 - math.floor(math.log2(exact)))
    while big_l > 1 and 2 * math.ceil(u * big_l) * t * big_l > _U64_MAX:
        big_l //= 2
    c = math.ceil(u * big_l)
    if 2 * c * t * big_l > _U64_MAX:  # pragma: no cover - excluded by the MAX_SIGMA check
        raise fail(owner, "sigma", "<= 2**31", sigma)
    return t, c, big_l


def _quadratic_parts(x: IntArray, d: int) -> tuple[UIntArray, UIntArray, npt.NDArray[np.intp]]:
    """Exact q = floor(x²/d) and r = x² - q·d for |x| < 2^53, d < 2^64, when q < 2^40.

    A float gives q within ±1; r is then recovered exactly from x² - q·d modulo 2^64 (wrapping
    uint64 arithmetic), lifted to the right multiple of 2^64 with the same float estimate (whose
    error is below 2^56, far from the 2^64 spacing of the candidates), and q is corrected by ±1.
    Elements outside these bounds are returned by index for the exact Python fallback. When every
    x² and d fit in int64 (the common case), a plain integer divmod is used instead.
    """
    if x.size == 0 or (d <= _I64_MAX and int(np.max(np.abs(x))) < min(_FAST_X, 2**31)):
        square = x * x
        q64, r64 = np.divmod(square, d)
        return q64.view(np.uint64), r64.view(np.uint64), np.empty(0, dtype=np.intp)
    ax = np.abs(x).astype(np.uint64)
    xf = ax.astype(np.float64)
    df = float(d)
    square_f = xf * xf
    qf = np.floor(square_f / df)
    slow = np.flatnonzero((ax >= np.uint64(_FAST_X)) | (qf >= _FAST_Q))
    if slow.size:
        qf[slow] = 0.0
        ax[slow] = 0
        square_f[slow] = 0.0
    q = qf.astype(np.uint64)
    d64 = np.uint64(d)
    low = ax * ax - q * d64  # r' mod 2^64, where r' = x² - q·d lies in [-d, 2d)
    estimate = square_f - qf * df  # r' up to an error < 2^56
    lift = np.rint((estimate - low.astype(np.float64)) * 2.0**-64)  # r' = low + lift·2^64
    negative = lift < 0  # r' < 0: q was one too big
    over = (lift > 0) | ((lift == 0) & (low >= d64))  # r' >= d: q was one too small
    q[negative] -= np.uint64(1)
    low[negative] += d64
    q[over] += np.uint64(1)
    low[over] -= d64
    return q, low, slow


def _discrete_gaussian_core(rng: Rng, t: int, c: int, big_l: int, n: int) -> IntArray:
    """CKS20 Algorithm 3 with σ² = c·t/L: Y ~ discrete Laplace(t), accept with probability
    exp(-(|Y| - σ²/t)² / (2σ²)) = exp(-(L|Y| - c)² / (2ctL))."""
    d = 2 * c * t * big_l
    if n <= _SCALAR_MAX:
        values: list[int] = []
        while len(values) < n:
            proposal = _discrete_laplace_python(rng, t, 1)
            x = abs(proposal) * big_l - c
            if _bexp_python(rng, x * x, d):
                values.append(proposal)
        return np.array(values, dtype=np.int64)
    if n > CHUNK:
        return in_chunks(lambda m: _discrete_gaussian_core(rng, t, c, big_l, m), n)
    out = np.empty(n, dtype=np.int64)
    filled = 0
    max_y = (_FAST_X - 1 + c) // big_l  # |Y| <= max_y keeps |L|Y| - c| < 2^53
    while filled < n:
        y = _discrete_laplace_core(rng, t, 1, n - filled)
        ay = np.abs(y)
        big = np.flatnonzero(ay > max_y)
        ay[big] = 0
        if big_l != 1:
            ay *= big_l
        ay -= c
        q, r, slow = _quadratic_parts(ay, d)
        accept = _bexp_parts(rng, q, r, d)
        for i in np.union1d(slow, big):  # outside the 64-bit fast path: exact Python integers
            xi = abs(int(y[i])) * big_l - c
            accept[i] = _bexp_python(rng, xi * xi, d)
        accepted = y[accept]
        out[filled : filled + accepted.size] = accepted
        filled += accepted.size
    return out


def discrete_gaussian(rng: Rng, sigma: int | float | Fraction, size: int) -> IntArray:
    """``size`` draws from the discrete Gaussian on the integers: exactly
    P[x] = exp(-x²/(2σ²)) / Σ_y exp(-y²/(2σ²)).

    CKS20 Algorithm 3 (Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for Differential
    Privacy"): with t = floor(σ) + 1, draw Y from the discrete Laplace with scale t and accept it
    with probability exp(-(|Y| - σ²/t)² / (2σ²)) (a :func:`bernoulli_exp` trial with a rational
    exponent), else retry.

    ``sigma`` may be an int, a Fraction or a float (the exact binary rational it stores); σ² is
    then an exact rational. The acceptance exponent is (L|Y| - c)² / D with σ²/t = c/L and
    D = 2·c·t·L. When D (in lowest terms) would exceed 2^64 - 1 — e.g. for most float σ, whose
    exact square has a 100-bit denominator — σ²/t is rounded UP to c/L with L a power of two
    chosen as large as the 64-bit bound allows, i.e. σ² is replaced by σ'² = c·t/L with
    σ² <= σ'² < σ²·(1 + 2^-30·max(1, 1/σ)) (and σ'² = 2^-62 for σ < 2^-31, where every sample
    is 0 but with probability below 2^(-2^60)). The sample is then exactly discrete Gaussian with
    σ'. More noise is always safe, so a privacy guarantee computed for σ holds. Integer σ below
    2^15 and Fractions with small terms are used exactly. The test is evaluated in vectorised 64-bit
    arithmetic; the rare elements whose integers do not fit (|Y| beyond about 2^53/L, or an
    exponent above 2^40) fall back to exact Python integers, so exactness is never lost.

    Not constant-time: the number of rejection rounds depends on the values drawn.

    Args:
        rng: the source of randomness.
        sigma: σ > 0 (at most 2^31), finite.
        size: the number of samples (>= 0).

    Returns:
        An int64 array of shape ``(size,)``.
    """
    t, c, big_l = _gaussian_parameters(sigma)
    size = check_int("discrete_gaussian", "size", size, minimum=0)
    return _discrete_gaussian_core(rng, t, c, big_l, size)
