"""Exact heavy-tailed integer noise for pure-ε smooth-sensitivity releases.

The distribution on the integers with P[Z = z] ∝ w_t(z) = 1 / (1 + (z/t)^4) (a discrete analogue
of the "generalised Cauchy" noise h(z) ∝ 1/(1 + |z|^γ) of Nissim, Raskhodnikova & Smith 2007,
Lemma 2.7, here with γ = 4 so that the variance is finite). Two properties make it admissible
for smooth sensitivity with pure ε-DP (:mod:`dpcurator.estimators.smooth` gives the argument):

* sliding: |ln w_t(z) - ln w_t(z + m)| <= 4|m| / t, because d/du ln(1 + |u|^4) <= 4;
* dilation: |ln P_t[z] - ln P_t'[z]| <= 8 |ln(t / t')|, because each weight moves by at most
  (t/t')^{±4} and so does their sum.

Sampling is exact, by rejection from a dyadic-shell envelope: |z| < T = ceil(t) has envelope 1,
the shell T·2^{j-1} <= |z| < T·2^j (j >= 1) has envelope 2^{-4(j-1)} >= w_t. A shell is chosen
with probability proportional to its envelope mass (7/15 for shell 0, (8/15)(7/8)(1/8)^{j-1} for
shell j), a magnitude uniformly inside it, and it is accepted with the exact rational probability
w_t / envelope. All arithmetic is on Python integers and Fractions; the only entropy is uniform
integers from a :class:`~dpcurator.random.Rng`.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, check_positive, check_probability
from dpcurator.core.numbers import dyadic_up, to_fraction, widen_up
from dpcurator.random import Rng, default_rng

_WORD = 64


def _below(rng: Rng, bound: int) -> int:
    """An exactly uniform integer in [0, bound) for any bound >= 1 (rejection on whole words)."""
    if bound <= 2**63:
        return int(rng.integers_below(bound, 1)[0])
    bits = bound.bit_length()
    words = -(-bits // _WORD)
    while True:
        value = 0
        for word in rng.uint64(words).tolist():
            value = (value << _WORD) | int(word)
        value >>= words * _WORD - bits
        if value < bound:
            return value


def _one(rng: Rng, t: Fraction, ceiling: int) -> int:
    t4 = t**4
    while True:
        if _below(rng, 15) < 7:
            shell, start, width = 0, 0, ceiling
        else:
            shell = 1
            while _below(rng, 8) == 0:  # P[shell = j] ∝ 8^-(j-1) for j >= 1
                shell += 1
            start = ceiling << (shell - 1)
            width = start
        magnitude = start + _below(rng, width)
        envelope = Fraction(1, 2 ** (4 * (shell - 1))) if shell else Fraction(1)
        accept = t4 / (t4 + magnitude**4) / envelope
        if _below(rng, accept.denominator) >= accept.numerator:
            continue
        negative = _below(rng, 2) == 1
        if negative and magnitude == 0:
            continue  # "-0": restart so that 0 is not counted twice
        return -magnitude if negative else magnitude


def heavy_tailed_integers(rng: Rng | None, scale: object, size: int) -> npt.NDArray[np.object_]:
    """``size`` exact draws with P[Z = z] ∝ 1 / (1 + (z/scale)^4), as Python integers.

    ``scale`` > 0 is rounded UP to a dyadic rational with a 62-bit numerator (a relative change
    below 2^-61; callers account for it). Python integers are returned because draws are not
    bounded by int64.
    """
    t = dyadic_up(to_fraction(check_positive("heavy_tailed_integers", "scale", scale)), bits=62)
    count = check_int("heavy_tailed_integers", "size", size, minimum=0)
    source = rng or default_rng()
    ceiling = max(1, math.ceil(t))
    out = np.empty(count, dtype=object)
    for i in range(count):
        out[i] = _one(source, t, ceiling)
    return out


def heavy_tailed_halfwidth(scale: object, alpha: object) -> float:
    """An integer u with P[|Z| > u] <= α for the distribution above (an upper bound on the tail).

    Σ_{|z|>u} w <= 2 ∫_u^∞ w <= 2t^4 / (3u^3), and Σ_z w >= ∫ w - w(0) = tπ/√2 - 1 (w is
    symmetric, unimodal and at most 1), so u = (2t^4 / (3α(tπ/√2 - 1)))^{1/3} suffices (t >= 1).
    """
    t = float(dyadic_up(to_fraction(check_positive("heavy_tailed_halfwidth", "scale", scale))))
    a = float(check_probability("heavy_tailed_halfwidth", "alpha", alpha, open_low=True))
    # For t < 1 the weights beyond 0 are below those of t = 1 and the total is at least w(0) = 1.
    mass = t * math.pi / math.sqrt(2) - 1 if t >= 1 else 1.0
    return float(math.ceil(widen_up((2 * max(t, 1.0) ** 4 / (3 * a * mass)) ** (1 / 3))))
