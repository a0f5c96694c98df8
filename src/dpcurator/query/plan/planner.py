"""The planner: a :class:`~dpcurator.query.frontend.builder.Query` + public metadata -> a private
plan.

Planning reads NO data: everything it decides (which exact aggregates the engine computes, the
contribution bounds, the sensitivities, the noise scales, the budget split, the released group
keys) follows from the query, the metadata and the requested budget. Errors raised here charge
nothing. Each output is planned by :mod:`dpcurator.query.plan.outputs`; this module checks the
query as a whole, chooses the released keys and splits the budget.

Budget split (documented default, :mod:`dpcurator.query.plan.split`): when keys are not public, one
DP partition selection decides the groups of all the query's aggregates. When the query has a count
to which a person adds at most 1 per group (``COUNT(DISTINCT person)``, or ``COUNT(*)`` with one
row per person and group), that count's noisy value is the selection's: the groups whose noisy
count clears the threshold are released with that same noisy count, and the selection costs no
share of ε of its own (only δ; see :func:`shared_selection_output`). Otherwise partition selection
takes the share ``selection_weight`` / (number of aggregates + ``selection_weight``) of ε and all
of δ. The rest is divided among the aggregates so as to minimise
the total relative variance of the released values: aggregate i gets a share proportional to the
cube root of its first-order variance coefficient (minimising Σ c_i/ε_i² under Σ ε_i = ε), which is
1 for a count, a sum, a histogram and a quantile, 1 + q^(1/3) for a mean, and so on. Within a mean,
the count and the sum split its share to minimise the delta-method variance of c + S/N,
(2/N²)(Δ_S²/ε_S² + m²·Δ_N²/ε_N²), with the unknown centred mean m replaced by the public stand-in
m² = q·h² (q = 1/3 for bounds symmetric about the centre: m uniform over them), so ε_S : ε_N =
1 : q^(1/3) (59% : 41%); n drops out at first order, so no table size is assumed. A variance or
standard deviation splits its share among count, sum and sum of squares by the same rule. When the
analyst gives weights (any ``weight`` other than 1), the shares follow the weights instead; an
accuracy-first query (:mod:`dpcurator.query.plan.accuracy`) passes the exact ``shares``. All
mechanisms are pure ε-DP, so by basic composition the query is ε-DP (ε, δ with partition
selection).

Sensitivities (add/remove one person, who contributes at most r = ``max_rows_per_person`` rows to
each of at most g = ``max_groups_per_person`` groups; g = 1 for an ungrouped query and at most the
number of public keys): a count has L1 sensitivity r·g, a distinct-person count g, a sum on the
grid 2^k with values clamped to [L, U] r·g·max(|round(L/2^k)|, |round(U/2^k)|) grid units, a
histogram r·g. Sums are computed on an integer grid (the defence against float-sum attacks,
Casacuberta et al. 2022): k = 0 for integer-valued expressions, otherwise k is chosen so that the
largest bound spans about 2^20 grid steps. Means and variances centre values at the middle of
their bounds first, which halves the sensitivity for ranges like [0, U]. Under the replace-one
relation (bounded DP) grouped sensitivities double, ungrouped counts keep r and ungrouped sums
take r·max(U − L, |L|, |U|), the whole table's count is the public n and its mean a noisy sum
over n (:mod:`dpcurator.query.privacy_unit`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from dpcurator._validation import check_nonnegative, check_positive, check_probability, fail
from dpcurator.accounting import ApproxEvent, PureEvent
from dpcurator.accounting.events import PrivacyEvent
from dpcurator.core.measures import ZCDP, ApproxDP, PureDP
from dpcurator.core.numbers import to_fraction
from dpcurator.errors import DomainError, DPError, InternalInvariantError, UnsupportedQueryError
from dpcurator.mechanisms import (
    PartitionSelection,
    partition_selection_threshold,
)
from dpcurator.mechanisms.gaussian_threshold import GaussianPartitionSelection
from dpcurator.query import ir
from dpcurator.query.backends.plan_checks import check_plan
from dpcurator.query.frontend.builder import Aggregate, Query
from dpcurator.query.plan.analysis import public_keys
from dpcurator.query.plan.limits import MAX_PUBLIC_GROUPS, exceeded
from dpcurator.query.plan.outputs import (
    ClippingCount,
    OutputPlan,
    PlanContext,
    noisy,
    plan_aggregate,
)
from dpcurator.query.plan.split import output_weight, reference_ratio, split
from dpcurator.query.plan.validation import check_epsilon, check_query
from dpcurator.query.privacy_unit import PrivacyUnit
from dpcurator.query.schema import Metadata


@dataclass(frozen=True)
class Plan:
    """A complete private plan: exact aggregates for the engine and how to noise them.

    Attributes:
        exact: the plan the backend executes.
        outputs: one entry per requested aggregate, in query order.
        group_columns: the names of the grouping columns.
        keys: the public group keys released (all of them, even empty groups), or None when
            partition selection decides which groups present in the data are released.
        selection: the partition selection mechanism (None with public keys): thresholded
            discrete Laplace, or discrete Gaussian in a Gaussian plan (query.plan.noise).
        selection_exact: the name of the exact count partition selection thresholds.
        selection_output: the output whose noisy count is the selection's (released with the
            very values the selection thresholded), or "" when the selection has its own count.
        cost: the total privacy cost charged for the query (ρ for a query given a ρ).
        order_by: output columns to sort the released rows by (post-processing).
        event: the accounting event charged (None: the PureEvent/ApproxEvent of ``cost``; see
            :func:`plan_event`).
        noise: why the noise family was chosen (readable; empty for a Laplace-only plan).
        unit: the privacy unit of the guarantee (relation and contribution bounds, from the
            metadata: :mod:`dpcurator.query.privacy_unit`).
        clipping: the opt-in clipping report's counts, one per clamped expression (empty unless
            asked for, :mod:`dpcurator.query.plan.clipping`).
    """

    exact: ir.AggregatePlan
    outputs: tuple[OutputPlan, ...]
    group_columns: tuple[str, ...]
    keys: tuple[tuple[ir.ScalarValue, ...], ...] | None
    selection: PartitionSelection | GaussianPartitionSelection | None
    selection_exact: str
    cost: PureDP | ApproxDP | ZCDP
    order_by: tuple[tuple[str, bool], ...] = ()
    event: PrivacyEvent | None = None
    noise: str = ""
    unit: PrivacyUnit = field(default_factory=PrivacyUnit)
    selection_output: str = ""
    clipping: tuple[ClippingCount, ...] = ()

    @property
    def neighbouring(self) -> str:
        """The neighbouring relation of the guarantee (``add_remove`` or ``replace_one``)."""
        return self.unit.relation


def plan_event(plan: Plan) -> PrivacyEvent:
    """The event a plan's release is charged: its own, or the pure/approximate one of its cost."""
    if plan.event is not None:
        return plan.event
    cost = plan.cost
    if isinstance(cost, ApproxDP) and cost.delta > 0:
        return ApproxEvent(cost.epsilon, cost.delta)
    if isinstance(cost, ZCDP):
        raise InternalInvariantError("A ρ-cost plan carries its event; please report this bug.")
    return PureEvent(cost.epsilon)


# ----------------------------------------------------------------------------------------------
# Planning


def plan_query(
    query: Query,
    metadata: Metadata,
    *,
    epsilon: object,
    delta: object = 0,
    selection_weight: float = 1.0,
    shares: Sequence[Fraction] | None = None,
) -> Plan:
    """Plan a query for release at (ε, δ): validate, bound, split the budget. Reads no data.

    ``shares``: the exact ε of each aggregate in query order (they sum to ε less the partition
    selection's share); default: the split of the module docstring.

    Every check happens here, before any charge: the query's limits, names and types
    (:func:`~dpcurator.query.plan.validation.check_query`), the value bounds, and the mechanisms,
    which are built now so that their own refusals (e.g. a noise scale beyond 2^52) are free too.
    The engines' :func:`~dpcurator.query.backends.plan_checks.check_plan` then holds by
    construction.

    Raises:
        ParameterError: invalid ε (below :data:`~dpcurator.query.plan.limits.MIN_EPSILON`), δ or
            weights, or a noise scale the mechanisms refuse.
        DomainError: unknown table or column, missing public bounds.
        UnsupportedQueryError: an aggregate, grouping, type or size the planner cannot make
            private (e.g. grouping without public keys when δ = 0; see
            :mod:`dpcurator.query.plan.limits` and :mod:`dpcurator.query.plan.typecheck`).
    """
    eps = check_epsilon("query", epsilon)
    check_probability("query", "delta", delta, open_high=True)
    dlt = to_fraction(delta)
    check_positive("query", "selection_weight", selection_weight)
    if not isinstance(query, Query):
        raise fail("plan_query", "query", "a Query (session.table(...)) or SQL text", query)
    if not metadata.has_table(tuple(query.table.split("."))):
        raise DomainError(f"Unknown table {query.table!r}: this session serves {metadata.table!r}.")
    checked = check_query(query, metadata)
    where, groups = checked.where, checked.groups
    keys = _group_keys(groups, metadata)
    needs_selection = bool(groups) and keys is None
    unit = metadata.unit
    if needs_selection:
        _check_selection(groups, metadata, dlt)
    per_person = unit.groups_per_person(bool(groups), keys)
    whole_table = where is None and not groups
    context = PlanContext(metadata, unit, per_person, [0], whole_table, bool(groups))
    exact: list[ir.ExactAggregate] = []
    planned = []
    for aggregate in checked.aggregates:
        output, aggregates = plan_aggregate(aggregate, eps, context)
        planned.append(output)
        exact.extend(aggregates)
    shared = shared_selection_output(planned, per_person) if needs_selection else None
    selection_share = _selection_share(
        eps, len(planned), selection_weight, needs_selection and shared is None
    )
    if shares is None:
        weights = _weights(checked.aggregates, planned, context)
        weights = [
            w if o.parts or o.quantile else Fraction(0)
            for w, o in zip(weights, planned, strict=True)
        ]
        chosen = split(eps - selection_share, weights) if any(weights) else [eps] * len(planned)
    else:
        chosen = _check_shares(shares, eps - selection_share, planned)
    outputs = [_with_share(o, share) for o, share in zip(planned, chosen, strict=True)]
    selection, selection_exact = None, "__persons"
    if needs_selection:
        selection, selection_exact = _selection(outputs, shared, selection_share, dlt, per_person)
        if shared is None:
            exact.append(ir.ExactAggregate(selection_exact, "count_persons"))
    free = not exact  # only public counts (replace-one): the engine's count goes unused
    if free:
        exact.append(ir.ExactAggregate("__rows", "count"))
    bound = replace(metadata.contribution_bound, max_groups=per_person)
    exact_plan = ir.AggregatePlan(
        table=metadata.table,
        aggregates=tuple(exact),
        where=where,
        group_by=groups,
        group_keys=keys if groups else None,
        bound=bound,
    )
    _check_engine_invariants(exact_plan, metadata)
    cost: PureDP | ApproxDP = ApproxDP(eps, dlt) if needs_selection else PureDP(eps)
    if free:
        cost = PureDP(Fraction(0))
    outputs_names = [o.name for o in outputs] + [g.name for g in groups]
    for column, _ in query.order_by:
        if column not in outputs_names:
            raise UnsupportedQueryError(
                f"Cannot sort by {column!r}: order only by output columns {outputs_names}."
            )
    return Plan(
        exact=exact_plan,
        outputs=tuple(outputs),
        group_columns=tuple(g.name for g in groups),
        keys=(keys if groups else ((),)),
        selection=selection,
        selection_exact=selection_exact,
        cost=cost,
        order_by=query.order_by,
        unit=unit,
        selection_output="" if shared is None else outputs[shared].name,
    )


def _selection(
    outputs: Sequence[OutputPlan],
    shared: int | None,
    share: Fraction,
    delta: Fraction,
    groups: int,
) -> tuple[PartitionSelection, str]:
    """The thresholded Laplace selection and the exact count it reads: the shared output's own
    count and noise (the same Laplace, at that output's share), or a person count at ``share``."""
    if shared is None:
        return partition_selection_threshold(share, delta, groups), "__persons"
    (part,) = outputs[shared].parts
    return partition_selection_threshold(part.epsilon, delta, groups), part.exact


def shared_selection_output(outputs: Sequence[OutputPlan], groups: int) -> int | None:
    """The index of the first count whose noisy value can also select the groups, or None.

    That is a count (of rows, non-null values or persons) with one noisy statistic of L1
    sensitivity ``groups``: one person adds at most 1 to each of at most g groups, exactly the
    distinct-person count partition selection thresholds (Wilson et al. 2020, §4: the count
    released is the noisy count that was thresholded). Thresholding it is a selection of the same
    (ε, δ) as a separate one at its share, so the query saves the separate share.
    """
    for index, output in enumerate(outputs):
        if output.kind not in ("count", "count_persons") or len(output.parts) != 1:
            continue
        if output.parts[0].sensitivity == groups and output.parts[0].role == "count":
            return index
    return None


def _selection_share(
    eps: Fraction, aggregates: int, selection_weight: float, needs_selection: bool
) -> Fraction:
    """Partition selection's share of ε: one share of weight ``selection_weight`` beside one of
    weight 1 per aggregate (0 without partition selection)."""
    if not needs_selection:
        return Fraction(0)
    weight = to_fraction(selection_weight)
    return eps * weight / (aggregates + weight)


def _weights(
    aggregates: Sequence[Aggregate], planned: Sequence[OutputPlan], context: PlanContext
) -> list[Fraction]:
    """The analyst's weights when any differs from 1, else the variance-minimising weights."""
    given = [to_fraction(a.weight) for a in aggregates]
    if any(w != 1 for w in given):
        return given
    ratio = context.groups / context.contributions
    return [output_weight(o.kind, _reference_ratio(o), ratio) for o in planned]


def _reference_ratio(output: OutputPlan) -> float:
    if output.lower is None or output.upper is None:
        return 1 / 3
    return reference_ratio(output.lower, output.upper, output.centre)


def _check_shares(
    shares: Sequence[Fraction], total: Fraction, planned: Sequence[OutputPlan]
) -> list[Fraction]:
    """The given shares: one per output, > 0 for an output with noise, 0 allowed for one with
    nothing to noise (a replace-one public count), summing to ``total``."""
    exact = [to_fraction(check_nonnegative("plan_query", "shares", s)) for s in shares]
    noised = [bool(o.parts) or o.quantile is not None for o in planned]
    if (
        len(exact) != len(planned)
        or sum(exact, Fraction(0)) != total
        or any(s == 0 and n for s, n in zip(exact, noised, strict=True))
    ):
        raise fail(
            "plan_query",
            "shares",
            f"{len(planned)} values summing to {total}, > 0 for every noisy output",
            list(shares),
        )
    return exact


def _with_share(output: OutputPlan, share: Fraction) -> OutputPlan:
    """The output planned at ``share`` instead of its provisional share (same inner split)."""
    factor = share / output.epsilon
    parts = tuple(
        noisy(p.exact, p.role, p.sensitivity, p.grid_exponent, p.epsilon * factor)
        for p in output.parts
    )
    step = None if output.quantile is None else output.quantile.scaled(factor)
    return replace(output, epsilon=share, parts=parts, quantile=step)


def _check_engine_invariants(plan: ir.AggregatePlan, metadata: Metadata) -> None:
    """The engines' own plan check, run before the charge: it cannot fail for a plan built from a
    query that passed the planner's checks, so a failure here is a planner bug (still free)."""
    try:
        check_plan(plan, metadata.column_types())
    except DPError as exc:
        raise InternalInvariantError(
            f"The planner built a plan the engines refuse ({exc}); please report this bug."
        ) from exc


def _group_keys(
    groups: tuple[ir.GroupColumn, ...], metadata: Metadata
) -> tuple[tuple[ir.ScalarValue, ...], ...] | None:
    person = metadata.person_column
    key_sets = []
    for group in groups:
        if isinstance(group.expr, ir.Col) and person is not None and group.expr.name == person:
            raise UnsupportedQueryError(
                f"GROUP BY the person column {person!r} is refused: it would release one row per "
                "person."
            )
        key_sets.append(public_keys(group.expr, metadata))
    if any(k is None for k in key_sets):
        return None
    size = math.prod(len(k) for k in key_sets if k is not None)
    if size > MAX_PUBLIC_GROUPS:
        raise exceeded(
            "The number of groups (the product of the public key sets)",
            f"{size:,}",
            "MAX_PUBLIC_GROUPS",
            f"{MAX_PUBLIC_GROUPS:,}",
        )
    return tuple(itertools.product(*(k for k in key_sets if k is not None)))


def _check_selection(
    groups: tuple[ir.GroupColumn, ...], metadata: Metadata, delta: Fraction
) -> None:
    """Refuse DP partition selection of the groups without public keys where the privacy unit
    says it cannot run (free)."""
    missing = [g.name for g in groups if public_keys(g.expr, metadata) is None]
    metadata.unit.check_selection(missing, delta_positive=delta > 0)
