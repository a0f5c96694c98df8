"""The plan of one request to a session: the options of :meth:`Session.plan
<dpcurator.query.session.Session.plan>` (and of ``estimate``, ``release``, ``sql``) turned into a
:class:`~dpcurator.query.plan.planner.Plan` from the query and the public metadata alone.

Exactly one of ``epsilon``, ``accuracy`` and ``rho`` prices the request: a given cost is planned
by :func:`~dpcurator.query.plan.clipping.plan_clipped` (with the optional clipping report), an
accuracy target by :func:`~dpcurator.query.plan.accuracy.plan_for_accuracy`. Every refusal is
raised here, before any charge, and costs nothing. Plans are cached per (query, budget, noise,
clipping, δ, selection weight, metadata) in the session's
:data:`~dpcurator.query.caches.PlanCache`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from dpcurator._validation import check_probability, fail
from dpcurator.accounting import BudgetFilter, GaussianDPFilter, PrivacyFilter
from dpcurator.accounting.events import ComposedEvent, GaussianEvent
from dpcurator.accounting.gaussian_dp import gaussian_dp_charge
from dpcurator.core.measures import ZCDP
from dpcurator.errors import UnsupportedQueryError
from dpcurator.mechanisms import Gaussian
from dpcurator.query.caches import PlanCache, PlanKey
from dpcurator.query.frontend.builder import Query
from dpcurator.query.frontend.sql import parse_sql
from dpcurator.query.plan.accuracy import basic_budget_refusal, check_targets, plan_for_accuracy
from dpcurator.query.plan.clipping import plan_clipped, refuse_clipping
from dpcurator.query.plan.noise import check_noise
from dpcurator.query.plan.planner import Plan, plan_event
from dpcurator.query.privacy_unit import l2_of_squared
from dpcurator.query.schema import Metadata


def plan_request(
    plans: PlanCache,
    query: str | Query,
    metadata: Metadata,
    *,
    epsilon: float | None,
    delta: float,
    selection_weight: float,
    accuracy: Mapping[str, float | str] | None,
    alpha: float | None,
    default_alpha: float,
    noise: str | None,
    rho: float | None,
    clipping: float | None,
) -> Plan:
    """The private plan of ``query`` (SQL text or builder Query) at the given cost, from
    ``plans`` when cached (``alpha``: the α of accuracy targets, ``default_alpha`` when None;
    the other options are those of :meth:`Session.plan <dpcurator.query.session.Session.plan>`).
    """
    if [epsilon, accuracy, rho].count(None) != 2:
        raise fail("Session", "epsilon", "given, or accuracy or rho given (exactly one)", epsilon)
    family = check_noise(noise)
    level = request_alpha(alpha, default_alpha)
    budget: object = ("noise", epsilon, rho, family, clipping)
    if accuracy is not None:
        refuse_clipping(clipping, "accuracy targets")
        targets = check_targets(accuracy)
        budget = ("accuracy", tuple(sorted(targets.items())), level, family)
    key: PlanKey = (query, budget, delta, selection_weight, metadata)
    plan = plans.get(key)
    if plan is None:
        parsed = parse_sql(query, metadata) if isinstance(query, str) else query
        if accuracy is None:
            plan = plan_clipped(
                parsed,
                metadata,
                epsilon=epsilon,
                delta=delta,
                rho=rho,
                noise=family,
                selection_weight=selection_weight,
                clipping=clipping,
            )
        else:
            plan = plan_for_accuracy(
                parsed,
                metadata,
                accuracy=accuracy,
                alpha=level,
                delta=delta,
                noise=family,
                selection_weight=selection_weight,
            )
        plans.put(key, plan)
    return plan


def request_alpha(alpha: float | None, default: float) -> float:
    """The α of a request's (1-α) intervals: ``alpha``, checked, or the session's ``default``."""
    if alpha is None:
        return default
    return float(check_probability("Session", "alpha", alpha, open_low=True, open_high=True))


def check_accounting(budget_filter: BudgetFilter, plan: Plan, accuracy_first: bool) -> Plan:
    """The plan to charge and release, refusing before the charge one the filter cannot
    charge: a ρ (Gaussian noise at δ = 0) when the session composes an ε or (ε, δ) budget by
    basic composition; under Gaussian-DP accounting, a plan whose noise it does not know. For a
    Gaussian-DP filter the plan's event becomes its Gaussian statistics themselves
    (:func:`gaussian_statistics_event`), when that is all the plan releases."""
    event = plan_event(plan)
    basic = isinstance(budget_filter, PrivacyFilter) and not isinstance(budget_filter.budget, ZCDP)
    if basic and event.approx_cost() is None and accuracy_first:
        raise UnsupportedQueryError(basic_budget_refusal(plan.cost))
    if basic and event.approx_cost() is None:
        raise UnsupportedQueryError(
            f"A query given rho (cost {plan.cost}) needs a zCDP budget: open the session "
            "with accounting='concentrated', or give epsilon and delta."
        )
    if isinstance(budget_filter, GaussianDPFilter):
        event = gaussian_statistics_event(plan) or event
        gaussian_dp_charge(event)  # a free refusal (ParameterError) if it cannot be charged
        plan = replace(plan, event=event)
    return plan


def gaussian_statistics_event(plan: Plan) -> ComposedEvent | None:
    """The plan's releases as discrete Gaussian events (σ and the L2 sensitivity of each noisy
    statistic, in its grid units, where it is an integer), when they are all it releases: a ρ
    plan without partition selection, quantiles or clipping reports whose every noisy
    statistic has Gaussian noise; else None. Its ρ is at most the plan's (each statistic's σ is
    rounded up from its share). Decided from the plan alone (public inputs)."""
    parts = [part for output in plan.outputs for part in output.parts]
    noises = [part.mechanism for part in parts if isinstance(part.mechanism, Gaussian)]
    if (
        not isinstance(plan.cost, ZCDP)
        or plan.selection is not None
        or plan.clipping
        or not parts
        or any(output.quantile is not None for output in plan.outputs)
        or len(noises) != len(parts)
    ):
        return None
    return ComposedEvent(
        GaussianEvent(noise.sigma, l2_of_squared(part.l2_squared))
        for noise, part in zip(noises, parts, strict=True)
    )
