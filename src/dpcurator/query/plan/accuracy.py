"""Accuracy-first planning: the smallest ε (or ρ) whose (1-α) intervals meet the analyst's targets.

The analyst names a target half-width for each aggregate (``{"n": 50}``: the (1-α) interval of
``n`` is at most ±50, in the units of the value) instead of ε, or a target relative to a public
scale: ``{"s": "5%"}`` is 5% of the width U - L of the declared bounds of the value the SUM or
HISTOGRAM reads, ``{"n": "5% of 2000"}`` 5% of the scale given (:func:`resolve_target`; a
relative target without a given scale on a count, which has no declared bounds, is refused).
Only public inputs decide the cost:
the half-width of a count, a distinct-person count, a sum or a histogram bin is the exact discrete
Laplace half-width of its noise (:meth:`~dpcurator.mechanisms.Laplace.ci_halfwidth`: the
smallest integer t, in grid units 2^k, with P[|Z| > t] <= α), a function of the noise scale Δ/ε
alone. Each aggregate gets the smallest share ε_i that meets its target and the query costs the
sum (plus partition selection's share, ``selection_weight`` / (number of aggregates) of that sum,
as in :mod:`dpcurator.query.plan.planner`), so no aggregate is more accurate than asked.

Inversion: with p = exp(-ε_i/Δ), P[|Z| >= t + 1] = 2p^(t+1) / (1 + p) increases with 1/ε_i, so
the half-width is a non-increasing step function of ε_i. A closed-form guess (the continuous
Laplace quantile, scale (t + 1) / ln(2/α)) is bracketed by doubling and refined by bisection on
the exact half-width until the bracket is 2^-40 of its upper end (at most about 2,100 steps for
any target), and the upper end is returned: its half-width meets the target, and ε_i(1 - 1e-6)
lies below the lower end, whose half-width does not.

Every target a value can be given is met by some finite ε (even 0: discrete noise is exactly 0
with probability >= 1-α once ε_i >= Δ·ln((2-α)/α)); the targets no budget can meet are those of
means, variances, standard deviations and quantiles, whose interval widths depend on the data
(the count), and they are refused here, free. A cost above the remaining budget is refused by
the budget filter before any charge, with that cost in the message. Under replace-one, a
whole-table count is the public n (:mod:`dpcurator.query.privacy_unit`): exact, it meets any
target and takes no share (a query of only such counts costs 0). The whole-table mean is then
c + S/n with n public: its released interval (:mod:`dpcurator.query.release.ratio_interval` with an
exact count) is the value minus quantiles of the sum's noise over n, a function of the noise
alone (:func:`public_mean_width`), so a target t for it is a target n·t for that width of S.

**Discrete Gaussian noise** (``noise="gaussian"``). Each aggregate gets instead the smallest ρ_i
whose exact discrete Gaussian half-width (:meth:`~dpcurator.mechanisms.Gaussian.ci_halfwidth`,
non-increasing in ρ_i: σ = Δ₂/sqrt(2ρ_i) shrinks) meets its target, by the same bracketing and
bisection from the continuous guess σ = (t + 1)/z_(1-α/2); the query is ρ-zCDP with ρ = Σρ_i
(Bun & Steinke 2016, Lemma 2.3), charged as a :class:`~dpcurator.accounting.ZCDPEvent`. Given
δ > 0 it is also (ε, δ)-DP with ε the zCDP conversion of ρ (CKS20, Proposition 12) and charged as
a :class:`~dpcurator.accounting.ConcentratedEvent` carrying both views. With partition selection
(δ > 0 needed) the selection's person counts take ``selection_weight`` / (number of aggregates)
of Σρ_i (none when it thresholds a count output's own noise) and δ/2 bounds its tail
(:mod:`dpcurator.mechanisms.gaussian_threshold`); ε is then the conversion at the other δ/2.
With δ > 0 and no ``noise`` both families are planned and the one meeting every target at the
smaller ε is kept, and ``Plan.noise`` says why (many aggregates favour the Gaussian, whose ρ adds
up linearly and whose ε grows about like its square root). Every choice reads public inputs only.
"""

from __future__ import annotations

import functools
import math
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from statistics import NormalDist

import numpy as np

from dpcurator._validation import check_real, fail
from dpcurator.accounting import ConcentratedEvent, ZCDPEvent
from dpcurator.core.measures import ZCDP, ApproxDP, readable
from dpcurator.core.numbers import to_fraction
from dpcurator.errors import ParameterError, UnsupportedQueryError
from dpcurator.mechanisms import Gaussian, Laplace
from dpcurator.query.frontend.builder import Query
from dpcurator.query.plan.limits import MIN_EPSILON
from dpcurator.query.plan.noise import (
    check_noise,
    gaussian_statistic,
    l2_squared,
    paired_counts,
    rho_event,
    rho_selection,
)
from dpcurator.query.plan.outputs import NoisyStatistic, OutputPlan
from dpcurator.query.plan.planner import Plan, plan_query
from dpcurator.query.release.ratio_interval import NUISANCE_FRACTION, MomentNoise, moment_intervals
from dpcurator.query.schema import Metadata

#: Output kinds whose (1-α) half-width is public (a function of the noise scale alone).
TARGETABLE = ("count", "count_persons", "sum", "histogram")

#: Bisection stops when the bracket is this fraction of its upper end.
RELATIVE_TOLERANCE = 2.0**-40

#: Doublings/halvings allowed while bracketing (more than the float range needs).
MAX_BRACKET_STEPS = 2_100


#: A relative target: ``"5%"`` (of the output's public scale) or ``"5% of 2000"``.
_RELATIVE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*%\s*(?:of\s+(\S+)\s*)?", re.IGNORECASE)

Target = float | str
#: The half-width an analyst sees of a statistic released with a given mechanism.
Width = Callable[[Laplace | Gaussian], float]


@dataclass(frozen=True)
class Want:
    """What one noisy statistic must meet: ``width`` <= ``target``, where ``alpha`` is the
    level the width is computed at (for the initial guess)."""

    target: float
    alpha: float
    width: Width


def check_targets(accuracy: object) -> dict[str, Target]:
    """The targets as ``{output name: target}``: a half-width (a finite real >= 0) or a relative
    target (``"5%"``, ``"5% of 2000"``; see :func:`resolve_target`), checked for form here."""
    if not isinstance(accuracy, Mapping) or not accuracy:
        raise fail(
            "accuracy", "accuracy", "a non-empty mapping {output name: half-width}", accuracy
        )
    targets: dict[str, Target] = {}
    for name, target in accuracy.items():
        if not isinstance(name, str):
            raise fail("accuracy", "accuracy", "keyed by output column names", name)
        if isinstance(target, str):
            _relative(name, target)
            targets[name] = target.strip()
            continue
        value = float(check_real("accuracy", f"accuracy[{name!r}]", target))
        if not value >= 0:
            raise fail("accuracy", f"accuracy[{name!r}]", "a half-width >= 0", target)
        targets[name] = value
    return targets


def _relative(name: str, target: str) -> tuple[float, float | None]:
    """(fraction, given scale or None) of a relative target, or a ParameterError naming it."""
    match = _RELATIVE.fullmatch(target)
    scale = None
    if match is not None and match.group(2) is not None:
        try:
            scale = float(match.group(2))
        except ValueError:
            match = None
    if match is None or (scale is not None and not (math.isfinite(scale) and scale > 0)):
        raise fail(
            "accuracy",
            f"accuracy[{name!r}]",
            "a half-width >= 0, 'P%' (of the output's public scale) or 'P% of S' (S > 0)",
            target,
        )
    return float(match.group(1)) / 100, scale


def resolve_target(output: OutputPlan, target: Target) -> float:
    """The absolute half-width of ``target`` for ``output``: a number as given; ``"P% of S"``
    P/100·S; ``"P%"`` P/100 of the output's public scale, the width U - L of the declared bounds
    of the value a SUM or HISTOGRAM reads (counts have no public scale: give one)."""
    if not isinstance(target, str):
        return target
    fraction, scale = _relative(output.name, target)
    if scale is None:
        if output.lower is None or output.upper is None:
            raise UnsupportedQueryError(
                f"The target {target!r} for {output.kind.upper()}({output.name}) is relative, but "
                "it has no public scale (declared bounds): give one, e.g. "
                f"{{{output.name!r}: '{fraction * 100:g}% of 1000'}}, or a half-width."
            )
        scale = output.upper - output.lower
    return fraction * scale


def plan_for_accuracy(
    query: Query,
    metadata: Metadata,
    *,
    accuracy: object,
    alpha: float,
    delta: object = 0,
    noise: str | None = None,
    selection_weight: float = 1.0,
) -> Plan:
    """The cheapest plan whose (1-α) CI half-widths meet ``accuracy`` (reads no data), with
    ``noise`` ``"laplace"``, ``"gaussian"`` or None (automatic: with δ > 0 the family meeting
    the targets at the smaller ε, else Laplace; module docstring).

    Raises:
        ParameterError: malformed targets, or a name that is not an output column.
        UnsupportedQueryError: an aggregate without a target, or one whose interval width
            depends on the data (mean, variance, stddev, quantile).
    """
    targets = check_targets(accuracy)
    family = check_noise(noise)
    provisional = plan_query(
        query, metadata, epsilon=1, delta=delta, selection_weight=selection_weight
    )
    wanted = _output_targets(provisional, targets, alpha)
    if all(want is None for want in wanted):
        return provisional  # only public counts: the planner's free plan (cost 0)
    dlt = to_fraction(delta)
    laplace_plan = functools.partial(
        _laplace_plan,
        query,
        metadata,
        provisional,
        wanted,
        delta=delta,
        selection_weight=selection_weight,
    )
    if family == "laplace" or (family is None and dlt == 0):
        return laplace_plan()
    if family == "gaussian":
        gaussian = _gaussian_plan(provisional, wanted, dlt, selection_weight)
        return replace(gaussian, noise=f"discrete Gaussian (requested): {_cost_text(gaussian)}")
    laplace = laplace_plan()
    gaussian = _gaussian_plan(provisional, wanted, dlt, selection_weight)
    lap, gau = _epsilon(laplace), _epsilon(gaussian)
    if gau < lap:
        text = (
            f"discrete Gaussian (automatic): meets the targets at {_cost_text(gaussian)}; "
            f"discrete Laplace would need ε = {readable(lap)}"
        )
        return replace(gaussian, noise=text)
    text = (
        f"discrete Laplace (automatic): meets the targets at ε = {readable(lap)}; discrete "
        f"Gaussian would need {_cost_text(gaussian)}"
    )
    return replace(laplace, noise=text)


def basic_budget_refusal(cost: object) -> str:
    """Why a basic ε or (ε, δ) budget refuses accuracy targets with Gaussian noise at δ = 0
    (their plan costs the ρ ``cost``, which basic composition cannot charge), and what to pass."""
    return (
        f"Accuracy targets with noise='gaussian' and delta = 0 cost a ρ ({cost}), which a basic "
        "ε or (ε, δ) budget cannot charge. Pass noise='laplace' (or no noise) to pay an ε; or "
        "give delta > 0 on a budget with a δ, and the Gaussian plan costs an (ε, δ); or open "
        "the session with a ZCDP budget, or with accounting='concentrated' and a δ > 0."
    )


def _output_targets(
    provisional: Plan, targets: Mapping[str, Target], alpha: float
) -> list[Want | None]:
    """The (half-width, level α) each output's noisy statistic must meet, None for a
    replace-one public count (exact, free): a replace-one whole-table mean's sum must meet n
    times the mean's target at the level its interval inverts (module docstring). Refuses
    unknown names, missing targets and outputs whose width depends on the data."""
    names = [output.name for output in provisional.outputs]
    unknown = sorted(set(targets) - set(names))
    if unknown:
        raise fail("accuracy", "accuracy", f"keyed by the query's outputs {names}", unknown[0])
    wanted: list[Want | None] = []
    for output in provisional.outputs:
        public_mean = output.kind == "mean" and output.public_count is not None
        if output.kind not in TARGETABLE and not public_mean:
            raise UnsupportedQueryError(
                f"No budget can meet an accuracy target for {output.kind.upper()}({output.name}): "
                "its interval width depends on the data. Accuracy targets apply to COUNT, SUM "
                "and HISTOGRAM outputs (and under replace-one to the whole table's AVG); pass "
                "epsilon for this query instead."
            )
        if output.name not in targets:
            raise UnsupportedQueryError(
                f"Give an accuracy target for every aggregate: {output.name!r} has none "
                f"(targets given: {sorted(targets)})."
            )
        target = resolve_target(output, targets[output.name])
        if not output.parts:
            wanted.append(None)
        elif output.public_count is not None:  # the mean c + S/n: S within n times the target
            n = output.public_count
            level = alpha * (1 - NUISANCE_FRACTION)  # its interval's level for the noise
            width = public_mean_width(output.parts[0], n, alpha)
            wanted.append(Want(target * n, level, width))
        else:
            wanted.append(Want(target, alpha, statistic_width(output.parts[0], alpha)))
    return wanted


def _laplace_plan(
    query: Query,
    metadata: Metadata,
    provisional: Plan,
    wanted: list[Want | None],
    *,
    delta: object,
    selection_weight: float,
) -> Plan:
    """The discrete Laplace plan: each output at its smallest ε share (module docstring)."""
    shares = [
        Fraction(0) if want is None else Fraction(smallest_epsilon(o.parts[0], want))
        for o, want in zip(provisional.outputs, wanted, strict=True)
    ]
    total = sum(shares, Fraction(0))
    if total < MIN_EPSILON:  # more accurate than asked: scale up to the documented minimum
        shares = [share * Fraction(MIN_EPSILON) / total for share in shares]
        total = sum(shares, Fraction(0))
    epsilon = total
    if provisional.selection is not None and not provisional.selection_output:
        epsilon = total * (len(shares) + to_fraction(selection_weight)) / len(shares)
    return plan_query(
        query,
        metadata,
        epsilon=epsilon,
        delta=delta,
        selection_weight=selection_weight,
        shares=shares,
    )


def _gaussian_plan(
    provisional: Plan,
    wanted: list[Want | None],
    delta: Fraction,
    selection_weight: float,
) -> Plan:
    """The discrete Gaussian plan: each output at its smallest ρ_i, partition selection at
    ``selection_weight`` / (number of outputs) of Σρ_i with tail δ/2, the query δ/2-approximately
    ρ-zCDP and (ε, δ)-DP with ε its zCDP conversion at δ/2 (at δ without selection; ρ-zCDP
    alone when δ = 0). Module docstring."""
    groups, paired = provisional.exact.bound.max_groups, paired_counts(provisional)
    rhos = [
        Fraction(0)
        if want is None
        else Fraction(smallest_rho(o.parts[0], want, groups, paired=paired))
        for o, want in zip(provisional.outputs, wanted, strict=True)
    ]
    statistics_rho = sum(rhos, Fraction(0))
    outputs = tuple(
        replace(o, parts=(gaussian_statistic(o.parts[0], rho, groups, paired=paired),))
        if o.parts
        else o
        for o, rho in zip(provisional.outputs, rhos, strict=True)
    )
    plan = replace(provisional, outputs=outputs)
    selection_rho = Fraction(0)
    tail = Fraction(0)
    if plan.selection is not None:
        tail = delta / 2
        if not plan.selection_output:
            selection_rho = statistics_rho * to_fraction(selection_weight) / len(rhos)
    selection = rho_selection(plan, selection_rho, tail)
    rho = statistics_rho + selection_rho
    if delta == 0:
        return replace(plan, selection=selection, cost=ZCDP(rho), event=rho_event(rho, tail))
    epsilon = ZCDP(rho).to_approx(delta - tail).epsilon
    event = ConcentratedEvent(rho, tail, epsilon, delta)
    return replace(plan, selection=selection, cost=ApproxDP(epsilon, delta), event=event)


def _epsilon(plan: Plan) -> Fraction:
    """The ε of a plan's (ε, δ) cost (0 for a free plan)."""
    cost = plan.cost
    return Fraction(0) if isinstance(cost, ZCDP) else cost.epsilon


def _cost_text(plan: Plan) -> str:
    event = plan.event
    rho = event.rho if isinstance(event, ConcentratedEvent | ZCDPEvent) else Fraction(0)
    if isinstance(plan.cost, ZCDP):
        return f"ρ = {readable(rho)}"
    return f"ε = {readable(_epsilon(plan))} (ρ = {readable(rho)})"


def statistic_width(part: NoisyStatistic, alpha: float) -> Width:
    """The (1-α) half-width of ``part`` released with a mechanism, in the units of the value."""
    unit = math.ldexp(1.0, part.grid_exponent)
    return lambda mechanism: mechanism.ci_halfwidth(alpha) * unit


def public_mean_width(part: NoisyStatistic, n: int, alpha: float) -> Width:
    """n times the half-width of the released (1-α) interval of a replace-one whole-table mean
    c + S/n whose centred sum ``part`` has a given mechanism: the interval of
    :func:`~dpcurator.query.release.ratio_interval.moment_intervals` with the exact count n, which
    is the value minus the noise's quantiles over n, whatever the data (unclamped here)."""
    unit = math.ldexp(1.0, part.grid_exponent)
    count, total = np.array([float(n)]), np.zeros(1)

    def width(mechanism: Laplace | Gaussian) -> float:
        noise = MomentNoise((None, mechanism), (1.0, unit))
        bounds = (-math.inf, math.inf)
        ((_, low, high),) = moment_intervals(
            "mean", [count, total], noise, bounds, 0.0, alpha=alpha
        )
        return n * max(high, -low)

    return width


def halfwidth(part: NoisyStatistic, epsilon: float, alpha: float) -> float:
    """The (1-α) half-width of ``part`` released with ``epsilon`` (inf beyond the sampler)."""
    return laplace_halfwidth(part, epsilon, statistic_width(part, alpha))


def laplace_halfwidth(part: NoisyStatistic, epsilon: float, width: Width) -> float:
    """``width`` of ``part`` released with discrete Laplace noise for ``epsilon`` (inf beyond
    the mechanism's scale limit)."""
    try:
        laplace = Laplace.for_epsilon(Fraction(epsilon), part.sensitivity)
    except ParameterError:  # a scale beyond 2^52: the mechanism refuses it
        return math.inf
    return width(laplace)


def smallest_epsilon(part: NoisyStatistic, want: Want) -> float:
    """The smallest ε (to a relative 2^-40) whose ``want.width`` for ``part`` is <= its target;
    the guess is the continuous Laplace's, scale (t + 1) / ln(2/α)."""
    steps = _grid_steps(want.target, part)
    guess = part.sensitivity * math.log(2 / want.alpha) / (steps + 1)
    return _smallest(
        lambda epsilon: laplace_halfwidth(part, epsilon, want.width), guess, want.target
    )


def gaussian_halfwidth(
    part: NoisyStatistic, rho: float, groups: int, width: Width, *, paired: bool = False
) -> float:
    """``width`` of ``part`` with discrete Gaussian noise spending ``rho`` (inf beyond the
    sampler's σ <= 2^31; ``paired``: :func:`~dpcurator.query.plan.noise.paired_counts`)."""
    try:
        gaussian = gaussian_statistic(part, Fraction(rho), groups, paired=paired).mechanism
    except (ParameterError, OverflowError):  # σ beyond 2^31 (or beyond the float range)
        return math.inf
    return width(gaussian)


def smallest_rho(part: NoisyStatistic, want: Want, groups: int, *, paired: bool = False) -> float:
    """The smallest ρ (to a relative 2^-40) whose ``want.width`` for ``part`` with discrete
    Gaussian noise is <= its target; the guess is the continuous Gaussian's, σ = (t + 1) /
    z_(1-α/2)."""
    steps = _grid_steps(want.target, part)
    squared = l2_squared(part, groups, paired=paired)
    z = NormalDist().inv_cdf(1 - want.alpha / 2)
    guess = max((z / (steps + 1)) ** 2 * squared / 2, sys.float_info.min)
    return _smallest(
        lambda rho: gaussian_halfwidth(part, rho, groups, want.width, paired=paired),
        guess,
        want.target,
    )


def _grid_steps(target: float, part: NoisyStatistic) -> float:
    """The whole grid steps of ``part`` within ``target`` (capped at 1e300: a float guess)."""
    return float(math.floor(min(target / math.ldexp(1.0, part.grid_exponent), 1e300)))


def _smallest(width: Callable[[float], float], guess: float, target: float) -> float:
    """The smallest cost x > 0 (to a relative 2^-40) with ``width(x)`` <= ``target``, for a
    non-increasing ``width``: bracketed from ``guess`` by doubling, then bisected."""
    low, high = guess / 2, guess * 2
    for _ in range(MAX_BRACKET_STEPS):
        if width(high) <= target:
            break
        low, high = high, high * 2
    for _ in range(MAX_BRACKET_STEPS):
        if low == 0 or width(low) > target:
            break
        low, high = low / 2, low
    while high - low > high * RELATIVE_TOLERANCE:
        middle = (low + high) / 2
        if width(middle) <= target:
            high = middle
        else:
            low = middle
    return high
