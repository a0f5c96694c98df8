"""The geometric and discrete Laplace distributions, sampled exactly (CKS20 Algorithm 2).

:func:`geometric` draws the number of Bernoulli(exp(-γ)) successes before a failure, and
:func:`discrete_laplace` a geometric magnitude with a fair sign; both in work that does not grow
with the scale. See :mod:`dpcurator.random.samplers` for the guarantees and the timing caveat.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Final

import numpy as np

from dpcurator._validation import check_int, check_positive, fail
from dpcurator.core.numbers import dyadic_up
from dpcurator.errors import InternalInvariantError
from dpcurator.random.rng import Rng
from dpcurator.random.samplers.bernoulli import (
    _I64_MAX,
    IntArray,
    _bexp_fraction,
    _bexp_one,
    _bexp_parts,
    _bexp_python,
    _randbelow,
)
from dpcurator.random.samplers.chunks import CHUNK, in_chunks

__all__ = ["MAX_LAPLACE_SCALE", "discrete_laplace", "geometric"]

#: Largest discrete Laplace scale (and largest 1/γ of :func:`geometric`): beyond it samples would
#: not reliably fit in int64.
MAX_LAPLACE_SCALE: Final = 2**52
#: The Laplace scale numerator t is kept at most this large (scale rounded up otherwise), so that
#: U + t·V of CKS20 Algorithm 2 fits in int64 for every geometric V up to 127.
_MAX_T: Final = 2**56
#: Batches up to this size run the same algorithms one value at a time in Python integers, which
#: beats dozens of numpy calls on tiny arrays (e.g. one noisy threshold in sparse vector).
_SCALAR_MAX: Final = 16  # measured crossover: ~13 us per value vs ~220 us per small batch


def _geometric_exp_one(rng: Rng, n: int) -> IntArray:
    """``n`` draws of V with P[V = v] = (1 - e^-1) e^-v: Bernoulli(exp(-1)) successes before a
    failure (the inner loop of CKS20 Algorithm 2)."""
    values = np.zeros(n, dtype=np.int64)
    live = np.arange(n)
    while live.size:
        live = live[_bexp_one(rng, live.size)]
        values[live] += 1
    return values


# Pure-Python exact versions, for small batches and rare elements beyond the int64 fast paths.


def _geometric_python(rng: Rng, t: int, s: int) -> int:
    """One draw of :func:`_geometric_core` (same algorithm) in Python integers."""
    if s >= t:
        count = 0
        while _bexp_python(rng, s, t):
            count += 1
        return count
    while True:
        u = _randbelow(rng, t)
        if _bexp_python(rng, u, t):
            break
    v = 0
    while _bexp_python(rng, 1, 1):
        v += 1
    value = (u + t * v) // s
    if value > _I64_MAX:  # pragma: no cover - probability below exp(-2^11)
        raise InternalInvariantError("A geometric sample exceeded the int64 range.")
    return value


def _discrete_laplace_python(rng: Rng, t: int, s: int) -> int:
    """One draw of :func:`_discrete_laplace_core` (same algorithm) in Python integers."""
    while True:
        magnitude = _geometric_python(rng, t, s)
        negative = _randbelow(rng, 2) == 1
        if not (negative and magnitude == 0):
            return -magnitude if negative else magnitude


#: Lower bound on the acceptance rate of the proposals of :func:`_geometric_core`
#: (E[exp(-U/t)] for U uniform on {0..t-1} is at least 1 - 1/e).
_GEOMETRIC_ACCEPTANCE = 1.0 - math.exp(-1.0)


def _proposals(need: int, acceptance: float) -> int:
    """How many i.i.d. proposals to draw so that one rejection round almost always yields
    ``need`` accepted samples: each round costs several array passes whatever its size, so a
    5% surplus (plus a few) is cheaper than the rounds it saves. The surplus is discarded, which
    is harmless: accepted proposals are i.i.d. from the target, and which of them are kept does
    not depend on their values."""
    return math.ceil(need * 1.05 / acceptance) + 16


def _geometric_core(rng: Rng, t: int, s: int, n: int) -> IntArray:
    """``n`` draws of Y with P[Y = y] = (1 - e^(-s/t)) e^(-y s/t), y >= 0.

    For s/t < 1, CKS20 Algorithm 2, lines 1-5: U uniform on {0..t-1} accepted with probability
    exp(-U/t), V ~ Geometric(1 - 1/e) (Bernoulli(exp(-1)) successes before a failure), then
    X = U + t·V is geometric with ratio e^(-1/t) and Y = floor(X / s). For s/t >= 1 (mean below
    0.6) the definition is cheaper: Y counts Bernoulli(exp(-s/t)) successes before a failure.

    t and s are Python integers in [1, 2^63) (s may be larger when s >= t). Accepted proposals
    are i.i.d. from the target, so they fill the output in order.
    """
    if n <= _SCALAR_MAX:
        return np.array([_geometric_python(rng, t, s) for _ in range(n)], dtype=np.int64)
    if n > CHUNK:
        return in_chunks(lambda m: _geometric_core(rng, t, s, m), n)
    if s >= t:
        return _geometric_by_trials(rng, s, t, n)
    out = np.empty(n, dtype=np.int64)
    filled = 0
    v_safe = (_I64_MAX - (t - 1)) // t  # U + t·V fits in int64 when V <= v_safe
    while filled < n:
        need = n - filled
        u = rng.integers_below(t, _proposals(need, _GEOMETRIC_ACCEPTANCE))
        u = u[_bexp_fraction(rng, u, t)][:need]
        v = _geometric_exp_one(rng, u.size)
        x = v * t
        x += u
        y = x if s == 1 else x // s
        for i in np.flatnonzero(v > v_safe):  # X beyond int64 (probability < e^-127): Python
            value = (int(u[i]) + t * int(v[i])) // s
            if value > _I64_MAX:
                raise InternalInvariantError(
                    "A geometric sample exceeded the int64 range; this has probability below "
                    "exp(-2^11) for the scales accepted. Please report it."
                )
            y[i] = value
        out[filled : filled + y.size] = y
        filled += y.size
    return out


def _geometric_by_trials(rng: Rng, numerator: int, denominator: int, n: int) -> IntArray:
    """``n`` counts of Bernoulli(exp(-numerator/denominator)) successes before the first failure
    (efficient when the ratio is >= 1, i.e. when most counts are 0)."""
    whole, rest = divmod(numerator, denominator)
    if whole > _I64_MAX:  # every trial needs more than 2^63 Bernoulli(exp(-1)) successes
        whole, rest = _I64_MAX, 0  # only a lower bound on γ ...
        exact_bound = False
    else:
        exact_bound = True
    values = np.zeros(n, dtype=np.int64)
    live = np.arange(n)
    while live.size:
        m = np.full(live.size, whole, dtype=np.int64)
        r = np.full(live.size, rest, dtype=np.int64)
        success = _bexp_parts(rng, m, r, denominator)
        if not exact_bound and success.any():  # pragma: no cover - probability exp(-2^63)
            raise InternalInvariantError("survived 2^63 Bernoulli(exp(-1)) trials")
        live = live[success]
        values[live] += 1
    return values


def geometric(rng: Rng, numerator: int, denominator: int, size: int) -> IntArray:
    """``size`` draws of the number of successes before the first failure of independent
    Bernoulli(exp(-γ)) trials, γ = numerator/denominator > 0: exactly
    P[k] = (1 - e^-γ) e^(-γ k), k = 0, 1, 2, ...

    Uses the trick of Canonne, Kamath & Steinke 2020 ("The Discrete Gaussian for Differential
    Privacy", Algorithm 2, lines 1-5) with t = denominator and s = numerator: U uniform on
    {0, ..., t-1} accepted with probability exp(-U/t), V the number of Bernoulli(exp(-1))
    successes before a failure, X = U + t·V (geometric with ratio e^(-1/t)) and k = floor(X/s).
    The expected work does not grow with the mean 1/γ, so large means are fast. For γ >= 1 (mean
    below 0.6) the definition itself is cheaper and is used: count the successes of
    :func:`bernoulli_exp` trials until the first failure.

    Not constant-time: the number of rejection rounds and Bernoulli iterations depends on the
    values drawn (larger samples take longer).

    Args:
        rng: the source of randomness.
        numerator: integer >= 1 (below 2^63).
        denominator: integer >= 1 (below 2^63), at most 2^52 · numerator so samples fit in int64.
        size: the number of samples (>= 0).

    Returns:
        An int64 array of shape ``(size,)``.
    """
    owner = "geometric"
    s = check_int(owner, "numerator", numerator, minimum=1)
    t = check_int(owner, "denominator", denominator, minimum=1)
    for name, value in (("numerator", s), ("denominator", t)):
        if value > _I64_MAX:
            raise fail(owner, name, "< 2**63", value)
    if t > MAX_LAPLACE_SCALE * s:
        raise fail(owner, "denominator", "<= 2**52 * numerator (the mean must fit int64)", t)
    size = check_int(owner, "size", size, minimum=0)
    return _geometric_core(rng, t, s, size)


def _laplace_parameters(scale: object, owner: str = "discrete_laplace") -> tuple[int, int]:
    """The exact (t, s) with scale = t/s used by CKS20 Algorithm 2 (rounded up if t > 2^56)."""
    exact = Fraction(check_positive(owner, "scale", scale))  # floats are exact binary rationals
    if exact > MAX_LAPLACE_SCALE:
        raise fail(owner, "scale", "<= 2**52 (larger noise would not fit in int64)", scale)
    if exact.numerator > _MAX_T:
        exact = dyadic_up(exact, bits=56)  # rounds the scale UP by a relative 2^-55 at most
    return exact.numerator, exact.denominator


def _discrete_laplace_core(rng: Rng, t: int, s: int, n: int) -> IntArray:
    """CKS20 Algorithm 2: discrete Laplace with scale t/s (t < 2^63, s >= 1 Python integers)."""
    if n <= _SCALAR_MAX:
        return np.array([_discrete_laplace_python(rng, t, s) for _ in range(n)], dtype=np.int64)
    if n > CHUNK:
        return in_chunks(lambda m: _discrete_laplace_core(rng, t, s, m), n)
    out = np.empty(n, dtype=np.int64)
    filled = 0
    acceptance = 1.0 - 0.5 * -math.expm1(-s / t)  # P[not "-0"] (a batch size, not a sample)
    while filled < n:
        need = n - filled
        proposals = _proposals(need, acceptance)
        magnitude = _geometric_core(rng, t, s, proposals)
        negative = rng.coins(proposals)
        keep = ~(negative & (magnitude == 0))  # "-0": restart, so that 0 is not counted twice
        np.negative(magnitude, out=magnitude, where=negative)
        accepted = magnitude[keep][:need]
        out[filled : filled + accepted.size] = accepted
        filled += accepted.size
    return out


def discrete_laplace(rng: Rng, scale: int | float | Fraction, size: int) -> IntArray:
    """``size`` draws from the discrete Laplace distribution on the integers with this scale:
    exactly P[x] = (1 - q)/(1 + q) · q^|x| with q = exp(-1/scale), i.e. P[x] ∝ exp(-|x|/scale).

    CKS20 Algorithm 2 (Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for Differential
    Privacy"), for scale = t/s in lowest terms: Y ~ :func:`geometric` with γ = s/t, a fair sign
    B, restart when B = 1 and Y = 0, return (1 - 2B)·Y.

    ``scale`` may be an int, a Fraction or a float (a float is the exact binary rational it
    stores). Every int and float scale is used exactly (its numerator t is below 2^53). Only a
    Fraction whose numerator t in lowest terms exceeds 2^56 is rounded UP to a dyadic rational
    n / 2^k with n < 2^56 (:func:`dpcurator.core.numbers.dyadic_up`; a relative change below
    2^-55), so that U + t·V stays in int64. More noise is always safe: a privacy guarantee
    computed for the requested scale holds for the sample.

    Not constant-time: the rejection rounds and Bernoulli iterations make the running time depend
    on the values drawn (larger |x| takes slightly longer).

    Args:
        rng: the source of randomness.
        scale: the scale b > 0 (at most 2^52), finite.
        size: the number of samples (>= 0).

    Returns:
        An int64 array of shape ``(size,)``.
    """
    t, s = _laplace_parameters(scale)
    size = check_int("discrete_laplace", "size", size, minimum=0)
    return _discrete_laplace_core(rng, t, s, size)
