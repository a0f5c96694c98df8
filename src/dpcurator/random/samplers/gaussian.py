"""The discrete Gaussian, sampled exactly (CKS20 Algorithm 3).

A discrete Laplace proposal accepted by a Bernoulli(exp(-γ)) trial whose rational exponent is
computed exactly in 64-bit arithmetic, with a Python-integer fallback where it does not fit. See
:mod:`dpcurator.random.samplers` for the guarantees and the timing caveat.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Final

import numpy as np

from dpcurator._validation import check_int, check_positive, fail
from dpcurator.random.rng import Rng
from dpcurator.random.samplers.bernoulli import _U64_MAX, IntArray
from dpcurator.random.samplers.chunks import CHUNK, in_chunks
from dpcurator.random.samplers.inversion import (
    FloatArray,
    UIntArray,
    apply_signs,
    bexp_scalar,
    bexp_words,
    inversion_float,
)
from dpcurator.random.samplers.laplace import (
    _INVERSION_RATIO,
    _SCALAR_MAX,
    _discrete_laplace_core,
    _discrete_laplace_python,
    _proposals,
)

__all__ = ["MAX_SIGMA", "discrete_gaussian"]

#: Largest discrete Gaussian σ: the acceptance test keeps its denominator 2σ² below 2^64.
MAX_SIGMA: Final = 2**31
#: L|Y| below this is an exact float64 (the vectorised acceptance test; beyond: Python integers).
_FAST_X: Final = 2**53


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


@functools.lru_cache(maxsize=64)
def _acceptance(t: int, c: int, big_l: int) -> float:
    """A float estimate of the acceptance rate of :func:`_discrete_gaussian_core` (it only sizes
    the batches of proposals): E[exp(-(|Y| - σ²/t)²/(2σ²))] for Y discrete Laplace(t), summed
    over |Y| <= 40t (exact up to e^-40) for t <= 4096, else its large-t limit."""
    tt = min(t, 4096)
    sigma2 = c * t / big_l * (tt / t) ** 2
    mu = sigma2 / tt
    q = math.exp(-1 / tt)
    k = np.arange(40 * tt + 1, dtype=np.float64)
    pmf = (1 - q) / (1 + q) * q**k
    pmf[1:] *= 2
    return float(np.sum(pmf * np.exp(-((k - mu) ** 2) / (2 * sigma2))))


def _proposals_laplace(rng: Rng, t: int, n: int) -> tuple[FloatArray, UIntArray]:
    """``n`` discrete Laplace(t) draws as (|Y| as exact floats, words whose low bit is the sign)."""
    if t <= _INVERSION_RATIO:
        return inversion_float(rng, 1, t, n, two_sided=True)
    y = _discrete_laplace_core(rng, t, 1, n)
    return np.abs(y).astype(np.float64), (y < 0).astype(np.uint64)


def _discrete_gaussian_core(rng: Rng, t: int, c: int, big_l: int, n: int) -> IntArray:
    """CKS20 Algorithm 3 with σ² = c·t/L: Y ~ discrete Laplace(t), accept with probability
    exp(-(|Y| - σ²/t)² / (2σ²)) = exp(-(L|Y| - c)² / (2ctL)).

    The acceptance test is one exact Bernoulli(exp(-x)) decision per proposal
    (:func:`~dpcurator.random.samplers.inversion.bexp_words`): x = a²/D with a = L|Y| - c computed
    exactly in float64 when L|Y| < 2^53 (integers below 2^53 are exact floats, so a is exact and
    x is within a relative 3·2^-53); the exact integers (a², D) decide the rare uncertain cases.
    Proposals with L|Y| >= 2^53 are tested one at a time in Python integers."""
    d = 2 * c * t * big_l
    if n <= _SCALAR_MAX:
        values: list[int] = []
        while len(values) < n:
            proposal = _discrete_laplace_python(rng, t, 1)
            x = abs(proposal) * big_l - c
            if bexp_scalar(rng, x * x, d):
                values.append(proposal)
        return np.array(values, dtype=np.int64)
    if n > CHUNK:
        return in_chunks(lambda m: _discrete_gaussian_core(rng, t, c, big_l, m), n)
    out = np.empty(n, dtype=np.int64)
    filled = 0
    acceptance = _acceptance(t, c, big_l)
    max_y = (_FAST_X - 1) // big_l  # |Y| <= max_y keeps L|Y| < 2^53
    while filled < n:
        need = n - filled
        magnitude, signs = _proposals_laplace(rng, t, _proposals(need, acceptance))
        a = magnitude.copy()
        big = np.flatnonzero(a > max_y)
        a[big] = 0.0
        if big_l != 1:
            a *= float(big_l)
        a -= float(c)
        a *= a
        a /= float(d)

        def exact(i: int, magnitude: FloatArray = magnitude) -> tuple[int, int]:
            x = int(magnitude[i]) * big_l - c
            return x * x, d

        accept = bexp_words(rng, a, exact)
        for i in big:  # outside the float-exact range: one test in Python integers
            accept[i] = bexp_scalar(rng, *exact(int(i)))
        accepted = apply_signs(magnitude[accept][:need], signs[accept][:need])
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
