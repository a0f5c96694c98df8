"""The service's running-total streams built on issue 27's mechanisms: their parameters, their
charge and their persisted state (used by :mod:`dpcurator.service.stores.streams`).

* ``correlated_count`` / ``correlated_sum`` —
  :class:`~dpcurator.streams.CorrelatedContinualSum`: ρ-zCDP with correlated discrete Gaussian
  noise, a Buffered Linear Toeplitz approximation (Dvijotham, McMahan, Pillutla, Steinke &
  Thakurta 2024) of the square-root factorization of the prefix-sum matrix (Fichtenberger,
  Henzinger & Upadhyay 2023), on an exact integer lattice (Canonne, Kamath & Steinke 2020).
  The whole stream of releases is ρ-zCDP for one event, or one person with
  ``max_events_per_person``; ``horizon`` may be None (unknown: up to 2^36 events).
* ``kary_count`` / ``kary_sum`` — :class:`~dpcurator.streams.KaryContinualSum`: ε-DP, the k-ary
  tree mechanism with Honaker's (2015) consistent estimates and the best ``branching`` for the
  horizon unless given (Dwork, Naor, Pitassi & Rothblum 2010; Chan, Shi & Song 2011).

**The charge** is decided at creation from the public parameters alone, like a query's: a
correlated stream is a ρ-only release (:class:`~dpcurator.accounting.ZCDPEvent` of the requested
ρ, which bounds the mechanism's ``rho_spent``: its lattice and σ are chosen to fit ρ), so only a
budget with concentrated accounting admits it, and a basic (ε, δ) budget refuses it free with
the ledger's own message (:mod:`dpcurator.service.ledger.admission`); a k-ary stream is the pure
ε event of the requested ε (which bounds ``epsilon_spent``).

**The persisted state** is the mechanism's :meth:`to_state` as JSON, its exact integers (the
clock, the encoder's buffers, running totals and anchors) as decimal strings, so that no JSON
reader rounds them; :func:`restore` rebuilds the mechanism from the stored public parameters and
continues it. As for the binary tree streams, the curator is trusted: the state holds exact
running totals (these streams are not pan-private).
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import Any

from dpcurator.accounting.events import PrivacyEvent, PureEvent, ZCDPEvent
from dpcurator.core.measures import ZCDP, ApproxDP
from dpcurator.errors import InternalInvariantError, ParameterError
from dpcurator.streams import CorrelatedContinualSum, KaryContinualSum
from dpcurator.streams.kary import best_branching

CORRELATED = ("correlated_count", "correlated_sum")
KARY = ("kary_count", "kary_sum")
KINDS = CORRELATED + KARY

Counter = CorrelatedContinualSum | KaryContinualSum
#: The state fields holding exact integers (stored as decimal strings), and lists of them.
_INTEGERS = ("time", "total")
_INTEGER_LISTS = ("encoder", "anchor", "acc_block")
#: Grid units of a value must stay below this (exact in float64).
_MAX_UNITS = 2**53


def params(
    kind: str,
    *,
    epsilon: Fraction | None,
    rho: Fraction | None,
    horizon: int | None,
    bounds: tuple[float, float],
    resolution: float | None,
    max_events_per_person: int | None,
    branching: int | None,
) -> dict[str, Any]:
    """The stored parameters of a new stream of ``kind`` (exact fractions as text; a k-ary
    stream's ``branching`` is the chosen one, by default the best for the horizon); raises
    ParameterError naming the parameter when a kind does not take it (free: before the charge)."""
    correlated = kind in CORRELATED
    measure, given, other = ("rho", rho, epsilon) if correlated else ("epsilon", epsilon, rho)
    if given is None or other is not None:
        wrong = "epsilon" if correlated else "rho"
        raise ParameterError(
            f"A {kind} stream is charged in {measure}: give {measure}"
            + (f", not {wrong}." if other is not None else ".")
        )
    if horizon is None and not correlated:
        raise ParameterError(f"A {kind} stream needs a horizon (the public maximum T).")
    if branching is not None and correlated:
        raise ParameterError("branching applies to kary_count and kary_sum streams only.")
    out: dict[str, Any] = {measure: str(given), "horizon": horizon}
    if kind.endswith("_sum"):
        out.update(lower=bounds[0], upper=bounds[1])
        if resolution is not None:
            out["resolution"] = resolution
    elif resolution is not None:
        raise ParameterError(f"resolution applies to sum streams; a {kind} stream counts events.")
    if max_events_per_person is not None:
        out["max_events_per_person"] = max_events_per_person
    if horizon is not None and not correlated:  # stored: the tree stays if the default changes
        out["branching"] = best_branching(horizon) if branching is None else branching
    return out


def build(kind: str, stored: dict[str, Any]) -> Counter:
    """The mechanism of a stream from its stored parameters (every check of the library's)."""
    horizon = stored["horizon"]
    per_person = stored.get("max_events_per_person")
    if kind in CORRELATED:
        rho = Fraction(stored["rho"])
        if kind == "correlated_count":
            return CorrelatedContinualSum.counter(rho, horizon, max_events_per_person=per_person)
        return CorrelatedContinualSum(
            rho,
            horizon,
            stored["lower"],
            stored["upper"],
            stored.get("resolution"),
            max_events_per_person=per_person,
        )
    epsilon = Fraction(stored["epsilon"])
    branching = stored.get("branching")
    if kind == "kary_count":
        return KaryContinualSum.counter(
            epsilon, horizon, branching=branching, max_events_per_person=per_person
        )
    return KaryContinualSum(
        epsilon,
        horizon,
        stored["lower"],
        stored["upper"],
        stored.get("resolution"),
        branching=branching,
        max_events_per_person=per_person,
    )


def check_grid(kind: str, counter: Counter) -> None:
    """Refuse (free, before the charge) a sum whose bounds need more than 2^53 steps of its
    resolution: the events are read as float64 grid units, exact only below 2^53."""
    grid = counter.grid
    if max(abs(grid.lo_units), abs(grid.hi_units)) < _MAX_UNITS:
        return
    coarsest = max(abs(grid.lower), abs(grid.upper)) / _MAX_UNITS
    least = 2.0 ** math.ceil(math.log2(coarsest))
    raise ParameterError(
        f"A {kind} stream with lower={grid.lower:g} and upper={grid.upper:g} needs a resolution "
        f"of at least {least:g} (a power of two); got {float(grid.resolution):g}."
    )


def event(kind: str, stored: dict[str, Any], counter: Counter) -> PrivacyEvent:
    """The privacy event charged at creation: ρ-zCDP of the requested ρ (correlated) or ε-DP of
    the requested ε (k-ary), each at least what the built mechanism spends."""
    if isinstance(counter, CorrelatedContinualSum):
        rho = Fraction(stored["rho"])
        if counter.rho_spent > rho:  # pragma: no cover - the lattice is chosen to fit ρ
            raise InternalInvariantError(f"A {kind} stream spends more than its rho.")
        return ZCDPEvent(rho)
    epsilon = Fraction(stored["epsilon"])
    if counter.epsilon_spent > epsilon:  # pragma: no cover - Laplace.for_epsilon fits ε
        raise InternalInvariantError(f"A {kind} stream spends more than its epsilon.")
    return PureEvent(epsilon)


def cost(kind: str, stored: dict[str, Any]) -> ApproxDP | ZCDP:
    """What the stream costs as shown to the owner: ρ (correlated) or (ε, 0) (k-ary)."""
    if kind in CORRELATED:
        return ZCDP(Fraction(stored["rho"]))
    return ApproxDP(Fraction(stored["epsilon"]), 0)


def encode(counter: Counter) -> bytes:
    """The persisted state: :meth:`to_state` with its exact integers as decimal strings."""
    state = dict(counter.to_state())
    for key in _INTEGERS:
        if key in state:
            state[key] = str(int(state[key]))
    for key in _INTEGER_LISTS:
        if key in state:
            state[key] = [str(int(v)) for v in state[key]]
    return json.dumps(state).encode()


def restore(kind: str, stored: dict[str, Any], data: bytes) -> Counter:
    """The stream's mechanism, continued from its persisted state."""
    counter = build(kind, stored)
    counter.restore(json.loads(data))
    return counter
