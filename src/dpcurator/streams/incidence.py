"""Pan-private incidence counting: the fraction of users who appeared at least k times (Dwork, Naor,
Pitassi, Rothblum & Yekhanin 2010, "Pan-private streaming algorithms", the t-incidence counter).

The curator keeps ONE counter modulo a public ``modulus`` m per tracked user, and nothing else
that depends on the data:

* at the start every counter is drawn by m-ary randomised response of 0
  (:class:`~dpcurator.mechanisms.KaryRandomizedResponse`): 0 with probability
  p = e^ε / (e^ε + m - 1), each other value with probability q = (1 - p) / (m - 1);
* when user x appears, x's counter goes up by one (mod m).

Privacy guarantee (user level, pan-private): a user who appeared c times has counter
(s_0 + c) mod m, which is exactly m-ary randomised response of c mod m: every value has
probability p or q, and p / q <= e^ε, so the state AT ANY MOMENT is ε-DP with respect to
everything a user did in the stream, independently of everyone else. An output adds discrete
Laplace noise of scale 1/ε_out to the number of counters in a set (sensitivity 1: a user moves
only their own counter), so one unannounced intrusion plus the outputs is (ε + Σ ε_out)-DP, as for
:class:`~dpcurator.streams.PanPrivateDensity`.

The estimate (:meth:`PanPrivateIncidence.estimate_at_least`): with S = {k, ..., m-1}, a counter is
in S with probability p + (|S| - 1) q if its user's count mod m is in S and |S| q otherwise, so
the fraction â = (noisy hits - M |S| q) / ((p - q) M) over the M tracked users is unbiased for the
fraction whose count mod m is in S, which is the fraction that appeared at least k times when
every count is below m. Counts wrap: a user who appeared m or more times counts as c mod m, so
choose m above the largest count that matters; the price is the gap p - q =
(e^ε - 1) / (e^ε + m - 1), which shrinks like 1/m. The (1-α) interval and the optional public
random sample of users are those of :class:`~dpcurator.streams.PanPrivateDensity`.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, fail
from dpcurator.core.numbers import to_fraction
from dpcurator.mechanisms import KaryRandomizedResponse
from dpcurator.random import Rng, default_rng
from dpcurator.streams.pan_private import (
    DensityEstimate,
    decode_state,
    encode_state,
    release_fraction,
    sample_without_replacement,
    tracked_positions,
)

__all__ = ["PanPrivateIncidence"]

_MAGIC = b"dpcurator-pan-private-incidence/1\n"


class PanPrivateIncidence:
    """The fraction of a public universe of users seen at least k times, with an ε-DP state.

    >>> from dpcurator.random import SeededRng
    >>> incidence = PanPrivateIncidence(epsilon=1, universe=1000, modulus=8, rng=SeededRng(1))
    >>> incidence.observe([3, 17, 3])
    >>> 0 <= incidence.estimate_at_least(2, epsilon=1, rng=SeededRng(3)).fraction <= 1
    True
    """

    def __init__(
        self,
        epsilon: object,
        universe: int,
        modulus: int,
        sample_size: int | None = None,
        rng: Rng | None = None,
    ) -> None:
        owner = "PanPrivateIncidence"
        self.universe = check_int(owner, "universe", universe, minimum=1)
        self.coin = KaryRandomizedResponse(epsilon, check_int(owner, "modulus", modulus, minimum=2))
        source = rng or default_rng()
        self.tracked = sample_without_replacement(owner, source, self.universe, sample_size)
        size = self.universe if self.tracked is None else self.tracked.size
        self.counters = self.coin.randomize(np.zeros(size, dtype=np.int64), source)

    @property
    def epsilon(self) -> Fraction:
        """ε of the internal state (and of any intrusion reading it), user level."""
        return self.coin.epsilon

    @property
    def modulus(self) -> int:
        """m: counts are kept modulo m (public)."""
        return self.coin.categories

    def observe(self, users: npt.ArrayLike) -> None:
        """Ingest a batch of user ids (repeats count); ids outside the universe are ignored.

        Each appearance adds one to its user's counter mod m; the ids are not kept. Work in
        the batch's size (only the counters of its users are read and written in memory); what
        is persisted is still the whole state (:meth:`to_bytes`).
        """
        slots = tracked_positions("PanPrivateIncidence.observe", users, self.universe, self.tracked)
        positions, counts = np.unique(slots, return_counts=True)
        self.counters[positions] = (self.counters[positions] + counts) % self.modulus

    def estimate_at_least(
        self, k: int, epsilon: object, alpha: object = 0.05, rng: Rng | None = None
    ) -> DensityEstimate:
        """Release the estimated fraction of the universe that appeared at least ``k`` times
        (1 <= k < modulus; counts taken mod m), at ε_out = ``epsilon``."""
        owner = "PanPrivateIncidence.estimate_at_least"
        k = check_int(owner, "k", k, minimum=1)
        if k >= self.modulus:
            raise fail(owner, "k", f"below the modulus ({self.modulus})", k)
        width = self.modulus - k
        q = self.coin.other_probability
        return release_fraction(
            owner,
            int(np.count_nonzero(self.counters >= k)),
            null_hits=float(self.counters.size * width * q),
            gap=self.coin.truth_probability - q,
            size=self.counters.size,
            sampled=self.tracked is not None,
            epsilon=epsilon,
            alpha=alpha,
            rng=rng,
        )

    def to_bytes(self) -> bytes:
        """The persisted state: the public parameters and the private counters, nothing else."""
        header = {"epsilon": str(self.epsilon), "universe": self.universe, "modulus": self.modulus}
        counters = self.counters.astype(_dtype(self.modulus)).tobytes()
        return encode_state(_MAGIC, header, self.tracked, counters)

    @classmethod
    def from_bytes(cls, data: bytes) -> PanPrivateIncidence:
        """Restore a state written by :meth:`to_bytes`."""
        header, tracked, size, rest = decode_state("PanPrivateIncidence", _MAGIC, data)
        made = cls.__new__(cls)
        modulus = int(header["modulus"])
        made.coin = KaryRandomizedResponse(to_fraction(Fraction(header["epsilon"])), modulus)
        made.universe = int(header["universe"])
        made.tracked = tracked
        counters = np.frombuffer(rest, dtype=_dtype(modulus), count=size)
        made.counters = counters.astype(np.int64)
        return made


def _dtype(modulus: int) -> np.dtype[np.unsignedinteger]:
    """The little-endian unsigned type of the persisted counters (values below ``modulus``)."""
    return np.dtype(np.min_scalar_type(modulus - 1)).newbyteorder("<")
