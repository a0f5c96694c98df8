"""Noise families of a query: discrete Laplace (pure ε) or discrete Gaussian (zCDP), chosen at
plan time from public inputs only.

A query is released with one of (``noise=`` in :meth:`~dpcurator.query.session.Session.sql`):

* ``"laplace"``: the plan of :func:`~dpcurator.query.plan.planner.plan_query`, each statistic with
  discrete Laplace noise of scale Δ₁/ε_j (ε-DP, or (ε, δ) with partition selection);
* ``"gaussian"``: the same statistics, each with exact discrete Gaussian noise
  (:class:`~dpcurator.mechanisms.Gaussian`; Canonne, Kamath & Steinke 2020), which is
  ρ_j = Δ₂²/(2σ_j²)-zCDP (Bun & Steinke 2016);
* neither, with δ > 0 (and no ``rho``): whichever gives the narrower intervals at the same cost
  (see "Automatic choice" below); with δ = 0 Laplace (a Gaussian has no pure ε cost).

**L2 sensitivity.** A person adds at most r rows to each of at most g groups. A statistic whose
per-group change is at most b grid units (r for a count, 1 for a distinct-person count, r·b_row
for a clamped sum, r for a histogram's vector of bins: r rows move at most r units of L1 mass, so
at most r of L2) changes the vector of all groups' values by at most b·sqrt(g) in L2, against
b·g in L1. The planner's L1 sensitivity is b·g, so Δ₂² = g·(Δ₁/g)², an exact integer.

**Budget.** Given (ε, δ): the planner's split gives each output its ε share (partition selection
its own share and, here, half of δ). The shares of the Gaussian outputs, ε_G, and the rest of δ,
δ_G, become ρ_G = the largest ρ whose zCDP conversion (CKS20, Corollary 13) is within (ε_G, δ_G),
and ρ_G is divided among the statistics in proportion to ε_j^(3/2): the Laplace split minimises
Σ c_j/ε_j² with ε_j ∝ c_j^(1/3), and the Gaussian variance c_j/ρ_j is minimised by ρ_j ∝ c_j^(1/2)
= ε_j^(3/2) (Lagrange multipliers).

**Partition selection** of a Gaussian plan is Gaussian thresholding
(:mod:`dpcurator.mechanisms.gaussian_threshold`: δ_t-approximately ρ_sel-zCDP, where δ_t bounds
the probability of releasing a group only one neighbour has). With its own share (ε_sel, δ_sel):
ρ_sel is the largest ρ within (ε_sel, δ_sel/2) and δ_t = δ_sel/2, so it is (ε_sel, δ_sel)-DP.
When it thresholds a count output's own noise (``Plan.selection_output``, see
:mod:`dpcurator.query.plan.planner`), it adds no ρ and δ_t = δ_sel. Its noise has L2 sensitivity
sqrt(g) against the Laplace's L1 g, so it has the lower threshold when a person may be in many
groups; with one group per person thresholded Laplace has the lower threshold at the same (ε, δ)
(``noise="laplace"``), but costs ε_sel²/2 of ρ rather than ρ_sel.

By basic composition the query is (ε, δ)-DP; as approximate zCDP it is
δ_t-approximately (ρ_G + Σ ε_q²/2 + ρ_sel)-zCDP (quantiles are ε_q-DP by permute-and-flip, hence
ε_q²/2-zCDP; approximate zCDP composes by adding ρ and δ, Bun & Steinke 2016 Lemma 8.3). It is
charged as one :class:`~dpcurator.accounting.ConcentratedEvent` carrying both views, so a basic
filter charges (ε, δ) and a :class:`~dpcurator.accounting.ConcentratedFilter` the cheaper.

Given ρ (``rho=``): the outputs share ρ in proportion to (ε share)^(3/2) of the planner's split;
a quantile output's share ρ_q buys permute-and-flip at ε_q = sqrt(2ρ_q) (rounded down); the
query is ρ-zCDP, charged as a :class:`~dpcurator.accounting.ZCDPEvent`. A GROUP BY without public
keys takes ``rho`` with ``delta``, the δ of Gaussian thresholding (:func:`rho_selection`): the
selection's person counts take a ρ share weighted like an output, (its ε share)^(3/2) (none when
it thresholds a count output's own noise), and all of δ bounds the probability of releasing a
group only one neighbour has, so the query is δ-approximately ρ-zCDP, charged as a
:class:`~dpcurator.accounting.ConcentratedEvent` (ρ, δ) with no (ε, δ) view. The released keys are
those whose noisy count clears the threshold, which depends on ρ, δ and the metadata only. With
public keys ``delta`` is refused with ``rho`` (there is nothing for it to pay for).

**Automatic choice.** Both plans are built at the same (ε, δ) and scored by the sum over their
noisy statistics of ((1-α) half-width / L1 sensitivity)², α = :data:`CHOICE_ALPHA`. With partition
selection the selection's count adds ((half-width + threshold) / g)², in place of the count
output's own term when it is that count: a group is released with its interval only when its
count is about the threshold or more, so a family with narrower intervals but a higher threshold
drops more small groups. The family with the smaller score wins (public inputs only).

The CI of a Gaussian statistic is the discrete Gaussian's exact (1-α) half-width
(:meth:`~dpcurator.mechanisms.Gaussian.ci_halfwidth`), so intervals of counts and sums are exact.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from fractions import Fraction

from dpcurator._validation import check_positive, fail
from dpcurator.accounting import ConcentratedEvent, ZCDPEvent
from dpcurator.accounting.concentrated import largest_rho
from dpcurator.core.measures import ZCDP, ApproxDP, readable
from dpcurator.core.numbers import to_fraction
from dpcurator.errors import InternalInvariantError, ParameterError
from dpcurator.mechanisms import Gaussian
from dpcurator.mechanisms.gaussian_threshold import GaussianPartitionSelection, gaussian_selection
from dpcurator.query.frontend.builder import Query
from dpcurator.query.plan.outputs import NoisyStatistic, OutputPlan
from dpcurator.query.plan.planner import Plan, plan_query
from dpcurator.query.privacy_unit import grouped_l2_squared
from dpcurator.query.schema import Metadata

#: The noise families a query may name.
NOISE_FAMILIES = ("laplace", "gaussian")

#: The automatic choice compares (1 - CHOICE_ALPHA) half-widths (fixed, so that a plan does not
#: depend on the release's α; the ratio of the two families barely moves with α).
CHOICE_ALPHA = 0.05


def check_noise(noise: object) -> str | None:
    """``noise`` as given: None (automatic) or one of :data:`NOISE_FAMILIES`."""
    if noise is not None and noise not in NOISE_FAMILIES:
        raise fail("query", "noise", f"one of {NOISE_FAMILIES} or None (automatic)", noise)
    return noise


def plan_with_noise(
    query: Query,
    metadata: Metadata,
    *,
    epsilon: object = None,
    delta: object = 0,
    rho: object = None,
    noise: str | None = None,
    selection_weight: float = 1.0,
) -> Plan:
    """Plan ``query`` at (ε, δ) or at ρ with the named noise family, or the automatic choice.

    Automatic (``noise`` None, δ > 0, ε given): the Gaussian plan is chosen when its score
    (module docstring, "Automatic choice": half-widths, and partition selection's half-width
    plus threshold) is below the Laplace plan's, both at the same (ε, δ), and Laplace when no
    Gaussian can be built (ε too small for its sampler); ``Plan.noise`` says which won and why.
    ``rho`` with ``delta``: Gaussian thresholding for a GROUP BY without public keys. Reads no
    data; every refusal is free.
    """
    family = check_noise(noise)
    if rho is not None:
        if epsilon is not None:
            raise fail("query", "rho", "given alone (not with epsilon)", rho)
        if family == "laplace":
            raise fail("query", "noise", "'gaussian' or None with rho (a zCDP cost)", noise)
        rho_fraction = to_fraction(check_positive("query", "rho", rho))
        return _rho_plan(query, metadata, rho_fraction, to_fraction(delta), selection_weight)
    delta_fraction = to_fraction(delta)
    if family == "laplace" or (family is None and delta_fraction == 0):
        return plan_query(
            query, metadata, epsilon=epsilon, delta=delta, selection_weight=selection_weight
        )
    if delta_fraction == 0:
        raise fail(
            "query",
            "delta",
            "> 0 with noise='gaussian' (or give rho)",
            delta,
            "Gaussian noise has no pure ε cost.",
        )
    if family == "gaussian":
        gaussian = _approx_plan(query, metadata, epsilon, delta_fraction, selection_weight)
        if not _noised(gaussian):  # only public counts: nothing to noise, free
            return gaussian
        return replace(gaussian, noise="discrete Gaussian (requested)")
    laplace = plan_query(
        query, metadata, epsilon=epsilon, delta=delta, selection_weight=selection_weight
    )
    try:
        gaussian = _approx_plan(query, metadata, epsilon, delta_fraction, selection_weight)
    except ParameterError:  # no ρ left, or σ beyond the exact sampler's 2^31: public inputs
        return replace(
            laplace,
            noise="discrete Laplace (automatic): no discrete Gaussian can be built at this cost",
        )
    return _choose(laplace, gaussian)


def _choose(laplace: Plan, gaussian: Plan) -> Plan:
    lap, gau = _score(laplace), _score(gaussian)
    if lap == 0:  # nothing to noise (quantiles only): Laplace, the plain plan
        return laplace
    ratio = math.sqrt(gau / lap)
    level = f"{1 - CHOICE_ALPHA:.0%}"
    what = f"{level} CI half-widths"
    if laplace.selection is not None:
        what += " (and partition selection's half-width plus threshold)"
    if ratio < 1:
        text = (
            f"discrete Gaussian (automatic): its {what} are {ratio:.3g}x the discrete Laplace "
            "ones at the same cost"
        )
        return replace(gaussian, noise=text)
    text = (
        f"discrete Laplace (automatic): the discrete Gaussian's {what} would be {ratio:.3g}x "
        "these at the same cost"
    )
    return replace(laplace, noise=text)


def _noised(plan: Plan) -> bool:
    """Whether any output of ``plan`` is released with noise (else the plan is free: only
    replace-one public counts, see :mod:`dpcurator.query.privacy_unit`)."""
    return any(o.parts or o.quantile is not None for o in plan.outputs)


def _quantile_rho(outputs: tuple[OutputPlan, ...]) -> Fraction:
    """Σ ε_q²/2 over the quantile outputs: permute-and-flip is ε_q-DP, hence ε_q²/2-zCDP.
    Outputs with noisy statistics are counted by their ρ shares, free outputs not at all."""
    return sum((o.epsilon**2 / 2 for o in outputs if o.quantile is not None), Fraction(0))


def _score(plan: Plan) -> float:
    """Σ over the plan's statistics of (CI half-width / L1 sensitivity)², in grid units, and
    with partition selection ((half-width + threshold) / g)² for the selection's count, in
    place of that count's own term when the selection thresholds a count output (module
    docstring, "Automatic choice")."""
    shared = plan.selection_output
    score = sum(
        (part.mechanism.ci_halfwidth(CHOICE_ALPHA) / part.sensitivity) ** 2
        for output in plan.outputs
        if output.name != shared or plan.selection is None
        for part in output.parts
    )
    if plan.selection is None:
        return score
    selection = plan.selection
    if isinstance(selection, GaussianPartitionSelection):
        width = selection.gaussian.ci_halfwidth(CHOICE_ALPHA)
    else:
        width = selection.laplace.ci_halfwidth(CHOICE_ALPHA)
    reach = width + selection.threshold
    return score + (reach / plan.exact.bound.max_groups) ** 2


def _approx_plan(
    query: Query, metadata: Metadata, epsilon: object, delta: Fraction, selection_weight: float
) -> Plan:
    """The Gaussian plan at (ε, δ) (module docstring)."""
    plan = plan_query(
        query, metadata, epsilon=epsilon, delta=delta, selection_weight=selection_weight
    )
    aggregate_delta = delta
    if plan.selection is not None:
        plan = plan_query(
            query, metadata, epsilon=epsilon, delta=delta / 2, selection_weight=selection_weight
        )
        aggregate_delta = delta - delta / 2
    if not _noised(plan):
        return plan  # the planner's free plan (cost 0)
    noisy_share = sum((o.epsilon for o in plan.outputs if o.parts), Fraction(0))
    pure_rho = _quantile_rho(plan.outputs)
    eps = to_fraction(epsilon)
    if noisy_share == 0:
        outputs = plan.outputs
        rho = Fraction(0)
    else:
        rho = _largest_rho(noisy_share, aggregate_delta)
        if rho == 0:
            raise fail("query", "epsilon", "large enough to leave a positive ρ", epsilon)
        outputs = _gaussian_outputs(plan, plan.outputs, rho)
    plan = replace(plan, outputs=outputs)
    selection, selection_rho = _gaussian_selection(plan)
    tail = Fraction(0) if selection is None else selection.tail_delta
    event = ConcentratedEvent(rho + pure_rho + selection_rho, tail, eps, delta)
    return replace(plan, selection=selection, cost=ApproxDP(eps, delta), event=event)


def _gaussian_selection(plan: Plan) -> tuple[GaussianPartitionSelection | None, Fraction]:
    """The plan's partition selection with discrete Gaussian noise at the same (ε_sel, δ_sel),
    and the ρ it adds to the plan's (0 when it thresholds an output's own noisy count).

    Shared with a count output (``Plan.selection_output``): that count's Gaussian noise, all of
    δ_sel for the threshold's tail. Otherwise the person counts get σ for ρ_sel = the largest ρ
    whose conversion is within (ε_sel, δ_sel/2), and the tail gets the other δ_sel/2, so the
    selection is (ε_sel, δ_sel)-DP and δ_sel/2-approximately ρ_sel-zCDP
    (:mod:`dpcurator.mechanisms.gaussian_threshold`).
    """
    if plan.selection is None:
        return None, Fraction(0)
    delta = plan.selection.delta
    if plan.selection_output:
        return _shared_selection(plan, delta), Fraction(0)
    groups = plan.exact.bound.max_groups
    rho = _largest_rho(plan.selection.epsilon, delta / 2)
    if rho == 0:
        raise fail(
            "query",
            "epsilon",
            "large enough to leave partition selection a positive ρ (its share here)",
            plan.selection.epsilon,
        )
    selection = gaussian_selection(
        Gaussian.for_rho_squared(rho, groups),
        delta - delta / 2,
        groups,
        epsilon=plan.selection.epsilon,
        conversion_delta=delta / 2,
    )
    return selection, selection.rho


def _shared_selection(plan: Plan, tail_delta: Fraction) -> GaussianPartitionSelection:
    """The selection thresholding the Gaussian noisy count ``plan.selection_output`` (no ρ of
    its own), its tail costing ``tail_delta``."""
    (output,) = [o for o in plan.outputs if o.name == plan.selection_output]
    mechanism = output.parts[0].mechanism
    if not isinstance(mechanism, Gaussian):
        raise InternalInvariantError(
            f"The selection's count {output.name!r} has no Gaussian noise; please report this."
        )
    return gaussian_selection(mechanism, tail_delta, plan.exact.bound.max_groups)


def rho_selection(
    plan: Plan, rho: Fraction, tail_delta: Fraction
) -> GaussianPartitionSelection | None:
    """The Gaussian partition selection of a ρ-costed plan: the shared count's own noise, or
    person counts at ``rho`` (its ρ is at most ``rho``: σ is rounded up); either way
    ``tail_delta``-approximately zCDP (:mod:`dpcurator.mechanisms.gaussian_threshold`)."""
    if plan.selection is None:
        return None
    if plan.selection_output:
        return _shared_selection(plan, tail_delta)
    groups = plan.exact.bound.max_groups
    return gaussian_selection(Gaussian.for_rho_squared(rho, groups), tail_delta, groups)


def rho_event(rho: Fraction, tail_delta: Fraction) -> ZCDPEvent | ConcentratedEvent:
    """The event of a ρ-costed query: ρ-zCDP, or δ-approximately ρ-zCDP with partition
    selection (Bun & Steinke 2016, Definition 8.1)."""
    return ZCDPEvent(rho) if tail_delta == 0 else ConcentratedEvent(rho, tail_delta)


def _rho_plan(
    query: Query, metadata: Metadata, rho: Fraction, delta: Fraction, selection_weight: float
) -> Plan:
    """The Gaussian plan at ρ, with partition selection when ``delta`` > 0 (module docstring)."""
    plan = plan_query(query, metadata, epsilon=1, delta=delta, selection_weight=selection_weight)
    if delta != 0 and plan.selection is None:
        raise fail(
            "query",
            "delta",
            "0 with rho unless the GROUP BY needs DP partition selection (delta is its "
            "threshold's δ; this query's groups are public)",
            delta,
        )
    if not _noised(plan):  # only public counts: free, charged ρ = 0
        return replace(plan, cost=ZCDP(Fraction(0)), event=ZCDPEvent(Fraction(0)))
    separate = plan.selection is not None and not plan.selection_output
    weights = [_power(o.epsilon) for o in plan.outputs]  # a free output's ε share is 0
    if separate:
        assert plan.selection is not None  # separate implies a selection
        weights.append(_power(plan.selection.epsilon))
    total = sum(weights, Fraction(0))
    shares = [rho * w / total for w in weights]
    selection_rho = shares.pop() if separate else Fraction(0)
    if any(o.quantile is not None for o in plan.outputs):
        epsilons = [
            _epsilon_within(share) if o.quantile is not None else o.epsilon
            for o, share in zip(plan.outputs, shares, strict=True)
        ]
        noisy_epsilon = sum(epsilons, Fraction(0))
        if separate:  # the planner's selection share on top (replaced below)
            noisy_epsilon *= (len(epsilons) + to_fraction(selection_weight)) / len(epsilons)
        plan = plan_query(
            query,
            metadata,
            epsilon=noisy_epsilon,
            delta=delta,
            selection_weight=selection_weight,
            shares=epsilons,
        )
    pure_rho = _quantile_rho(plan.outputs)
    outputs = plan.outputs
    if any(o.parts for o in outputs):
        statistics_rho = rho - selection_rho - pure_rho
        outputs = _gaussian_outputs(plan, outputs, statistics_rho)
    plan = replace(plan, outputs=outputs)
    selection = rho_selection(plan, selection_rho, delta)
    text = f"discrete Gaussian (a ρ = {readable(rho)} zCDP cost)"
    if selection is not None:
        text = (
            f"discrete Gaussian (a ρ = {readable(rho)} zCDP cost; partition selection's "
            f"threshold {selection.threshold} has δ = {readable(delta)})"
        )
    return replace(
        plan, selection=selection, cost=ZCDP(rho), event=rho_event(rho, delta), noise=text
    )


def _gaussian_outputs(
    plan: Plan, outputs: tuple[OutputPlan, ...], rho: Fraction
) -> tuple[OutputPlan, ...]:
    """Every noisy statistic of ``outputs`` (of ``plan``) with discrete Gaussian noise, sharing
    ``rho`` in proportion to ε_j^(3/2) (module docstring); outputs without statistics are
    unchanged."""
    groups, paired = plan.exact.bound.max_groups, paired_counts(plan)
    parts = [part for output in outputs for part in output.parts]
    total = sum((_power(p.epsilon) for p in parts), Fraction(0))
    return tuple(
        replace(
            output,
            parts=tuple(
                gaussian_statistic(p, rho * _power(p.epsilon) / total, groups, paired=paired)
                for p in output.parts
            ),
        )
        for output in outputs
    )


def paired_counts(plan: Plan) -> bool:
    """Whether ``plan``'s counts are grouped non-negative count vectors whose squared L2 change
    the privacy unit bounds below g·(Δ₁/g)² (replace-one,
    :meth:`~dpcurator.query.privacy_unit.PrivacyUnit.grouped_l2_squared`)."""
    return plan.unit.replace_one and bool(plan.group_columns)


def l2_squared(part: NoisyStatistic, groups: int, *, paired: bool = False) -> int:
    """The squared L2 sensitivity of ``part`` over ``groups`` = g groups per person (module
    docstring; :meth:`~dpcurator.query.privacy_unit.PrivacyUnit.grouped_l2_squared`)."""
    per_group, rest = divmod(part.sensitivity, groups)
    if rest:
        raise InternalInvariantError(
            f"The L1 sensitivity {part.sensitivity} of {part.exact} is not per-group sensitivity "
            f"times {groups} groups; please report this bug."
        )
    return grouped_l2_squared(per_group, groups, paired_counts=paired and part.role == "count")


def gaussian_statistic(
    part: NoisyStatistic, rho: Fraction, groups: int, *, paired: bool = False
) -> NoisyStatistic:
    """``part`` with discrete Gaussian noise spending ``rho``, at its :func:`l2_squared`."""
    squared = l2_squared(part, groups, paired=paired)
    mechanism = Gaussian.for_rho_squared(rho, squared)
    return replace(part, mechanism=mechanism, rho=rho, l2_squared=squared)


def _power(epsilon: Fraction) -> Fraction:
    """ε^(3/2) as an exact Fraction of its double (a weight: only ratios matter)."""
    return Fraction(float(epsilon) ** 1.5)


def _epsilon_within(rho: Fraction) -> Fraction:
    """The largest double ε with ε²/2 <= ρ: a pure ε-DP step inside a ρ share."""
    eps = math.sqrt(2 * float(rho))
    while Fraction(eps) ** 2 / 2 > rho:
        eps = math.nextafter(eps, 0.0)
    return Fraction(eps)


@functools.lru_cache(maxsize=1024)
def _largest_rho(epsilon: Fraction, delta: Fraction) -> Fraction:
    """:func:`~dpcurator.accounting.concentrated.largest_rho`, cached (a pure function of public
    numbers; the bisection on exact Fractions dominates planning time otherwise)."""
    return largest_rho(epsilon, delta)
