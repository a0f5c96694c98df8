"""The opt-in clipping report of a query (issue 14, "clipping bias"), planned from public inputs.

A statistic computed on values clamped to public bounds [L, U] (SUM, AVG, VARIANCE, STDDEV,
quantiles) is moved by clamping when values lie outside the bounds, and its noise interval does
not show it. With ``clipping=c`` (``Session.sql(q, epsilon=ε, clipping=0.1)``) the query spends
(1 - c)·ε on its outputs, as planned without the option, and c·ε on a report: for each distinct
clamped expression and bounds, per released group, the rows below L, within [L, U] and above U
(NULLs count as within when the column has a declared fill, else nowhere, as the aggregate
skips them). The engine computes the three counts in the same pass as the query's aggregates
(sums of CASE indicators), under the same contribution bounding.

Privacy: a row is in at most one of the three cells, so one person (at most r rows in each of at
most g groups) moves the counts of all groups by at most r·g in L1 (2·r·g under replace-one: a
replaced row may leave one cell for another). Discrete Laplace noise of scale r·g/ε_j on each
count is ε_j-DP for the triple (Dwork, McSherry, Nissim & Smith 2006); the c·ε is split evenly
among the k clamped expressions, ε_j = c·ε/k, and by basic composition the query with its
report costs ε (its δ unchanged). A Gaussian plan (``noise``) keeps its ρ view: each pure ε_j
adds ε_j²/2 of ρ (Bun & Steinke 2016, Proposition 1.4).

Which expressions are reported, the mechanisms and the charge depend on the query, the metadata
and the budget only. Refusals (a share outside (0, 1), no clamped output, a ρ or accuracy-first
cost) are raised here, before any charge.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from dpcurator._validation import check_positive, fail
from dpcurator.accounting import ConcentratedEvent
from dpcurator.core.measures import ApproxDP, PureDP
from dpcurator.core.numbers import to_fraction
from dpcurator.errors import UnsupportedQueryError
from dpcurator.mechanisms import Laplace
from dpcurator.query import ir
from dpcurator.query.frontend.builder import Query
from dpcurator.query.plan.facts import value_bounds
from dpcurator.query.plan.noise import plan_with_noise
from dpcurator.query.plan.outputs import ClippingCount, clamped_fill
from dpcurator.query.plan.planner import Plan
from dpcurator.query.plan.validation import check_epsilon, check_query
from dpcurator.query.release.estimate import CLAMPED_KINDS
from dpcurator.query.schema import Metadata


def check_clipping(clipping: object) -> Fraction:
    """The clipping report's share of the query's ε: a number strictly between 0 and 1."""
    share = to_fraction(check_positive("query", "clipping", clipping))
    if share >= 1:
        raise fail(
            "query",
            "clipping",
            "the share of the query's epsilon spent on the clipping report, in (0, 1)",
            clipping,
        )
    return share


def refuse_clipping(clipping: object, what: str) -> None:
    """Refuse a clipping report where it is not available (``what``: a ρ cost, accuracy
    targets or a model fit)."""
    if clipping is not None:
        raise UnsupportedQueryError(
            f"A clipping report (clipping={clipping!r}) is not available with {what}: it takes a "
            "share of a given epsilon, for SUM, AVG, VARIANCE, STDDEV and quantiles."
        )


def plan_clipped(
    query: Query,
    metadata: Metadata,
    *,
    epsilon: object,
    delta: object,
    rho: object,
    noise: str | None,
    selection_weight: float,
    clipping: object,
) -> Plan:
    """The plan of :func:`~dpcurator.query.plan.noise.plan_with_noise`, with the clipping report of
    the module docstring when ``clipping`` is given (its ε share of the query's ``epsilon``)."""
    if clipping is None:
        return plan_with_noise(
            query,
            metadata,
            epsilon=epsilon,
            delta=delta,
            rho=rho,
            noise=noise,
            selection_weight=selection_weight,
        )
    if rho is not None:
        refuse_clipping(clipping, "a rho cost")
    share = check_clipping(clipping)
    eps = check_epsilon("query", epsilon)
    plan = plan_with_noise(
        query,
        metadata,
        epsilon=eps * (1 - share),
        delta=delta,
        noise=noise,
        selection_weight=selection_weight,
    )
    return with_clipping(plan, query, metadata, eps * share)


def with_clipping(plan: Plan, query: Query, metadata: Metadata, epsilon: Fraction) -> Plan:
    """``plan`` with the clipping counts of its clamped outputs at ``epsilon`` more."""
    columns: dict[tuple[ir.Expr, float, float], list[str]] = {}
    fills: dict[tuple[ir.Expr, float, float], float | None] = {}
    for aggregate in check_query(query, metadata).aggregates:
        if aggregate.kind not in CLAMPED_KINDS or aggregate.expr is None:
            continue
        lower, upper = value_bounds(aggregate, metadata)
        key = (aggregate.expr, lower, upper)
        columns.setdefault(key, []).append(aggregate.output_name)
        fills[key] = clamped_fill(aggregate.expr, metadata, lower, upper)
    if not columns:
        raise UnsupportedQueryError(
            "The clipping report counts the rows outside the bounds of SUM, AVG, VARIANCE, "
            "STDDEV and quantiles; this query has none of them (drop clipping=)."
        )
    groups = plan.exact.bound.max_groups  # g, as the planner bounded it
    sensitivity = metadata.unit.count_l1(groups)
    each = epsilon / len(columns)
    mechanism = Laplace.for_epsilon(each, sensitivity)
    counts, exact = [], []
    for index, ((expr, lower, upper), outputs) in enumerate(columns.items()):
        names = (f"__clip{index}_below", f"__clip{index}_within", f"__clip{index}_above")
        exact += _cell_counts(names, expr, lower, upper, fills[(expr, lower, upper)] is not None)
        counts.append(
            ClippingCount(tuple(outputs), lower, upper, names, mechanism, sensitivity, each)
        )
    exact_plan = replace(plan.exact, aggregates=plan.exact.aggregates + tuple(exact))
    return _charged(replace(plan, exact=exact_plan, clipping=tuple(counts)), epsilon)


def _cell_counts(
    names: tuple[str, str, str], expr: ir.Expr, lower: float, upper: float, filled: bool
) -> list[ir.ExactAggregate]:
    """Sums of 0/1 indicators: below L, within [L, U] (a NULL too when it is filled), above U.
    A row is in one cell at most, in every engine (each tests the same conditions in order)."""
    one, zero = ir.Lit(1), ir.Lit(0)
    null = ir.IsNull(expr)
    below = ir.Compare("<", expr, ir.Lit(lower))
    above = ir.Compare(">", expr, ir.Lit(upper))
    cells = (
        ir.Case(((null, zero), (below, one)), zero),
        ir.Case(((null, one if filled else zero), (below, zero), (above, zero)), one),
        ir.Case(((null, zero), (below, zero), (above, one)), zero),
    )
    return [
        ir.ExactAggregate(name, "sum", cell, 0, 1, None, 0)
        for name, cell in zip(names, cells, strict=True)
    ]


def _charged(plan: Plan, epsilon: Fraction) -> Plan:
    """``plan`` charged ``epsilon`` more (pure ε; a Gaussian plan's ρ view adds ε²/2)."""
    cost = plan.cost
    if isinstance(plan.event, ConcentratedEvent):
        event = plan.event
        assert isinstance(cost, ApproxDP)  # a Gaussian plan given (ε, δ)
        more = ConcentratedEvent(
            event.rho + epsilon * epsilon / 2,
            event.delta,
            None if event.epsilon is None else event.epsilon + epsilon,
            event.epsilon_delta,
        )
        return replace(plan, cost=ApproxDP(cost.epsilon + epsilon, cost.delta), event=more)
    if isinstance(cost, ApproxDP):
        return replace(plan, cost=ApproxDP(cost.epsilon + epsilon, cost.delta))
    assert isinstance(cost, PureDP)  # ρ plans are refused above
    return replace(plan, cost=PureDP(cost.epsilon + epsilon))
