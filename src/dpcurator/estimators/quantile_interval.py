"""The (1-α) confidence interval of a refined DP quantile (:mod:`dpcurator.estimators.
quantile_refine`), from discrete Laplace counts around the final edge.

Interval (noise only: it covers the empirical quantile of the clamped values the engine counted,
not the population quantile). p = num/den; with the final pivot edge e_k, L values below it and
U at or above (n = L + U), two statistics get discrete Laplace noise:

* the rank offset T = (den - num)·L - num·U = den·(L - p·n). One value moves L or U by one, so T
  by at most max(num, den - num); r values per person: L1 sensitivity r·max(num, den - num),
  noise of ε_T = :data:`OFFSET_SHARE`·ε_ci;
* disjoint shells of final-level bins on each side (widths w, w, 2w, 4w, ... ; w = 1 for
  integer data on unit bins, so that a value held by many people gives an interval of that one
  value; :data:`SHELL_WIDTH` fine bins otherwise). A value is in at most one shell: L1
  sensitivity r, noise of ε_S = ε_ci - ε_T.

The interval is ε_ci-DP by the Laplace mechanism's guarantee on each vector (Dwork, McSherry,
Nissim & Smith 2006; discrete Laplace: Canonne, Kamath & Steinke 2020) and basic composition.

With S_m the first m shells below e_k (m = 0, 1, ..., M; m = 0 is e_k itself) and e_m the far edge
of shell m, F(e_m) = L - S_m values lie below e_m, and x_(⌊ρ⌋) >= e_m (ρ = p·(n - 1)) as soon as
F(e_m) <= ρ, i.e. G_m = T - den·S_m + num <= 0. Its noisy version is G_m + N_m with
N_m = Z_T - den·(Z_1 + ... + Z_m), and the lower end is the first e_m with
G̃_m + den·t_m <= 0, t_m a tail bound (in ranks) at level β_m of Z_T/den + Z_1 + ... + Z_m
(:func:`summed_noise_thresholds`; the noise is symmetric): a wrong certification needs G_m > 0
and N_m < -den·t_m, of probability <= β_m. The upper end likewise: x_(⌈ρ⌉) < e'_m once
F(e'_m) = L + S'_m >= ρ + 1 (F is an integer >= ⌈ρ⌉ + 1), i.e. T + den·S'_m + num - den >= 0.
The last level's shells stop at its window (its outer bins hold the values clamped from outside
it); with more than one level the shells go on over the first level's bins outside the window
(widths 1, 1, 2, 4, ... of those bins, up to the bounds), so a wide interval is still an interval
and not the whole range (a value is still in at most one shell). Where no shell suffices, the
end is the public bound. Each side's tests share α/2 (the window's M + 1 tests equally, or with
outer shells (1 - γ)·α/2 and the outer ones γ·α/2, :data:`OUTER_ALPHA_SHARE`; the number of
shells is fixed by the plan), so by the union bound the interval holds x_(⌊ρ⌋) and x_(⌈ρ⌉), hence
the linearly interpolated quantile, with probability >= 1 - α. The selection's own error plays no
part in the guarantee (only the noisy counts' tails do), and every threshold is a function of
public inputs (ε, r, p, α and the plan's shells).

Before issue 28 item 1 the noisy statistics were L and U themselves (with the shells, L1
sensitivity 2r at one scale): T costs r·max(p, 1-p) instead of 2r, so for the median at a third
of ε_ci its noise in ranks is about that of L and U at two thirds, and the shells keep two
thirds; the upper end also asked for ρ + 2 values below it where ρ + 1 suffices.

Tail bounds: :func:`summed_noise_thresholds`, the exact tail of a rounded-up upper bound of the
summed noise (before: the smaller of a Chernoff and a union bound, up to 1.6 times larger once a
shell joins the offset, since Chernoff loses a log factor at Laplace tails).

Width (α = 0.1; ``python benchmarks/quantile_intervals.py``, 100 runs on one data set against the
oracle: the 5% and 95% points of the released values plus the gap between x_(⌊ρ⌋) and x_(⌈ρ⌉);
the shares :data:`OFFSET_SHARE` and :data:`SHELL_WIDTH` were chosen there): N(50, 10²) on
[0, 100], n = 10^4, ε = 1, median: 0.20 against an oracle of 0.042 (4.7×; before, with L and U
noised and Chernoff bounds, 0.39-0.49: 10-13×); p = 0.9: 0.39 (5.6×; before 0.78); n = 2,000,
ε = 0.3, p = 0.25: 4.7 (6.4×; before 9.4); UCI Adult's ages of its 311 American-Indian/Eskimo
people at ε = 0.3 (the grouped median of benchmarks/adult_workflow.py): [27, 50] against an
oracle of 3 ages (before [17, 90], the whole range); Adult-like ages at n = 10^4, ε = 1: the
released age itself or it and the next (the oracle's width). At n = 200, ε = 0.3 an end still
reaches its bound in most runs. The interval stays several times the oracle because certifying
ranks needs counts of their own: the selection (permute-and-flip on exact scores,
:mod:`dpcurator.estimators.quantile_refine`) releases no counts an interval could reuse, and a
selection made of noisy counts instead (a noisy CDF over the window) has rank noise growing with
the square root of the bins summed (or log^1.5 with a tree), several times permute-and-flip's
~1/ε ranks at these resolutions. Coverage is tested at n ∈ {200, 2000, 10^4}, ε ∈ {0.3, 1},
integer and continuous data, p ∈ {0.25, 0.5, 0.9} (tests/test_quantile_interval_oracle.py).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt
from scipy.fft import irfft, next_fast_len, rfft

from dpcurator.estimators.quantiles import QuantileBins
from dpcurator.mechanisms import Laplace
from dpcurator.random import Rng

#: Width, in final-level bins, of the two innermost shells of the interval (then doubling).
SHELL_WIDTH = 64

#: Most grid points per side of one rounded noise term in :func:`summed_noise_thresholds`.
_MAX_GRID_POINTS = 2**15

#: Added to every computed tail probability for the floating-point error of the convolution.
_ROUNDING_SLACK = 1e-9

#: Share of the interval's ε spent on the chosen edge's rank offset T (the rest on its shells).
OFFSET_SHARE = Fraction(1, 3)

#: Share γ of the interval's α its shells outside the last level's window get (they are reached
#: only when the window's shells do not suffice, so the window keeps most of α).
OUTER_ALPHA_SHARE = 0.2


@functools.lru_cache(maxsize=1024)
def summed_noise_thresholds(
    offset_scale: Fraction, den: int, shell_scale: Fraction, levels: tuple[float, ...]
) -> tuple[float, ...]:
    """t_m (in ranks) with P[N_m > t_m] <= ``levels[m]`` for N_m = Z_T / den + Z_1 + ... + Z_m,
    independent discrete Laplace variables, Z_T of scale ``offset_scale`` and the Z_i of scale
    ``shell_scale``, computed from the distribution of an upper bound of N_m: each term V is
    rounded UP to a grid of u ranks (a power of two, 1/2 unless the noise is wide; the integer
    shells stay exact while u <= 1), its lower tail below -J·u moved up to -J·u (both only
    raise N_m) and its mass above J·u counted as exceeding every t (at most 10^-6 of the
    level); the rounded terms' probabilities come from the discrete Laplace distribution
    function in closed form and are convolved (FFT; the tail gets :data:`_ROUNDING_SLACK` for
    its floating-point error). Exact up to the grid, so tighter than a Chernoff bound (which
    loses a log factor at Laplace tails). Public inputs
    only; cached (every group of a release asks for the same thresholds)."""
    widest = max(float(offset_scale) / den, float(shell_scale))
    reach = widest * (math.log(1 / min(levels)) + math.log(1e6 * len(levels)) + 2)
    unit = 0.5
    while reach / unit > _MAX_GRID_POINTS:
        unit *= 2
    span = math.ceil(reach / unit)
    terms = [_rounded_up(offset_scale, Fraction(1, den), unit, span)]
    terms += [_rounded_up(shell_scale, Fraction(1), unit, span)] * (len(levels) - 1)
    thresholds = []
    pmf, overflow = np.ones(1), 0.0
    for m, level in enumerate(levels):
        term, beyond = terms[m]
        pmf = np.clip(_convolve(pmf, term), 0.0, None)
        overflow += beyond
        # pmf[i] is P[sum = (i - (m + 1)·span)·u]; tail[i] = P[sum > that]
        tail = np.concatenate([np.cumsum(pmf[::-1])[::-1][1:], [0.0]])
        ok = np.flatnonzero(tail + overflow + _ROUNDING_SLACK <= level)
        thresholds.append((int(ok[0]) - (m + 1) * span) * unit if ok.size else math.inf)
    return tuple(thresholds)


def _convolve(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """The full linear convolution of two 1-D arrays by real FFTs of a fast length, as
    ``scipy.signal.fftconvolve`` computes it (importing scipy.signal, which loads scipy.stats,
    took a fifth of a server's start)."""
    if a.size == 1 or b.size == 1:
        return a * b
    size = a.size + b.size - 1
    fast = next_fast_len(size, real=True)
    return irfft(rfft(a, fast) * rfft(b, fast), fast)[:size]  # type: ignore[no-any-return]


def _rounded_up(
    scale: Fraction, per_unit: Fraction, unit: float, span: int
) -> tuple[npt.NDArray[np.float64], float]:
    """The probabilities of ceil(c·Z / u) on -J..J (c = ``per_unit`` ranks per unit of Z, Z
    discrete Laplace of ``scale``, J = ``span``), the mass below -J moved to -J, and the mass
    above J."""
    q = math.exp(-1 / float(scale))
    steps = np.arange(-span - 1, span + 1, dtype=np.float64)
    # Z <= floor(j·u / c) iff ceil(c·Z / u) <= j
    bounds = np.floor(steps * unit / float(per_unit))
    below = np.where(
        bounds >= 0,
        1 - np.power(q, np.maximum(bounds, 0) + 1) / (1 + q),
        np.power(q, -np.minimum(bounds, 0)) / (1 + q),
    )
    pmf = np.diff(below)
    pmf[0] += below[0]  # P[ceil(c·Z / u) <= -J]
    return np.clip(pmf, 0.0, None), q ** (float(bounds[-1]) + 1) / (1 + q)


@dataclass(frozen=True)
class IntervalPlan:
    """The noisy counts of the interval: ``offset`` on the chosen edge's rank offset T (in units
    of 1/den), ``shell_noise`` on ``shells`` shells per side in the last level's window and
    ``outer`` more per side over the first level's bins outside it."""

    offset: Laplace
    shell_noise: Laplace
    shells: int
    alpha: float
    outer: int = 0
    first_width: int = SHELL_WIDTH
    growth: int = 2

    @classmethod
    def for_epsilon(
        cls,
        epsilon: Fraction,
        p: Fraction,
        rows_per_person: int,
        alpha: float,
        *,
        shells: int,
        outer: int,
        first_width: int,
        growth: int,
    ) -> IntervalPlan:
        """The counts at ``epsilon`` in all: :data:`OFFSET_SHARE` of it on T (L1 sensitivity
        r·max(num, den - num)), the rest on the shells (L1 sensitivity r)."""
        offset = Laplace.for_epsilon(epsilon * OFFSET_SHARE, offset_sensitivity(p, rows_per_person))
        shell_noise = Laplace.for_epsilon(epsilon * (1 - OFFSET_SHARE), rows_per_person)
        return cls(offset, shell_noise, shells, alpha, outer, first_width, growth)

    def epsilon(self, p: Fraction, rows_per_person: int) -> Fraction:
        """The ε of the interval's counts (basic composition of T's and the shells' noise)."""
        return self.offset.epsilon(offset_sensitivity(p, rows_per_person)) + (
            self.shell_noise.epsilon(rows_per_person)
        )

    def thresholds(self, p: Fraction, alpha: float | None = None) -> list[float]:
        """t_m (in ranks) for m = 0..shells + outer: the summed noise's tail bounds, at
        α/(2·(shells + 1)) for the chosen edge itself (m = 0) and the window's shells, or with
        outer shells at (1 - γ)·α/(2·(shells + 1)) for those and γ·α/(2·outer) for the outer
        ones (γ = :data:`OUTER_ALPHA_SHARE`): α/2 per side in all."""
        a = self.alpha if alpha is None else alpha
        inner = a / (2 * (self.shells + 1)) * (1 - OUTER_ALPHA_SHARE if self.outer else 1)
        outer = a / (2 * self.outer) * OUTER_ALPHA_SHARE if self.outer else 0.0
        levels = [inner if m <= self.shells else outer for m in range(self.shells + self.outer + 1)]
        scales = (self.offset.scale, p.denominator, self.shell_noise.scale)
        return list(summed_noise_thresholds(*scales, tuple(levels)))

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
        sums = _RunningSums.of(counts)  # the values below each edge
        # (far edge, exact count) of each shell going down, then going up
        width, growth = self.first_width, self.growth
        below = [
            (edges[a], sums.between(a, b))
            for a, b in _shells(k, -1, 1, self.shells, width, growth=growth)
        ]
        above = [
            (edges[b], sums.between(a, b))
            for a, b in _shells(k, 1, bins.bins - 1, self.shells, width, growth=growth)
        ]
        if first is not None and self.outer:
            outer_below, outer_above = _outer_shells(bins, *first, self.outer)
            below, above = below + outer_below, above + outer_above
        num, den = p.numerator, p.denominator
        # den·(L - p·n) = (den - num)·L - num·U, in Python integers, clamped to ±2^62
        lower_count, total = sums.between(0, k), sums.between(0, len(sums.high) - 1)
        offset = (den - num) * lower_count - num * (total - lower_count)
        clamp = min(max(offset, -(2**62)), 2**62)
        noisy_offset = int(self.offset.release_integers(np.array([clamp], np.int64), rng)[0])
        exact = np.array(
            [min(max(int(count), -(2**62)), 2**62) for _, count in below + above], np.int64
        )
        shells = (
            [int(v) for v in self.shell_noise.release_integers(exact, rng)] if len(exact) else []
        )
        thresholds = self.thresholds(p, alpha)
        low, high = limits
        edge_k = float(edges[k])
        # m = 0: the chosen edge itself (no shell), then its shells going out. Lower end:
        # den·(F(e) - ρ) = T - den·S_m + num <= 0 certified; upper: den·(F(e) - ρ - 1) >= 0.
        total = 0
        for j, edge in enumerate([edge_k] + [e for e, _ in below]):
            total += shells[j - 1] if j else 0
            if noisy_offset - den * total + num + den * thresholds[j] <= 0:
                low = float(edge)
                break
        total = 0
        for j, edge in enumerate([edge_k] + [e for e, _ in above]):
            total += shells[len(below) + j - 1] if j else 0
            if noisy_offset + den * total + num - den - den * thresholds[j] >= 0:
                high = float(edge)
                break
        return low, high


def offset_sensitivity(p: Fraction, rows_per_person: int) -> int:
    """The L1 sensitivity of T = (den - num)·L - num·U (p = num/den, L and U the values below and
    at or above an edge): one value moves L or U by one, T by at most max(num, den - num); r
    values per person multiply that by r."""
    return rows_per_person * max(p.numerator, p.denominator - p.numerator)


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
    edges, sums = bin_edges(bins), _RunningSums.of(counts)
    start = max(int(np.searchsorted(edges, window.lower, side="right")) - 1, 0)
    stop = min(int(np.searchsorted(edges, window.upper, side="left")), bins.bins)
    below = [(edges[a], sums.between(a, b)) for a, b in _shells(start, -1, 0, count, 1)]
    above = [(edges[b], sums.between(a, b)) for a, b in _shells(stop, 1, bins.bins, count, 1)]
    return below, above


@dataclass(frozen=True)
class _RunningSums:
    """The values below each edge of a histogram of exact non-negative int64 counts, kept as
    running sums of their high and low 31-bit halves (each below 2^52 for fewer than 2^20 bins,
    so never wrapping, whatever the counts); :meth:`between` is exact in Python integers."""

    high: npt.NDArray[np.int64]
    low: npt.NDArray[np.int64]

    @classmethod
    def of(cls, counts: npt.ArrayLike) -> _RunningSums:
        exact = np.asarray(counts, dtype=np.int64).reshape(-1)
        zero = np.zeros(1, dtype=np.int64)
        high = np.concatenate([zero, np.cumsum(exact >> 31)])
        low = np.concatenate([zero, np.cumsum(exact & np.int64(2**31 - 1))])
        return cls(high, low)

    def between(self, start: int, stop: int) -> int:
        """The values between edges ``start`` and ``stop`` (below ``stop``, not below ``start``)."""
        high = int(self.high[stop]) - int(self.high[start])
        return high * 2**31 + int(self.low[stop]) - int(self.low[start])


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
