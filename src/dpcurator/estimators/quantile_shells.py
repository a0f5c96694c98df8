"""The shells of a quantile interval (:mod:`dpcurator.estimators.quantile_interval`): disjoint
ranges of values going out from the chosen edge on one side, each sized from the noisy counts of
the shells before it, and the test that certifies an end.

A side is walked out from the chosen edge e_k. Step m adds a shell, the values between the
previous shell's far edge and a new far edge e_m, and its discrete Laplace count; the end is e_m
once the noisy running count C̃_m of the values between e_m and e_k satisfies
den·C̃_m >= base + den·t_m (``base`` from the noisy rank offset of e_k, t_m the walk thresholds of
:func:`~dpcurator.estimators.walk_thresholds.crossing_thresholds`). Step 0 tests e_k itself.

Sizing (post-processing of noisy outputs already drawn, so free): every shell aims at the count
still needed, ``(need - C̃)·(1 + SHELL_MARGIN)``. The first at a prior density (from the noisy
number of values, :mod:`dpcurator.estimators.quantile_interval`); each later one at the density
the shells so far show (C̃ over the distance they cover, at least one noise scale of count), its
reach between :data:`MIN_GROWTH` and :data:`MAX_GROWTH` times the previous one. Before, the
shells doubled (widths w, w, 2w, 4w, ...), whatever the data: an end needing 20 ranks often
landed at 39 (at n = 10^4, ε = 1).

Privacy: the shells are disjoint ranges of values, chosen from earlier noisy outputs only, so a
value lies in at most one shell whatever is drawn; with L1 sensitivity r per count, all shells of
both sides together are ε_S-DP (adaptive parallel composition: for any outputs, at most one
count's likelihood ratio differs from 1). Coverage does not depend on the sizing: an end is wrong
only if the noise walk crosses its boundary (the walk's noise is the same whichever shells were
chosen).

Values past the last level's window: its end bins hold the values clamped from outside it, so a
side's shells run over the window's inner edges, then over the first level's edges outside the
window (the values in the window's end bin itself are in no shell: counting fewer values between
an edge and e_k only makes its test harder to pass).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

#: Each shell after the first aims this share beyond the count the next test needs.
SHELL_MARGIN = 0.15

#: A shell's far edge reaches at least this times the previous distance from e_k ...
MIN_GROWTH = 1.25

#: ... and at most this times.
MAX_GROWTH = 4.0


@dataclass(frozen=True)
class RunningSums:
    """The values below each edge of a histogram of exact non-negative int64 counts, kept as
    running sums of their high and low 31-bit halves (each below 2^52 for fewer than 2^20 bins,
    so never wrapping, whatever the counts); :meth:`between` is exact in Python integers."""

    high: npt.NDArray[np.int64]
    low: npt.NDArray[np.int64]

    @classmethod
    def of(cls, counts: npt.ArrayLike) -> RunningSums:
        exact = np.asarray(counts, dtype=np.int64).reshape(-1)
        zero = np.zeros(1, dtype=np.int64)
        high = np.concatenate([zero, np.cumsum(exact >> 31)])
        low = np.concatenate([zero, np.cumsum(exact & np.int64(2**31 - 1))])
        return cls(high, low)

    def between(self, start: int, stop: int) -> int:
        """The values between edges ``start`` and ``stop`` (below ``stop``, not below ``start``)."""
        high = int(self.high[stop]) - int(self.high[start])
        return high * 2**31 + int(self.low[stop]) - int(self.low[start])


@dataclass(frozen=True)
class Side:
    """The far edges a side's shells can end at, going out from edge ``k`` of the last level
    (``edges``, ``sums``) in the direction ``step`` (-1 down, +1 up): its edges up to ``limit``
    (1 or bins - 1), then the first level's (``outer_edges``, ``outer_sums``) from
    ``outer_start``, the first-level edge at the window's end, outwards (none when
    ``outer_edges`` is empty). Position 0 is e_k itself; position i > 0 is the i-th edge out."""

    edges: npt.NDArray[np.float64]
    sums: RunningSums
    k: int
    step: int
    limit: int
    outer_edges: npt.NDArray[np.float64]
    outer_sums: RunningSums | None
    outer_start: int

    @property
    def inner(self) -> int:
        """Positions on the last level's edges (1..inner)."""
        return max((self.limit - self.k) * self.step, 0)

    @property
    def positions(self) -> int:
        """The last position (on the outermost edge)."""
        if self.outer_sums is None:
            return self.inner
        outer = self.outer_start if self.step < 0 else self.outer_edges.size - 1 - self.outer_start
        return self.inner + outer

    def edge(self, position: int) -> float:
        """The edge at ``position``."""
        if position <= self.inner:
            return float(self.edges[self.k + self.step * position])
        return float(self.outer_edges[self.outer_start + self.step * (position - self.inner)])

    def distance(self, position: int) -> float:
        """How far the edge at ``position`` is from e_k."""
        return abs(self.edge(position) - float(self.edges[self.k]))

    def count(self, position: int) -> int:
        """The exact number of values counted between e_k and the edge at ``position``."""
        inner = min(position, self.inner)
        near, far = sorted((self.k, self.k + self.step * inner))
        total = self.sums.between(near, far)
        if position > self.inner and self.outer_sums is not None:
            end = self.outer_start + self.step * (position - self.inner)
            near, far = sorted((self.outer_start, end))
            total += self.outer_sums.between(near, far)
        return total

    def reaching(self, distance: float, after: int) -> int:
        """The first position past ``after`` at least ``distance`` from e_k (else the last)."""
        target = float(self.edges[self.k]) + self.step * distance
        down = self.step < 0
        inner = self.edges[self.k - self.inner : self.k][::-1] if down else self.edges[self.k + 1 :]
        position = _before(inner[: self.inner], target, self.step) + 1
        if position > self.inner and self.outer_sums is not None:
            start = self.outer_start
            outer = self.outer_edges[:start][::-1] if down else self.outer_edges[start + 1 :]
            position = self.inner + _before(outer, target, self.step) + 1
        return min(max(position, after + 1), self.positions)


def _before(edges: npt.NDArray[np.float64], target: float, step: int) -> int:
    """How many of ``edges`` (in order going out, down for ``step`` < 0) come before the first one
    at or past ``target``."""
    if step < 0:
        return int(np.searchsorted(-edges, -target, side="left"))
    return int(np.searchsorted(edges, target, side="left"))


def walk(
    side: Side,
    base: int,
    *,
    den: int,
    thresholds: list[float],
    prior_density: float,
    noise_scale: float,
    noisy: Callable[[int], int],
) -> float | None:
    """The certified end of ``side`` (None: no test passed; the end is then the public bound):
    step 0 tests e_k, step m >= 1 adds a shell sized as in the module docstring (the first at
    ``prior_density`` values per unit) and tests its far edge, certified once
    den·C̃_m >= base + den·t_m; ``noisy`` releases one shell's count."""
    if base + den * thresholds[0] <= 0:
        return side.edge(0)
    noisy_total, position = 0, 0
    for threshold in thresholds[1:]:
        if position >= side.positions:
            return None
        covered = side.distance(position)
        need = max(base / den + threshold - noisy_total, 0.0) * (1 + SHELL_MARGIN)
        if covered <= 0:  # the first shell (or edges too close for floats to tell apart)
            distance = need / prior_density if prior_density > 0 else math.inf
        else:
            density = max(noisy_total, noise_scale) / covered
            distance = covered + need / density
            distance = min(max(distance, covered * MIN_GROWTH), covered * MAX_GROWTH)
        far = side.reaching(distance, position)
        noisy_total += noisy(side.count(far) - side.count(position))
        position = far
        if den * noisy_total >= base + den * threshold:
            return side.edge(position)
    return None
