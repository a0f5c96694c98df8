"""DP quantiles by multi-resolution refinement, with a confidence interval that covers.

One-level selection among public bins caps the resolution at (upper - lower) / bins whatever n and
ε. Here the budget is spent explicitly over levels, all candidates being functions of public
inputs and earlier DP outputs only:

1. level 1: permute-and-flip (McKenna & Sheldon 2020; the exponential mechanism of McSherry &
   Talwar 2007 applied to quantiles as in Smith 2011) picks one of the ``points + 1`` public edges
   of equal-width bins over [lower, upper];
2. level l > 1: the same selection among the interior edges of ``points`` equal-width bins over
   the public neighbourhood of ± ``half_width`` bins of level l-1 around its chosen edge (shifted
   inside [lower, upper]). Values outside the neighbourhood are clamped into its first and last
   bins, so every interior edge still knows exactly how many values lie below it;
3. optionally a (1-α) interval (:class:`IntervalPlan`) from discrete Laplace counts around the
   final edge.

Scores (edges, not bin centres, so that a candidate's score measures the rank distance of the
value it would release). For an edge e with L values below it among n, the target (0-indexed)
rank is ρ = p·(n - 1) and e is a perfect answer when ρ < L <= ρ + 1 (it separates the order
statistics around ρ)::

    q(e) = -|2·den·L - 2·num·(n - 1) - den|        (p = num / den)

Adding or removing one value moves L by at most one and ρ by p, in the same direction when the
value is below e, so q moves by at most 2·max(num, den - num); r values per person multiply that
by r. Each level is ε_l-DP (permute-and-flip with that sensitivity), the interval ε_ci-DP, and the
release is ε-DP with ε = Σ ε_l + ε_ci by basic composition.

Interval (noise only: it covers the empirical quantile of the clamped values the engine counted,
not the population quantile). With the final edge e_k, the counts L (values below e_k), U
(values at or above) and disjoint shells of final-level bins doubling in width on each side get
discrete Laplace noise (each value is in L or U and in at most one shell: L1 sensitivity 2r).
Every noisy count is within its (1 - α/N) half-width τ of the truth with probability >= 1 - α
(union bound over the N counts). The lower end is the nearest edge e_{k-m} whose shells are
certain (after subtracting τ per shell) to hold enough values that at most ⌊ρ⌋ values lie below
it, given the bounds on L and U; the upper end likewise; where no shell suffices the interval
extends to the public bound. So on that event the interval holds x_(⌊ρ⌋) and x_(⌈ρ⌉), hence the
linearly interpolated quantile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, check_probability, check_real, fail
from dpcurator.core.numbers import to_fraction
from dpcurator.estimators.quantiles import (
    DEFAULT_MAX_BINS,
    QuantileBins,
    rational_level,
    select_quantile_bin,
)
from dpcurator.mechanisms import Laplace, PermuteAndFlip
from dpcurator.random import Rng

#: ``(share of the selection budget, half-width in bins of the previous level, bins)`` per level.
#: Chosen by measurement (benchmarks/estimators.py --quantiles): a coarse level that only has to
#: land within ± half-width of its bins, then one fine level over that neighbourhood.
DEFAULT_LEVELS: tuple[tuple[Fraction, int, int], ...] = (
    (Fraction(1, 5), 0, 1024),
    (Fraction(4, 5), 16, 2048),
)

#: Share of a quantile's ε spent on its interval when one is asked for.
DEFAULT_INTERVAL_SHARE = Fraction(1, 5)

#: Width, in final-level bins, of the two innermost shells of the interval (then doubling).
SHELL_WIDTH = 16

#: Counts the values of one public histogram (a numpy bincount, or an engine's GROUP BY bin).
Counter = Callable[[QuantileBins], npt.NDArray[np.int64]]


def edge_scores(
    counts: npt.ArrayLike, p: Fraction, rows_per_person: int = 1
) -> tuple[npt.NDArray[np.int64], int]:
    """The scores of the ``bins + 1`` edges of a histogram and their sensitivity (see the module
    docstring), in exact integers (Python ints, so no wrap-around) clamped to [-2^62, 0]."""
    check_int("edge_scores", "rows_per_person", rows_per_person, minimum=1)
    exact = [int(c) for c in np.asarray(counts, dtype=np.int64).reshape(-1)]
    num, den = p.numerator, p.denominator
    target = 2 * num * (sum(exact) - 1) + den
    scores, below = [], 0
    for count in [*exact, 0]:
        scores.append(-min(abs(2 * den * below - target), 2**62))
        below += count
    return np.array(scores, dtype=np.int64), 2 * rows_per_person * max(num, den - num)


@dataclass(frozen=True)
class Level:
    """One selection: ``bins`` equal-width bins over ± ``half_width`` bins of the previous level
    (the whole range for the first level), chosen among their edges by ``mechanism``."""

    half_width: int
    bins: int
    mechanism: PermuteAndFlip


@dataclass(frozen=True)
class IntervalPlan:
    """The noisy counts of the interval: ``laplace`` on L, U and ``shells`` shells per side."""

    laplace: Laplace
    shells: int
    alpha: float

    @property
    def halfwidth(self) -> float:
        """τ: every one of the 2 + 2·shells counts is within τ with probability 1 - α/N."""
        return self.laplace.ci_halfwidth(self.alpha / (2 + 2 * self.shells))


@dataclass(frozen=True)
class RefinedQuantile:
    """The public plan of one refined quantile (a function of p, ε, bounds and r only, so a plan
    can build it, and be refused, before anything is charged)."""

    p: Fraction
    lower: float
    upper: float
    levels: tuple[Level, ...]
    interval: IntervalPlan | None

    @classmethod
    def plan(
        cls,
        p: object,
        epsilon: object,
        lower: float,
        upper: float,
        *,
        rows_per_person: int = 1,
        alpha: float | None = None,
        interval_share: Fraction = DEFAULT_INTERVAL_SHARE,
        levels: tuple[tuple[Fraction, int, int], ...] = DEFAULT_LEVELS,
    ) -> RefinedQuantile:
        """Split ``epsilon`` over the levels (and the interval when ``alpha`` is given)."""
        level = rational_level(p)
        eps = to_fraction(epsilon)
        if not float(lower) < float(upper):
            raise fail("RefinedQuantile.plan", "upper", f"> lower ({lower})", upper)
        check_int("RefinedQuantile.plan", "rows_per_person", rows_per_person, minimum=1)
        if sum(share for share, _, _ in levels) != 1:
            raise fail("RefinedQuantile.plan", "levels", "shares summing to 1", levels)
        interval = None
        selection = eps
        last_bins = levels[-1][2]
        if alpha is not None:
            a = float(check_probability("quantile", "alpha", alpha, open_low=True, open_high=True))
            selection = eps * (1 - interval_share)
            laplace = Laplace.for_epsilon(eps * interval_share, 2 * rows_per_person)
            shells = max(1, (last_bins // SHELL_WIDTH).bit_length())
            interval = IntervalPlan(laplace, shells, a)
        sensitivity = (
            2 * rows_per_person * max(level.numerator, level.denominator - level.numerator)
        )
        planned = tuple(
            Level(
                half_width,
                check_int("RefinedQuantile.plan", "bins", bins, minimum=2),
                PermuteAndFlip(selection * share, sensitivity, bins + 1 if i == 0 else bins - 1),
            )
            for i, (share, half_width, bins) in enumerate(levels)
        )
        return cls(level, float(lower), float(upper), planned, interval)

    def run(
        self, count: Counter, rng: Rng | None = None
    ) -> tuple[float, float | None, float | None]:
        """The released value and, when planned, its (1-α) interval (else None, None)."""
        bins = QuantileBins(self.lower, self.upper, self.levels[0].bins)
        index, counts = self._select(bins, count(bins), self.levels[0], rng, interior=False)
        for level in self.levels[1:]:
            bins = _neighbourhood(bins, index, level, self.lower, self.upper)
            index, counts = self._select(bins, count(bins), level, rng, interior=True)
        value = _edges(bins)[index]
        if self.interval is None:
            return float(value), None, None
        low, high = self._interval(bins, counts, index, rng)
        return float(value), low, high

    def _select(
        self,
        bins: QuantileBins,
        counts: npt.NDArray[np.int64],
        level: Level,
        rng: Rng | None,
        *,
        interior: bool,
    ) -> tuple[int, npt.NDArray[np.int64]]:
        """The chosen edge and the counts (interior edges only after the first level: the outer
        edges of a neighbourhood do not know the values clamped into its first and last bins)."""
        scores, _ = edge_scores(counts, self.p)
        if interior:
            return 1 + level.mechanism.select(scores[1:-1], rng), counts
        return level.mechanism.select(scores, rng), counts

    def _interval(
        self, bins: QuantileBins, counts: npt.NDArray[np.int64], k: int, rng: Rng | None
    ) -> tuple[float, float]:
        assert self.interval is not None  # only called when planned
        plan, edges = self.interval, _edges(bins)
        below = _shells(k, -1, 1, plan.shells)  # bin ranges [start, stop) going down
        above = _shells(k, 1, bins.bins - 1, plan.shells)
        exact = [int(counts[:k].sum()), int(counts[k:].sum())]
        exact += [int(counts[a:b].sum()) for a, b in below + above]
        noisy = [int(v) for v in plan.laplace.release_integers(np.array(exact, np.int64), rng)]
        tau = plan.halfwidth
        p = float(self.p)
        n_below, n_above, shells = noisy[0], noisy[1], noisy[2:]
        # Upper bounds of (1-p)L - pU and pU - (1-p)L on the event that every count is within τ.
        excess = (1 - p) * n_below - p * n_above + tau
        deficit = p * n_above - (1 - p) * n_below + tau
        low, high = self.lower, self.upper
        total = 0.0
        for j, (start, _) in enumerate(below):
            total += shells[j] - tau
            if total >= excess + p + 1:
                low = float(edges[start])
                break
        total = 0.0
        for j, (_, stop) in enumerate(above):
            total += shells[len(below) + j] - tau
            if total >= deficit - p + 2:
                high = float(edges[stop])
                break
        return low, high


def _edges(bins: QuantileBins) -> npt.NDArray[np.float64]:
    steps = np.arange(bins.bins + 1, dtype=np.float64)
    return np.asarray(bins.lower + (bins.upper - bins.lower) / bins.bins * steps, np.float64)


def _neighbourhood(
    bins: QuantileBins, edge: int, level: Level, lower: float, upper: float
) -> QuantileBins:
    """± ``level.half_width`` bins of ``bins`` around ``edge``, shifted inside [lower, upper]."""
    width = min(2 * level.half_width, bins.bins)
    start = min(max(edge - level.half_width, 0), bins.bins - width)
    edges = _edges(bins)
    low = lower if start == 0 else float(edges[start])
    high = upper if start + width == bins.bins else float(edges[start + width])
    return QuantileBins(low, high, level.bins)


def _shells(k: int, step: int, limit: int, count: int) -> list[tuple[int, int]]:
    """Up to ``count`` disjoint bin ranges [start, stop) from edge k in the direction ``step``,
    of widths w, w, 2w, 4w, ... (w = :data:`SHELL_WIDTH`), never past bin ``limit`` (the
    neighbourhood's outer bins hold clamped values from outside it)."""
    shells: list[tuple[int, int]] = []
    near, width = k, SHELL_WIDTH
    for _ in range(count):
        far = near + step * width
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
        near, width = far, (width if not shells[1:] else 2 * width)
    return shells


def refined_quantile(
    values: npt.ArrayLike,
    p: float,
    epsilon: float,
    *,
    lower: float,
    upper: float,
    alpha: float | None = None,
    rng: Rng | None = None,
) -> tuple[float, float | None, float | None]:
    """An ε-DP p-quantile of ``values`` (one value per person) and, when ``alpha`` is given, its
    (1-α) interval (noise only), by multi-resolution refinement (see the module docstring)."""
    plan = RefinedQuantile.plan(p, epsilon, lower, upper, alpha=alpha)
    array = np.asarray(values, dtype=np.float64)
    return plan.run(lambda bins: bins.counts(array), rng)


def dp_quantile(
    values: npt.ArrayLike,
    p: float,
    epsilon: float,
    *,
    lower: float,
    upper: float,
    integer: bool = False,
    max_bins: int = DEFAULT_MAX_BINS,
    rng: Rng | None = None,
) -> float:
    """An ε-DP p-quantile of ``values`` (one value per person) with public bounds.

    Integer data whose range fits ``max_bins`` unit bins: one selection among the integers (exact
    at large ε). Otherwise the multi-resolution refinement of
    :mod:`dpcurator.estimators.quantile_refine`, whose error shrinks with n and ε.

    >>> from dpcurator.random import SeededRng
    >>> dp_quantile([1, 2, 3, 4, 5], 0.5, 1e6, lower=0, upper=10, integer=True, rng=SeededRng(1))
    3.0
    """
    check_real("dp_quantile", "lower", lower)
    check_real("dp_quantile", "upper", upper)
    bins = QuantileBins.for_bounds(lower, upper, integer=integer, max_bins=max_bins)
    if bins.lower == lower:  # not unit bins
        return refined_quantile(values, p, epsilon, lower=lower, upper=upper, rng=rng)[0]
    index = select_quantile_bin(bins.counts(values), p, epsilon, rng=rng)
    return float(bins.centres()[index])
