"""Accuracy-first planning: the smallest ε whose (1-α) intervals meet the analyst's targets.

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
as in :mod:`dpcurator.query.planner`), so no aggregate is more accurate than asked.

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
whole-table count is the public n (:mod:`dpcurator.query.neighbouring`): exact, it meets any
target and takes no share (a query of only such counts costs 0).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction

from dpcurator._validation import check_real, fail
from dpcurator.core.numbers import to_fraction
from dpcurator.errors import ParameterError, UnsupportedQueryError
from dpcurator.mechanisms import Laplace
from dpcurator.query.builder import Query
from dpcurator.query.limits import MIN_EPSILON
from dpcurator.query.plan_outputs import NoisyStatistic, OutputPlan
from dpcurator.query.planner import Plan, plan_query
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
    selection_weight: float = 1.0,
) -> Plan:
    """The cheapest plan whose (1-α) CI half-widths meet ``accuracy`` (reads no data).

    Raises:
        ParameterError: malformed targets, or a name that is not an output column.
        UnsupportedQueryError: an aggregate without a target, or one whose interval width
            depends on the data (mean, variance, stddev, quantile).
    """
    targets = check_targets(accuracy)
    provisional = plan_query(
        query, metadata, epsilon=1, delta=delta, selection_weight=selection_weight
    )
    names = [output.name for output in provisional.outputs]
    unknown = sorted(set(targets) - set(names))
    if unknown:
        raise fail("accuracy", "accuracy", f"keyed by the query's outputs {names}", unknown[0])
    shares = []
    for output in provisional.outputs:
        if output.kind not in TARGETABLE:
            raise UnsupportedQueryError(
                f"No budget can meet an accuracy target for {output.kind.upper()}({output.name}): "
                "its interval width depends on the data. Accuracy targets apply to COUNT, SUM "
                "and HISTOGRAM outputs; pass epsilon for this query instead."
            )
        if output.name not in targets:
            raise UnsupportedQueryError(
                f"Give an accuracy target for every aggregate: {output.name!r} has none "
                f"(targets given: {sorted(targets)})."
            )
        target = resolve_target(output, targets[output.name])
        if not output.parts:  # a replace-one public count: exact, meets any target, free
            shares.append(Fraction(0))
            continue
        (part,) = output.parts
        shares.append(Fraction(smallest_epsilon(part, target, alpha)))
    total = sum(shares, Fraction(0))
    if total == 0:
        return provisional  # only public counts: the planner's free plan (cost 0)
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


def halfwidth(part: NoisyStatistic, epsilon: float, alpha: float) -> float:
    """The (1-α) half-width of ``part`` released with ``epsilon`` (inf beyond the sampler)."""
    try:
        laplace = Laplace.for_epsilon(Fraction(epsilon), part.sensitivity)
    except ParameterError:  # a scale beyond 2^52: the mechanism refuses it
        return math.inf
    return laplace.ci_halfwidth(alpha) * math.ldexp(1.0, part.grid_exponent)


def smallest_epsilon(part: NoisyStatistic, target: float, alpha: float) -> float:
    """The smallest ε (to a relative 2^-40) whose half-width for ``part`` is <= ``target``."""
    steps = math.floor(target / math.ldexp(1.0, part.grid_exponent))
    guess = part.sensitivity * math.log(2 / alpha) / (steps + 1)
    low, high = guess / 2, guess * 2
    for _ in range(MAX_BRACKET_STEPS):
        if halfwidth(part, high, alpha) <= target:
            break
        low, high = high, high * 2
    for _ in range(MAX_BRACKET_STEPS):
        if low == 0 or halfwidth(part, low, alpha) > target:
            break
        low, high = low / 2, low
    while high - low > high * RELATIVE_TOLERANCE:
        middle = (low + high) / 2
        if halfwidth(part, middle, alpha) <= target:
            high = middle
        else:
            low = middle
    return high
