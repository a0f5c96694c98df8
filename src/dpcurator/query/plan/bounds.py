"""The plan of a DP bounds estimate for one column: noisy counts over public log-scale bins
(reads no data, so its refusals are free)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from dpcurator._validation import fail
from dpcurator.core.measures import PureDP
from dpcurator.estimators.bounds import LogBins, detection_threshold
from dpcurator.mechanisms import Laplace
from dpcurator.query import ir
from dpcurator.query.plan.validation import check_epsilon
from dpcurator.query.schema import Metadata


@dataclass(frozen=True)
class BoundsPlan:
    """The exact plan and mechanism of a DP bounds estimate for one column."""

    exact: ir.AggregatePlan
    column: str
    bins: LogBins
    laplace: Laplace
    threshold: float
    cost: PureDP


def plan_bounds(
    metadata: Metadata,
    column: str,
    *,
    epsilon: object,
    beta: float = 0.01,
    bins: LogBins | None = None,
) -> BoundsPlan:
    """Plan a DP bounds estimate: noisy counts over public log-scale bins (reads no data)."""
    eps = check_epsilon("dp_bounds", epsilon)
    spec = metadata.column(column)
    if not spec.is_numeric:
        raise fail("dp_bounds", "column", "a numeric (int or float) column", column)
    log_bins = bins or LogBins()
    value = ir.Col(spec.name)
    edges = log_bins.edges
    whens = tuple((ir.Compare("<", value, ir.Lit(edge)), ir.Lit(i)) for i, edge in enumerate(edges))
    index = ir.Case(whens, ir.Lit(len(edges)))
    unit = metadata.unit
    laplace = Laplace.for_epsilon(eps, unit.count_l1(log_bins.bins))
    exact = ir.AggregatePlan(
        table=metadata.table,
        aggregates=(ir.ExactAggregate("n", "count"),),
        where=ir.Not(ir.IsNull(value)),
        group_by=(ir.GroupColumn("bin", index),),
        group_keys=tuple((i,) for i in range(log_bins.bins)),
        bound=replace(metadata.contribution_bound, max_groups=unit.groups_touched(log_bins.bins)),
    )
    threshold = detection_threshold(laplace, log_bins.bins, beta)
    return BoundsPlan(exact, spec.name, log_bins, laplace, threshold, PureDP(eps))
