"""The discrete Gaussian, sampled exactly (CKS20 Algorithm 3).

A discrete Laplace proposal accepted by a Bernoulli(exp(-γ)) trial with an exact rational
exponent γ, decided from one uniform word (:mod:`dpcurator.random.samplers.inversion`). See
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
from dpcurator.random.samplers import _kernel
from dpcurator.random.samplers.bernoulli import IntArray, UIntArray
from dpcurator.random.samplers.chunks import CHUNK, fill_in_chunks
from dpcurator.random.samplers.inversion import (
    bexp_of_word,
    bexp_proposals,
    bexp_scalar,
    invert_into,
    lazy_below_exp,
    magnitude_of_word,
    settle,
)
from dpcurator.random.samplers.laplace import (
    _INVERSION_RATIO,
    _SCALAR_MAX,
    CACHED_TYPES,
    _discrete_laplace_core,
    _discrete_laplace_python,
    _laplace_parameters,
    _proposals,
)

__all__ = ["MAX_SIGMA", "discrete_gaussian"]

#: Largest discrete Gaussian σ (its discrete Laplace proposals must fit in int64 with room).
MAX_SIGMA: Final = 2**31


class _Target:
    """CKS20 Algorithm 3 for σ (exact rational) with proposal scale τ = t/s: Y ~ discrete
    Laplace(τ) is accepted with probability exp(-(|Y| - μ)²/(2σ²)), μ = σ²/τ. That ratio of the
    pmfs is at most 1 for every τ > 0, so the output is exactly the discrete Gaussian whatever τ
    is; τ = σ (rounded up only for a Fraction with a numerator above 2^56) keeps the acceptance
    rate at 0.61-0.76."""

    def __init__(self, sigma: Fraction) -> None:
        self.t, self.s = _laplace_parameters(sigma, "discrete_gaussian")
        mu = sigma * sigma * self.s / self.t
        two_var = 2 * sigma * sigma
        # exponent (|Y| - μ)²/(2σ²) = (|Y|·mq - mp)²·vq / (mq²·vp) in integers
        self.mp, self.mq = mu.numerator, mu.denominator
        self.vp, self.vq = two_var.numerator, two_var.denominator
        # The float test needs 2σ² far from float underflow (σ > 2^-400); smaller σ (all of whose
        # draws are 0 but with probability exp(-2^799)) run the exact Python path.
        self.vectorised = float(two_var) > 2.0**-800
        self.mu = float(mu)
        self.inv_sd = 1.0 / math.sqrt(float(two_var)) if self.vectorised else math.inf
        self.acceptance = _acceptance(float(sigma), self.t / self.s) if self.vectorised else 0.5
        # one-value trials: inversion proposals and a float acceptance test (else exact Python)
        self.one_word = self.vectorised and self.s * _INVERSION_RATIO >= self.t
        self.table = _threshold_table(self.mu, self.inv_sd) if self.one_word else None

    def exponent(self, magnitude: int) -> tuple[int, int]:
        """The exact exponent for |Y| = magnitude, as (numerator, denominator)."""
        a = magnitude * self.mq - self.mp
        return a * a * self.vq, self.mq * self.mq * self.vp

    def draw_python(self, rng: Rng) -> int | None:
        """One trial of Algorithm 3 in Python: the proposal if accepted, else None."""
        if not self.one_word:
            proposal = _discrete_laplace_python(rng, self.t, self.s)
            return proposal if bexp_scalar(rng, *self.exponent(abs(proposal))) else None
        # The proposal's and the test's words under one lock; the test as in the vectorised path
        proposal_word, test_word = rng._words64(2)
        proposal = magnitude_of_word(rng, proposal_word, self.s, self.t, True)
        magnitude = abs(proposal)
        a = (magnitude - self.mu) * self.inv_sd
        if bexp_of_word(rng, test_word, a * a, lambda: self.exponent(magnitude)):
            return proposal
        return None


#: Acceptance thresholds are tabulated per magnitude when the table has at most this many rows.
_TABLE_MAX: Final = 2**15
#: Relative margin of the tabulated thresholds: it covers the float errors of x (below 2^-43
#: absolute for x <= 64, see _discrete_gaussian_core) and of exp (2^-44 relative) with room.
_TABLE_MARGIN: Final = 2.0**-40


def _threshold_table(mu: float, inv_sd: float) -> tuple[UIntArray, UIntArray] | None:
    """Integer brackets of the acceptance probabilities e^(-x_m), x_m = ((m - μ)/sqrt(2σ²))², for
    magnitudes m = 0 .. L-1, as (lo, width) with lo <= 2^64·e^(-x_m) < lo + width (modulo 2^64:
    width = 2^64 - lo when the upper end reaches 2^64). A 64-bit word w, U ∈ [w/2^64, (w+1)/2^64),
    then gives U < e^(-x_m) for certain when w < lo, U > e^(-x_m) when w - lo >= width (mod 2^64);
    the rest (probability about 2^-39) is decided exactly. The last row (x > 64, so
    e^-x < 2^-92) serves every m >= L - 1: w < 1 is undecided, everything else a rejection.
    ``None`` when more than :data:`_TABLE_MAX` rows would be needed (σ above about 1900)."""
    rows = math.ceil(mu + 11.4 / inv_sd) + 2  # x > 64 from row rows - 1 on
    if rows > _TABLE_MAX:
        return None
    a = np.arange(rows, dtype=np.float64) - mu
    a *= inv_sd
    x = a * a
    top = np.exp(-x) * 2.0**64
    lo = np.floor(top * (1 - _TABLE_MARGIN))
    hi = np.ceil(top * (1 + _TABLE_MARGIN)) + 1
    far = x > 64
    lo[far], hi[far] = 0.0, 1.0
    lo_words = lo.astype(np.uint64)
    hi_words = np.where(hi >= 2.0**64, 0.0, hi).astype(np.uint64)  # 2^64 wraps to 0
    width = hi_words - lo_words
    lo_words.setflags(write=False)  # shared by every call with this σ
    width.setflags(write=False)
    return lo_words, width


@functools.lru_cache(maxsize=64)
def _target(sigma: Fraction) -> _Target:
    return _Target(sigma)


def _checked_target(sigma: object) -> _Target:
    """The validated :class:`_Target` of ``sigma`` (see :func:`discrete_gaussian`)."""
    owner = "discrete_gaussian"
    exact = Fraction(check_positive(owner, "sigma", sigma))  # floats are exact binary rationals
    if exact > MAX_SIGMA:
        raise fail(owner, "sigma", "<= 2**31 (larger noise would not fit in int64)", sigma)
    return _target(exact)


#: :func:`_checked_target` once per int, float or Fraction σ (a public input).
_cached_target = functools.lru_cache(maxsize=64, typed=True)(_checked_target)


def _acceptance(sigma: float, tau: float) -> float:
    """A float estimate of the acceptance rate (it only sizes the batches of proposals):
    E[exp(-(|Y| - σ²/τ)²/(2σ²))] for Y discrete Laplace(τ), summed over |Y| <= 40τ + 40, with σ
    and τ scaled down together when τ > 4096 (the large-τ limit)."""
    if tau > 4096:
        sigma, tau = sigma * 4096 / tau, 4096.0
    q = math.exp(-1 / tau)
    k = np.arange(int(40 * tau) + 41, dtype=np.float64)
    pmf = (1 - q) / (1 + q) * q**k
    pmf[1:] *= 2
    rate = float(np.sum(pmf * np.exp(-((k - sigma * sigma / tau) ** 2) / (2 * sigma * sigma))))
    return rate if 0.1 < rate <= 1 else 0.5


def _proposals_into(rng: Rng, t: int, s: int, out: IntArray) -> None:
    """Fill ``out`` with discrete Laplace(t/s) draws (|Y| < 2^53)."""
    if s * _INVERSION_RATIO >= t:
        invert_into(rng, s, t, out, True)  # signed
    else:
        out[:] = _discrete_laplace_core(rng, t, s, out.size)


def _accepted(rng: Rng, target: _Target, proposals: IntArray, words: IntArray) -> IntArray:
    """The proposals that pass their acceptance tests, in order (a prefix of ``proposals``,
    rewritten in place, or a copy when a rare word was undecided); ``words`` are the tests'
    words (random, as int64). For σ up to about 1900, one C pass (``_kernel.gaussian_table``)
    compares each word with :func:`_threshold_table`'s row for |Y| (the last row for larger
    |Y|) and the words inside a bracket are decided exactly, in index order; else
    :func:`~dpcurator.random.samplers.inversion.bexp_proposals`."""
    if target.table is None:
        return bexp_proposals(
            rng, proposals, words, mu=target.mu, inv_sd=target.inv_sd, exponent=target.exponent
        )
    lo, width = target.table
    kept, undecided = _kernel.gaussian_table(proposals, words, lo, width)

    def decide(i: int, proposal: int) -> bool:
        word = int(words[i]) % 2**64
        return lazy_below_exp(rng, word, 64, *target.exponent(abs(proposal)))

    return settle(proposals, kept, undecided, decide)


def _fill_gaussian(rng: Rng, target: _Target, out: IntArray, scratch: IntArray) -> None:
    """Fill ``out`` with draws of CKS20 Algorithm 3 (:class:`_Target`): rounds of proposals and
    their acceptance words, in ``scratch`` (room for two rounds' worth of words)."""
    filled = 0
    while filled < out.size:
        need = out.size - filled
        count = _proposals(need, target.acceptance)
        proposals, words = scratch[:count], scratch[count : 2 * count]
        _proposals_into(rng, target.t, target.s, proposals)
        rng._fill(words)  # the words of rng._uint64(count)
        accepted = _accepted(rng, target, proposals, words)[:need]
        out[filled : filled + accepted.size] = accepted
        filled += accepted.size


def _discrete_gaussian_core(rng: Rng, target: _Target, n: int) -> IntArray:
    """``n`` draws of CKS20 Algorithm 3 (:class:`_Target`).

    The acceptance test is one exact Bernoulli(exp(-x)) decision per proposal, x =
    ((|Y| - μ)/sqrt(2σ²))² computed in float64: |Y| < 2^53 is an exact float, so for x <= 64 the
    error is below 2^-43 (a few roundings of numbers below 2^4). For σ up to about 1900 the word
    is compared with the integer bracket of e^(-x) tabulated for its |Y|
    (:func:`_threshold_table`, no logarithm); for larger σ by the logarithm test of
    :func:`~dpcurator.random.samplers.inversion.bexp_words`. Either margin covers that error and
    the exact integer exponent decides the rare uncertain cases, so both decide the same event
    U < e^(-x) from the same word (:func:`_accepted`). Blocks of :data:`CHUNK` draws are written
    in place and share one scratch array."""
    if n <= _SCALAR_MAX or not target.vectorised:
        values: list[int] = []
        while len(values) < n:
            value = target.draw_python(rng)
            if value is not None:
                values.append(value)
        return np.array(values, dtype=np.int64)
    scratch = np.empty(2 * _proposals(min(n, CHUNK), target.acceptance), dtype=np.int64)
    return fill_in_chunks(lambda view: _fill_gaussian(rng, target, view, scratch), n)


def discrete_gaussian(rng: Rng, sigma: int | float | Fraction, size: int) -> IntArray:
    """``size`` draws from the discrete Gaussian on the integers: exactly
    P[x] = exp(-x²/(2σ²)) / Σ_y exp(-y²/(2σ²)).

    CKS20 Algorithm 3 (Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for Differential
    Privacy"): draw Y from the discrete Laplace with scale τ and accept it with probability
    exp(-(|Y| - σ²/τ)² / (2σ²)), else retry. CKS20 take τ = floor(σ) + 1; any τ > 0 gives the
    same output distribution (the ratio of the two pmfs is a constant times that probability),
    and τ = σ accepts more often for σ < 3 (0.61 instead of 0.52 at σ = 0.5, 0.71 instead of
    0.54 at σ = 1; 0.76 for large σ), so τ = σ is used.

    ``sigma`` may be an int, a Fraction or a float (the exact binary rational it stores): the
    output is exactly the discrete Gaussian with that σ, without rounding (the acceptance
    exponent is an exact rational; only a Fraction σ with a numerator above 2^56 has its
    proposal scale τ rounded up, which changes the proposals, not the output). Each acceptance
    test reads one 64-bit word and is decided by a certified float comparison, or in the rare
    uncertain cases by exact integer arithmetic on more bits
    (:mod:`dpcurator.random.samplers.inversion`); so is each discrete Laplace proposal.

    Not constant-time: the number of rejection rounds depends on the values drawn.

    Args:
        rng: the source of randomness.
        sigma: σ > 0 (at most 2^31), finite.
        size: the number of samples (>= 0).

    Returns:
        An int64 array of shape ``(size,)``.
    """
    target = _cached_target(sigma) if type(sigma) in CACHED_TYPES else _checked_target(sigma)
    if type(size) is not int or size < 0:
        size = check_int("discrete_gaussian", "size", size, minimum=0)
    return _discrete_gaussian_core(rng, target, size)
