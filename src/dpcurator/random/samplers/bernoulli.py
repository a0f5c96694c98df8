"""Exact Bernoulli trials, the primitives of every other sampler (CKS20 Algorithm 1).

P[True] = n/d for integers n and d (:func:`bernoulli_rational`, and the rational trials below),
and P[True] = exp(-γ) for a rational γ >= 0 (:func:`bernoulli_exp`),
vectorised, with exact Python-integer fallbacks for values beyond 64 bits. See
:mod:`dpcurator.random.samplers` for the guarantees and the timing caveat.
"""

from __future__ import annotations

import math
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, fail
from dpcurator.random.rng import Rng

__all__ = ["bernoulli_exp", "bernoulli_rational"]

_U32_MAX: Final = 2**32 - 1
_U64_MAX: Final = 2**64 - 1
_I64_MAX: Final = 2**63 - 1

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
UIntArray = npt.NDArray[np.uint64]


# ------------------------------------------------------------------------------------------------
# Rational Bernoulli trials
# ------------------------------------------------------------------------------------------------


def _ratio_scalar(rng: Rng, a: npt.NDArray[np.integer], b: int) -> BoolArray:
    """Elementwise Bernoulli(a / b) for an array ``0 <= a <= b`` and one integer 1 <= b < 2^64.

    A w-bit word x (w = 32 when b < 2^24, else 64) is uniform on [0, b·c) when it is not rejected
    (x >= b·c, c = floor((2^w - 1) / b)), and then P[x < a·c] = a / b exactly.
    """
    n = a.size
    words: npt.NDArray[np.unsignedinteger[Any]]
    if b < 2**24:
        c = _U32_MAX // b
        dtype: type[np.unsignedinteger[Any]] = np.uint32
        words = rng._uint32(n)
    else:
        c = _U64_MAX // b
        dtype = np.uint64
        words = rng.uint64(n)
    limit = dtype(b * c)
    thresholds = a.astype(dtype) * dtype(c) if c != 1 else a.astype(dtype)
    out = words < thresholds
    bad = np.flatnonzero(words >= limit)
    while bad.size:
        fresh = rng._uint32(bad.size) if dtype is np.uint32 else rng.uint64(bad.size)
        good = fresh < limit
        out[bad[good]] = fresh[good] < thresholds[bad[good]]
        bad = bad[~good]
    return out


def _ratio_array(rng: Rng, a: npt.NDArray[np.integer], b: UIntArray) -> BoolArray:
    """Elementwise Bernoulli(a / b) for integer arrays with 0 <= a <= b, 1 <= b < 2^64."""
    c = np.uint64(_U64_MAX) // b
    limit = b * c
    thresholds = a.astype(np.uint64, copy=False) * c
    words = rng.uint64(a.size)
    out = words < thresholds
    bad = np.flatnonzero(words >= limit)
    while bad.size:
        fresh = rng.uint64(bad.size)
        good = fresh < limit[bad]
        out[bad[good]] = fresh[good] < thresholds[bad[good]]
        bad = bad[~good]
    return out


def _one_in(rng: Rng, k: int, n: int) -> BoolArray:
    """``n`` draws of Bernoulli(1/k) for an integer 1 <= k < 2^32."""
    if k == 1:
        return np.ones(n, dtype=np.bool_)
    if k == 2:
        return rng.coins(n)
    c = _U32_MAX // k
    limit = np.uint32(k * c)
    words = rng._uint32(n)
    out = words < np.uint32(c)
    bad = np.flatnonzero(words >= limit)
    while bad.size:
        fresh = rng._uint32(bad.size)
        good = fresh < limit
        out[bad[good]] = fresh[good] < np.uint32(c)
        bad = bad[~good]
    return out


def _ratio_times_k(rng: Rng, a: npt.NDArray[np.integer], den: int | UIntArray, k: int) -> BoolArray:
    """Elementwise Bernoulli(a / (den·k)): one trial when den·k < 2^64, else two independent
    trials Bernoulli(a / den) and Bernoulli(1 / k) that must both succeed."""
    if isinstance(den, int):
        if den * k <= _U64_MAX:
            return _ratio_scalar(rng, a, den * k)
        return _ratio_scalar(rng, a, den) & _one_in(rng, k, a.size)
    if k == 1:
        return _ratio_array(rng, a, den)
    small = den <= np.uint64(_U64_MAX // k)
    if small.all():
        return _ratio_array(rng, a, den * np.uint64(k))
    out = np.empty(a.size, dtype=np.bool_)
    out[small] = _ratio_array(rng, a[small], den[small] * np.uint64(k))
    big = ~small
    out[big] = _ratio_array(rng, a[big], den[big]) & _one_in(rng, k, int(np.count_nonzero(big)))
    return out


# ------------------------------------------------------------------------------------------------
# Bernoulli(exp(-γ)) for rational γ (CKS20 Algorithm 1)
# ------------------------------------------------------------------------------------------------


def _bexp_one(rng: Rng, n: int) -> BoolArray:
    """``n`` draws of Bernoulli(exp(-1)): CKS20 Algorithm 1 with γ = 1.

    Draw Bernoulli(1/k) for k = 1, 2, ... until the first failure at k = K; return K odd.
    P[K > k] = 1/k!, so P[K odd] = sum over odd K of (1/(K-1)! - 1/K!) = exp(-1).
    """
    out = np.zeros(n, dtype=np.bool_)  # K = 2 (the first possible failure) is even: False
    live = np.flatnonzero(rng.coins(n))  # k = 1 always succeeds; k = 2 is a fair coin
    k = 3
    while live.size:
        success = _one_in(rng, k, live.size)
        if k % 2:
            out[live[~success]] = True
        live = live[success]
        k += 1
    return out


def _bexp_integer(rng: Rng, m: npt.NDArray[np.integer]) -> BoolArray:
    """Elementwise Bernoulli(exp(-m)) for integers m >= 0: m Bernoulli(exp(-1)) trials that must
    all succeed, stopping at the first failure (so huge m costs no more than a few trials)."""
    out = np.ones(m.size, dtype=np.bool_)
    live = np.flatnonzero(m > 0)
    remaining = m[live]
    while live.size:
        success = _bexp_one(rng, live.size)
        out[live[~success]] = False
        keep = success & (remaining > 1)
        live = live[keep]
        remaining = remaining[keep] - 1
    return out


def _bexp_fraction(rng: Rng, r: npt.NDArray[np.integer], den: int | UIntArray) -> BoolArray:
    """Elementwise Bernoulli(exp(-r/den)) for 0 <= r <= den (so γ = r/den lies in [0, 1]).

    CKS20 Algorithm 1 for γ in [0, 1]: K = the first k with Bernoulli(γ/k) = 0; return K odd.
    P[K > k] = γ^k / k!, hence P[K odd] = exp(-γ). Bernoulli(γ/k) = Bernoulli(r / (den·k)) is a
    rational trial. Iteration k acts on the elements that have not failed yet.
    """
    out = np.ones(r.size, dtype=np.bool_)  # failing at odd K: True
    if r.size == 0:
        return out
    # k = 1 on every element (r = 0 fails with certainty); later iterations on the survivors.
    live = np.flatnonzero(_ratio_times_k(rng, r, den, 1))
    ratio = r[live].astype(np.uint64)
    dens = den if isinstance(den, int) else den[live]
    k = 2
    while live.size:
        success = _ratio_times_k(rng, ratio, dens, k)
        if k % 2 == 0:
            out[live[~success]] = False
        live = live[success]
        ratio = ratio[success]
        if not isinstance(dens, int):
            dens = dens[success]
        k += 1
    return out


def _bexp_parts(
    rng: Rng,
    m: npt.NDArray[np.integer],
    r: npt.NDArray[np.integer],
    den: int | UIntArray,
) -> BoolArray:
    """Elementwise Bernoulli(exp(-(m + r/den))), 0 <= r < den: CKS20 Algorithm 1 for γ > 1
    (floor(γ) Bernoulli(exp(-1)) trials with early exit, then the fractional part)."""
    out = _bexp_integer(rng, m)
    alive = np.flatnonzero(out & (r > 0))
    if alive.size:
        dens = den if isinstance(den, int) else den[alive]
        out[alive] = _bexp_fraction(rng, r[alive], dens)
    return out


# Pure-Python exact fallbacks for rare elements whose integers leave the int64 fast paths.


def _randbelow(rng: Rng, bound: int) -> int:
    """An exactly uniform Python integer in [0, bound) for any bound >= 1 (rejection)."""
    bits = (bound - 1).bit_length()
    if bits == 0:
        return 0
    nbytes = (bits + 7) // 8
    while True:
        value = int.from_bytes(rng.random_bytes(nbytes), "little") >> (8 * nbytes - bits)
        if value < bound:
            return value


# ------------------------------------------------------------------------------------------------
# Public samplers
# ------------------------------------------------------------------------------------------------


def bernoulli_rational(rng: Rng, numerator: int, denominator: int, size: int) -> BoolArray:
    """``size`` independent Bernoulli trials with P[True] = numerator / denominator exactly.

    Each trial compares a uniform real W in [0, 1), read 64 bits at a time, with the binary
    expansion of p = n/d: with c = floor(n·2^64 / d) the first word w gives True if w < c and
    False if w > c; only when w = c (probability 2^-64) is the next word compared with the next
    64 bits of p, and so on. Exact for integers of any size. Not constant-time only in that
    2^-64 tie case. (Used as a building block of the constructions of Canonne, Kamath & Steinke
    2020, "The Discrete Gaussian for Differential Privacy".)

    Args:
        rng: the source of randomness.
        numerator: n, an integer with 0 <= n <= d.
        denominator: d, an integer >= 1.
        size: the number of trials (>= 0).

    Returns:
        A bool array of shape ``(size,)``.
    """
    owner = "bernoulli_rational"
    d = check_int(owner, "denominator", denominator, minimum=1)
    n = check_int(owner, "numerator", numerator, minimum=0)
    if n > d:
        raise fail(owner, "numerator", f"<= the denominator ({d})", numerator)
    size = check_int(owner, "size", size, minimum=0)
    if n == 0 or size == 0:
        return np.zeros(size, dtype=np.bool_)
    if n == d:
        return np.ones(size, dtype=np.bool_)
    c, rest = divmod(n << 64, d)
    words = rng.uint64(size)
    out = words < np.uint64(c)
    for i in np.flatnonzero(words == np.uint64(c)):
        remainder = rest
        while True:
            c_next, remainder_next = divmod(remainder << 64, d)
            word = int(rng.uint64(1)[0])
            if word != c_next:
                out[i] = word < c_next
                break
            remainder = remainder_next
    return out


def _as_int64_parameter(owner: str, name: str, value: object, minimum: int) -> IntArray:
    """Validate an integer or integer array parameter and return it as int64."""
    if isinstance(value, list | tuple):
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iu" and value.size:
            raise fail(owner, name, "an integer or an integer array", f"array of {value.dtype}")
        if value.size and (value.min() < minimum or value.max() > _I64_MAX):
            low, high = value.min(), value.max()
            raise fail(
                owner, name, f"in [{minimum}, 2**63 - 1] elementwise", f"range [{low}, {high}]"
            )
        return value.astype(np.int64, copy=False)
    number = check_int(owner, name, value, minimum=minimum)
    if number > _I64_MAX:
        raise fail(owner, name, "< 2**63", value)
    return np.asarray(number, dtype=np.int64)


def bernoulli_exp(
    rng: Rng,
    numerator: int | IntArray,
    denominator: int | IntArray,
    size: int | None = None,
) -> BoolArray:
    """Independent Bernoulli trials with P[True] = exp(-numerator/denominator) exactly.

    γ = numerator/denominator >= 0 is rational; ``numerator`` and ``denominator`` may be Python
    integers or int64 arrays (broadcast against each other, and against ``(size,)`` when ``size``
    is given). Construction (Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for
    Differential Privacy", Algorithm 1):

    * γ in [0, 1]: draw Bernoulli(γ/k) for k = 1, 2, ... until the first failure at k = K and
      return ``K odd`` (P[K > k] = γ^k/k!, so P[K odd] = e^-γ);
    * γ > 1: floor(γ) draws of Bernoulli(exp(-1)) with early exit at the first failure, then
      Bernoulli(exp(-(γ - floor(γ)))).

    Vectorised: each loop iteration is one array operation on the still-undecided elements, so a
    huge γ costs a few iterations (an element dies with probability 1 - 1/e per iteration).

    Not constant-time: the number of iterations depends on the coins drawn and on γ.

    Args:
        rng: the source of randomness.
        numerator: integer(s) >= 0, below 2^63.
        denominator: integer(s) >= 1, below 2^63.
        size: output length; ``None`` gives the broadcast shape of the parameters.

    Returns:
        A bool array (0-dimensional for scalar parameters and ``size=None``).
    """
    owner = "bernoulli_exp"
    num = _as_int64_parameter(owner, "numerator", numerator, 0)
    den = _as_int64_parameter(owner, "denominator", denominator, 1)
    if size is not None:
        size = check_int(owner, "size", size, minimum=0)
    try:
        if size is None:
            shape: tuple[int, ...] = np.broadcast_shapes(num.shape, den.shape)
        else:
            shape = (size,)
            np.broadcast_shapes(num.shape, den.shape, shape)
    except ValueError as exc:
        raise fail(
            owner, "numerator", "broadcastable with the denominator and size", num.shape
        ) from exc
    count = math.prod(shape)
    if count == 0:
        return np.zeros(shape, dtype=np.bool_)
    if den.ndim == 0:
        d = int(den)
        if num.ndim == 0:
            m, r = divmod(int(num), d)
            whole = np.full(count, m, dtype=np.int64)
            rest = np.full(count, r, dtype=np.int64)
        else:
            flat = np.broadcast_to(num, shape).reshape(-1)
            whole, rest = np.divmod(flat, d)
        return _bexp_parts(rng, whole, rest, d).reshape(shape)
    flat_num = np.broadcast_to(num, shape).reshape(-1)
    flat_den = np.broadcast_to(den, shape).reshape(-1)
    whole, rest = np.divmod(flat_num, flat_den)
    return _bexp_parts(rng, whole, rest, flat_den.astype(np.uint64)).reshape(shape)
