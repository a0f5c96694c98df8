"""Exact selection: the exponential mechanism and permute-and-flip.

Both choose one candidate out of many with probability that decreases with its score's distance to
the best score, and neither computes a floating-point softmax: every probability is a Bernoulli of
exp(-γ) for a RATIONAL γ, sampled exactly (Canonne, Kamath & Steinke 2020).

Privacy guarantee: for integer scores q(x, r) of sensitivity Δ (|q(x, r) - q(x', r)| <= Δ for
neighbours x, x'), both are ε-DP (McSherry & Talwar 2007 for the exponential mechanism; McKenna &
Sheldon 2020 for permute-and-flip, which is never less accurate). When scores are monotone
(moving to a neighbour shifts every score in the same direction, as counts do) the factor 2 in the
exponent can be dropped. Internally ε is rounded DOWN to a dyadic rational (less privacy loss than
claimed, never more) so that all arithmetic is exact in 64-bit integers.

Permute-and-flip is also report-noisy-max with exponential noise (Ding, Kifer, Saghaian et al.
2021).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, check_positive, fail
from dpcurator.core.numbers import dyadic_down, to_fraction
from dpcurator.random import Rng, default_rng
from dpcurator.random.samplers import bernoulli_exp

#: int64 headroom: gap * ε numerator and 2 * sensitivity * ε denominator stay below this.
_INT_LIMIT = 2**62


def _acceptance_exponents(
    scores: npt.ArrayLike, epsilon: object, sensitivity: object, monotonic: bool, owner: str
) -> tuple[npt.NDArray[np.int64], int]:
    """Numerators and common denominator of γ_r = ε (max q - q_r) / (c Δ), c = 1 or 2 (exact)."""
    array = np.asarray(scores)
    if array.ndim != 1 or array.size == 0:
        raise fail(owner, "scores", "a non-empty one-dimensional array", array.shape)
    if array.dtype.kind not in "iu":
        raise fail(owner, "scores", "integers (put float scores on an integer grid)", array.dtype)
    eps = to_fraction(check_positive(owner, "epsilon", epsilon))
    delta = check_int(owner, "sensitivity", sensitivity, minimum=1)
    gaps = (array.max() - array).astype(np.int64)
    max_gap = int(gaps.max())
    factor = 1 if monotonic else 2
    # Choose the precision of ε so that every product fits in int64.
    bits = max(8, min(52, 61 - max(1, max_gap.bit_length())))
    eps_used = dyadic_down(eps, bits=bits) if eps.denominator != 1 or eps >= 2**bits else eps
    denominator = factor * delta * eps_used.denominator
    if denominator >= _INT_LIMIT or eps_used.numerator * max(max_gap, 1) >= _INT_LIMIT:
        raise fail(owner, "scores", "of a range that fits exact 64-bit arithmetic", max_gap)
    return gaps * eps_used.numerator, denominator


def permute_and_flip(
    scores: npt.ArrayLike,
    epsilon: object,
    sensitivity: object = 1,
    rng: Rng | None = None,
    *,
    monotonic: bool = False,
) -> int:
    """Return the index of one candidate chosen by permute-and-flip (ε-DP; McKenna & Sheldon 2020).

    Every candidate r flips a coin with P[heads] = exp(-ε (max q - q_r) / (2Δ)) (Δ instead of 2Δ
    when ``monotonic``); the first head in a uniformly random order wins. Because the order is
    independent of the coins, that is a uniform choice among the heads, which is how it is sampled.
    The best candidate always shows heads, so there is no retry loop.

    >>> from dpcurator.random import SeededRng
    >>> permute_and_flip([0, 0, 100], epsilon=1.0, rng=SeededRng(3))
    2
    """
    numerators, denominator = _acceptance_exponents(
        scores, epsilon, sensitivity, monotonic, "permute_and_flip"
    )
    source = rng or default_rng()
    heads = np.flatnonzero(bernoulli_exp(source, numerators, denominator))
    return int(heads[int(source.integers_below(heads.size, 1)[0])])


def exponential_mechanism(
    scores: npt.ArrayLike,
    epsilon: object,
    sensitivity: object = 1,
    rng: Rng | None = None,
    *,
    monotonic: bool = False,
    size: int | None = None,
) -> npt.NDArray[np.int64]:
    """Indices r drawn with probability ∝ exp(ε q_r / (2Δ)) (ε-DP each; McSherry & Talwar 2007).

    Returns ``size`` independent draws (one when ``size`` is None, as a length-1 array). Sampled
    exactly by rejection: propose r uniformly, accept with probability exp(-ε (max q - q_r) / (2Δ)),
    all pending draws at once. The number of rounds depends on the scores: not constant-time.

    >>> from dpcurator.random import SeededRng
    >>> exponential_mechanism([0, 0, 100], epsilon=1.0, rng=SeededRng(3)).tolist()
    [2]
    """
    numerators, denominator = _acceptance_exponents(
        scores, epsilon, sensitivity, monotonic, "exponential_mechanism"
    )
    draws = 1 if size is None else check_int("exponential_mechanism", "size", size, minimum=0)
    source = rng or default_rng()
    chosen = np.empty(draws, dtype=np.int64)
    pending = np.arange(draws)
    while pending.size:
        proposals = source.integers_below(numerators.size, pending.size)
        accepted = bernoulli_exp(source, numerators[proposals], denominator)
        chosen[pending[accepted]] = proposals[accepted]
        pending = pending[~accepted]
    return chosen
