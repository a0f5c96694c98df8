"""Plan-time validation of a whole query: limits, names, nesting, columns and types.

:func:`check_query` runs first in :func:`~dpcurator.query.plan.planner.plan_query`, on builder and
SQL queries alike, and decides from the query, ε and the public metadata alone. Every refusal here
is
free: nothing is charged and no data is read. What it guarantees to the planner: at most
:data:`~dpcurator.query.plan.limits.MAX_AGGREGATES` aggregates with distinct, unreserved names;
every expression nested at most :data:`~dpcurator.query.plan.limits.MAX_EXPRESSION_DEPTH` deep,
naming declared columns (in their declared spelling) and well typed
(:mod:`dpcurator.query.plan.typecheck`); a WHERE that is a predicate; aggregated values that are
numbers whose public bounds stay in range.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from dpcurator._validation import check_positive, fail
from dpcurator.core.numbers import to_fraction
from dpcurator.errors import ParameterError, UnsupportedQueryError
from dpcurator.query import ir
from dpcurator.query.frontend.builder import Aggregate, Query
from dpcurator.query.plan.analysis import resolve_expr
from dpcurator.query.plan.limits import (
    MAX_AGGREGATES,
    MAX_HISTOGRAM_BINS,
    MIN_EPSILON,
    check_at_most,
    check_expression_depth,
)
from dpcurator.query.plan.typecheck import check_aggregated_value, check_predicate, expression_type
from dpcurator.query.schema import Metadata

#: Names starting with this are reserved for the planner's and the engines' internal columns.
RESERVED_PREFIX = "__"


def check_epsilon(owner: str, epsilon: object) -> Fraction:
    """ε as an exact Fraction: a finite real >= :data:`~dpcurator.query.plan.limits.MIN_EPSILON`."""
    value = check_positive(owner, "epsilon", epsilon)
    if value < MIN_EPSILON:
        raise fail(
            owner,
            "epsilon",
            f">= {MIN_EPSILON:g} (MIN_EPSILON, dpcurator.query.plan.limits)",
            epsilon,
            "Smaller ε gives noise too large to sample exactly.",
        )
    return to_fraction(value)


@dataclass(frozen=True)
class CheckedQuery:
    """A query's expressions after :func:`check_query`, with columns in their declared spelling."""

    where: ir.Expr | None
    groups: tuple[ir.GroupColumn, ...]
    aggregates: tuple[Aggregate, ...]


def check_query(query: Query, metadata: Metadata) -> CheckedQuery:
    """Check a query against the public limits and metadata (see the module docstring).

    Raises:
        UnsupportedQueryError: a limit is exceeded, a type does not fit, a name is reserved.
        ParameterError: output names are not distinct.
        DomainError: an unknown column.
    """
    if not query.aggregates:
        raise UnsupportedQueryError("The query has no aggregate: nothing to release.")
    check_at_most(
        "The number of aggregates", len(query.aggregates), "MAX_AGGREGATES", MAX_AGGREGATES
    )
    names = [a.output_name for a in query.aggregates] + [g.name for g in query.groups]
    if len(set(names)) != len(names):
        raise ParameterError(f"Output column names must be distinct; got {names}.")
    reserved = [name for name in names if name.startswith(RESERVED_PREFIX)]
    if reserved:
        raise UnsupportedQueryError(
            f"Output column names starting with {RESERVED_PREFIX!r} are reserved; rename "
            f"{', '.join(map(repr, reserved))}."
        )
    expressions = [query.where] + [g.expr for g in query.groups]
    for expr in [*expressions, *(a.expr for a in query.aggregates)]:
        if expr is not None:
            check_expression_depth(expr)
    where = None
    if query.where is not None:
        where = resolve_expr(query.where, metadata)
        check_predicate(where, metadata, "WHERE")
    groups = tuple(ir.GroupColumn(g.name, resolve_expr(g.expr, metadata)) for g in query.groups)
    for group in groups:
        expression_type(group.expr, metadata)
    return CheckedQuery(
        where, groups, tuple(_check_aggregate(a, metadata) for a in query.aggregates)
    )


def _check_aggregate(aggregate: Aggregate, metadata: Metadata) -> Aggregate:
    if aggregate.expr is None:
        return aggregate
    expr = resolve_expr(aggregate.expr, metadata)
    if aggregate.kind == "count":
        expression_type(expr, metadata)
    else:
        label = f"{aggregate.kind.upper()}({aggregate.output_name})"
        check_aggregated_value(expr, metadata, label)
    if aggregate.kind == "histogram":
        check_at_most(
            f"The number of bins of HISTOGRAM({aggregate.output_name})",
            aggregate.bins,
            "MAX_HISTOGRAM_BINS",
            MAX_HISTOGRAM_BINS,
        )
    return replace(aggregate, expr=expr)
