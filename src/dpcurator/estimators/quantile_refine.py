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
3. optionally a (1-α) interval (:class:`~dpcurator.estimators.quantile_interval.IntervalPlan`)
   from discrete Laplace counts around the final edge.

Which levels: :func:`choose_levels`, a public rule (the selection ε and the bounds only): two
levels, or at a selection ε below 1/2 one level of 65,536 bins (the coarse level's share of the
budget costs more there than the resolution it buys: benchmarks/estimators.py --quantiles at
ε = 0.1, n = 10^4), or one level of 1,024 evenly spaced candidates when finer bins would be too
narrow for float edges. The best choice depends on n and the data's density, which are private;
the rule is tuned at n = 10^4 (at much larger n and small ε, two levels would resolve finer).
Integer data whose range fits unit bins (``integer=True``) has one level choosing among the
integers (bin centres, :mod:`dpcurator.estimators.quantiles`).

Scores (edges, not bin centres, so that a candidate's score measures the rank distance of the
value it would release). For an edge e with L values below it among n, the target (0-indexed)
rank is ρ = p·(n - 1) and e is a perfect answer when ρ < L <= ρ + 1 (it separates the order
statistics around ρ)::

    q(e) = -|2·den·L - 2·num·(n - 1) - den|        (p = num / den)

Adding or removing one value moves L by at most one and ρ by p, in the same direction when the
value is below e, so q moves by at most 2·max(num, den - num); r values per person multiply that
by r. Each level is ε_l-DP (permute-and-flip with that sensitivity), the interval ε_ci-DP, and the
release is ε-DP with ε = Σ ε_l + ε_ci by basic composition.

MIN and MAX (p = 0 and p = 1) under add/remove neighbours (``one_sided``): the score of an edge
is -|2L - 1| for p = 0 and -|2(n - L) - 1| for p = 1. Adding one person adds r values; each
raises L (p = 0) or n - L (p = 1) by at most r for every edge, and since L >= 0 (n - L >= 0)
the distance |2L - 1| can only stay or grow (from L = 0 to 1 it stays 1): every score moves down
or stays; removing moves them all up or keeps them. The scores are then monotone, so
permute-and-flip is ε_l-DP with coins exp(-ε_l·gap / Δ) instead of exp(-ε_l·gap / (2Δ))
(McKenna & Sheldon 2020, Theorem 1 and its monotone case; McSherry & Talwar 2007): each level
spends its whole charge, where the general rule reached ε_l / 2 (issue 27 item 3). A later
level's interior edges count the values clamped into its window's end bins, so their L is exact
and the same holds. Under replace-one neighbours (a person removed and one added), some scores
rise and others fall: the general rule stays. Unit bins (scores of bin centres) are not monotone
either (a value entering an empty bin raises its score and lowers those above): they keep it too.

Interval: :mod:`dpcurator.estimators.quantile_interval`, from discrete Laplace counts around the
final edge (its ε is part of the same basic composition).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, check_probability, fail
from dpcurator.core.measures import PureDP
from dpcurator.core.numbers import dyadic_down, to_fraction
from dpcurator.estimators.quantile_interval import IntervalPlan, bin_edges
from dpcurator.estimators.quantiles import (
    QuantileBins,
    quantile_scores,
    rational_level,
    saturated,
)
from dpcurator.estimators.release import (
    Covers,
    Estimate,
    as_float_array,
    check_bounds,
    clamp_fill,
)
from dpcurator.mechanisms import PermuteAndFlip
from dpcurator.random import Rng

#: ``(share of the selection budget, half-width in bins of the previous level, bins)`` per level.
#: Chosen by measurement (benchmarks/estimators.py --quantiles): a coarse level that only has to
#: land within ± half-width of its bins (a tenth of ε; a fifth cost 10-20% at the quartiles at
#: ε = 1), then one fine level over that neighbourhood (bins of 1/262,144 of the range: below
#: the gaps between order statistics of 10^4 values on [0, 100]).
DEFAULT_LEVELS: tuple[tuple[Fraction, int, int], ...] = (
    (Fraction(1, 10), 0, 1024),
    (Fraction(9, 10), 16, 8192),
)

#: One level of 65,536 bins, for a selection ε below :data:`SMALL_EPSILON`: all of it on one
#: selection whose rank noise (about 1/ε ranks) dwarfs the bins at such ε.
FINE_ONE_LEVEL: tuple[tuple[Fraction, int, int], ...] = ((Fraction(1), 0, 65536),)

#: One level of evenly spaced candidates (the 1,025 edges of 1,024 bins), for bounds too narrow
#: for finer float edges.
ONE_LEVEL: tuple[tuple[Fraction, int, int], ...] = ((Fraction(1), 0, 1024),)

#: Selection ε below which :func:`choose_levels` keeps one fine level (measured, n = 10^4:
#: benchmarks/estimators.py --quantiles; at ε = 0.1 two levels lose the coarse level's fifth of
#: the budget, and one level was 10-20% better on all six cells; at ε = 1 the fine level's
#: resolution decides the lognormal cells and two levels win).
SMALL_EPSILON = Fraction(1, 2)

#: Share of a quantile's ε spent on its interval when one is asked for. The interval certifies
#: ranks with noisy counts (a rank offset and running shell counts, tested against walk
#: thresholds), which need several noise scales per side where the selection's rank error is
#: about 1/ε_sel, so at equal shares the interval stays ~3× the spread of the released values.
#: Two thirds (issue 28 item 1; half before) makes the intervals 18-45% narrower in absolute
#: terms and 1.8-3.2× that spread at n >= 2,000 (3-4× at n = 200, ε = 0.3), for 15-35% more
#: error in the value (``python benchmarks/quantile_intervals.py``; the table is in
#: docs/sql.md). A fifth (before issue 28) gave Adult's median age at ε = 1 an exact value
#: and the interval [19, 50]. Three quarters (measured with the first shells sized from the
#: noisy n) would narrow the intervals by another 4-19% (0.9-1.9× the spread of a value that is
#: itself worse) for 25-55% more median error and 26-85% more root-mean-square error in the
#: value (2,000 selections at ε/4 against ε/3 on the benchmark's data): not adopted.
DEFAULT_INTERVAL_SHARE = Fraction(2, 3)

#: A refined level's bins must be wider than this fraction of the bounds' magnitude (float
#: edges stay distinct); otherwise :func:`choose_levels` keeps one level.
_MIN_RELATIVE_WIDTH = 2.0**-40

#: Each level's ε is rounded down to n / 2^k with n < 2^_EPSILON_BITS (spending at most a 2^-39
#: relative part less than planned): permute-and-flip's coins then take their int64 path, where
#: the exact float-to-fraction ε (e.g. 0.1 = 3602879701896397 / 2^55) forces Python integers.
_EPSILON_BITS = 40

#: Counts the values of one public histogram (a numpy bincount, or an engine's GROUP BY bin).
Counter = Callable[[QuantileBins], npt.NDArray[np.int64]]


def edge_scores(
    counts: npt.ArrayLike, p: Fraction, rows_per_person: int = 1
) -> tuple[npt.NDArray[np.int64], int]:
    """The scores of the ``bins + 1`` edges of a histogram and their sensitivity (see the module
    docstring), exact (:func:`~dpcurator.estimators.quantiles.saturated`: no wrap-around)
    and clamped to [-2^62, 0]; ``counts`` of shape (..., bins) give scores of shape
    (..., bins + 1), one histogram per row."""
    check_int("edge_scores", "rows_per_person", rows_per_person, minimum=1)
    exact = np.asarray(counts, dtype=np.int64)
    num, den = p.numerator, p.denominator
    zeros = np.zeros((*exact.shape[:-1], 1), dtype=np.int64)
    below = np.concatenate([zeros, np.cumsum(exact, axis=-1)], axis=-1)
    # 2·den·L - 2·num·(n - 1) - den
    distance = np.abs(saturated(2 * den, below, 2 * num, below[..., -1:], 2 * num - den))
    return -distance, 2 * rows_per_person * max(num, den - num)


def choose_levels(
    lower: float, upper: float, epsilon: object = 1, max_bins: int | None = None
) -> tuple[tuple[Fraction, int, int], ...]:
    """The levels of a quantile from public inputs only (never the data): for a selection
    ``epsilon`` below :data:`SMALL_EPSILON` :data:`FINE_ONE_LEVEL` (unless its bins exceed
    ``max_bins``, a bound on one histogram's size), else :data:`DEFAULT_LEVELS`; :data:`ONE_LEVEL`
    when the finest bins would be too narrow for float edges (so later windows never collapse)."""
    magnitude = max(abs(float(lower)), abs(float(upper)))
    small = to_fraction(epsilon) < SMALL_EPSILON
    fits = max_bins is None or FINE_ONE_LEVEL[0][2] <= max_bins
    chosen = FINE_ONE_LEVEL if small and fits else DEFAULT_LEVELS
    finest = (float(upper) - float(lower)) / chosen[0][2]
    for _, half_width, bins in chosen[1:]:
        finest *= 2 * half_width / bins
    if finest <= magnitude * _MIN_RELATIVE_WIDTH:
        return ONE_LEVEL
    return chosen


@dataclass(frozen=True)
class Level:
    """One selection: ``bins`` equal-width bins over ± ``half_width`` bins of the previous level
    (the whole range for the first level), chosen among their edges by ``mechanism``."""

    half_width: int
    bins: int
    mechanism: PermuteAndFlip


@dataclass(frozen=True)
class RefinedQuantile:
    """The public plan of one refined quantile (a function of p, ε, bounds and r only, so a plan
    can build it, and be refused, before anything is charged). ``unit``: one level choosing
    among the integers (bin centres of unit bins)."""

    p: Fraction
    lower: float
    upper: float
    levels: tuple[Level, ...]
    interval: IntervalPlan | None
    unit: bool = False

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
        integer: bool = False,
        interval_share: Fraction = DEFAULT_INTERVAL_SHARE,
        levels: tuple[tuple[Fraction, int, int], ...] | None = None,
        max_bins: int | None = None,
        one_sided: bool = False,
    ) -> RefinedQuantile:
        """Split ``epsilon`` over the levels (and the interval when ``alpha`` is given); levels
        default to :func:`choose_levels` (``max_bins``: its bound on one level's bins);
        ``one_sided``: neighbours add or remove rows, never both (add/remove), so that the
        selections of p = 0 and p = 1 over edges are monotone (module docstring);
        ``integer`` data whose bounds fit
        :data:`~dpcurator.estimators.quantiles.DEFAULT_MAX_BINS` unit bins gets one level over the
        integers."""
        level = rational_level(p)
        eps = to_fraction(epsilon)
        check_bounds("RefinedQuantile.plan", lower, upper)
        check_int("RefinedQuantile.plan", "rows_per_person", rows_per_person, minimum=1)
        interval = None
        selection = eps if alpha is None else eps * (1 - interval_share)
        unit_bins = QuantileBins.for_bounds(lower, upper, integer=integer)
        unit = unit_bins.lower != float(lower)
        if unit:
            levels = ((Fraction(1), 0, unit_bins.bins),)
        elif levels is None:
            levels = choose_levels(lower, upper, selection, max_bins)
        if sum(share for share, _, _ in levels) != 1:
            raise fail("RefinedQuantile.plan", "levels", "shares summing to 1", levels)
        if alpha is not None:
            a = float(check_probability("quantile", "alpha", alpha, open_low=True, open_high=True))
            interval = IntervalPlan.for_epsilon(
                eps * interval_share,
                level,
                rows_per_person,
                a,
            )
        factor = 1 if unit else 2  # centre scores (quantiles.py) or edge scores (above)
        monotonic = one_sided and not unit and level in (0, 1)  # MIN, MAX: see the docstring
        num, den = level.numerator, level.denominator
        sensitivity = factor * rows_per_person * max(num, den - num)
        planned = tuple(
            Level(
                half_width,
                check_int("RefinedQuantile.plan", "bins", bins, minimum=2),
                PermuteAndFlip(
                    dyadic_down(selection * share, _EPSILON_BITS),
                    sensitivity,
                    bins if unit else bins + 1 if i == 0 else bins - 1,
                    monotonic=monotonic,
                ),
            )
            for i, (share, half_width, bins) in enumerate(levels)
        )
        return cls(level, float(lower), float(upper), planned, interval, unit)

    def first_bins(self) -> QuantileBins:
        """The public bins of the first level (unit bins around the integers when ``unit``)."""
        if self.unit:
            return QuantileBins(self.lower - 0.5, self.upper + 0.5, self.levels[0].bins)
        return QuantileBins(self.lower, self.upper, self.levels[0].bins)

    def select(self, level: int, counts: npt.ArrayLike, rng: Rng | None) -> int:
        """The index chosen at ``level`` from its histogram: a bin (``unit``), an edge of the
        first level, or an interior edge of a later level (the outer edges of a neighbourhood
        do not know the values clamped into its first and last bins)."""
        (chosen,) = self.select_rows(level, np.asarray(counts)[np.newaxis], rng)
        return chosen

    def select_rows(self, level: int, counts: npt.ArrayLike, rng: Rng | None) -> list[int]:
        """:meth:`select` for each row of ``counts`` (one histogram per group, shape (groups,
        bins)): the scores of all groups at once, then each group's selection in row order
        (the same draws as group by group)."""
        mechanism = self.levels[level].mechanism
        if self.unit:
            return [mechanism.select(row, rng) for row in quantile_scores(counts, self.p)[0]]
        scores, _ = edge_scores(counts, self.p)
        if level:
            return [1 + mechanism.select(row, rng) for row in scores[:, 1:-1]]
        return [mechanism.select(row, rng) for row in scores]

    def next_bins(self, bins: QuantileBins, index: int, level: int) -> QuantileBins:
        """The bins of ``level`` (>= 1) around edge ``index`` of the previous level's ``bins``:
        ± half-width bins, shifted inside [lower, upper] (see :func:`_neighbourhood`)."""
        return _neighbourhood(bins, index, self.levels[level], self.lower, self.upper)

    def fine_bins(
        self, code: tuple[int, int] | None, index: int, level: int
    ) -> tuple[int, int] | None:
        """Where the bins of ``level`` (>= 1) around edge ``index`` lie among equal-width bins of
        [lower, upper]: ``(resolution, first)`` when they are the ``bins`` consecutive bins from
        ``first`` of ``resolution`` bins of the bounds, given the previous level's ``code`` (the
        first level's is ``(bins, 0)``), else None (a width that does not divide the bins).
        Mathematically the same bins as :meth:`next_bins` (which names their edges); counted
        this way, every level is a window of one fine binning of the bounds
        (:mod:`dpcurator.query.plan.quantile`)."""
        current = self.levels[level]
        if code is None:
            return None
        resolution, first = code
        start, width = _window(self.levels[level - 1].bins, index, current)
        if current.bins % width:
            return None
        factor = current.bins // width
        return resolution * factor, (first + start) * factor

    def finish(
        self,
        bins: QuantileBins,
        counts: npt.ArrayLike,
        index: int,
        rng: Rng | None,
        alpha: float | None = None,
        *,
        first: tuple[QuantileBins, npt.ArrayLike] | None = None,
    ) -> tuple[float, float | None, float | None]:
        """The released value from the last level's choice and, when planned, its (1-α)
        interval (``alpha`` overrides the planned level; ``first``: the first level's bins and
        exact counts, over which the interval's shells continue outside the last window)."""
        value = float(bins.centres()[index] if self.unit else bin_edges(bins)[index])
        if self.interval is None:
            return value, None, None
        exact = np.asarray(counts, dtype=np.int64).reshape(-1)
        outer = first if len(self.levels) > 1 else None  # shells past the last window
        limits = (self.lower, self.upper)
        low, high = self.interval.bounds(
            self.p, limits, bins, exact, index, rng=rng, alpha=alpha, first=outer
        )
        if self.unit:  # integer values: the interval's ends round inwards
            low, high = float(math.ceil(low)), float(math.floor(high))
        return value, min(low, value), max(high, value)

    def run(
        self, count: Counter, rng: Rng | None = None, alpha: float | None = None
    ) -> tuple[float, float | None, float | None]:
        """The released value and, when planned, its (1-α) interval (else None, None)."""
        bins = self.first_bins()
        counts = count(bins)
        first = (bins, counts)
        index = self.select(0, counts, rng)
        for level in range(1, len(self.levels)):
            bins = self.next_bins(bins, index, level)
            counts = count(bins)
            index = self.select(level, counts, rng)
        return self.finish(bins, counts, index, rng, alpha, first=first)


def _window(bins: int, edge: int, level: Level) -> tuple[int, int]:
    """(first bin, bins): ± ``level.half_width`` of ``bins`` bins around ``edge``, shifted
    inside them."""
    width = min(2 * level.half_width, bins)
    return min(max(edge - level.half_width, 0), bins - width), width


def _neighbourhood(
    bins: QuantileBins, edge: int, level: Level, lower: float, upper: float
) -> QuantileBins:
    """± ``level.half_width`` bins of ``bins`` around ``edge``, shifted inside [lower, upper]."""
    start, width = _window(bins.bins, edge, level)
    edges = bin_edges(bins)
    low = lower if start == 0 else float(edges[start])
    high = upper if start + width == bins.bins else float(edges[start + width])
    return QuantileBins(low, high, level.bins)


def refined_quantile(
    values: npt.ArrayLike,
    p: float,
    epsilon: float,
    *,
    lower: float,
    upper: float,
    alpha: float | None = None,
    integer: bool = False,
    rng: Rng | None = None,
) -> tuple[float, float | None, float | None]:
    """An ε-DP p-quantile of ``values`` (one value per person) and, when ``alpha`` is given, its
    (1-α) interval (noise only), by multi-resolution refinement (see the module docstring;
    ``integer``: unit bins over the integers when the bounds fit, :meth:`RefinedQuantile.plan`)."""
    plan = RefinedQuantile.plan(p, epsilon, lower, upper, alpha=alpha, integer=integer)
    array = np.asarray(values, dtype=np.float64)
    return plan.run(lambda bins: bins.counts(array), rng)


def median(
    values: object,
    *,
    epsilon: float,
    bounds: tuple[float, float],
    alpha: float = 0.05,
    rng: Rng | None = None,
) -> Estimate:
    """The ε-DP median of ``values`` (numpy, pandas or Polars; one value per person, clamped to
    the public ``bounds`` = (lower, upper), NaN -> their midpoint) with its (1-α) noise-only
    interval: :func:`refined_quantile` at p = 1/2 (permute-and-flip over refined public edges,
    Smith 2011; McKenna & Sheldon 2020), ε-DP by basic composition of its levels and interval.

    >>> from dpcurator.random import SeededRng
    >>> release = median([1.0, 2.0, 3.0, 4.0, 5.0], epsilon=1e6, bounds=(0, 10), rng=SeededRng(1))
    >>> 3 <= float(release.value) <= 4  # an edge with the 3 smallest values below it
    True
    """
    owner = "median"
    if not isinstance(bounds, tuple | list) or len(bounds) != 2:
        raise fail(owner, "bounds", "a pair (lower, upper)", bounds)
    low, high = check_bounds(owner, *bounds)
    data = clamp_fill(as_float_array(owner, "values", values, ndim=1), low, high, (low + high) / 2)
    value, ci_low, ci_high = refined_quantile(
        data, 0.5, epsilon, lower=low, upper=high, alpha=alpha, rng=rng
    )
    return Estimate(
        np.array(value),
        np.array(ci_low),
        np.array(ci_high),
        Covers.NOISE,
        alpha,
        PureDP(to_fraction(epsilon)),
        "refined quantile (permute-and-flip; Smith 2011)",
    )


def dp_quantile(
    values: npt.ArrayLike,
    p: float,
    epsilon: float,
    *,
    lower: float,
    upper: float,
    integer: bool = False,
    rng: Rng | None = None,
) -> float:
    """An ε-DP p-quantile of ``values`` (one value per person) with public bounds: the
    :class:`RefinedQuantile` plan of these public inputs, without an interval. Integer data
    whose range fits :data:`~dpcurator.estimators.quantiles.DEFAULT_MAX_BINS` unit bins gets one
    selection among the integers (exact at large ε); other data the multi-resolution
    refinement, whose error shrinks with n and ε.

    >>> from dpcurator.random import SeededRng
    >>> dp_quantile([1, 2, 3, 4, 5], 0.5, 1e6, lower=0, upper=10, integer=True, rng=SeededRng(1))
    3.0
    """
    value, _, _ = refined_quantile(
        values, p, epsilon, lower=lower, upper=upper, integer=integer, rng=rng
    )
    return value
