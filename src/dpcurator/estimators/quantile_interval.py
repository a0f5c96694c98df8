"""The (1-α) confidence interval of a refined DP quantile (:mod:`dpcurator.estimators.
quantile_refine`), from discrete Laplace counts around the final edge.

Interval (noise only: it covers the empirical quantile of the clamped values the engine counted,
not the population quantile). p = num/den; with the final pivot edge e_k, L values below it and
U at or above (n = L + U), two kinds of statistic get discrete Laplace noise:

* the rank offset T = (den - num)·L - num·U = den·(L - p·n). One value moves L or U by one, so T
  by at most max(num, den - num); r values per person: L1 sensitivity r·max(num, den - num),
  noise of ε_T = :data:`OFFSET_SHARE`·ε_ci;
* the number of values n (L1 sensitivity r), noise of ε_n = :data:`TOTAL_SHARE`·ε_ci. It only
  sizes the first shells: they assume :data:`DENSITY_PRIOR`·4p(1 - p) times the bounds' average
  density n/(upper - lower) (:func:`_shape`), with n taken :data:`TOTAL_MARGIN` noise scales
  above its noisy count;
* the counts of disjoint shells of values going out from e_k on each side, the first sized at
  that prior density and each later one from the noisy counts of the shells before it
  (:mod:`dpcurator.estimators.quantile_shells`; at least one bin, so one value on unit bins,
  and a value held by many people gives an interval of that one value). A value is in at most
  one shell whatever the sizes: L1 sensitivity r over all of them, noise of
  ε_S = ε_ci - ε_T - ε_n.

The interval is ε_ci-DP by the Laplace mechanism's guarantee (Dwork, McSherry, Nissim & Smith
2006; discrete Laplace: Canonne, Kamath & Steinke 2020), adaptive parallel composition over the
shells and basic composition with T and n.

With C_m the values between e_k and the far edge e_m of the m-th shell below it (m = 0 is e_k
itself), F(e_m) = L - C_m values lie below e_m, and x_(⌊ρ⌋) >= e_m (ρ = p·(n - 1)) as soon as
F(e_m) <= ρ, i.e. G_m = T - den·C_m + num <= 0. Its noisy version is G_m + N_m with
N_m = Z_T - den·(Z_1 + ... + Z_m), and the lower end is the first e_m with G̃_m + den·t_m <= 0.
The upper end likewise: x_(⌈ρ⌉) < e'_m once F(e'_m) = L + C'_m >= ρ + 1 (F is an integer >=
⌈ρ⌉ + 1), i.e. T + den·C'_m + num - den >= 0. An end is wrong only if some test passes while
its G_m is on the wrong side, which needs the walk Z_T/den ± (Z_1 + ... + Z_m) (the same law
both ways: the noise is symmetric) to cross t_m at some m; the thresholds
(:func:`~dpcurator.estimators.walk_thresholds.crossing_thresholds`, the level shared by
:data:`STEP_WEIGHTS`) make that at most α/2 per side, computed exactly for the walk (before: a
union bound over the tests, each at α/(2(M + 1)), although they share Z_T and their first
shells). So the interval holds x_(⌊ρ⌋) and x_(⌈ρ⌉), hence the linearly interpolated
quantile, with probability >= 1 - α. The selection's own error and the shells' sizes play no
part in the guarantee, and every threshold is a function of public inputs (ε, r, p, α,
:data:`SHELL_STEPS` and :data:`STEP_WEIGHTS`). Where no test passes, the end is the public bound.
The last level's shells stop at its window (its end bins hold the values clamped from outside
it); with more than one level they go on over the first level's edges outside the window.

Before issue 28 item 1 the noisy statistics were L and U themselves (L1 sensitivity 2r): T costs
r·max(p, 1-p) instead, so for the median at a third of ε_ci its noise in ranks is that of L and U
at two thirds.

Width (α = 0.1; ``python benchmarks/quantile_intervals.py``: medians over runs on one data set
against the oracle, the 5% and 95% points of the released values plus the gap between x_(⌊ρ⌋)
and x_(⌈ρ⌉); :data:`OFFSET_SHARE`, :data:`TOTAL_SHARE`, :data:`DENSITY_PRIOR` and the sizing rule
were chosen there). The walk thresholds, the sized shells and two thirds of ε on the interval
(:data:`~dpcurator.estimators.quantile_refine.DEFAULT_INTERVAL_SHARE`) took N(50, 10²) on
[0, 100], n = 10^4, ε = 1, median from 0.21 (5.1× the oracle) to 0.12; n = 200, ε = 0.3 from 75
(17×, an end at a bound) to 28; UCI Adult's ages of its 311 American-Indian/Eskimo people at
ε = 0.3 (the grouped median of benchmarks/adult_workflow.py) from 31 ages to 14. First shells
sized from the noisy n (before: 1/4096 of the bounds, a thousand values at n = 10^5 and a few
steps short at n <= 200) then took n = 10^5 from 0.049 (15×) to 0.0076 (2.3×), n = 200 to 19
(3.1×), n = 50 at ε = 1 from 52 (7×) to 24 (3.2×), lognormal incomes on [0, 10^6] from 488 to
366, for 3% more at n = 10^4's median (0.13, 2.5×); integer groups kept their widths (14 ages,
2.8-3.5× an oracle of 4-5 ages). Weighting the early tests (:data:`STEP_WEIGHTS`) then took
n = 10^4's median to 0.11 (2.1×), p = 0.9 to 0.14 (1.4×), n = 200 to 17.8 (3.0×) and Adult's
two smallest groups to 12 ages (2.4× and 3.0×). The interval stays 1.4-3× the oracle because
certifying ranks needs counts of their own (several noise scales per side, summed over a few
shells), where the selection (permute-and-flip on exact scores) errs by about 1/ε_sel ranks and
releases no counts an interval could reuse. Coverage is tested at n ∈ {200, 2000, 10^4},
ε ∈ {0.3, 1}, integer and continuous data, p ∈ {0.25, 0.5, 0.9}
(tests/test_quantile_interval_oracle.py).
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

#: Most shells per side (public: the walk thresholds are computed for this many tests).
SHELL_STEPS = 12

#: How the walk's crossing level is shared among its tests m = 0, 1, 2, ... (relative weights,
#: the last repeating to :data:`SHELL_STEPS`; :func:`~dpcurator.estimators.walk_thresholds.
#: crossing_thresholds`). Most ends are certified by the first three shells (92% at n = 10^4,
#: ε = 1; 72% at n = 200, ε = 0.3), so those get the most; a later test, needed where a
#: quantile sits in a gap of the data, gets less, and the test of e_k itself half. Measured
#: against equal weights (``python benchmarks/quantile_intervals.py --reps 400 --datasets
#: 100``): intervals 12-16% narrower at n = 10^4, 4-8% at n <= 2000, 13-14% on UCI Adult's
#: small groups, none wider; for a median at ε_ci = 2/3 the thresholds go from 8.5, 11.5, 13.5,
#: 15.5 ... 27 ranks to 8.5, 9.5, 11.5, 13.5 ... 34.
STEP_WEIGHTS = (0.5, 1.0, 1.0, 1.0, 0.5, 0.25, 0.125)

#: Share of the interval's ε spent on the chosen edge's rank offset T.
OFFSET_SHARE = Fraction(1, 3)

#: Share of the interval's ε spent on the number of values n, which sizes the first shells (the
#: rest of ε goes to the shells). Measured: 1/16 (with a margin of 2) left less for the tests
#: and gave intervals up to 24% wider, 1/8 up to 25%; 1/64 a less certain n and up to 13% wider
#: ones at n <= 200.
TOTAL_SHARE = Fraction(1, 32)

#: The first shell of a side assumes this many times the bounds' average density (n over their
#: range) at the median: twice a normal's when the bounds span ±5 standard deviations (a first
#: shell too large lands the end past where it had to be, one too small only costs a step).
#: Measured (``python benchmarks/quantile_intervals.py``): 4 gave normal data 5-10% narrower
#: intervals and lognormal incomes under bounds [0, 10^6] 48% wider than 8.
DENSITY_PRIOR = 8.0

#: ... times 4·p·(1 - p) at the p-quantile (a logistic distribution's density there is
#: p·(1 - p) over its scale), at least this share of the median's.
SHAPE_FLOOR = 1 / 16

#: The prior takes n this many noise scales above its noisy count (a smaller first shell, for
#: the reason above).
TOTAL_MARGIN = 1


@dataclass(frozen=True)
class IntervalPlan:
    """The noisy counts of the interval: ``offset`` on the chosen edge's rank offset T (in units
    of 1/den), ``total`` on the number of values, ``shell_noise`` on up to ``steps`` shells per
    side (the first shells' prior density is :data:`DENSITY_PRIOR` times the noisy n over the
    width of the public limits :meth:`bounds` is given)."""

    offset: Laplace
    total: Laplace
    shell_noise: Laplace
    alpha: float
    steps: int = SHELL_STEPS

    @classmethod
    def for_epsilon(
        cls,
        epsilon: Fraction,
        p: Fraction,
        rows_per_person: int,
        alpha: float,
    ) -> IntervalPlan:
        """The counts at ``epsilon`` in all: :data:`OFFSET_SHARE` of it on T (L1 sensitivity
        r·max(num, den - num)), :data:`TOTAL_SHARE` on n and the rest on the shells (L1
        sensitivity r each)."""
        offset = Laplace.for_epsilon(epsilon * OFFSET_SHARE, offset_sensitivity(p, rows_per_person))
        total = Laplace.for_epsilon(epsilon * TOTAL_SHARE, rows_per_person)
        shells = Laplace.for_epsilon(epsilon * (1 - OFFSET_SHARE - TOTAL_SHARE), rows_per_person)
        return cls(offset, total, shells, alpha)

    def epsilon(self, p: Fraction, rows_per_person: int) -> Fraction:
        """The ε of the interval's counts (basic composition of T's, n's and the shells' noise)."""
        return (
            self.offset.epsilon(offset_sensitivity(p, rows_per_person))
            + self.total.epsilon(rows_per_person)
            + self.shell_noise.epsilon(rows_per_person)
        )

    def thresholds(self, p: Fraction, alpha: float | None = None) -> list[float]:
        """t_m (in ranks) for m = 0..steps: boundaries the summed noise crosses with probability
        at most α/2 per side (:func:`~dpcurator.estimators.walk_thresholds.crossing_thresholds`)."""
        a = self.alpha if alpha is None else alpha
        scales = (self.offset.scale, p.denominator, self.shell_noise.scale)
        return list(crossing_thresholds(*scales, step_weights(self.steps), a / 2))

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
        noisy_offset = _release(self.offset, offset, rng)
        noisy_total = _release(self.total, total, rng)
        thresholds = self.thresholds(p, alpha)
        scale = float(self.shell_noise.scale)
        assumed_total = max(noisy_total + TOTAL_MARGIN * float(self.total.scale), 1.0)
        prior_density = DENSITY_PRIOR * _shape(p) * assumed_total / (limits[1] - limits[0])

        def noisy(count: int) -> int:
            return _release(self.shell_noise, count, rng)

        # lower end: den·(F(e) - ρ) = T - den·C_m + num <= 0 certified, i.e. den·C̃_m >= T̃ + num;
        # upper end: den·(F(e) - ρ - 1) = T + den·C_m + num - den >= 0, den·C̃_m >= den - num - T̃
        below, above = _sides(edges, sums, k, bins, first)

        def end(side: Side, base: int) -> float | None:
            return walk(
                side,
                base,
                den=den,
                thresholds=thresholds,
                prior_density=prior_density,
                noise_scale=scale,
                noisy=noisy,
            )

        low, high = end(below, noisy_offset + num), end(above, den - num - noisy_offset)
        return limits[0] if low is None else low, limits[1] if high is None else high


def step_weights(steps: int) -> tuple[float, ...]:
    """The weights of tests 0..``steps`` (:data:`STEP_WEIGHTS`, its last repeated)."""
    return tuple(STEP_WEIGHTS[min(m, len(STEP_WEIGHTS) - 1)] for m in range(steps + 1))


def _shape(p: Fraction) -> float:
    """The prior density at the p-quantile relative to the median's: 4·p·(1 - p), at least
    :data:`SHAPE_FLOOR`."""
    return max(4 * float(p * (1 - p)), SHAPE_FLOOR)


def _release(noise: Laplace, count: int, rng: Rng | None) -> int:
    """``count`` (a Python integer, clamped to ±2^62) with ``noise``."""
    exact = np.array([min(max(count, -(2**62)), 2**62)], np.int64)
    return int(noise.release_integers(exact, rng)[0])


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
