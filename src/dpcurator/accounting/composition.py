"""Costs combined directly, without events or an accountant: parallel composition over
disjoint parts, and the cost for groups of k people."""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

from dpcurator._validation import check_int, fail
from dpcurator.core.measures import ZCDP, ApproxDP, Measure, PureDP, require_measure
from dpcurator.core.numbers import float_up, fraction_up

__all__ = ["group_privacy", "parallel_composition"]


def parallel_composition(costs: Iterable[Measure]) -> Measure:
    """The cost of releases on disjoint partitions: the worst part (McSherry 2009, Theorem 4).

    All costs must be of one measure (PureDP, ApproxDP or ZCDP). For events, use
    :class:`~dpcurator.accounting.events.ParallelEvent`.
    """
    parts = [require_measure("parallel_composition", "costs", cost) for cost in costs]
    if not parts or any(type(part) is not type(parts[0]) for part in parts):
        raise fail("parallel_composition", "costs", "a non-empty list of one measure type", costs)
    if isinstance(parts[0], PureDP):
        return PureDP(max(part.epsilon for part in parts if isinstance(part, PureDP)))
    if isinstance(parts[0], ApproxDP):
        approx = [part for part in parts if isinstance(part, ApproxDP)]
        return ApproxDP(max(p.epsilon for p in approx), max(p.delta for p in approx))
    return ZCDP(max(part.rho for part in parts if isinstance(part, ZCDP)))


def group_privacy(measure: Measure, k: object) -> Measure:
    """The cost for groups of ``k`` people (datasets at distance k) of a per-person ``measure``.

    * ε-DP gives kε-DP (Dwork, McSherry, Nissim & Smith 2006);
    * (ε, δ)-DP gives (kε, k e^{(k-1)ε} δ)-DP (Vadhan 2017, Lemma 2.2), δ rounded up; refused if
      that δ reaches 1 (the guarantee would be vacuous);
    * ρ-zCDP gives k²ρ-zCDP (Bun & Steinke 2016, Proposition 1.9).
    """
    cost = require_measure("group_privacy", "measure", measure)
    size = check_int("group_privacy", "k", k, minimum=1)
    if isinstance(cost, PureDP):
        return PureDP(size * cost.epsilon)
    if isinstance(cost, ZCDP):
        return ZCDP(size**2 * cost.rho)
    if cost.delta == 0:
        return ApproxDP(size * cost.epsilon, 0)
    log_delta = (
        math.log(size) + (size - 1) * float_up(cost.epsilon) + math.log(float_up(cost.delta))
    )
    delta = fraction_up(math.exp(log_delta), 8) if log_delta < 0 else Fraction(1)
    if delta >= 1:
        raise fail("group_privacy", "k", f"small enough that k·e^((k-1)ε)·δ < 1 for {cost}", k)
    return ApproxDP(size * cost.epsilon, delta)
