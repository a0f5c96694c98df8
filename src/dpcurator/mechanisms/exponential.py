"""Exact selection: permute-and-flip and the exponential mechanism.

Both choose one of m candidates with probability that decreases with its score's distance to the
best score, and neither computes a floating-point softmax: every probability is a Bernoulli of
exp(-γ) for a RATIONAL γ, sampled exactly (:meth:`PermuteAndFlip.coins`: a uniform word against
exp(-γ), decided by a float test only within a proven margin, else in exact integer arithmetic;
the law of Canonne, Kamath & Steinke 2020, Algorithm 1).

Privacy guarantee: for integer scores q(x, r) of sensitivity Δ (|q(x, r) - q(x', r)| <= Δ for
neighbours x, x'), both are ε-DP with exactly the requested ε, the same on every data set
(McSherry & Talwar 2007 for the exponential mechanism; McKenna & Sheldon 2020, "Permute-and-Flip:
A new mechanism for differentially private selection", for permute-and-flip, which is never less
accurate). When scores are monotone (moving to a neighbour shifts every score in the same
direction, as counts do) the factor 2 in the exponent is dropped.

Nothing that decides behaviour is read from the scores. γ_r = ε·g_r / (cΔ) (c = 1 when monotone,
else 2) is kept as an exact ratio of integers, so there is no precision to choose. The gap
g_r = max q - q_r is clamped to a public cap G (a function of ε, Δ, c and m only): that replaces
q_r by max(q_r, max q - G), a maximum of two Δ-sensitive (and monotone) functions, so the
guarantee is unchanged; and with the default G a clamped candidate's chance exp(-εG/(cΔ)) is at
most 2^-64/m, so the clamp costs no accuracy. The work per candidate is bounded for every
admissible ε (floor(γ) <= a public constant), and no score value raises.

Permute-and-flip is also report-noisy-max with exponential noise (Ding, Kifer, Saghaian et al.
2021).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, check_positive, fail
from dpcurator.core.numbers import fraction_up, to_fraction
from dpcurator.random import Rng, default_rng
from dpcurator.random.samplers.inversion import bexp_words

#: Largest gap cap: keeps max q - clamp(q) inside int64 for any int64 or uint64 scores.
_MAX_GAP = 2**62
#: A clamped candidate keeps a chance of at most 2^-CLAMP_BITS / m under the default cap.
CLAMP_BITS = 64


@dataclass(frozen=True)
class PermuteAndFlip:
    """Permute-and-flip over ``candidates`` integer scores (ε-DP; McKenna & Sheldon 2020).

    Every candidate r flips a coin with P[heads] = exp(-ε·min(max q - q_r, G) / (cΔ)); the first
    head in a uniformly random order wins. Because the order is independent of the coins, that is
    a uniform choice among the heads, which is how it is sampled. The best candidate always shows
    heads, so there is no retry loop. All parameters are public and validated here, so a plan
    that builds this object can refuse bad ones before any budget is charged.

    Attributes:
        epsilon: ε, used exactly.
        sensitivity: Δ, an integer >= 1.
        candidates: m, the number of scores :meth:`select` takes.
        monotonic: scores move together between neighbours (c = 1 instead of 2).
        max_gap: G, the public cap on score gaps (default: the smallest G with
            exp(-εG/(cΔ)) <= 2^-64/m, at most 2^62).

    >>> from dpcurator.random import SeededRng
    >>> PermuteAndFlip(1.0, 1, 3).select([0, 0, 100], rng=SeededRng(3))
    2
    """

    epsilon: Fraction
    sensitivity: int
    candidates: int
    monotonic: bool
    max_gap: int

    def __init__(
        self,
        epsilon: object,
        sensitivity: object = 1,
        candidates: object = 1,
        *,
        monotonic: bool = False,
        max_gap: object = None,
    ) -> None:
        owner = type(self).__name__
        eps = to_fraction(check_positive(owner, "epsilon", epsilon))
        delta = check_int(owner, "sensitivity", sensitivity, minimum=1)
        m = check_int(owner, "candidates", candidates, minimum=1)
        factor = 1 if monotonic else 2
        if max_gap is None:
            log_odds = fraction_up(math.log(m) + CLAMP_BITS * math.log(2))
            cap = min(math.ceil(factor * delta * log_odds / eps), _MAX_GAP)
        else:
            cap = check_int(owner, "max_gap", max_gap, minimum=1)
            if cap > _MAX_GAP:
                raise fail(owner, "max_gap", "<= 2**62", max_gap)
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "sensitivity", delta)
        object.__setattr__(self, "candidates", m)
        object.__setattr__(self, "monotonic", bool(monotonic))
        object.__setattr__(self, "max_gap", cap)

    @property
    def _ratio(self) -> Fraction:
        """ε / (cΔ): γ_r is this times the clamped gap."""
        return self.epsilon / ((1 if self.monotonic else 2) * self.sensitivity)

    def gaps(self, scores: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """min(max q - q_r, G) for each candidate: exact, in [0, G], whatever the values."""
        array = np.asarray(scores)
        owner = f"{type(self).__name__}.select"
        if array.shape != (self.candidates,):
            raise fail(
                owner, "scores", f"a one-dimensional array of {self.candidates}", array.shape
            )
        if array.dtype.kind not in "iu":
            raise fail(
                owner, "scores", "integers (put float scores on an integer grid)", array.dtype
            )
        wide = array.astype(np.uint64 if array.dtype.kind == "u" else np.int64)
        top = int(wide.max())
        floor = max(top - self.max_gap, int(np.iinfo(wide.dtype).min))
        clamped = np.maximum(wide, wide.dtype.type(floor))
        return (wide.dtype.type(top) - clamped).astype(np.int64)

    def coins(self, gaps: npt.NDArray[np.int64], rng: Rng) -> npt.NDArray[np.bool_]:
        """Independent Bernoulli(exp(-γ_r)) for the given gaps, exact, one 64-bit word each.

        Coin r is ``U_r < exp(-γ_r)`` for the uniform real U_r whose first 64 bits are its word
        (:func:`~dpcurator.random.samplers.inversion.bexp_words`): decided by a float test only
        where a proven margin covers its error, else by exact integer bounds on exp(-γ_r) and
        more bits of U_r. The float γ_r = float(g_r)·float(ε/(cΔ)) is within 3·2^-53·γ_r of the
        exact ratio (three correctly rounded steps), inside that test's assumed 2^-47·(γ_r + 1);
        the exact fallback reads γ_r = g_r·n / d as Python integers. So P[heads] = exp(-γ_r)
        exactly, as for the chains of rational coins (CKS20 Algorithm 1) this replaced, from
        one word per candidate instead of about five and a dozen array passes; the coins are
        independent (disjoint words), so :meth:`select`'s law is unchanged."""
        ratio = self._ratio
        numerator, denominator = ratio.numerator, ratio.denominator
        gaps = np.asarray(gaps, dtype=np.int64)
        exponents = gaps.astype(np.float64) * float(ratio)
        return bexp_words(rng, exponents, lambda i: (int(gaps[i]) * numerator, denominator))

    def select(self, scores: npt.ArrayLike, rng: Rng | None = None) -> int:
        """The index of the chosen candidate."""
        source = rng or default_rng()
        heads = np.flatnonzero(self.coins(self.gaps(scores), source))
        return int(heads[int(source.integers_below(heads.size, 1)[0])])


def permute_and_flip(
    scores: npt.ArrayLike,
    epsilon: object,
    sensitivity: object = 1,
    rng: Rng | None = None,
    *,
    monotonic: bool = False,
) -> int:
    """:meth:`PermuteAndFlip.select` with the default gap cap for ``len(scores)`` candidates.

    >>> from dpcurator.random import SeededRng
    >>> permute_and_flip([0, 0, 100], epsilon=1.0, rng=SeededRng(3))
    2
    """
    array = np.asarray(scores)
    if array.ndim != 1 or array.size == 0:
        raise fail("permute_and_flip", "scores", "a non-empty one-dimensional array", array.shape)
    mechanism = PermuteAndFlip(epsilon, sensitivity, array.size, monotonic=monotonic)
    return mechanism.select(array, rng)


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
    exactly by rejection: propose r uniformly, accept with probability exp(-γ_r) (γ_r as in
    :class:`PermuteAndFlip`, same public gap cap), all pending draws at once. The number of
    rounds depends on the scores: not constant-time.

    >>> from dpcurator.random import SeededRng
    >>> exponential_mechanism([0, 0, 100], epsilon=1.0, rng=SeededRng(3)).tolist()
    [2]
    """
    array = np.asarray(scores)
    if array.ndim != 1 or array.size == 0:
        raise fail(
            "exponential_mechanism", "scores", "a non-empty one-dimensional array", array.shape
        )
    mechanism = PermuteAndFlip(epsilon, sensitivity, array.size, monotonic=monotonic)
    gaps = mechanism.gaps(array)
    draws = 1 if size is None else check_int("exponential_mechanism", "size", size, minimum=0)
    source = rng or default_rng()
    chosen = np.empty(draws, dtype=np.int64)
    pending = np.arange(draws)
    while pending.size:
        proposals = source.integers_below(gaps.size, pending.size)
        accepted = mechanism.coins(gaps[proposals], source)
        chosen[pending[accepted]] = proposals[accepted]
        pending = pending[~accepted]
    return chosen
