"""Continual counting under pure ε: the k-ary tree mechanism with consistent estimates.

The binary tree mechanism (:class:`~dpcurator.streams.ContinualSum`; Dwork, Naor, Pitassi &
Rothblum 2010; Chan, Shi & Song 2011) answers each prefix from up to L = bit_length(T) noisy
dyadic intervals. A k-ary tree has L_k = the number of base-k digits of T levels, so each event
is in fewer nodes (less noise per node, scale ∝ L_k), at the price of up to k - 1 nodes per
level in a prefix (Qardaji, Yang & Li 2013: k around 16 is best for range queries). Honaker
(2015) showed that a node's noisy sum and the sum of its children's estimates are two
independent estimates of the same interval, and that their inverse-variance average is better
than either: with V the variance of one node's noise, the estimate of a level-h node is
E_h = r_h · v + (1 - r_h) · Σ_children E_(h-1), with r_0 = 1 and r_h = 1 / (1 + 1/(k r_(h-1))),
and has variance r_h V. A node's estimate uses its own subtree only, so it is available the
moment the node completes (the bottom-up half of Honaker's estimator, which is the part a stream
can use); a prefix is the sum of the estimates of the d_h(t) completed nodes per level (the base-k
digits of t), whose noises are independent: variance V Σ_h d_h(t) r_h.
:func:`best_branching` picks the k in 2 ... 64 with the smallest worst-step variance over the
horizon (ties: the smallest mean).

Privacy guarantee: every event lies in exactly one node per level, so changing one event (within
the public bounds, span grid units) moves the vector of node sums by at most L_k · span in L1
norm; each node sum gets independent discrete Laplace noise of scale L_k · span / ε
(:class:`~dpcurator.mechanisms.Laplace`), so the sequence of all releases, a post-processing of
the noisy node sums, is ε-DP for one event (Dwork & Roth 2014, Theorem 12.1). User level
(``max_events_per_person=k``): the cap of :mod:`dpcurator.streams._events`, k times the noise.

Accuracy: :meth:`KaryContinualSum.ci_halfwidth` is a Chernoff bound on the released noise, a
weighted sum of independent discrete Laplace variables (each node of a level-h subtree at level
g <= h enters with weight r_g Π_(g<l<=h) (1 - r_l)), with their exact moment generating function,
plus ``t · resolution / 2`` for input rounding and half a step for output rounding. Released
values (a post-processing of the integer noisy sums) are rounded to the stream's resolution.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize_scalar

from dpcurator._validation import check_int, check_positive, check_probability
from dpcurator.core.numbers import float_up, to_fraction
from dpcurator.random import Rng, default_rng
from dpcurator.streams._events import EventGrid, GridStream, check_batch, node_noise
from dpcurator.streams.tree import laplace_log_mgf

__all__ = ["KaryContinualSum", "best_branching", "tree_variance_factors"]

_MAX_BRANCHING = 64
_MARGIN = 1e-9


def _digits(value: int, k: int) -> list[int]:
    """The base-k digits of value, least significant first."""
    out = []
    while value:
        value, digit = divmod(value, k)
        out.append(digit)
    return out


def _levels(horizon: int, k: int) -> int:
    return len(_digits(horizon, k))


def _ratios(k: int, levels: int) -> list[float]:
    """r_h = Var(E_h) / V for h = 0 ... levels - 1 (Honaker's bottom-up estimate)."""
    ratios = [1.0]
    for _ in range(1, levels):
        ratios.append(1.0 / (1.0 + 1.0 / (k * ratios[-1])))
    return ratios


def tree_variance_factors(horizon: int, k: int, *, consistent: bool = True) -> tuple[float, float]:
    """(worst, mean) over t = 1 ... T of Var(release t) · ε² / span², for the k-ary tree with
    discrete Laplace noise approximated by its continuous variance 2 (L_k / ε)² per node."""
    levels = _levels(horizon, k)
    ratios = _ratios(k, levels) if consistent else [1.0] * levels
    digits = _digits(horizon, k)
    candidates = [digits]
    for p in range(levels):
        if digits[p]:
            candidates.append([k - 1] * p + [digits[p] - 1] + digits[p + 1 :])
    worst = max(sum(d * r for d, r in zip(c, ratios, strict=True)) for c in candidates)
    total = 0.0
    for h, r in enumerate(ratios):  # Σ_{t=0}^{T} digit_h(t)
        width, period = k**h, k ** (h + 1)
        cycles, rem = divmod(horizon + 1, period)
        a, c = divmod(rem, width)
        count = cycles * width * k * (k - 1) // 2 + width * a * (a - 1) // 2 + a * c
        total += count * r
    scale = 2.0 * levels**2
    return worst * scale, total / horizon * scale


def best_branching(horizon: int) -> int:
    """The k in 2 ... 64 with the smallest worst-step variance over the horizon (ties: mean)."""
    scores = {k: tree_variance_factors(horizon, k) for k in range(2, _MAX_BRANCHING + 1)}
    return min(scores, key=lambda k: (round(scores[k][0], 9), scores[k][1], k))


class KaryContinualSum(GridStream):
    """Running sums of a bounded stream released after every event by the k-ary tree mechanism
    with consistent (Honaker) estimates, ε-DP (see the module docstring).

    >>> from dpcurator.random import SeededRng
    >>> counter = KaryContinualSum.counter(epsilon=1, horizon=1000)
    >>> counter.update([1, 0, 1, 1], rng=SeededRng(3)).shape
    (4,)
    """

    def __init__(
        self,
        epsilon: object,
        horizon: int,
        lower: float = 0.0,
        upper: float = 1.0,
        resolution: float | None = None,
        *,
        branching: int | None = None,
        max_events_per_person: int | None = None,
    ) -> None:
        owner = "KaryContinualSum"
        eps = to_fraction(check_positive(owner, "epsilon", epsilon))
        self.horizon = check_int(owner, "horizon", horizon, minimum=1)
        self.grid = EventGrid(owner, lower, upper, resolution, max_events_per_person)
        self.branching = (
            best_branching(self.horizon)
            if branching is None
            else check_int(owner, "branching", branching, minimum=2)
        )
        self.grid.check_horizon(self.horizon, horizon)
        self.levels = _levels(self.horizon, self.branching)
        self.sensitivity = self.grid.events * self.levels * self.grid.span
        self.mechanism = node_noise(eps, self.sensitivity)
        self.ratios = _ratios(self.branching, self.levels)
        self.time = 0
        self._total = 0  # exact running sum in grid units
        self._anchor = [0] * self.levels  # running sum at the last multiple of k^h
        self._acc = [0.0] * self.levels  # Σ E of the completed nodes of the current parent block
        self._acc_block = [-1] * self.levels  # that block's index ((end - 1) // k^(h+1))

    @classmethod
    def counter(
        cls,
        epsilon: object,
        horizon: int,
        *,
        branching: int | None = None,
        max_events_per_person: int | None = None,
    ) -> KaryContinualSum:
        """A running count of 0/1 events (any non-zero value counts as 1, NaN as 0)."""
        made = cls(
            epsilon,
            horizon,
            0,
            1,
            1,
            branching=branching,
            max_events_per_person=max_events_per_person,
        )
        made.grid.counting = True
        return made

    @property
    def epsilon_spent(self) -> Fraction:
        """ε of the whole stream of releases (per event, or per person at user level; exact)."""
        return self.mechanism.epsilon(self.sensitivity)

    def update(
        self,
        values: npt.ArrayLike,
        rng: Rng | None = None,
        persons: Sequence[int | str] | None = None,
    ) -> npt.NDArray[np.float64]:
        """Ingest a batch of events; return the released running sum after each of them (the
        batch length is public; a batch past the horizon is refused before anything is read)."""
        owner = "KaryContinualSum.update"
        units = self.grid.units(values, persons, owner)
        n = units.size
        check_batch(owner, self.time, n, self.horizon)
        self.grid.cap(units, persons)
        source = rng or default_rng()
        start = self.time
        prefix = self._total + np.concatenate(([0], np.cumsum(units)))  # prefix[i] = S(start+i)
        times = np.arange(start + 1, start + n + 1, dtype=np.int64)
        released = np.zeros(n, dtype=np.float64)
        children: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]] | None = None
        for level in range(self.levels):
            children = self._level(level, start, prefix, times, released, children, source)
        self.time = start + n
        self._total = int(prefix[-1])
        return np.rint(released) * float(self.grid.resolution)

    def _level(  # noqa: PLR0917 (one level of the batch: its inputs and the level below)
        self,
        level: int,
        start: int,
        prefix: npt.NDArray[np.int64],
        times: npt.NDArray[np.int64],
        released: npt.NDArray[np.float64],
        children: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]] | None,
        rng: Rng,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """Release the level's nodes ending in this batch, add each time's completed nodes of
        its current parent block to ``released``; return (ends, block-cumulative estimates)."""
        k = self.branching
        width, parent = k**level, k ** (level + 1)
        end = start + times.size
        first = ((start // width) + 1) * width
        ends = np.arange(first, end + 1, width, dtype=np.int64)
        begins = ends - width
        begin = np.where(
            begins >= start, prefix[np.maximum(begins - start, 0)], self._anchor[level]
        )
        noisy = self.mechanism.release_integers(
            (prefix[ends - start] - begin).astype(np.int64), rng
        )
        estimate = noisy.astype(np.float64)
        if level and ends.size:
            child_ends, child_cum = children  # type: ignore[misc]
            full = child_cum[np.searchsorted(child_ends, ends)]  # Σ of all k children's E
            r = self.ratios[level]
            estimate = r * estimate + (1 - r) * full
        block = (ends - 1) // parent
        cumulative = np.cumsum(estimate)
        if ends.size:
            opens = np.flatnonzero(np.concatenate(([True], block[1:] != block[:-1])))
            marks = np.zeros(ends.size, dtype=np.int64)
            marks[opens] = opens
            owner = np.maximum.accumulate(marks)  # each node's first node of its block
            cumulative = cumulative - (cumulative[owner] - estimate[owner])
            cumulative = cumulative + np.where(
                block == self._acc_block[level], self._acc[level], 0.0
            )
        index = np.searchsorted(ends, times, side="right") - 1
        current = times // parent
        inside = index >= 0
        hit = inside & (block[np.maximum(index, 0)] == current) if ends.size else inside
        released[hit] += cumulative[index[hit]]
        carried = ~inside & (self._acc_block[level] == current)
        released[carried] += self._acc[level]
        if ends.size:
            self._acc[level], self._acc_block[level] = float(cumulative[-1]), int(block[-1])
        boundary = (end // width) * width
        if boundary > start:
            self._anchor[level] = int(prefix[boundary - start])
        return ends, cumulative

    def _coefficients(self, time: int) -> list[tuple[float, float]]:
        """(weight, count) of the discrete Laplace variables in the release at ``time``."""
        k, ratios = self.branching, self.ratios
        out: list[tuple[float, float]] = []
        for h, digit in enumerate(_digits(time, k)):
            if not digit:
                continue
            carry = 1.0
            for g in range(h, -1, -1):
                out.append((ratios[g] * carry, float(digit) * k ** (h - g)))
                carry *= 1 - ratios[g]
        return out

    def variance(self, time: int | None = None) -> float:
        """The exact noise variance of the release at ``time`` (values' units²)."""
        t = self.time if time is None else check_int("variance", "time", time, minimum=1)
        p = math.exp(-1 / float(self.mechanism.scale))
        node = 2 * p / (1 - p) ** 2
        units = node * sum(w * w * c for w, c in self._coefficients(t))
        return units * float(self.grid.resolution) ** 2

    def ci_halfwidth(self, time: int | None = None, alpha: object = 0.05) -> float:
        """Half-width of a (1-α) interval for the release at ``time`` (default: the latest);
        public (the time, ε, the bounds, the resolution)."""
        t = self.time if time is None else check_int("ci_halfwidth", "time", time, minimum=1)
        a = float(check_probability("ci_halfwidth", "alpha", alpha, open_low=True, open_high=True))
        terms = self._coefficients(t)
        b = float(self.mechanism.scale)
        top = max((w for w, _ in terms), default=0.0)
        noise = 0.0
        if terms:

            def bound(u: float) -> float:
                s = u / (b * top)
                return (sum(c * laplace_log_mgf(s * w, b) for w, c in terms) + math.log(2 / a)) / s

            best = minimize_scalar(bound, bounds=(1e-9, 1 - 1e-9), method="bounded")
            noise = float(best.fun) * (1 + _MARGIN)
        step = float(self.grid.resolution)
        return float_up(Fraction(noise * step) + Fraction(step / 2 + self.grid.rounding(t)))

    def to_state(self) -> dict[str, Any]:
        """The curator state to persist (JSON-able)."""
        return {
            "time": self.time,
            "total": self._total,
            "anchor": list(self._anchor),
            "acc": list(self._acc),
            "acc_block": list(self._acc_block),
            "persons": sorted(self.grid.events_per_person.items(), key=repr),
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`to_state` of a stream built with the same public parameters."""
        self.time, self._total = int(state["time"]), int(state["total"])
        self._anchor = [int(v) for v in state["anchor"]]
        self._acc = [float(v) for v in state["acc"]]
        self._acc_block = [int(v) for v in state["acc_block"]]
        self.grid.events_per_person = {p: int(n) for p, n in state.get("persons", [])}

    def state_bytes(self) -> int:
        """Bytes of the mechanism's state (per level: an anchor, an estimate, a block index)."""
        return 24 * self.levels + 16
