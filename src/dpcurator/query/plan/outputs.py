"""How one output column of a query is planned: its exact aggregates for the engine and the
noise added to each (:class:`NoisyStatistic`, :class:`OutputPlan`), read from the aggregate,
the public metadata and its provisional ε share. Reads no data; the sensitivities, grids and
centring follow the rules of the :mod:`dpcurator.query.plan.planner` module docstring, which splits
the budget among the outputs planned here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from dpcurator.errors import UnsupportedQueryError
from dpcurator.mechanisms import Gaussian, Laplace
from dpcurator.query import ir
from dpcurator.query.frontend.builder import Aggregate
from dpcurator.query.plan.facts import (
    choose_grid_exponent,
    grid_units,
    unit_grid,
    value_bounds,
)
from dpcurator.query.plan.histogram import histogram_cuts
from dpcurator.query.plan.limits import MAX_BOUND_MAGNITUDE, exceeded
from dpcurator.query.plan.quantile import QuantileStep, first_histogram, plan_step
from dpcurator.query.plan.split import moment_weights, reference_ratio, split
from dpcurator.query.privacy_unit import PrivacyUnit
from dpcurator.query.schema import Metadata

#: ``coefficient``: a model fit's released coordinates (dpcurator.query.fit.release); ``test``: a
#: hypothesis test's figures (dpcurator.query.hypothesis.release).
OutputKind = Literal[
    "count",
    "count_persons",
    "sum",
    "mean",
    "variance",
    "stddev",
    "quantile",
    "histogram",
    "coefficient",
    "test",
]


@dataclass(frozen=True)
class NoisyStatistic:
    """One exact aggregate and the discrete Laplace or Gaussian noise added to it (grid units).

    Attributes:
        exact: the name of the exact aggregate in the plan.
        role: ``"count"``, ``"sum"`` or ``"sum_squares"`` (or ``"histogram"``).
        mechanism: the noise (:class:`~dpcurator.mechanisms.Laplace`, or
            :class:`~dpcurator.mechanisms.Gaussian` for a Gaussian plan, see
            :mod:`dpcurator.query.plan.noise`).
        sensitivity: the L1 sensitivity in grid units (over all groups of one person).
        grid_exponent: values are in units of 2^grid_exponent.
        epsilon: the ε share this statistic was planned at (Laplace: what it spends).
        rho: Gaussian only: the ρ it spends.
        l2_squared: Gaussian only: the squared L2 sensitivity in grid units.
    """

    exact: str
    role: str
    mechanism: Laplace | Gaussian
    sensitivity: int
    grid_exponent: int
    epsilon: Fraction
    rho: Fraction = Fraction(0)
    l2_squared: int = 0


@dataclass(frozen=True)
class OutputPlan:
    """How one output column is released.

    Attributes:
        name: the output column.
        kind: the statistic.
        epsilon: the ε share of this output.
        parts: the noisy exact statistics it is computed from.
        lower, upper: the public bounds of the value read (None for counts).
        centre: the value subtracted before summing (means and variances).
        quantile: the selection step of a quantile.
        edges: the bin edges of a histogram, ``(lower, c1, ..., upper)``: integers for integer
            values (see :mod:`dpcurator.query.plan.histogram`, which also labels the open edge
            bins).
        public_count: replace-one only: the public table size n, released as the count (no
            parts, free) or dividing a mean's noisy sum (:mod:`dpcurator.query.privacy_unit`).
    """

    name: str
    kind: OutputKind
    epsilon: Fraction
    parts: tuple[NoisyStatistic, ...] = ()
    lower: float | None = None
    upper: float | None = None
    centre: float = 0.0
    quantile: QuantileStep | None = None
    edges: tuple[float, ...] = ()
    public_count: int | None = None


@dataclass(frozen=True)
class ClippingCount:
    """The opt-in clipping report of one clamped output (:mod:`dpcurator.query.plan.clipping`):
    per group, the rows of its expression below ``lower``, within the bounds and above
    ``upper``, three disjoint counts noised together.

    Attributes:
        outputs: the output columns it reports on (those clamping the same expression to the
            same bounds share one report).
        lower, upper: the bounds the outputs clamp to.
        exact: the names of the exact counts (below, within, above).
        mechanism: the discrete Laplace noise added to each of the three counts.
        sensitivity: their joint L1 sensitivity (a row is in at most one of them, so r·g, twice
            that under replace-one: a replaced row leaves one cell for another).
        epsilon: the ε the three counts spend together.
    """

    outputs: tuple[str, ...]
    lower: float
    upper: float
    exact: tuple[str, str, str]
    mechanism: Laplace
    sensitivity: int
    epsilon: Fraction


# ----------------------------------------------------------------------------------------------
# Planning one output


@dataclass(frozen=True)
class PlanContext:
    """What planning one output reads besides the aggregate: the metadata, the privacy unit
    (every sensitivity, :mod:`dpcurator.query.privacy_unit`), the groups a person may
    contribute to in this query, whether it reads the whole table, and a counter naming the
    exact aggregates uniquely."""

    metadata: Metadata
    unit: PrivacyUnit
    groups: int  # g: groups per person in this query
    counter: list[int]
    whole_table: bool = False  # no WHERE, no GROUP BY
    grouped: bool = True  # the query has a GROUP BY

    @property
    def contributions(self) -> int:
        """The L1 sensitivity of a vector of counts (groups, histogram bins)."""
        return self.unit.count_l1(self.groups)

    @property
    def count_contributions(self) -> int:
        """The L1 sensitivity of a count: of the count vector when grouped, else of one count."""
        return self.contributions if self.grouped else self.unit.scalar_count()

    def sum_sensitivity(self, lower: float, upper: float, exponent: int, offset: int = 0) -> int:
        """The L1 sensitivity in grid units of a clamped sum of (grid value - ``offset``)
        (rounding is monotone, so the extremes come from the bounds;
        :meth:`~dpcurator.query.privacy_unit.PrivacyUnit.sum_l1`)."""
        low, high = grid_units(lower, exponent) - offset, grid_units(upper, exponent) - offset
        return self.unit.sum_l1(low, high, grouped=self.grouped, groups=self.groups)

    def name(self, label: str) -> str:
        self.counter[0] += 1
        return f"__a{self.counter[0]}_{label}"


def _check_magnitude(aggregate: Aggregate, lower: float, upper: float) -> None:
    """Refuse value bounds beyond ±MAX_BOUND_MAGNITUDE: sums, differences and grids of the
    bounds must stay finite."""
    if max(-lower, upper) > MAX_BOUND_MAGNITUDE:
        raise exceeded(
            f"The largest bound of {aggregate.kind.upper()}({aggregate.output_name})",
            f"{max(-lower, upper):g}",
            "MAX_BOUND_MAGNITUDE",
            f"{MAX_BOUND_MAGNITUDE:g}",
        )


def clamped_fill(expr: ir.Expr, metadata: Metadata, lower: float, upper: float) -> float | None:
    """The declared public fill of a column clamped to the aggregate's bounds (which may be
    narrower than the column's), or None (NULL values are skipped)."""
    if isinstance(expr, ir.Col):
        fill = metadata.column(expr.name).fill
        if isinstance(fill, int | float) and not isinstance(fill, bool):
            return min(max(float(fill), lower), upper)
    return None


def noisy(
    name: str, role: str, sensitivity: int, exponent: int, epsilon: Fraction
) -> NoisyStatistic:
    """The exact aggregate ``name`` with discrete Laplace noise for ``epsilon`` at
    ``sensitivity`` grid units of 2^``exponent``."""
    return NoisyStatistic(
        name, role, Laplace.for_epsilon(epsilon, sensitivity), sensitivity, exponent, epsilon
    )


def plan_aggregate(
    aggregate: Aggregate, share: Fraction, context: PlanContext
) -> tuple[OutputPlan, list[ir.ExactAggregate]]:
    """One output planned at the provisional ε ``share``, with the exact aggregates it reads
    (none for a replace-one public count)."""
    kind = aggregate.kind
    name = aggregate.output_name
    metadata = context.metadata
    free = context.unit.public_count(aggregate, context.whole_table)
    if free is not None and kind != "mean":  # replace-one: the public n, exact
        return OutputPlan(name, kind, share, public_count=free), []
    if kind == "count" and aggregate.expr is None:
        exact = ir.ExactAggregate(context.name("count"), "count")
        part = noisy(exact.name, "count", context.count_contributions, 0, share)
        return OutputPlan(name, "count", share, (part,)), [exact]
    if kind == "count":
        assert aggregate.expr is not None  # COUNT(x) has an expression
        exact = _non_null_count(aggregate.expr, context)
        part = noisy(exact.name, "count", context.count_contributions, 0, share)
        return OutputPlan(name, "count", share, (part,)), [exact]
    if kind == "count_persons":
        if metadata.person_column is None:
            raise UnsupportedQueryError(
                "COUNT(DISTINCT person) needs a person column in the metadata (row-level privacy: "
                "use COUNT(*))."
            )
        exact = ir.ExactAggregate(context.name("persons"), "count_persons")
        persons = context.unit.persons_count(context.grouped, context.groups)
        part = noisy(exact.name, "count", persons, 0, share)
        return OutputPlan(name, "count_persons", share, (part,)), [exact]
    assert aggregate.expr is not None  # value aggregates have an expression
    expr = aggregate.expr
    lower, upper = value_bounds(aggregate, metadata)
    _check_magnitude(aggregate, lower, upper)
    integer = unit_grid(expr, metadata, lower, upper)
    fill = clamped_fill(expr, metadata, lower, upper)
    if kind == "sum":
        k = choose_grid_exponent(lower, upper, integer=integer)
        exact = ir.ExactAggregate(context.name("sum"), "sum", expr, lower, upper, fill, k)
        part = noisy(exact.name, "sum", context.sum_sensitivity(lower, upper, k), k, share)
        return OutputPlan(name, "sum", share, (part,), lower, upper), [exact]
    if kind == "histogram":
        bins = aggregate.bins
        exact = ir.ExactAggregate(
            context.name("hist"), "histogram", expr, lower, upper, None, 0, bins
        )
        part = noisy(exact.name, "histogram", context.contributions, 0, share)
        edges = histogram_cuts(exact, integer=integer)
        return OutputPlan(name, "histogram", share, (part,), lower, upper, edges=edges), [exact]
    if kind == "quantile":
        assert aggregate.p is not None  # validated by Aggregate
        step = plan_step(  # refined levels and interval: dpcurator.query.plan.quantile
            context.name("qhist"),
            expr,
            aggregate.p,
            lower=lower,
            upper=upper,
            epsilon_per_group=share / context.groups,
            rows_per_person=context.unit.rows_changed,
            integer=integer,
            one_sided=context.unit.one_sided,
        )
        output = OutputPlan(name, "quantile", share, (), lower, upper, quantile=step)
        return output, [first_histogram(step)]
    return _plan_moments(aggregate, share, context, (lower, upper), integer=integer, fill=fill)


def _non_null_count(expr: ir.Expr, context: PlanContext) -> ir.ExactAggregate:
    """The count of rows where ``expr`` has a value: a plain row count for a column the public
    metadata declares non-nullable (cheaper in every engine), else a sum of a 0/1 indicator."""
    if isinstance(expr, ir.Col) and not context.metadata.column(expr.name).nullable:
        return ir.ExactAggregate(context.name("count"), "count")
    indicator = ir.Case(((ir.IsNull(expr), ir.Lit(0)),), ir.Lit(1))
    return ir.ExactAggregate(context.name("nonnull"), "sum", indicator, 0, 1, None, 0)


def _plan_moments(
    aggregate: Aggregate,
    share: Fraction,
    context: PlanContext,
    bounds: tuple[float, float],
    *,
    integer: bool,
    fill: float | None,
) -> tuple[OutputPlan, list[ir.ExactAggregate]]:
    """Mean, variance, stddev: a noisy count and noisy centred power sums.

    Usually the centre is the grid point nearest the middle of the bounds, so the centred sum is
    the plain fixed-point sum of the column minus an integer offset per value (no per-row
    subtraction before rounding). When the bounds lie far from 0 compared with their width, the
    grid of [lower, upper] would be much coarser than that of the centred range, so the values
    are centred before rounding instead.
    """
    lower, upper = bounds
    assert aggregate.expr is not None  # value aggregates have an expression
    expr = aggregate.expr
    middle = float(math.floor((lower + upper) / 2)) if integer else (lower + upper) / 2
    k = choose_grid_exponent(lower, upper, integer=integer)
    k_centred = choose_grid_exponent(lower - middle, upper - middle, integer=integer)
    per_row = k > k_centred + 2  # centre each value before rounding (bounds far from 0)
    if per_row:
        offset, centre, k = 0, middle, k_centred
    else:
        offset = grid_units(middle, k)
        centre = math.ldexp(float(offset), k)  # exact: offset has about 21 significant bits
    shifted = ir.BinOp("-", expr, ir.Lit(int(centre) if integer else centre))
    shifted_fill = None if fill is None else fill - centre
    low, high = lower - centre, upper - centre
    summed, sum_bounds, sum_fill = (
        (shifted, (low, high), shifted_fill) if per_row else (expr, (lower, upper), fill)
    )
    inner = moment_weights(aggregate.kind, reference_ratio(lower, upper, centre))
    part_eps = split(share, inner)  # count, sum[, sum of squares]: see the module docstring
    c = context.count_contributions
    if fill is None:
        count = _non_null_count(expr, context)
    else:
        count = ir.ExactAggregate(context.name("count"), "count")
    total = ir.ExactAggregate(
        context.name("sum"), "sum", summed, *sum_bounds, sum_fill, k, offset=offset
    )
    exact = [count, total]
    sensitivity = context.sum_sensitivity(*sum_bounds, k, offset)
    n = context.unit.public_count(aggregate, context.whole_table)
    if n is not None and count.kind == "count":  # replace-one: every row counts, n is public
        part = noisy(total.name, "sum", sensitivity, k, share)
        output = OutputPlan(
            aggregate.output_name, "mean", share, (part,), lower, upper, centre, public_count=n
        )
        return output, [total]
    parts = [
        noisy(count.name, "count", c, 0, part_eps[0]),
        noisy(total.name, "sum", sensitivity, k, part_eps[1]),
    ]
    if len(part_eps) == 3:
        square_max = max(low * low, high * high)
        if not math.isfinite(square_max):
            raise UnsupportedQueryError(
                f"{aggregate.kind.upper()}({aggregate.output_name}) squares values up to "
                f"{max(-low, high):g} from the middle of its bounds, beyond the float range: use "
                "bounds less than 1e150 apart."
            )
        k2 = choose_grid_exponent(0.0, square_max, integer=integer)
        squares = ir.ExactAggregate(
            context.name("sumsq"), "sum_squares", shifted, low, high, shifted_fill, k2
        )
        exact.append(squares)
        parts.append(
            noisy(
                squares.name,
                "sum_squares",
                context.sum_sensitivity(0.0, square_max, k2),
                k2,
                part_eps[2],
            )
        )
    return (
        OutputPlan(
            aggregate.output_name, aggregate.kind, share, tuple(parts), lower, upper, centre
        ),
        exact,
    )
