"""Pan-private density estimation (Dwork, Naor, Pitassi, Rothblum & Yekhanin 2010, "Pan-private
streaming algorithms"; Dwork, CACM 2011, "A firm foundation for private data analysis").

The question: what fraction of a public universe of users {0, ..., N-1} has appeared in the
stream? The curator keeps ONE bit per tracked user, and nothing else that depends on the data:

* at the start every bit is a fair coin;
* when user x appears, x's bit is redrawn: 1 with probability p = e^ε / (1 + e^ε), else 0
  (the randomised response coin of :class:`~dpcurator.mechanisms.RandomizedResponse`), however
  many times x appears.

Privacy guarantee (user level, pan-private): each user's bit is Bernoulli(1/2) if the user never
appeared and Bernoulli(p) if they did, independently of everyone else, and p/(1/2) <= e^ε and
(1/2)/(1-p) <= e^ε, so the internal state AT ANY MOMENT is ε-DP with respect to everything a user
did in the stream. An intrusion that reads the state (or its persisted bytes, :meth:`to_bytes`)
learns no more than that. An output adds discrete Laplace noise of scale 1/ε_out to the number of
one bits (sensitivity 1: a user changes only their own bit), so one unannounced intrusion plus the
outputs is (ε + Σ ε_out)-DP (the paper's Theorem 3.1 argument; outputs compose).

The estimate: E[ones] = m/2 + (p - 1/2) a, where m bits are tracked and a of those users appeared,
so â = (ones + noise - m/2) / (p - 1/2). For a universe too big to keep one bit per user, a
uniformly random sample of ``sample_size`` users (chosen before any event, so independent of the
data) is tracked and the fraction among them estimates the fraction in the universe.

Accuracy (:meth:`PanPrivateDensity.estimate`): a (1-α) interval from a union bound over
Hoeffding's inequality for the m independent bits, the exact discrete Laplace tail, and (when
sampling) Hoeffding's inequality for sampling without replacement, α/3 each.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, check_positive, check_probability, fail
from dpcurator.core.numbers import to_fraction
from dpcurator.mechanisms import Laplace, RandomizedResponse
from dpcurator.random import Rng, default_rng

__all__ = ["DensityEstimate", "PanPrivateDensity"]

_MAGIC = b"dpcurator-pan-private-density/1\n"


@dataclass(frozen=True)
class DensityEstimate:
    """The estimated fraction of the universe that appeared, with a (1-α) interval."""

    fraction: float
    ci_low: float
    ci_high: float
    alpha: float
    epsilon: Fraction  # ε of this output (the state's own ε is PanPrivateDensity.epsilon)


class PanPrivateDensity:
    """The fraction of a public universe of users seen in a stream, with an ε-DP internal state.

    >>> from dpcurator.random import SeededRng
    >>> density = PanPrivateDensity(epsilon=1, universe=1000, rng=SeededRng(1))
    >>> density.observe([3, 17, 3], rng=SeededRng(2))
    >>> 0 <= density.estimate(epsilon=1, rng=SeededRng(3)).alpha < 1
    True
    """

    def __init__(
        self,
        epsilon: object,
        universe: int,
        sample_size: int | None = None,
        rng: Rng | None = None,
    ) -> None:
        owner = "PanPrivateDensity"
        self.coin = RandomizedResponse(epsilon)
        self.universe = check_int(owner, "universe", universe, minimum=1)
        source = rng or default_rng()
        self.tracked = sample_without_replacement(owner, source, self.universe, sample_size)
        size = self.universe if self.tracked is None else self.tracked.size
        self.bits = source.coins(size)

    @property
    def epsilon(self) -> Fraction:
        """ε of the internal state (and of any intrusion reading it), user level."""
        return self.coin.epsilon

    @property
    def bias(self) -> Fraction:
        """p: the probability that an appeared user's bit is 1 (exact)."""
        return self.coin.truth_probability

    def observe(self, users: npt.ArrayLike, rng: Rng | None = None) -> None:
        """Ingest a batch of user ids; ids outside the universe are ignored (never an error).

        Only the bits of tracked users who appear are redrawn; the ids are not kept.
        """
        slots = tracked_positions("PanPrivateDensity.observe", users, self.universe, self.tracked)
        positions = np.unique(slots)
        redrawn = self.coin.randomize(np.ones(positions.size, dtype=np.bool_), rng)
        self.bits[positions] = redrawn

    def estimate(
        self, epsilon: object, alpha: object = 0.05, rng: Rng | None = None
    ) -> DensityEstimate:
        """Release the estimated fraction of the universe that appeared (ε_out = ``epsilon``)."""
        return release_fraction(
            "PanPrivateDensity.estimate",
            int(self.bits.sum()),
            null_hits=self.bits.size / 2,
            gap=self.bias - Fraction(1, 2),
            size=self.bits.size,
            sampled=self.tracked is not None,
            epsilon=epsilon,
            alpha=alpha,
            rng=rng,
        )

    def to_bytes(self) -> bytes:
        """The persisted state: the public parameters and the private bits, nothing else."""
        header = {"epsilon": str(self.epsilon), "universe": self.universe}
        return encode_state(_MAGIC, header, self.tracked, np.packbits(self.bits).tobytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> PanPrivateDensity:
        """Restore a state written by :meth:`to_bytes`."""
        header, tracked, size, rest = decode_state("PanPrivateDensity", _MAGIC, data)
        made = cls.__new__(cls)
        made.coin = RandomizedResponse(to_fraction(Fraction(header["epsilon"])))
        made.universe = int(header["universe"])
        made.tracked = tracked
        made.bits = np.unpackbits(np.frombuffer(rest, dtype=np.uint8), count=size).view(np.bool_)
        return made


def encode_state(
    magic: bytes, header: dict[str, Any], tracked: npt.NDArray[np.int64] | None, payload: bytes
) -> bytes:
    """A persisted pan-private state: the public ``header`` (plus the sample size) as one JSON
    line, the public sample of tracked users, then the private ``payload``."""
    size = None if tracked is None else int(tracked.size)
    line = json.dumps({**header, "sample_size": size}, sort_keys=True).encode() + b"\n"
    sample = b"" if tracked is None else tracked.astype("<i8").tobytes()
    return b"".join((magic, line, sample, payload))


def decode_state(
    owner: str, magic: bytes, data: bytes
) -> tuple[dict[str, Any], npt.NDArray[np.int64] | None, int, bytes]:
    """The header, tracked sample, number of tracked users and payload of :func:`encode_state`."""
    if not data.startswith(magic):
        raise fail(f"{owner}.from_bytes", "data", "a persisted state", data[:32])
    line, _, rest = data[len(magic) :].partition(b"\n")
    header: dict[str, Any] = json.loads(line)
    size = header["sample_size"]
    if size is None:
        return header, None, int(header["universe"]), rest
    tracked = np.frombuffer(rest[: 8 * size], dtype="<i8").astype(np.int64)
    return header, tracked, int(size), rest[8 * size :]


def tracked_positions(
    owner: str, users: npt.ArrayLike, universe: int, tracked: npt.NDArray[np.int64] | None
) -> npt.NDArray[np.int64]:
    """The state slots of a batch's user ids, one per event (repeats kept); ids outside the
    universe or not in the tracked sample are dropped (never an error)."""
    ids = np.asarray(users).reshape(-1)
    if ids.dtype.kind not in "iu":
        raise fail(owner, "users", "integer user ids", ids.dtype)
    ids = ids[(ids >= 0) & (ids < universe)].astype(np.int64)
    if tracked is None:
        return ids
    slot = np.searchsorted(tracked, ids)
    hit = (slot < tracked.size) & (tracked[np.minimum(slot, tracked.size - 1)] == ids)
    positions: npt.NDArray[np.int64] = slot[hit]
    return positions


def release_fraction(
    owner: str,
    hits: int,
    *,
    null_hits: float,
    gap: Fraction,
    size: int,
    sampled: bool,
    epsilon: object,
    alpha: object,
    rng: Rng | None,
) -> DensityEstimate:
    """Release a fraction from the number of tracked states in a set: ``hits`` gets discrete
    Laplace noise at ``epsilon`` (sensitivity 1: one user moves only their own state), then
    fraction = (noisy - null_hits) / (gap · m), where ``null_hits`` is the expected count if no
    user had the property and ``gap`` the difference of a state's probability of being in the
    set with and without it. The (1-α) interval: Hoeffding for the m independent states, the
    exact discrete Laplace tail and (when sampling) Hoeffding for sampling without replacement,
    α split evenly."""
    check_positive(owner, "epsilon", epsilon)
    a = float(check_probability(owner, "alpha", alpha, open_low=True, open_high=True))
    mechanism = Laplace.for_epsilon(epsilon, 1)
    noisy = int(mechanism.release_integers(np.array([hits]), rng)[0])
    m = size
    scaled = float(gap) * m
    fraction = (noisy - null_hits) / scaled
    share = a / (3 if sampled else 2)
    half = (math.sqrt(m * math.log(2 / share) / 2) + mechanism.ci_halfwidth(share)) / scaled
    if sampled:
        half += math.sqrt(math.log(2 / share) / (2 * m))
    low, point, high = clip_to_unit(fraction - half, fraction, fraction + half)
    return DensityEstimate(point, low, high, a, mechanism.epsilon(1))


def clip_to_unit(low: float, point: float, high: float) -> tuple[float, float, float]:
    """An estimate of a fraction and its interval, each clipped to [0, 1].

    Clipping is monotone, so low <= point <= high still holds afterwards (the point stays in
    its interval, and an interval wholly above 1 becomes [1, 1], not an inverted one); the
    clipped interval holds every truth in [0, 1] the unclipped one held (same coverage, never
    wider), and the clipped point is never farther from a truth in [0, 1] (it is no longer
    unbiased)."""
    return min(max(low, 0.0), 1.0), min(max(point, 0.0), 1.0), min(max(high, 0.0), 1.0)


def sample_without_replacement(
    owner: str, rng: Rng, universe: int, sample_size: int | None
) -> npt.NDArray[np.int64] | None:
    """A uniformly random ``sample_size``-subset of {0..universe-1}, sorted, drawn from ``rng``
    only (never from the data); None (track everyone) without a size.

    The subset is the first ``sample_size`` distinct values of a sequence of independent uniform
    draws (drawn in vectorised batches): the sequence's law is invariant under any permutation of
    the universe, so every subset of that size is equally likely. When the sample is more than
    half the universe, its complement is drawn that way instead (the complement of a uniform
    subset is uniform). Expected draws: at most about 2.3 per sampled user; work and memory
    O(sample_size) in the first case, O(universe) <= O(2 sample_size) in the second.
    """
    if sample_size is None:
        return None
    size = check_int(owner, "sample_size", sample_size, minimum=1)
    if size > universe:
        raise fail(owner, "sample_size", f"<= universe ({universe})", sample_size)
    if 2 * size > universe:
        left_out = _first_distinct(rng, universe, universe - size)
        return np.setdiff1d(np.arange(universe, dtype=np.int64), left_out, assume_unique=True)
    return np.sort(_first_distinct(rng, universe, size))


def _first_distinct(rng: Rng, universe: int, size: int) -> npt.NDArray[np.int64]:
    """The first ``size`` distinct values of independent uniform draws from {0..universe-1}."""
    chosen = np.empty(0, dtype=np.int64)
    while chosen.size < size:
        need = size - chosen.size
        fresh = universe - size  # the least share of the universe still unchosen (size <= N/2)
        more = need * universe // fresh + need // 8 + 16
        draws = np.concatenate((chosen, rng.integers_below(universe, more)))
        _, first = np.unique(draws, return_index=True)
        chosen = draws[np.sort(first)][:size]
    return chosen
