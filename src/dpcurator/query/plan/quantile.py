"""Quantiles in the query layer: refined selection level by level, one engine pass per level.

A quantile output (``MEDIAN``, ``QUANTILE``, ``MIN``, ``MAX``, the builder's ``quantile``) is
planned as a :class:`~dpcurator.estimators.quantile_refine.RefinedQuantile` from public inputs
only (p, its ε share per group, the bounds, rows per person, the column's type): every level's
mechanism and the interval's noise are built at plan time, so the whole cost is known and charged
once before any data is read, and every refusal is free.

Release (:func:`release_quantiles`): the first level's histogram is an exact aggregate of the
query's own plan. Each later level is ONE engine pass for all quantile outputs and all groups:
the same table, filter, grouping and contribution bounding, whose aggregates are the histograms
of each group's window chosen by the previous DP step. The window of a group is a function of
public inputs and that group's level-1 DP output only; an ungrouped plan counts the window
directly, a grouped plan counts ``(x - low_g) / (high_g - low_g)`` over [0, 1] with the group's
window picked by a CASE on the group key (the same arithmetic as the ungrouped bins, so bins
agree bit for bit). The number of passes is the number of levels, a public number.

Levels: :func:`~dpcurator.estimators.quantile_refine.choose_levels` with every level's
histogram held to :data:`~dpcurator.query.plan.limits.MAX_HISTOGRAM_BINS` bins per group (engine
memory), so two levels at every ε: the library's one level of 65,536 bins at small ε would hold
65,536 counts per group and quantile output.

Intervals: the (1-α) interval of :mod:`~dpcurator.estimators.quantile_interval`, from discrete
Laplace counts around the final edge. It accounts for the privacy noise only: it covers the
empirical quantile of the values the engine counted (after filtering, contribution bounding and
clamping to the bounds), not a population quantile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator.estimators.quantile_refine import RefinedQuantile
from dpcurator.estimators.quantiles import QuantileBins, rank_error
from dpcurator.query import ir
from dpcurator.query.plan.limits import MAX_HISTOGRAM_BINS
from dpcurator.random import Rng

#: The interval's α at plan time (a release passes its own α; the noise does not depend on it).
PLANNED_ALPHA = 0.05

#: Computes one exact plan (the engine, without the session's result cache).
Compute = Callable[[ir.AggregatePlan], ir.ExactResult]
#: Reads the exact histogram ``name`` of ``bins`` bins for each released key (total: 0 if absent).
ReadCounts = Callable[
    [ir.ExactResult, Sequence[tuple[ir.ScalarValue, ...]], str, int], npt.NDArray[np.int64]
]


@dataclass(frozen=True)
class QuantileStep:
    """A quantile released by refinement (see the module docstring).

    Attributes:
        exact: the name of the level-1 histogram in the query's exact plan.
        expr: the value read.
        refined: the public plan (levels, mechanisms, interval) at ``epsilon_per_group``.
        p: the quantile level.
        epsilon_per_group: each group's ε (the output's share over groups per person).
        rows_per_person: r, the rows one person adds to a group.
        integer: whether the value is an integer (unit bins when the bounds fit).
        one_sided: neighbours add or remove rows, never both (MIN and MAX then spend their
            whole ε: :class:`RefinedQuantile`).
    """

    exact: str
    expr: ir.Expr
    refined: RefinedQuantile
    p: float
    epsilon_per_group: Fraction
    rows_per_person: int
    integer: bool
    one_sided: bool = False

    @property
    def bins(self) -> QuantileBins:
        """The first level's public bins."""
        return self.refined.first_bins()

    def scaled(self, factor: Fraction) -> QuantileStep:
        """The same step at ``factor`` times its ε (re-planned: public inputs only)."""
        return plan_step(
            self.exact,
            self.expr,
            self.p,
            lower=self.refined.lower,
            upper=self.refined.upper,
            epsilon_per_group=self.epsilon_per_group * factor,
            rows_per_person=self.rows_per_person,
            integer=self.integer,
            one_sided=self.one_sided,
        )

    def describe(self) -> str:
        """The mechanism record's name: the levels and what the interval accounts for."""
        levels = len(self.refined.levels)
        kind = "integers" if self.refined.unit else f"{levels} level{'s' * (levels > 1)}"
        return f"permute-and-flip ({kind}); CI: noise only (discrete Laplace counts)"

    def rank_error(self, alpha: float) -> float:
        """Ranks within which the last level's choice lies of the target with probability
        1-α, given that its window holds the target (permute-and-flip's bound)."""
        last = self.refined.levels[-1].mechanism
        return rank_error(last.epsilon, self.p, last.candidates, alpha, self.rows_per_person)


def plan_step(
    name: str,
    expr: ir.Expr,
    p: float,
    *,
    lower: float,
    upper: float,
    epsilon_per_group: Fraction,
    rows_per_person: int,
    integer: bool,
    one_sided: bool = False,
) -> QuantileStep:
    """The public plan of one quantile output (mechanisms built now: refusals are free)."""
    refined = RefinedQuantile.plan(
        p,
        epsilon_per_group,
        lower,
        upper,
        rows_per_person=rows_per_person,
        alpha=PLANNED_ALPHA,
        integer=integer,
        max_bins=MAX_HISTOGRAM_BINS,
        one_sided=one_sided,
    )
    return QuantileStep(
        name, expr, refined, p, epsilon_per_group, rows_per_person, integer, one_sided
    )


def first_histogram(step: QuantileStep) -> ir.ExactAggregate:
    """The level-1 histogram the query's exact plan computes for ``step``."""
    bins = step.bins
    return ir.ExactAggregate(
        step.exact, "histogram", step.expr, bins.lower, bins.upper, None, 0, bins.bins
    )


def release_quantiles(
    steps: dict[str, QuantileStep],
    plan: ir.AggregatePlan,
    exact: ir.ExactResult,
    keys: Sequence[tuple[ir.ScalarValue, ...]],
    *,
    read: ReadCounts,
    compute: Compute | None,
    alpha: float,
    rng: Rng | None,
) -> dict[str, list[tuple[float, float | None, float | None]]]:
    """Per quantile output, per released key: (value, ci_low, ci_high).

    Level 1 reads ``exact``; each later level is one ``compute`` pass over all outputs and keys.
    """
    state: dict[str, list[tuple[QuantileBins, npt.NDArray[np.int64], int]]] = {}
    codes: dict[str, list[tuple[int, int] | None]] = {}  # (resolution, first) per key
    for name, step in steps.items():
        bins = step.bins
        counts = read(exact, keys, step.exact, bins.bins)
        chosen = step.refined.select_rows(0, counts, rng)
        state[name] = [(bins, row, index) for row, index in zip(counts, chosen, strict=True)]
        codes[name] = [None if step.refined.unit else (bins.bins, 0)] * len(keys)
    first = {name: [(bins, row) for bins, row, _ in rows] for name, rows in state.items()}
    depth = max((len(s.refined.levels) for s in steps.values()), default=1)
    for level in range(1, depth):
        active = {n: s for n, s in steps.items() if len(s.refined.levels) > level}
        windows = {
            n: [s.refined.next_bins(bins, index, level) for bins, _, index in state[n]]
            for n, s in active.items()
        }
        for n, s in active.items():
            codes[n] = [
                s.refined.fine_bins(code, index, level)
                for code, (_, _, index) in zip(codes[n], state[n], strict=True)
            ]
        if compute is None or not keys:  # nothing released (or a caller without an engine)
            break
        aggregates = tuple(
            _window_histogram(
                f"__q{level}_{i}",
                step,
                windows=windows[n],
                codes=codes[n],
                keys=keys,
                groups=plan.group_by,
            )
            for i, (n, step) in enumerate(active.items())
        )
        result = compute(replace(plan, aggregates=aggregates))
        for aggregate, (n, step) in zip(aggregates, active.items(), strict=True):
            counts = read(result, keys, aggregate.name, aggregate.bins)
            chosen = step.refined.select_rows(level, counts, rng)
            state[n] = [
                (bins, row, index)
                for bins, row, index in zip(windows[n], counts, chosen, strict=True)
            ]
    return {
        n: [
            step.refined.finish(bins, row, index, rng, alpha, first=level_1)
            for (bins, row, index), level_1 in zip(state[n], first[n], strict=True)
        ]
        for n, step in steps.items()
    }


def _window_histogram(
    name: str,
    step: QuantileStep,
    *,
    windows: Sequence[QuantileBins],
    codes: Sequence[tuple[int, int] | None],
    keys: Sequence[tuple[ir.ScalarValue, ...]],
    groups: tuple[ir.GroupColumn, ...],
) -> ir.ExactAggregate:
    """The histogram of each key's window (NULL, which no bin counts, for groups not released,
    picked by a CASE on the group key): of the value's fine bin minus the window's first when
    every window is a run of fine bins of the bounds (:meth:`RefinedQuantile.fine_bins`), else
    of the value itself (ungrouped) or mapped to [0, 1] by its group's window."""
    bins = windows[0].bins if windows else 1
    # power-of-two bins: a bin's number i over [0, bins] is exactly i (i / bins · bins = i)
    fine = bins & (bins - 1) == 0 and all(code is not None for code in codes)
    if not groups and not fine:
        (window,) = windows
        return ir.ExactAggregate(
            name, "histogram", step.expr, window.lower, window.upper, None, 0, bins
        )
    values = (
        [_fine_bin(step, code) for code in codes if code is not None]
        if fine
        else [_scaled(step.expr, window) for window in windows]
    )
    mapped: ir.Expr
    if not groups:
        (mapped,) = values
    else:
        whens = tuple(
            (_key_match(groups, key), value) for key, value in zip(keys, values, strict=True)
        )
        mapped = ir.Case(whens) if whens else ir.Lit(None)
    upper = float(bins) if fine else 1.0
    return ir.ExactAggregate(name, "histogram", mapped, 0.0, upper, None, 0, bins)


def _fine_bin(step: QuantileStep, code: tuple[int, int]) -> ir.Expr:
    """floor((x - lower) / (upper - lower) · resolution) - first: a histogram of ``bins`` bins
    over [0, bins] then counts x in the window's bin, the values below it in its first bin and
    those above in its last, exactly like the window's own histogram (the same fine bins) but
    computed with the operations of the first level's bin rule (an engine may read them from a
    :class:`~dpcurator.query.ir.BinCodeColumn`)."""
    resolution, first = code
    lower, upper = step.refined.lower, step.refined.upper
    shifted = ir.BinOp("-", step.expr, ir.Lit(float(lower)))
    unit = ir.BinOp("/", shifted, ir.Lit(float(upper - lower)))
    index = ir.Func("floor", (ir.BinOp("*", unit, ir.Lit(float(resolution))),))
    return ir.BinOp("-", index, ir.Lit(float(first)))


def _scaled(expr: ir.Expr, window: QuantileBins) -> ir.Expr:
    """(x - low) / (high - low): the histogram over [0, 1] then computes floor(that · bins), the
    bin the window's own histogram gives x."""
    shifted = ir.BinOp("-", expr, ir.Lit(float(window.lower)))
    return ir.BinOp("/", shifted, ir.Lit(float(window.upper - window.lower)))


def _key_match(groups: tuple[ir.GroupColumn, ...], key: tuple[ir.ScalarValue, ...]) -> ir.Expr:
    tests: list[ir.Expr] = [
        ir.IsNull(group.expr)
        if value is None
        else ir.Compare("=", group.expr, ir.Lit(_scalar(value)))
        for group, value in zip(groups, key, strict=True)
    ]
    return tests[0] if len(tests) == 1 else ir.And(tuple(tests))


def _scalar(value: ir.ScalarValue) -> ir.ScalarValue:
    """A key as a Python scalar (an engine may hand over numpy scalars)."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value
