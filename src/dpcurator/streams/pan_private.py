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
        if sample_size is None:
            self.tracked: npt.NDArray[np.int64] | None = None
            size = self.universe
        else:
            size = check_int(owner, "sample_size", sample_size, minimum=1)
            if size > self.universe:
                raise fail(owner, "sample_size", f"<= universe ({self.universe})", sample_size)
            self.tracked = _sample_without_replacement(source, self.universe, size)
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
        ids = np.asarray(users).reshape(-1)
        if ids.dtype.kind not in "iu":
            raise fail("PanPrivateDensity.observe", "users", "integer user ids", ids.dtype)
        ids = ids[(ids >= 0) & (ids < self.universe)].astype(np.int64)
        if self.tracked is None:
            positions = np.unique(ids)
        else:
            slot = np.searchsorted(self.tracked, ids)
            hit = (slot < self.tracked.size) & (
                self.tracked[np.minimum(slot, self.tracked.size - 1)] == ids
            )
            positions = np.unique(slot[hit])
        redrawn = self.coin.randomize(np.ones(positions.size, dtype=np.bool_), rng)
        self.bits[positions] = redrawn

    def estimate(
        self, epsilon: object, alpha: object = 0.05, rng: Rng | None = None
    ) -> DensityEstimate:
        """Release the estimated fraction of the universe that appeared (ε_out = ``epsilon``)."""
        owner = "PanPrivateDensity.estimate"
        check_positive(owner, "epsilon", epsilon)
        a = float(check_probability(owner, "alpha", alpha, open_low=True, open_high=True))
        mechanism = Laplace.for_epsilon(epsilon, 1)
        ones = int(mechanism.release_integers(np.array([int(self.bits.sum())]), rng)[0])
        m = self.bits.size
        gap = float(self.bias) - 0.5
        fraction = (ones - m / 2) / (gap * m)
        parts = 3 if self.tracked is not None else 2
        share = a / parts
        bits_width = math.sqrt(m * math.log(2 / share) / 2)
        noise_width = mechanism.ci_halfwidth(share)
        half = (bits_width + noise_width) / (gap * m)
        if self.tracked is not None:
            half += math.sqrt(math.log(2 / share) / (2 * m))
        clipped = min(max(fraction, 0.0), 1.0)
        return DensityEstimate(
            clipped,
            max(fraction - half, 0.0),
            min(fraction + half, 1.0),
            a,
            mechanism.epsilon(1),
        )

    def to_bytes(self) -> bytes:
        """The persisted state: the public parameters and the private bits, nothing else."""
        header = {
            "epsilon": str(self.epsilon),
            "universe": self.universe,
            "sample_size": None if self.tracked is None else int(self.tracked.size),
        }
        parts = [_MAGIC, json.dumps(header, sort_keys=True).encode() + b"\n"]
        if self.tracked is not None:
            parts.append(self.tracked.astype("<i8").tobytes())
        parts.append(np.packbits(self.bits).tobytes())
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes) -> PanPrivateDensity:
        """Restore a state written by :meth:`to_bytes`."""
        if not data.startswith(_MAGIC):
            raise fail("PanPrivateDensity.from_bytes", "data", "a persisted state", data[:32])
        body = data[len(_MAGIC) :]
        line, _, rest = body.partition(b"\n")
        header = json.loads(line)
        made = cls.__new__(cls)
        made.coin = RandomizedResponse(to_fraction(Fraction(header["epsilon"])))
        made.universe = int(header["universe"])
        size = header["sample_size"]
        if size is None:
            made.tracked = None
            size = made.universe
        else:
            made.tracked = np.frombuffer(rest[: 8 * size], dtype="<i8").astype(np.int64)
            rest = rest[8 * size :]
        made.bits = np.unpackbits(np.frombuffer(rest, dtype=np.uint8), count=size).view(np.bool_)
        return made


def _sample_without_replacement(rng: Rng, universe: int, size: int) -> npt.NDArray[np.int64]:
    """A uniformly random ``size``-subset of {0..universe-1}, sorted (Floyd's algorithm)."""
    chosen: set[int] = set()
    for j in range(universe - size, universe):
        pick = int(rng.integers_below(j + 1, 1)[0])
        chosen.add(j if pick in chosen else pick)
    return np.array(sorted(chosen), dtype=np.int64)
