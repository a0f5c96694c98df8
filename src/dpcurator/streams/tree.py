"""Continual counting: the binary tree mechanism (Dwork, Naor, Pitassi & Rothblum 2010; Chan, Shi &
Song 2011).

A stream of events x_1, x_2, ... arrives one at a time (or in batches); after every event the
curator releases the running total x_1 + ... + x_t. Releasing each total with fresh noise would
cost ε per release; the tree mechanism instead keeps one noisy partial sum per dyadic interval
(t - 2^j, t] of the time line and answers each prefix from the at most L = bit_length(T) dyadic
intervals that tile it, so the noise of every release is a sum of at most L discrete Laplace
variables and the error is O(L^1.5 / ε), polylogarithmic in the horizon T.

Privacy guarantee (event level): every event falls in exactly one dyadic interval per level, so
changing the value of ONE event (within the public bounds) changes the vector of all interval sums
by at most L · (upper - lower) in L1 norm; each interval sum gets independent discrete Laplace
noise of scale L · (upper - lower) / ε in grid units (:class:`~dpcurator.mechanisms.Laplace`), so
the whole sequence of T releases is ε-DP with respect to one event (Dwork & Roth 2014, Theorem
12.1 and §12.2). Event level protects one event: a person contributing m events is protected at
m · ε (group privacy).

User level (``max_events_per_person=k``, public): each event carries its person's id, and the
curator keeps only the first k events of each person, replacing every later one by the null value
(0 clamped to the bounds; 0 for counts) in its time slot, so the clock stays public. Neighbouring
streams differ in all the events of one person; after the cap they differ in at most k slots,
each by at most ``upper - lower``, so the interval sums move by at most k · L · (upper - lower) in
L1 norm: the noise scale is k times the event-level one and the whole sequence of releases is
ε-DP for the person (Dwork, Naor, Pitassi & Rothblum 2010, user-level privacy; Dwork & Roth 2014,
§12.2, with Δ = k). The cap depends on each person's own events only, so one person's events
cannot change which events of another are kept. The counts per person are curator state (kept
with the tree, never released).

Values are clamped to the public bounds and rounded to a public power-of-two ``resolution``
(integer arithmetic from then on, so sums are exact); counts (:meth:`ContinualSum.counter`) take
0/1 events and are not rounded. Nothing raises on a value: NaN counts as ``lower``, ±inf clamp.

Accuracy: :meth:`ContinualSum.ci_halfwidth` is a Chernoff bound on the sum of the popcount(t)
noise terms of release t (the exact moment generating function of discrete Laplace noise,
minimised over the free parameter; the exact tail when t is a power of two), plus
``t · resolution / 2`` for rounding. With probability at least 1 - α the released total is within
it of the true (clamped) running sum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize_scalar

from dpcurator._validation import check_int, check_positive, check_probability
from dpcurator.core.numbers import float_up, to_fraction
from dpcurator.random import Rng, default_rng
from dpcurator.streams._events import EventGrid, GridStream, check_batch, node_noise

__all__ = ["ContinualSum", "sum_of_laplace_halfwidth"]

#: Relative safety margin on the floating-point evaluation of the Chernoff bound.
_MARGIN = 1e-9


def laplace_log_mgf(s: float, b: float) -> float:
    """ln M(s) of discrete Laplace noise of scale ``b`` (|s| < 1/b): exactly
    ln((1 - p)^2 / ((1 - p e^s)(1 - p e^-s))) with p = e^(-1/b)."""
    return (
        2 * math.log(-math.expm1(-1 / b))
        - math.log(-math.expm1(s - 1 / b))
        - math.log(-math.expm1(-s - 1 / b))
    )


def sum_of_laplace_halfwidth(scale: Fraction, terms: int, alpha: float) -> float:
    """A t with P[|Z_1 + ... + Z_terms| > t] <= α for iid discrete Laplace(scale) Z_i.

    Chernoff: for 0 < s < 1/scale, P[Y >= t] <= exp(terms · ln M(s) - s t) with the exact moment
    generating function M(s) = (1 - p)^2 / ((1 - p e^s)(1 - p e^-s)), p = e^(-1/scale). Every s
    gives a valid bound, so t(s) = (terms · ln M(s) + ln(2/α)) / s is minimised numerically and
    widened by a relative margin for floating-point rounding.
    """
    if terms == 0:
        return 0.0
    b = float(scale)

    def bound(u: float) -> float:
        s = u / b
        return (terms * laplace_log_mgf(s, b) + math.log(2 / alpha)) / s

    best = minimize_scalar(bound, bounds=(1e-9, 1 - 1e-9), method="bounded")
    return float(best.fun) * (1 + _MARGIN)


class ContinualSum(GridStream):
    """Running sums of a bounded stream, released after every event by the binary tree mechanism.

    >>> from dpcurator.random import SeededRng
    >>> counter = ContinualSum.counter(epsilon=1, horizon=1000)
    >>> counter.update([1, 0, 1, 1], rng=SeededRng(3)).shape
    (4,)
    >>> counter.time
    4
    """

    def __init__(
        self,
        epsilon: object,
        horizon: int,
        lower: float = 0.0,
        upper: float = 1.0,
        resolution: float | None = None,
        *,
        max_events_per_person: int | None = None,
    ) -> None:
        owner = "ContinualSum"
        eps = to_fraction(check_positive(owner, "epsilon", epsilon))
        self.horizon = check_int(owner, "horizon", horizon, minimum=1)
        self.grid = EventGrid(owner, lower, upper, resolution, max_events_per_person)
        self.grid.check_horizon(self.horizon, horizon)
        self.levels = self.horizon.bit_length()
        self.sensitivity = self.grid.events * self.levels * self.grid.span
        self.mechanism = node_noise(eps, self.sensitivity)
        self.time = 0
        self._total = 0  # exact running sum in grid units
        self._anchor = [0] * self.levels  # running sum at the last multiple of 2^(j+1)
        self._node = [0] * self.levels  # noisy sum of the newest left interval of each level

    @classmethod
    def counter(
        cls, epsilon: object, horizon: int, *, max_events_per_person: int | None = None
    ) -> ContinualSum:
        """A running count of 0/1 events (any non-zero value counts as 1, NaN as 0; exact)."""
        made = cls(
            epsilon,
            horizon,
            lower=0,
            upper=1,
            resolution=1,
            max_events_per_person=max_events_per_person,
        )
        made.grid.counting = True
        return made

    @property
    def epsilon_spent(self) -> Fraction:
        """ε of the whole stream of releases up to the horizon (per event, or per person with
        ``max_events_per_person``; exact)."""
        return self.mechanism.epsilon(self.sensitivity)

    def update(
        self,
        values: npt.ArrayLike,
        rng: Rng | None = None,
        persons: Sequence[int | str] | None = None,
    ) -> npt.NDArray[np.float64]:
        """Ingest a batch of events; return the released running sum after each of them.

        The batch length is public (it is the clock); a batch that would pass the horizon is
        refused before anything is ingested. A user-level stream needs ``persons``, the id of
        each event's person.
        """
        owner = "ContinualSum.update"
        units = self.grid.to_units(values)
        n = units.size
        check_batch(owner, self.time, n, self.horizon)
        self.grid.check_persons(n, persons, owner)
        self.grid.cap(units, persons)
        source = rng or default_rng()
        start = self.time
        prefix = self._total + np.concatenate(([0], np.cumsum(units)))  # prefix[i] = S(start + i)
        times = np.arange(start + 1, start + n + 1, dtype=np.int64)
        released = np.zeros(n, dtype=np.float64)
        for level in range(self.levels):
            released += self._level_noise(level, start, prefix, times, source)
        self.time = start + n
        self._total = int(prefix[-1])
        return released * float(self.resolution)

    def _level_noise(
        self,
        level: int,
        start: int,
        prefix: npt.NDArray[np.int64],
        times: npt.NDArray[np.int64],
        rng: Rng,
    ) -> npt.NDArray[np.float64]:
        """Each release's noisy level-``level`` interval (zero where bit ``level`` of t is 0).

        The interval used at time t is (e - 2^j, e] with e = (t >> j) << j; it is a left child
        (e / 2^j odd), so its start is a multiple of 2^(j+1). Intervals ending in this batch are
        released now; the one in use at the batch start comes from the previous batch.
        """
        width = 1 << level
        end = start + len(times)
        odd = (start >> level) + 1  # the first multiple of 2^j after start, in units of 2^j...
        odd += 1 - (odd & 1)  # ...moved to the first odd one (a left child's end)
        ends = np.arange(odd << level, end + 1, width << 1, dtype=np.int64)
        begin = prefix[np.maximum(ends - width - start, 0)]
        if ends.size and (odd << level) - width < start:  # began in an earlier batch
            begin[0] = self._anchor[level]
        noisy = self.mechanism.release_integers(prefix[ends - start] - begin, rng)
        # Value of level j at each time: the newest completed left interval, if bit j of t is set
        # (index 0 of ``pool``: the one completed before this batch).
        pool = np.concatenate(([self._node[level]], noisy))
        index = np.searchsorted(ends, times, side="right")
        out = np.where((times >> level) & 1 == 1, pool[index], 0).astype(np.float64)
        if noisy.size:
            self._node[level] = int(noisy[-1])
        boundary = (end >> (level + 1)) << (level + 1)
        if boundary > start:
            self._anchor[level] = int(prefix[boundary - start])
        return out

    def ci_halfwidth(self, time: int | None = None, alpha: object = 0.05) -> float:
        """Half-width of a (1-α) interval for the release at ``time`` (default: the latest).

        Public: it depends on the time, ε, the bounds and the resolution only.
        """
        t = self.time if time is None else check_int("ci_halfwidth", "time", time, minimum=1)
        a = float(check_probability("ci_halfwidth", "alpha", alpha, open_low=True, open_high=True))
        terms = t.bit_count()
        noise = (
            self.mechanism.ci_halfwidth(a)  # one node: the exact discrete Laplace tail
            if terms == 1
            else sum_of_laplace_halfwidth(self.mechanism.scale, terms, a)
        )
        step = float(self.resolution)
        return float_up(Fraction(noise * step) + Fraction(self.grid.rounding(t)))
