"""Fast exact sampling: inversion of one uniform word, checked against certified error bounds.

The samplers of CKS20 (Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for Differential
Privacy", arXiv:2004.00010) decide every Bernoulli(exp(-γ)) trial by chains of rational coin flips:
exact, but a dozen array passes and ~25 random bytes per discrete Laplace draw. This module decides
the SAME events — "a uniform real U lies below a threshold e^(-x)" — from one 64-bit word per event,
and stays exact:

* U is an infinite sequence of fair bits; the word ``w`` gives its first 64, so
  U ∈ [w/2^64, (w+1)/2^64). The output is a function of the real U, never of a rounding of it.
* A float computation proposes the answer (a geometric count ``floor(-ln U / λ)``, or whether
  U < e^(-x)), together with a margin that provably exceeds its floating-point error. The answer is
  accepted only when the whole interval of U, widened by that margin, gives the same answer; the
  float is then a certified evaluation, not an approximation.
* Otherwise (probability below about 2^-35 per draw for the parameters routed here) the element is
  decided in exact integer arithmetic: more bits of U are drawn on demand and compared with
  rigorous integer bounds on the transcendental threshold (:func:`exp_neg_bounds`, a Taylor series
  with explicit error terms), until the comparison is certain. U equals a threshold with
  probability 0, so this ends with probability 1 (after 64 more bits, all but ~2^-50 of the time).

Hence each sample is EXACTLY distributed as the inversion of a uniform real — the exact discrete
Laplace, geometric or Bernoulli(exp(-x)) law — given uniform bits from the generator.

Floating-point assumptions (checked by tests/test_samplers_fast.py against mpmath): numpy's
float64 ``log`` and ``exp`` and the C library's ``log`` are within 2^-44 (relative for exp,
absolute for log of values in [2^-64, 2]) of the true value; IEEE basic operations are correctly
rounded. The documented worst cases of these implementations are a few units in the last place
(2^-50 here), 64 times below these margins.

The batch paths run the float test in C (``_kernel.c``, built at install): one pass over a block
of words, written in place, that gives each word the decision of the one-word Python functions
below (:func:`magnitude_of_word`, :func:`bexp_of_word`) and lists the undecided words, which are
then decided exactly in index order, as the Python path would. The kernel first uses its own
table logarithm (within 2^-45, tests/test_samplers_kernel.py) and recomputes the reference's
float with the C library's ``log`` whenever that could change a decision (within a slack of 2^-40
of a margin); its docstring has the proof, and tests/test_samplers_kernel.py checks the two paths
word by word on words crafted at every margin.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Final

import numpy as np
import numpy.typing as npt

from dpcurator.random.rng import Rng
from dpcurator.random.samplers import _kernel

__all__ = [
    "bexp_of_word",
    "bexp_proposals",
    "bexp_scalar",
    "bexp_words",
    "exp_neg_bounds",
    "inversion_magnitudes",
    "invert_into",
    "lazy_below_exp",
    "magnitude_of_word",
    "magnitude_scalar",
    "settle",
]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

#: Inversion is used when the rate λ = s/t is at least this (scale t/s at most 2^20): the float
#: count ``-ln U / λ`` then has an error far below its integer spacing.
MIN_INVERSION_RATE: Final = 2.0**-20
#: Margin (absolute, in units of -ln U) covering the float error of ``lnc + 64 ln 2 - log(w)``.
_LOG_MARGIN: Final = 2.0**-36
#: Words below this go to the exact path (the width ln(1 + 1/w) of U's interval is then large).
_SMALL_WORD: Final = 2**39
#: Margin of the Bernoulli(exp(-x)) decision: 2^-36 (log) + 2^-39 (U's interval) + 65·2^-47 (x).
_BEXP_DELTA: Final = 2.0**-35
_LN2_63: Final = 63 * math.log(2)


def _fdiv(a: int, b: int) -> float:
    """a / b as a float, +inf when it overflows (a and b Python integers, b > 0)."""
    try:
        return a / b
    except OverflowError:
        return math.inf


@functools.lru_cache(maxsize=256)
def _log_c(s: int, t: int, two_sided: bool) -> float:
    """ln c for the thresholds T_k = c·e^(-k s/t): ln 2 - ln(1 + e^(-s/t)), or 0."""
    return math.log(2) - math.log1p(math.exp(-_fdiv(s, t))) if two_sided else 0.0


@functools.lru_cache(maxsize=256)
def _inversion_constants(s: int, t: int, two_sided: bool) -> tuple[float, float]:
    """(t/s, ln c + 63 ln 2) as floats: K = floor((ln c + 63 ln 2 - ln(v + 1/2))·t/s)."""
    return _fdiv(t, s), _log_c(s, t, two_sided) + _LN2_63


def _inversion_margin(inv: float) -> float:
    """z is certain when |frac(z) - 1/2| <= this (so frac(z) is farther than δ from 0 and 1)."""
    return 0.5 - inv * (_LOG_MARGIN + 1.01 / _SMALL_WORD)


# -- exact arithmetic ------------------------------------------------------------------------------


def _series_bounds(r: int, d: int, prec: int) -> tuple[int, int]:
    """Integers lo <= 2^prec · e^(-r/d) <= hi for 0 <= r <= d (alternating Taylor series).

    Terms T_i = floor(T_{i-1}·r/(d·i)) are each below the true term by at most i (induction:
    the factor r/(d·i) <= 1), so the partial sum is off by at most N² for N terms; the first
    omitted true term is at most N + 1 and bounds the tail of an alternating series with
    decreasing terms."""
    one = 1 << prec
    if r == 0:
        return one, one
    total = term = one
    i = 0
    while term:
        i += 1
        term = term * r // (d * i)
        total += -term if i % 2 else term
    slack = i * i + 2 * i + 2
    return max(0, total - slack), total + slack


def exp_neg_bounds(num: int, den: int, prec: int) -> tuple[int, int]:
    """Integers lo <= 2^prec · exp(-num/den) <= hi (num >= 0, den >= 1), with hi - lo small
    relative to 2^prec · exp(-num/den) (a few units beyond 2^-prec·(1 + num/den))."""
    if num == 0:
        return 1 << prec, 1 << prec
    whole, rest = divmod(num, den)
    if whole > prec + 2:  # e^-whole < 2^-(1.44·whole) < 2^-prec
        return 0, 1
    guard = 32 + 2 * whole.bit_length()
    p = prec + guard
    lo, hi = _series_bounds(rest, den, p)
    if whole:
        base_lo, base_hi = _series_bounds(1, 1, p)
        k = whole
        while k:  # binary powering of the interval of e^-1, multiplied into (lo, hi)
            if k & 1:
                lo, hi = (lo * base_lo) >> p, ((hi * base_hi) >> p) + 1
            k >>= 1
            if k:
                base_lo, base_hi = (base_lo * base_lo) >> p, ((base_hi * base_hi) >> p) + 1
    return lo >> guard, (hi >> guard) + 1


def _magnitude_threshold_bounds(
    k: int, s: int, t: int, two_sided: bool, prec: int
) -> tuple[int, int]:
    """Bounds on 2^prec · T_k, T_k = c·e^(-k s/t) with c = 1 (geometric) or 2/(1 + e^(-s/t))
    (magnitude of the discrete Laplace: P[|X| >= k] = c·q^k for k >= 1)."""
    p = prec + 8
    a_lo, a_hi = exp_neg_bounds(k * s, t, p)
    if not two_sided:
        return a_lo >> 8, (a_hi >> 8) + 1
    b_lo, b_hi = exp_neg_bounds(s, t, p)
    one = 1 << p
    lo = (2 * a_lo << p) // (one + b_hi)
    hi = -((-2 * a_hi << p) // (one + b_lo))
    return lo >> 8, (hi >> 8) + 1


class _LazyUniform:
    """A uniform real U in [0, 1) whose bits are drawn on demand:
    U ∈ [value / 2^bits, (value + 1) / 2^bits)."""

    def __init__(self, rng: Rng, prefix: int, bits: int) -> None:
        self.rng = rng
        self.value = prefix
        self.bits = bits

    def extend(self) -> None:
        self.value = (self.value << 64) | self.rng._word64()
        self.bits += 64

    def below(self, bounds: Callable[[int], tuple[int, int]]) -> bool:
        """Whether U < T, for T given by ``bounds(prec) -> (lo, hi)``, lo <= 2^prec·T <= hi."""
        while True:
            lo, hi = bounds(self.bits + 16)
            if (self.value + 1) << 16 <= lo:
                return True
            if self.value << 16 >= hi:
                return False
            self.extend()

    def log(self) -> float:
        """ln U to float precision (a guess only; draws bits until the prefix is non-zero)."""
        while self.value == 0:
            self.extend()
        return math.log(self.value) - self.bits * math.log(2)


def lazy_below_exp(rng: Rng, prefix: int, bits: int, num: int, den: int) -> bool:
    """Exactly ``U < exp(-num/den)`` for the uniform U whose first ``bits`` bits are ``prefix``."""
    return _LazyUniform(rng, prefix, bits).below(lambda prec: exp_neg_bounds(num, den, prec))


def _magnitude_exact(rng: Rng, prefix: int, bits: int, s: int, t: int, *, two_sided: bool) -> int:
    """Exactly max{k >= 0 : U < T_k} (T_0 >= 1 > U) for U with first ``bits`` bits ``prefix``."""
    u = _LazyUniform(rng, prefix, bits)
    guess = max(0, math.floor((_log_c(s, t, two_sided) - u.log()) * _fdiv(t, s)))

    def below(k: int) -> bool:
        return k <= 0 or u.below(lambda prec: _magnitude_threshold_bounds(k, s, t, two_sided, prec))

    k = guess
    while not below(k):
        k -= 1
    while below(k + 1):
        k += 1
    return k


# -- vectorised samplers ---------------------------------------------------------------------------


def inversion_magnitudes(rng: Rng, s: int, t: int, n: int, two_sided: bool) -> IntArray:
    """``n`` draws of :func:`invert_into` (int64)."""
    return invert_into(rng, s, t, np.empty(n, dtype=np.int64), two_sided)


def invert_into(rng: Rng, s: int, t: int, out: IntArray, two_sided: bool) -> IntArray:
    """Fill the contiguous int64 array ``out`` (and return it) with exact draws of
    K = max{k >= 0 : U < T_k} for λ = s/t >= MIN_INVERSION_RATE:

    * ``two_sided=False``: T_k = e^(-λk), so K is geometric, P[K = k] = (1 - e^-λ) e^(-λk);
    * ``two_sided=True``: T_k = c·e^(-λk), c = 2/(1 + e^-λ), so K is |X| for X discrete
      Laplace with scale 1/λ (P[|X| >= k] = 2q^k/(1 + q), q = e^-λ, for k >= 1), returned with a
      fair sign from the word's low bit (a sign on 0 is void): exactly the discrete Laplace.

    Each draw uses one 64-bit word: its high 63 bits v are the first bits of U, so
    U ∈ [v/2^63, (v+1)/2^63). K = floor((ln c - ln U)/λ): the float z of that quotient at the
    middle of U's interval has an error below δ = (t/s)·(2^-36 + 1.01·2^-39) (the interval's
    half-width, below 0.51/v <= 2^-39.9 for v >= 2^39, the log, the rounding), so floor(z) is
    certain when z is farther than δ from an integer. The C kernel
    (``_kernel.invert``, one pass, the float operations of :func:`magnitude_of_word`) decides
    those words; the rest (probability about 2δ, plus 2^-24 for v < 2^39) are decided exactly by
    :func:`_magnitude_exact`, in index order, on more bits of the stream.
    """
    inv, offset = _inversion_constants(s, t, two_sided)
    if out.size:
        rng._fill(out)  # the words of rng._uint64(out.size), replaced by their draws in place
    words = out.view(np.uint64)
    margin = _inversion_margin(inv)
    for i in _kernel.invert(out, inv, offset, margin, _SMALL_WORD, two_sided):
        word = int(words[i])
        k = _magnitude_exact(rng, word >> 1, 63, s, t, two_sided=two_sided)
        out[i] = -k if two_sided and word & 1 else k
    return out


def bexp_words(rng: Rng, x: FloatArray, exact: Callable[[int], tuple[int, int]]) -> BoolArray:
    """Elementwise exact Bernoulli(exp(-x_i)): whether U_i < e^(-x_i), one word per element.

    ``x`` holds floats within 2^-47·(x_i + 1) of the true exponents x_i >= 0, and
    ``exact(i) -> (num, den)`` gives x_i = num/den exactly (Python integers). With v the high 63
    bits of a word, U ∈ [v/2^63, (v+1)/2^63) and -ln U lies within 0.51/v <= 2^-39.9 of
    y = 63 ln 2 - ln(v + 1/2) when v >= 2^39; y is computed within 2^-40. So with d = y - x and
    δ = 2^-35 (which covers these errors for x <= 64; for larger x, y <= 44 < x - 20 anyway),
    U < e^-x for certain when d > δ and U > e^-x for certain when d < -δ: the C kernel
    (``_kernel.bexp``, the float operations of :func:`bexp_of_word`) decides those. Undecided
    elements (probability about 2^-34, plus 2^-24 for v < 2^39) are compared exactly by
    :func:`lazy_below_exp`.
    """
    words = rng._uint64(x.size)
    accept = np.empty(x.size, dtype=np.bool_)
    for i in _kernel.bexp(words, x, _LN2_63, _BEXP_DELTA, _SMALL_WORD, accept):
        num, den = exact(i)
        accept[i] = lazy_below_exp(rng, int(words[i]) >> 1, 63, num, den)
    return accept


def bexp_proposals(
    rng: Rng,
    proposals: IntArray,
    words: IntArray,
    *,
    mu: float,
    inv_sd: float,
    exponent: Callable[[int], tuple[int, int]],
) -> IntArray:
    """The ``proposals`` y that pass exact Bernoulli(exp(-x_y)) tests, x_y = ((|y| - μ)·inv_sd)²
    (the discrete Gaussian's acceptance, within 2^-43 of ``exponent(|y|) -> (num, den)`` for
    x <= 64), one word of ``words`` each: the test of :func:`bexp_words` with x computed in the
    same C pass (``_kernel.gaussian_log``), which also moves the kept proposals to the front of
    ``proposals`` in order; the undecided ones are decided exactly (:func:`settle`)."""
    kept, undecided = _kernel.gaussian_log(
        proposals, words, mu, inv_sd, _LN2_63, _BEXP_DELTA, _SMALL_WORD
    )

    def decide(i: int, proposal: int) -> bool:
        return lazy_below_exp(rng, (int(words[i]) % 2**64) >> 1, 63, *exponent(abs(proposal)))

    return settle(proposals, kept, undecided, decide)


def settle(
    proposals: IntArray,
    kept: int,
    undecided: list[tuple[int, int]],
    decide: Callable[[int, int], bool],
) -> IntArray:
    """``proposals[:kept]`` (accepted and undecided proposals, in order, as a compacting kernel
    left them) without the undecided ones that ``decide(i, proposal)`` rejects; ``undecided``
    lists (word index i, position) in increasing i, the order in which they are decided."""
    if not undecided:
        return proposals[:kept]
    keep = np.ones(kept, dtype=np.bool_)
    for i, position in undecided:
        keep[position] = decide(i, int(proposals[position]))
    return proposals[:kept][keep]


# -- one value at a time (small batches) -----------------------------------------------------------


def magnitude_of_word(rng: Rng, word: int, s: int, t: int, two_sided: bool) -> int:
    """One draw of :func:`inversion_magnitudes` from the 64-bit ``word`` (same algorithm, Python
    floats; more bits are drawn from ``rng`` only in the rare exact case)."""
    v = word >> 1
    inv, offset = _inversion_constants(s, t, two_sided)
    z = (offset - math.log(v + 0.5)) * inv if v >= _SMALL_WORD else 0.0
    k = math.floor(z)
    if v < _SMALL_WORD or abs(z - k - 0.5) > _inversion_margin(inv):
        k = _magnitude_exact(rng, v, 63, s, t, two_sided=two_sided)
    return -k if two_sided and word & 1 else k


def magnitude_scalar(rng: Rng, s: int, t: int, two_sided: bool) -> int:
    """One draw of :func:`inversion_magnitudes` (same algorithm, Python floats)."""
    return magnitude_of_word(rng, rng._word64(), s, t, two_sided)


def bexp_of_word(rng: Rng, word: int, x: float, exact: Callable[[], tuple[int, int]]) -> bool:
    """One exact Bernoulli(exp(-x)) from the 64-bit ``word`` (the test of :func:`bexp_words`,
    Python floats): ``x`` approximates the exponent within the error that test's margin covers
    (as the discrete Gaussian's float x does), and ``exact()`` gives the exponent as (num, den)
    for the rare undecided case."""
    v = word >> 1
    if v >= _SMALL_WORD:
        y = _LN2_63 - math.log(v + 0.5)
        if y > x + _BEXP_DELTA:
            return True
        if y < x - _BEXP_DELTA:
            return False
    return lazy_below_exp(rng, v, 63, *exact())


def bexp_scalar(rng: Rng, num: int, den: int) -> bool:
    """One exact Bernoulli(exp(-num/den)) (the test of :func:`bexp_words`, Python floats)."""
    return bexp_of_word(rng, rng._word64(), _fdiv(num, den), lambda: (num, den))
