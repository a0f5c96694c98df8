"""The (1-α) confidence interval of a refined DP quantile (:mod:`dpcurator.estimators.
quantile_refine`), from discrete Laplace counts around the final edge.

Interval (noise only: it covers the empirical quantile of the clamped values the engine counted,
not the population quantile). With the final pivot edge e_k, the counts L (values below e_k), U
(values at or above) and disjoint shells of final-level bins (widths w, w, 2w, 4w, ... on each
side; w = 1 for integer data on unit bins, so that a value held by many people gives an interval
of that one value, not of 16) get discrete Laplace noise (each value is in L or U and in at most
one shell: L1 sensitivity 2r). The lower end is the farthest-in edge e_s whose shells S_m (the
first m shells below e_k, m = 0, 1, ..., M; S_0 = 0 is the chosen edge itself) hold enough
values that at most ⌊ρ⌋ values lie below it: L - S_m <= p·(L + U - 1), i.e.
D_m = S_m - (1-p)·L + p·U - p >= 0. Its noisy version D̃_m = D_m + N_m, where N_m is a sum of
m + 2 independent discrete Laplace variables (weights 1, ..., 1, 1-p, p), is tested against one
tail bound t_m of that SUM (a Chernoff bound from the discrete Laplace moment generating
function, or the union bound over the m + 2 counts when smaller) at level α/(2(M + 1)):
D̃_m - t_m >= 0 implies D_m >= 0 except with probability α/(2(M + 1)). The upper end likewise
(L + S'_m >= ρ + 2 suffices for ⌈ρ⌉ + 1 values below it). The last level's shells stop at its
window (its outer bins hold the values clamped from outside it); with more than one level the
shells go on over the first level's bins outside the window (widths 1, 1, 2, 4, ... of those
bins, up to the bounds), so a wide interval is still an interval and not the whole range. A value
is still in L or U and in at most one shell (the window's outer bins are in none: S_m counts a
subset of the values between the edges, which only makes the test stricter), so the L1
sensitivity stays 2r. Where no shell suffices, the interval extends to the public bound. Each
side's tests share α/2 (the window's M + 1 tests equally, with outer shells (1 - γ)·α/2 and the
outer ones γ·α/2, :data:`OUTER_ALPHA_SHARE`; the number of shells is fixed by the plan), so by
the union bound the interval holds x_(⌊ρ⌋) and x_(⌈ρ⌉), hence the linearly interpolated
quantile, with probability >= 1 - α. The selection's own error plays no part in the guarantee
(only the noisy counts' tails do), and every threshold is a function of public inputs (ε, r, p,
α and the plan's shells). Discrete Laplace: Canonne, Kamath & Steinke 2020; the interval is ε_ci-DP
by the Laplace mechanism's guarantee (Dwork, McSherry, Nissim & Smith 2006) at L1 sensitivity 2r.

Width: in ranks the interval's half-width is about t_m, i.e. a few times the counts' noise scale
2r/ε_ci; with ε_ci half of the quantile's ε (:data:`~dpcurator.estimators.quantile_refine.
DEFAULT_INTERVAL_SHARE`) this is still several times the selection's own rank error (about
1/ε_sel ranks), so for continuous data the interval is wider than the spread of the released
values (13× at n = 10^4, ε = 1: tests/test_quantile_interval_oracle.py and docs/sql.md); on
integer data holding many people per value it is the released value itself.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator.estimators.quantiles import QuantileBins
from dpcurator.mechanisms import Laplace
from dpcurator.random import Rng

#: Width, in final-level bins, of the two innermost shells of the interval (then doubling).
SHELL_WIDTH = 16

#: Share γ of the interval's α its shells outside the last level's window get (they are reached
#: only when the window's shells do not suffice, so the window keeps most of α).
OUTER_ALPHA_SHARE = 0.2


@functools.lru_cache(maxsize=4096)
def summed_noise_threshold(scale: Fraction, shells: int, p: Fraction, level: float) -> float:
    """A t with P[N > t] <= ``level`` for N = Z_1 + ... + Z_m + (1-p)·Z_L + p·Z_U, independent
    discrete Laplace(``scale``) variables, m = ``shells``: the smaller of the Chernoff bound
    min_λ (K(λ) + ln(1/level)) / λ over a grid of λ in (0, 1/scale), K the cumulant generating
    function of N, and the union bound (m + 1)·τ with τ the (1 - level/(m+2)) two-sided bound
    of one variable. Public inputs only."""
    a = 1 / float(scale)
    lam = a * np.linspace(0.001, 0.999, 999)

    def log_mgf(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        # E[e^{xZ}] = (1-q)^2 / ((1-q e^x)(1-q e^-x)), q = e^-a, for |x| < a
        return np.asarray(
            2 * np.log(-np.expm1(-a)) - np.log(-np.expm1(x - a)) - np.log(-np.expm1(-x - a)),
            np.float64,
        )

    pf = float(p)
    cumulant = shells * log_mgf(lam) + log_mgf((1 - pf) * lam) + log_mgf(pf * lam)
    chernoff = float(np.min((cumulant + math.log(1 / level)) / lam))
    union = (shells + 1) * Laplace(scale).ci_halfwidth(level / (shells + 2))
    return min(chernoff, union)


@dataclass(frozen=True)
class IntervalPlan:
    """The noisy counts of the interval: ``laplace`` on L, U, ``shells`` shells per side in the
    last level's window and ``outer`` more per side over the first level's bins outside it."""

    laplace: Laplace
    shells: int
    alpha: float
    outer: int = 0
    first_width: int = SHELL_WIDTH
    growth: int = 2

    def thresholds(self, p: Fraction, alpha: float | None = None) -> list[float]:
        """t_m for m = 0..shells + outer: the summed noise's tail bounds, at α/(2·(shells + 1))
        for the chosen edge itself (m = 0) and the window's shells, or with outer shells at
        (1 - γ)·α/(2·(shells + 1)) for those and γ·α/(2·outer) for the outer ones
        (γ = :data:`OUTER_ALPHA_SHARE`): α/2 per side in all."""
        a = self.alpha if alpha is None else alpha
        inner = a / (2 * (self.shells + 1)) * (1 - OUTER_ALPHA_SHARE if self.outer else 1)
        outer = a / (2 * self.outer) * OUTER_ALPHA_SHARE if self.outer else 0.0
        scale = self.laplace.scale
        return [
            summed_noise_threshold(scale, m, p, inner if m <= self.shells else outer)
            for m in range(self.shells + self.outer + 1)
        ]

    def bounds(
        self,
        p: Fraction,
        limits: tuple[float, float],
        bins: QuantileBins,
        counts: npt.NDArray[np.int64],
        k: int,
        *,
        rng: Rng | None,
        alpha: float | None,
        first: tuple[QuantileBins, npt.ArrayLike] | None,
    ) -> tuple[float, float]:
        """The (1-α) interval of the p-quantile from the last level's ``bins``, their exact
        ``counts`` and the chosen edge ``k``, within the public ``limits`` (an end stays at its
        limit where no shell suffices). ``alpha`` overrides the planned level; ``first``: with
        more than one level, the first level's bins and exact counts, over which the shells
        continue outside the last window."""
        edges = bin_edges(bins)
        ints = [int(c) for c in counts]  # Python ints: no int64 wrap-around in the sums
        # (far edge, exact count) of each shell going down, then going up
        width, growth = self.first_width, self.growth
        below = [
            (edges[a], sum(ints[a:b]))
            for a, b in _shells(k, -1, 1, self.shells, width, growth=growth)
        ]
        above = [
            (edges[b], sum(ints[a:b]))
            for a, b in _shells(k, 1, bins.bins - 1, self.shells, width, growth=growth)
        ]
        if first is not None and self.outer:
            outer_below, outer_above = _outer_shells(bins, *first, self.outer)
            below, above = below + outer_below, above + outer_above
        exact = [sum(ints[:k]), sum(ints[k:])] + [count for _, count in below + above]
        clamped = np.array([min(max(v, 0), 2**62) for v in exact], np.int64)  # total
        noisy = [int(v) for v in self.laplace.release_integers(clamped, rng)]
        thresholds = self.thresholds(p, alpha)
        share = float(p)
        n_below, n_above, shells = noisy[0], noisy[1], noisy[2:]
        low, high = limits
        edge_k = float(edges[k])
        # m = 0: the chosen edge itself (no shell), then its shells going out
        total = 0.0
        for j, edge in enumerate([edge_k] + [e for e, _ in below]):
            total += shells[j - 1] if j else 0
            if total - thresholds[j] >= (1 - share) * n_below - share * n_above + share:
                low = float(edge)
                break
        total = 0.0
        for j, edge in enumerate([edge_k] + [e for e, _ in above]):
            total += shells[len(below) + j - 1] if j else 0
            if total - thresholds[j] >= share * n_above - (1 - share) * n_below - share + 2:
                high = float(edge)
                break
        return low, high


def bin_edges(bins: QuantileBins) -> npt.NDArray[np.float64]:
    """The ``bins + 1`` edges of ``bins``, the candidates of a refined level."""
    steps = np.arange(bins.bins + 1, dtype=np.float64)
    return np.asarray(bins.lower + (bins.upper - bins.lower) / bins.bins * steps, np.float64)


def _outer_shells(
    window: QuantileBins, bins: QuantileBins, counts: npt.ArrayLike, count: int
) -> tuple[list[tuple[float, int]], list[tuple[float, int]]]:
    """(far edge, exact count) of up to ``count`` shells per side over the first level's
    ``bins`` outside the last level's ``window`` (whose ends are first-level edges or the
    bounds), going down from its lower end and up from its upper end, widths 1, 1, 2, 4, ...
    first-level bins; the first level's end bins hold the values clamped to the bounds."""
    edges, ints = bin_edges(bins), [int(c) for c in np.asarray(counts).reshape(-1)]
    start = max(int(np.searchsorted(edges, window.lower, side="right")) - 1, 0)
    stop = min(int(np.searchsorted(edges, window.upper, side="left")), bins.bins)
    below = [(edges[a], sum(ints[a:b])) for a, b in _shells(start, -1, 0, count, 1)]
    above = [(edges[b], sum(ints[a:b])) for a, b in _shells(stop, 1, bins.bins, count, 1)]
    return below, above


def _shells(
    k: int, step: int, limit: int, count: int, first_width: int = SHELL_WIDTH, *, growth: int = 2
) -> list[tuple[int, int]]:
    """Up to ``count`` disjoint bin ranges [start, stop) from edge k in the direction ``step``,
    reaching w, w·g, w·g², ... bins from k (w = ``first_width``, g = ``growth``: widths w, w,
    2w, 4w, ... for g = 2), never past bin ``limit`` (the neighbourhood's outer bins hold
    clamped values from outside it)."""
    shells: list[tuple[int, int]] = []
    near, reach = k, first_width
    for _ in range(count):
        far = k + step * reach
        if step < 0:
            far = max(far, limit)
            if far >= near:
                break
            shells.append((far, near))
        else:
            far = min(far, limit)
            if far <= near:
                break
            shells.append((near, far))
        near, reach = far, reach * growth
    return shells
