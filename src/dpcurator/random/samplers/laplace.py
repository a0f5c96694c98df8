"""The geometric and discrete Laplace distributions, sampled exactly (inversion of one uniform
word; CKS20 Algorithm 2 for scales above 2^20).

:func:`geometric` draws the number of Bernoulli(exp(-γ)) successes before a failure, and
:func:`discrete_laplace` a magnitude with a fair sign; both in work that does not grow with the
scale. See :mod:`dpcurator.random.samplers` for the guarantees and the timing caveat.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Final

import numpy as np

from dpcurator._validation import check_int, check_positive, fail
from dpcurator.core.numbers import dyadic_up
from dpcurator.errors import InternalInvariantError
from dpcurator.random.rng import Rng
from dpcurator.random.samplers.bernoulli import _I64_MAX, IntArray, _randbelow
from dpcurator.random.samplers.chunks import CHUNK, fill_in_chunks, in_chunks
from dpcurator.random.samplers.inversion import (
    MIN_INVERSION_RATE,
    bexp_scalar,
    bexp_words,
    inversion_magnitudes,
    invert_into,
    magnitude_of_word,
    magnitude_scalar,
)

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
#: Rates s/t >= 1/_INVERSION_RATIO (scales up to 2^20) are sampled by inversion of one word.
_INVERSION_RATIO: Final = round(1 / MIN_INVERSION_RATE)
#: Parameters of these exact types are validated and converted once per value (lru caches keyed
#: by type and value: a noise scale is a public input, and repeated calls reuse it).
CACHED_TYPES: Final = (int, float, Fraction)


# Pure-Python exact versions, for small batches (same algorithms as the vectorised ones).


def _geometric_python(rng: Rng, t: int, s: int) -> int:
    """One draw of :func:`_geometric_core` (same algorithm) in Python."""
    if s * _INVERSION_RATIO >= t:
        return magnitude_scalar(rng, s, t, two_sided=False)
    while True:
        u = _randbelow(rng, t)
        if bexp_scalar(rng, u, t):
            break
    v = magnitude_scalar(rng, 1, 1, two_sided=False)
    value = (u + t * v) // s
    if value > _I64_MAX:  # pragma: no cover - probability below exp(-2^11)
        raise InternalInvariantError("A geometric sample exceeded the int64 range.")
    return value


def _discrete_laplace_python(rng: Rng, t: int, s: int) -> int:
    """One draw of :func:`_discrete_laplace_core` (same algorithm) in Python."""
    if s * _INVERSION_RATIO >= t:
        return magnitude_scalar(rng, s, t, two_sided=True)  # signed
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

    For s/t >= 2^-20 (the common case): inversion of one uniform word, Y = floor(-ln U · t/s),
    certified or decided exactly (:func:`.inversion.inversion_magnitudes`).
    For smaller rates, CKS20 Algorithm 2, lines 1-5: U uniform on {0..t-1} accepted with
    probability exp(-U/t), V ~ Geometric(1 - 1/e), then X = U + t·V is geometric with ratio
    e^(-1/t) and Y = floor(X / s); the acceptance test and V use the same exact one-word
    decisions. Accepted proposals are i.i.d. from the target, so they fill the output in order.
    """
    if n <= _SCALAR_MAX:
        return np.array([_geometric_python(rng, t, s) for _ in range(n)], dtype=np.int64)
    if s * _INVERSION_RATIO >= t:
        return fill_in_chunks(lambda view: invert_into(rng, s, t, view, False), n)
    if n > CHUNK:
        return in_chunks(lambda m: _geometric_core(rng, t, s, m), n)
    out = np.empty(n, dtype=np.int64)
    filled = 0
    v_safe = (_I64_MAX - (t - 1)) // t  # U + t·V fits in int64 when V <= v_safe
    while filled < n:
        need = n - filled
        u = rng.integers_below(t, _proposals(need, _GEOMETRIC_ACCEPTANCE))
        x = u.astype(np.float64)
        x /= float(t)

        def exact(i: int, u: IntArray = u) -> tuple[int, int]:
            return int(u[i]), t

        u = u[bexp_words(rng, x, exact)][:need]
        v = inversion_magnitudes(rng, 1, 1, u.size, two_sided=False)
        x_int = v * t
        x_int += u
        y = x_int if s == 1 else x_int // s
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


def geometric(rng: Rng, numerator: int, denominator: int, size: int) -> IntArray:
    """``size`` draws of the number of successes before the first failure of independent
    Bernoulli(exp(-γ)) trials, γ = numerator/denominator > 0: exactly
    P[k] = (1 - e^-γ) e^(-γ k), k = 0, 1, 2, ...

    For γ >= 2^-20: inversion, k = floor(-ln U / γ) for U uniform on (0, 1) (P[k >= j] =
    P[U < e^(-γj)] = e^(-γj)), from one 64-bit word, certified or decided exactly
    (:mod:`dpcurator.random.samplers.inversion`). For smaller γ, the trick of
    Canonne, Kamath & Steinke 2020 ("The Discrete Gaussian for Differential Privacy", Algorithm 2,
    lines 1-5) with t = denominator and s = numerator: U uniform on {0, ..., t-1} accepted
    with probability exp(-U/t), V ~ Geometric(1 - 1/e), X = U + t·V (geometric with ratio
    e^(-1/t)) and k = floor(X/s). The expected work does not grow with the mean 1/γ.

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
    """The exact (t, s) with scale = t/s used by CKS20 Algorithm 2 (rounded up if t > 2^56);
    computed once per int, float or Fraction ``scale`` (:data:`CACHED_TYPES`)."""
    if type(scale) in CACHED_TYPES:
        return _cached_laplace_parameters(scale, owner)
    return _checked_laplace_parameters(scale, owner)


def _checked_laplace_parameters(scale: object, owner: str) -> tuple[int, int]:
    """:func:`_laplace_parameters` without the cache."""
    exact = Fraction(check_positive(owner, "scale", scale))  # floats are exact binary rationals
    if exact > MAX_LAPLACE_SCALE:
        raise fail(owner, "scale", "<= 2**52 (larger noise would not fit in int64)", scale)
    if exact.numerator > _MAX_T:
        exact = dyadic_up(exact, bits=56)  # rounds the scale UP by a relative 2^-55 at most
    return exact.numerator, exact.denominator


_cached_laplace_parameters = functools.lru_cache(maxsize=256, typed=True)(
    _checked_laplace_parameters
)


def _discrete_laplace_core(rng: Rng, t: int, s: int, n: int) -> IntArray:
    """Discrete Laplace with scale t/s (t < 2^63, s >= 1 Python integers).

    Scales up to 2^20: |X| by inversion of one uniform word against P[|X| >= k] = 2q^k/(1 + q)
    (:func:`~dpcurator.random.samplers.inversion.inversion_magnitudes`), and a fair sign (which
    leaves 0 unchanged). Larger scales: CKS20 Algorithm 2 (a geometric magnitude and a sign,
    restarting on "-0")."""
    if n <= _SCALAR_MAX:
        if s * _INVERSION_RATIO >= t:  # one word per value, all read under one lock
            values = [magnitude_of_word(rng, w, s, t, True) for w in rng._words64(n)]
        else:
            values = [_discrete_laplace_python(rng, t, s) for _ in range(n)]
        return np.array(values, dtype=np.int64)
    if s * _INVERSION_RATIO >= t:  # signed, written in place block by block
        return fill_in_chunks(lambda view: invert_into(rng, s, t, view, True), n)
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

    For scale = t/s in lowest terms, q = e^(-s/t):

    * scale <= 2^20: inversion. With U uniform on (0, 1), |X| = max{k >= 0 : U < c·q^k},
      c = 2/(1 + q), has exactly P[|X| >= k] = 2q^k/(1 + q) for k >= 1, the law of |X| for the
      discrete Laplace; a fair sign (void on 0) completes it. One 64-bit word per draw gives U's
      first 63 bits and the sign; |X| = floor((ln c - ln U)·t/s) is computed in float64 and kept
      only when certain under a proven error margin, else decided exactly by comparing more
      bits of U with integer bounds on c·q^k (:mod:`dpcurator.random.samplers.inversion`).
    * larger scales: CKS20 Algorithm 2 (Canonne, Kamath & Steinke 2020, "The Discrete Gaussian
      for Differential Privacy"): Y ~ :func:`geometric` with γ = s/t, a fair sign B, restart
      when B = 1 and Y = 0, return (1 - 2B)·Y; its Bernoulli(exp(-·)) decisions use the same
      one-word exact test.

    Both give exactly the discrete Laplace given uniform bits: the float path only ever returns
    the value that exact arithmetic would.

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
    if type(size) is not int or size < 0:
        size = check_int("discrete_laplace", "size", size, minimum=0)
    return _discrete_laplace_core(rng, t, s, size)
