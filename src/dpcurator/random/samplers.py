"""Exact, vectorised samplers of discrete noise (Canonne, Kamath & Steinke 2020).

Every sampler here returns values from EXACTLY the stated distribution, given uniformly random bits
from an :class:`~dpcurator.random.rng.Rng`: no decision depends on floating-point arithmetic (a
float appears only as a guess that exact integer arithmetic then checks and corrects, e.g. the
quotient in the discrete Gaussian's acceptance test). The constructions are those of

    C. Canonne, G. Kamath, T. Steinke. "The Discrete Gaussian for Differential Privacy."
    NeurIPS 2020, arXiv:2004.00010 ("CKS20"),

vectorised over numpy arrays: each loop runs over *iterations* of an algorithm, and every
iteration is a handful of array operations on the elements that are still undecided. Random words
are drawn in batches of 32 or 64 bits and turned into exactly uniform integers by rejection
thresholds (never by a biased ``% bound`` or float scaling).

Timing side channels (Jin, McMurtry, Rubinstein & Ohrimenko, "Are We There Yet? Timing and
Floating-Point Attacks on Differential Privacy Systems", IEEE S&P 2022): the samplers are NOT
constant-time. The number of rejection rounds and chain iterations, hence the running time,
depends on the values drawn (for example a large |noise| takes a few more iterations). Drawing a
whole batch at once blurs this to an aggregate over the batch, which still depends on the noise:
do not expose per-call or per-value timings to an adversary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, check_positive, fail
from dpcurator.core.numbers import dyadic_up
from dpcurator.errors import InternalInvariantError
from dpcurator.random.rng import Rng

__all__ = [
    "MAX_LAPLACE_SCALE",
    "MAX_SIGMA",
    "bernoulli_exp",
    "bernoulli_exp_exact",
    "bernoulli_rational",
    "discrete_gaussian",
    "discrete_laplace",
    "geometric",
]

_U32_MAX: Final = 2**32 - 1
_U64_MAX: Final = 2**64 - 1
_I64_MAX: Final = 2**63 - 1

#: Largest discrete Laplace scale (and largest 1/γ of :func:`geometric`): beyond it samples would
#: not reliably fit in int64.
MAX_LAPLACE_SCALE: Final = 2**52
#: Largest discrete Gaussian σ: the acceptance test keeps its denominator 2σ² below 2^64.
MAX_SIGMA: Final = 2**31
#: The Laplace scale numerator t is kept at most this large (scale rounded up otherwise), so that
#: U + t·V of CKS20 Algorithm 2 fits in int64 for every geometric V up to 127.
_MAX_T: Final = 2**56
#: Bounds of the vectorised exact path of the Gaussian acceptance test (see _quadratic_parts).
_FAST_X: Final = 2**53
_FAST_Q: Final = 2.0**40
#: Batches up to this size run the same algorithms one value at a time in Python integers, which
#: beats dozens of numpy calls on tiny arrays (e.g. one noisy threshold in sparse vector).
_SCALAR_MAX: Final = 16  # measured crossover: ~13 us per value vs ~220 us per small batch

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


def _geometric_exp_one(rng: Rng, n: int) -> IntArray:
    """``n`` draws of V with P[V = v] = (1 - e^-1) e^-v: Bernoulli(exp(-1)) successes before a
    failure (the inner loop of CKS20 Algorithm 2)."""
    values = np.zeros(n, dtype=np.int64)
    live = np.arange(n)
    while live.size:
        live = live[_bexp_one(rng, live.size)]
        values[live] += 1
    return values


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


def _bexp_python(rng: Rng, numerator: int, denominator: int) -> bool:
    """One Bernoulli(exp(-numerator/denominator)) in Python integers (CKS20 Algorithm 1)."""
    whole, rest = divmod(numerator, denominator)
    for _ in range(whole):  # a lazy range: the loop exits at the first failure
        k = 2
        while _randbelow(rng, k) == 0:
            k += 1
        if k % 2 == 0:
            return False
    k = 1
    while _randbelow(rng, denominator * k) < rest:
        k += 1
    return k % 2 == 1


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


def bernoulli_exp_exact(rng: Rng, numerators: Sequence[int], denominator: int) -> BoolArray:
    """Independent trials with P[True] = exp(-n_i / d) exactly, for non-negative integers n_i
    and one integer d >= 1 of ANY size (where :func:`bernoulli_exp` needs int64 parameters).

    The same construction (Canonne, Kamath & Steinke 2020, Algorithm 1): floor(n_i / d) trials of
    Bernoulli(exp(-1)) with early exit, then the fractional part. It runs vectorised when
    d < 2^64 and floor(n_i / d) < 2^63, else one trial at a time in Python integers. Not
    constant-time (as :func:`bernoulli_exp`).

    Returns:
        A bool array of shape ``(len(numerators),)``.
    """
    owner = "bernoulli_exp_exact"
    d = check_int(owner, "denominator", denominator, minimum=1)
    values = [check_int(owner, "numerators", n, minimum=0) for n in numerators]
    out = np.empty(len(values), dtype=np.bool_)
    slow = np.arange(len(values))
    if d <= _U64_MAX:
        parts = [divmod(n, d) for n in values]
        fast = np.array([w <= _I64_MAX for w, _ in parts], dtype=np.bool_)
        whole = np.array([w for w, _ in parts if w <= _I64_MAX], dtype=np.int64)
        rest = np.array([r for w, r in parts if w <= _I64_MAX], dtype=np.uint64)
        out[fast] = _bexp_parts(rng, whole, rest, d)
        slow = np.flatnonzero(~fast)
    for i in slow:
        out[i] = _bexp_python(rng, values[i], d)
    return out


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
