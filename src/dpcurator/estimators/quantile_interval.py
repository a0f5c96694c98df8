"""The (1-α) confidence interval of a refined DP quantile (:mod:`dpcurator.estimators.
quantile_refine`), from discrete Laplace counts around the final edge.

Interval (noise only: it covers the empirical quantile of the clamped values the engine counted,
not the population quantile). p = num/den; with the final pivot edge e_k, L values below it and
U at or above (n = L + U), two kinds of statistic get discrete Laplace noise:

* the rank offset T = (den - num)·L - num·U = den·(L - p·n). One value moves L or U by one, so T
  by at most max(num, den - num); r values per person: L1 sensitivity r·max(num, den - num),
  noise of ε_T = :data:`OFFSET_SHARE`·ε_ci;
* the counts of disjoint shells of values going out from e_k on each side, each sized from the
  noisy counts of the shells before it (:mod:`dpcurator.estimators.quantile_shells`; the first
  reaches one value on unit bins, so that a value held by many people gives an interval of that
  one value, and :data:`FIRST_SHELL_SHARE` of the bounds' range otherwise). A value is in at most
  one shell whatever the sizes: L1 sensitivity r over all of them, noise of ε_S = ε_ci - ε_T.

The interval is ε_ci-DP by the Laplace mechanism's guarantee (Dwork, McSherry, Nissim & Smith
2006; discrete Laplace: Canonne, Kamath & Steinke 2020), adaptive parallel composition over the
shells and basic composition with T.

With C_m the values between e_k and the far edge e_m of the m-th shell below it (m = 0 is e_k
itself), F(e_m) = L - C_m values lie below e_m, and x_(⌊ρ⌋) >= e_m (ρ = p·(n - 1)) as soon as
F(e_m) <= ρ, i.e. G_m = T - den·C_m + num <= 0. Its noisy version is G_m + N_m with
N_m = Z_T - den·(Z_1 + ... + Z_m), and the lower end is the first e_m with G̃_m + den·t_m <= 0.
The upper end likewise: x_(⌈ρ⌉) < e'_m once F(e'_m) = L + C'_m >= ρ + 1 (F is an integer >=
⌈ρ⌉ + 1), i.e. T + den·C'_m + num - den >= 0. An end is wrong only if some test passes while
its G_m is on the wrong side, which needs the walk Z_T/den ± (Z_1 + ... + Z_m) (the same law
both ways: the noise is symmetric) to cross t_m at some m; the thresholds
(:func:`~dpcurator.estimators.walk_thresholds.crossing_thresholds`) make that at most α/2 per
side, computed exactly for the walk (before: a union bound over the tests, each at α/(2(M + 1)),
although they share Z_T and their first shells). So the interval holds x_(⌊ρ⌋) and x_(⌈ρ⌉),
hence the linearly interpolated quantile, with probability >= 1 - α. The selection's own error
and the shells' sizes play no part in the guarantee, and every threshold is a function of public
inputs (ε, r, p, α and :data:`SHELL_STEPS`). Where no test passes, the end is the public bound.
The last level's shells stop at its window (its end bins hold the values clamped from outside
it); with more than one level they go on over the first level's edges outside the window.

Before issue 28 item 1 the noisy statistics were L and U themselves (L1 sensitivity 2r): T costs
r·max(p, 1-p) instead, so for the median at a third of ε_ci its noise in ranks is that of L and U
at two thirds.

Width (α = 0.1; ``python benchmarks/quantile_intervals.py``: 200 runs on one data set against the
oracle, the 5% and 95% points of the released values plus the gap between x_(⌊ρ⌋) and x_(⌈ρ⌉);
:data:`OFFSET_SHARE`, :data:`FIRST_SHELL_SHARE` and the sizing rule were chosen there). The
walk thresholds, the sized shells and two thirds of ε on the interval
(:data:`~dpcurator.estimators.quantile_refine.DEFAULT_INTERVAL_SHARE`) took N(50, 10²) on
[0, 100], n = 10^4, ε = 1, median from 0.21 (5.1× the oracle) to 0.12 (2.2×); p = 0.9 from 0.39
(5.0×) to 0.18 (1.6×); n = 2,000, ε = 0.3, p = 0.25 from 4.7 (5.5×) to 2.5 (2.7×); n = 200,
ε = 0.3 from 75 (17×, an end at a bound) to 28 (4.4×); UCI Adult's ages of its 311
American-Indian/Eskimo people at ε = 0.3 (the grouped median of benchmarks/adult_workflow.py)
from 31 ages (7.8×) to 14 (2.3×), its 271 "Other" from 28 (9.3×) to 14 (2.8×); Adult-like ages
at n = 10^4, ε = 1: the released age itself or it and the next (the oracle's width), unchanged.
The released values' error grew by 15-35% (a third of ε on the selection instead of a half).
The interval stays about twice the oracle because certifying ranks needs counts of their own
(several noise scales per side, summed over a few shells), where the selection (permute-and-flip
on exact scores) errs by about 1/ε_sel ranks and releases no counts an interval could reuse.
Coverage is tested at n ∈ {200, 2000, 10^4}, ε ∈ {0.3, 1}, integer and continuous data,
p ∈ {0.25, 0.5, 0.9} (tests/test_quantile_interval_oracle.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator.estimators.quantile_shells import RunningSums, Side, walk
from dpcurator.estimators.quantiles import QuantileBins
from dpcurator.estimators.walk_thresholds import crossing_thresholds
from dpcurator.mechanisms import Laplace
from dpcurator.random import Rng

#: The first shell's far edge is this share of the bounds' range from the chosen edge
#: (continuous data; one value on unit bins); later shells are sized from the counts
#: (:mod:`dpcurator.estimators.quantile_shells`).
FIRST_SHELL_SHARE = Fraction(1, 4096)

#: Most shells per side (public: the walk thresholds are computed for this many tests).
SHELL_STEPS = 12

#: Share of the interval's ε spent on the chosen edge's rank offset T (the rest on its shells).
OFFSET_SHARE = Fraction(1, 3)


@dataclass(frozen=True)
class IntervalPlan:
    """The noisy counts of the interval: ``offset`` on the chosen edge's rank offset T (in units
    of 1/den), ``shell_noise`` on up to ``steps`` shells per side, the first reaching
    ``first_distance`` from the chosen edge (in the data's units)."""

    offset: Laplace
    shell_noise: Laplace
    alpha: float
    steps: int = SHELL_STEPS
    first_distance: float = 1.0

    @classmethod
    def for_epsilon(
        cls,
        epsilon: Fraction,
        p: Fraction,
        rows_per_person: int,
        alpha: float,
        *,
        first_distance: float,
    ) -> IntervalPlan:
        """The counts at ``epsilon`` in all: :data:`OFFSET_SHARE` of it on T (L1 sensitivity
        r·max(num, den - num)), the rest on the shells (L1 sensitivity r)."""
        offset = Laplace.for_epsilon(epsilon * OFFSET_SHARE, offset_sensitivity(p, rows_per_person))
        shell_noise = Laplace.for_epsilon(epsilon * (1 - OFFSET_SHARE), rows_per_person)
        return cls(offset, shell_noise, alpha, SHELL_STEPS, first_distance)

    def epsilon(self, p: Fraction, rows_per_person: int) -> Fraction:
        """The ε of the interval's counts (basic composition of T's and the shells' noise)."""
        return self.offset.epsilon(offset_sensitivity(p, rows_per_person)) + (
            self.shell_noise.epsilon(rows_per_person)
        )

    def thresholds(self, p: Fraction, alpha: float | None = None) -> list[float]:
        """t_m (in ranks) for m = 0..steps: boundaries the summed noise crosses with probability
        at most α/2 per side (:func:`~dpcurator.estimators.walk_thresholds.crossing_thresholds`)."""
        a = self.alpha if alpha is None else alpha
        scales = (self.offset.scale, p.denominator, self.shell_noise.scale)
        return list(crossing_thresholds(*scales, self.steps, a / 2))

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
        limit where no test passes). ``alpha`` overrides the planned level; ``first``: with
        more than one level, the first level's bins and exact counts, over which the shells
        continue outside the last window."""
        edges = bin_edges(bins)
        sums = RunningSums.of(counts)  # the values below each edge
        num, den = p.numerator, p.denominator
        # den·(L - p·n) = (den - num)·L - num·U, in Python integers, clamped to ±2^62
        lower_count, total = sums.between(0, k), sums.between(0, bins.bins)
        offset = (den - num) * lower_count - num * (total - lower_count)
        clamp = min(max(offset, -(2**62)), 2**62)
        noisy_offset = int(self.offset.release_integers(np.array([clamp], np.int64), rng)[0])
        thresholds = self.thresholds(p, alpha)
        scale = float(self.shell_noise.scale)

        def noisy(count: int) -> int:
            exact = np.array([min(max(count, -(2**62)), 2**62)], np.int64)
            return int(self.shell_noise.release_integers(exact, rng)[0])

        # lower end: den·(F(e) - ρ) = T - den·C_m + num <= 0 certified, i.e. den·C̃_m >= T̃ + num;
        # upper end: den·(F(e) - ρ - 1) = T + den·C_m + num - den >= 0, den·C̃_m >= den - num - T̃
        below, above = _sides(edges, sums, k, bins, first)

        def end(side: Side, base: int) -> float | None:
            return walk(
                side,
                base,
                den=den,
                thresholds=thresholds,
                first_distance=self.first_distance,
                noise_scale=scale,
                noisy=noisy,
            )

        low, high = end(below, noisy_offset + num), end(above, den - num - noisy_offset)
        return limits[0] if low is None else low, limits[1] if high is None else high


def _sides(
    edges: npt.NDArray[np.float64],
    sums: RunningSums,
    k: int,
    bins: QuantileBins,
    first: tuple[QuantileBins, npt.ArrayLike] | None,
) -> tuple[Side, Side]:
    """The sides below and above edge ``k`` of the last level (its end bins hold clamped values,
    so its shells stop at edges 1 and bins - 1), continued over the first level's edges outside
    the window when ``first`` is given."""
    none = np.zeros(0, dtype=np.float64)
    if first is None:
        return (
            Side(edges, sums, k, -1, 1, none, None, 0),
            Side(edges, sums, k, 1, bins.bins - 1, none, None, 0),
        )
    first_bins, first_counts = first
    outer_edges, outer_sums = bin_edges(first_bins), RunningSums.of(first_counts)
    start = max(int(np.searchsorted(outer_edges, bins.lower, side="right")) - 1, 0)
    stop = min(int(np.searchsorted(outer_edges, bins.upper, side="left")), first_bins.bins)
    return (
        Side(edges, sums, k, -1, 1, outer_edges, outer_sums, start),
        Side(edges, sums, k, 1, bins.bins - 1, outer_edges, outer_sums, stop),
    )


def offset_sensitivity(p: Fraction, rows_per_person: int) -> int:
    """The L1 sensitivity of T = (den - num)·L - num·U (p = num/den, L and U the values below and
    at or above an edge): one value moves L or U by one, T by at most max(num, den - num); r
    values per person multiply that by r."""
    return rows_per_person * max(p.numerator, p.denominator - p.numerator)


def bin_edges(bins: QuantileBins) -> npt.NDArray[np.float64]:
    """The ``bins + 1`` edges of ``bins``, the candidates of a refined level."""
    steps = np.arange(bins.bins + 1, dtype=np.float64)
    return np.asarray(bins.lower + (bins.upper - bins.lower) / bins.bins * steps, np.float64)
