"""Privacy events: immutable records of what was released, so accounting can improve later.

A ledger stores events rather than costs: an event names the mechanism and its parameters (e.g.
Laplace noise of scale b on a statistic of sensitivity Δ), so a better accountant can later
recompute a tighter total from the same history. Each event knows its own cost in the measures
where one is defined (``None`` otherwise):

* ``pure_cost()`` — ε-DP (Dwork, McSherry, Nissim & Smith 2006);
* ``approx_cost()`` — (ε, δ)-DP without choosing a δ for conversions;
* ``zcdp_cost()`` — ρ-zCDP (Bun & Steinke 2016);
* ``approx_zcdp_cost()`` — δ-approximate ρ-zCDP (Bun & Steinke 2016, approximate zCDP), the
  currency of :class:`~dpcurator.accounting.ConcentratedFilter`.

Events round-trip through plain JSON-able dicts (``to_dict`` / ``PrivacyEvent.from_dict``);
Fractions are stored as exact "p/q" strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

from dpcurator._validation import check_int, check_positive, check_probability, fail
from dpcurator.accounting.calibration import gaussian_rho, laplace_epsilon
from dpcurator.core.measures import ZCDP, ApproxDP, PureDP
from dpcurator.core.numbers import to_fraction


def _nonnegative(owner: str, name: str, value: object) -> Fraction:
    fraction = to_fraction(value, owner=owner, name=name)
    if fraction < 0:
        raise fail(owner, name, ">= 0", value)
    return fraction


def _positive(owner: str, name: str, value: object) -> Fraction:
    check_positive(owner, name, value)
    return to_fraction(value, owner=owner, name=name)


def _encode(value: Fraction) -> str:
    return str(value)


def _fractions_dict(event: PrivacyEvent, *names: str) -> dict[str, Any]:
    """The ``to_dict`` of an event whose fields are all Fractions: its kind, then each field."""
    return {"kind": event.kind, **{name: _encode(getattr(event, name)) for name in names}}


def _decode(data: Mapping[str, Any], key: str) -> Fraction:
    try:
        return Fraction(data[key])
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise fail(
            "PrivacyEvent.from_dict", key, "an exact number such as '1/10'", data.get(key)
        ) from exc


class PrivacyEvent:
    """Base class of all events. Subclasses are frozen dataclasses validated at construction."""

    kind: ClassVar[str]

    def pure_cost(self) -> PureDP | None:
        """The ε-DP cost of this event, or None if it is not pure DP."""
        return None

    def approx_cost(self) -> ApproxDP | None:
        """The (ε, δ)-DP cost of this event with no δ spent on conversions, or None."""
        pure = self.pure_cost()
        return None if pure is None else pure.to_approx()

    def zcdp_cost(self) -> ZCDP | None:
        """The ρ-zCDP cost of this event, or None if it has none (e.g. δ > 0 events)."""
        pure = self.pure_cost()
        return None if pure is None else pure.to_zcdp()

    def approx_zcdp_cost(self) -> tuple[ZCDP, Fraction] | None:
        """(ρ, δ) such that this event is δ-approximately ρ-zCDP, or None.

        An event with a zCDP cost is 0-approximately that ρ-zCDP. Otherwise an (ε, δ)-DP event is
        δ-approximately (ε²/2)-zCDP: every (ε, δ)-DP pair of output distributions is a
        post-processing of (ε, δ) randomized response on four outcomes (Kairouz, Oh & Viswanath
        2015; Murtagh & Vadhan 2016, Lemma 3.2), i.e. a mixture, with weight 1-δ, of an ε-DP
        pair, which is (ε²/2)-zCDP (Bun & Steinke 2016, Proposition 1.4).
        """
        zcdp = self.zcdp_cost()
        if zcdp is not None:
            return zcdp, Fraction(0)
        approx = self.approx_cost()
        if approx is None:
            return None
        return ZCDP(approx.epsilon**2 / 2), approx.delta

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able description; :meth:`from_dict` inverts it exactly."""
        raise NotImplementedError  # pragma: no cover  # every subclass overrides

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrivacyEvent:
        """Rebuild an event from :meth:`to_dict` output (exact round trip).

        Called on a subclass, also checks that the event has that type.
        """
        event = _event_from_dict(data)
        if not isinstance(event, cls):
            raise fail(f"{cls.__name__}.from_dict", "data", f"a {cls.__name__} dict", data)
        return event


@dataclass(frozen=True)
class PureEvent(PrivacyEvent):
    """A release satisfying ε-DP (its mechanism is not described further)."""

    epsilon: Fraction
    kind: ClassVar[str] = "pure"

    def __init__(self, epsilon: object) -> None:
        object.__setattr__(self, "epsilon", _nonnegative("PureEvent", "epsilon", epsilon))

    def pure_cost(self) -> PureDP:
        return PureDP(self.epsilon)

    def to_dict(self) -> dict[str, Any]:
        return _fractions_dict(self, "epsilon")


@dataclass(frozen=True)
class ApproxEvent(PrivacyEvent):
    """A release satisfying (ε, δ)-DP (its mechanism is not described further)."""

    epsilon: Fraction
    delta: Fraction
    kind: ClassVar[str] = "approx"

    def __init__(self, epsilon: object, delta: object) -> None:
        object.__setattr__(self, "epsilon", _nonnegative("ApproxEvent", "epsilon", epsilon))
        check_probability("ApproxEvent", "delta", delta, open_high=True)
        object.__setattr__(self, "delta", to_fraction(delta))

    def pure_cost(self) -> PureDP | None:
        return PureDP(self.epsilon) if self.delta == 0 else None

    def approx_cost(self) -> ApproxDP:
        return ApproxDP(self.epsilon, self.delta)

    def to_dict(self) -> dict[str, Any]:
        return _fractions_dict(self, "epsilon", "delta")


@dataclass(frozen=True)
class LaplaceEvent(PrivacyEvent):
    """Laplace or discrete Laplace noise of scale b on a statistic of L1 sensitivity Δ: ε = Δ/b.

    Dwork, McSherry, Nissim & Smith 2006; the discrete Laplace on any grid containing the
    statistic has the same ε (Ghosh, Roughgarden & Sundararajan 2009).
    """

    scale: Fraction
    l1_sensitivity: Fraction
    kind: ClassVar[str] = "laplace"

    def __init__(self, scale: object, l1_sensitivity: object) -> None:
        object.__setattr__(self, "scale", _positive("LaplaceEvent", "scale", scale))
        sensitivity = _positive("LaplaceEvent", "l1_sensitivity", l1_sensitivity)
        object.__setattr__(self, "l1_sensitivity", sensitivity)

    def pure_cost(self) -> PureDP:
        return PureDP(laplace_epsilon(self.scale, self.l1_sensitivity))

    def to_dict(self) -> dict[str, Any]:
        return _fractions_dict(self, "scale", "l1_sensitivity")


@dataclass(frozen=True)
class GaussianEvent(PrivacyEvent):
    """(Discrete) Gaussian noise of parameter σ on a statistic of L2 sensitivity Δ.

    ρ = Δ²/(2σ²)-zCDP (Bun & Steinke 2016, Proposition 1.6; discrete: Canonne, Kamath & Steinke
    2020, Theorem 4). No pure cost; its (ε, δ) depends on a chosen δ (see the accountants).
    """

    sigma: Fraction
    l2_sensitivity: Fraction
    kind: ClassVar[str] = "gaussian"

    def __init__(self, sigma: object, l2_sensitivity: object) -> None:
        object.__setattr__(self, "sigma", _positive("GaussianEvent", "sigma", sigma))
        sensitivity = _positive("GaussianEvent", "l2_sensitivity", l2_sensitivity)
        object.__setattr__(self, "l2_sensitivity", sensitivity)

    def zcdp_cost(self) -> ZCDP:
        return ZCDP(gaussian_rho(self.sigma, self.l2_sensitivity))

    def to_dict(self) -> dict[str, Any]:
        return _fractions_dict(self, "sigma", "l2_sensitivity")


@dataclass(frozen=True)
class ZCDPEvent(PrivacyEvent):
    """A release satisfying ρ-zCDP (Bun & Steinke 2016)."""

    rho: Fraction
    kind: ClassVar[str] = "zcdp"

    def __init__(self, rho: object) -> None:
        object.__setattr__(self, "rho", _nonnegative("ZCDPEvent", "rho", rho))

    def zcdp_cost(self) -> ZCDP:
        return ZCDP(self.rho)

    def to_dict(self) -> dict[str, Any]:
        return _fractions_dict(self, "rho")


@dataclass(frozen=True)
class ConcentratedEvent(PrivacyEvent):
    """A release that is δ-approximately ρ-zCDP and, when ``epsilon`` is given, also
    (ε, δ_ε)-DP: e.g. a query whose discrete Gaussian noise was calibrated to a requested (ε, δ)
    (the (ε, δ) view is what an (ε, δ) ledger with basic composition charges; a
    :class:`~dpcurator.accounting.ConcentratedFilter` charges whichever view is cheaper).

    ``delta`` > 0 comes from Gaussian partition selection: a group present in only one of two
    neighbouring tables is released with probability at most δ, and conditioned on none being
    released the output is that of the Gaussian mechanism on the groups of both tables.
    """

    rho: Fraction
    delta: Fraction
    epsilon: Fraction | None
    epsilon_delta: Fraction
    kind: ClassVar[str] = "concentrated"

    def __init__(
        self,
        rho: object,
        delta: object = 0,
        epsilon: object = None,
        epsilon_delta: object = 0,
    ) -> None:
        owner = "ConcentratedEvent"
        object.__setattr__(self, "rho", _nonnegative(owner, "rho", rho))
        check_probability(owner, "delta", delta, open_high=True)
        object.__setattr__(self, "delta", to_fraction(delta))
        eps = None if epsilon is None else _nonnegative(owner, "epsilon", epsilon)
        object.__setattr__(self, "epsilon", eps)
        check_probability(owner, "epsilon_delta", epsilon_delta, open_high=True)
        object.__setattr__(self, "epsilon_delta", to_fraction(epsilon_delta))

    def pure_cost(self) -> PureDP | None:
        if self.epsilon is None or self.epsilon_delta != 0:
            return None
        return PureDP(self.epsilon)

    def approx_cost(self) -> ApproxDP | None:
        return None if self.epsilon is None else ApproxDP(self.epsilon, self.epsilon_delta)

    def zcdp_cost(self) -> ZCDP | None:
        return ZCDP(self.rho) if self.delta == 0 else None

    def approx_zcdp_cost(self) -> tuple[ZCDP, Fraction]:
        return ZCDP(self.rho), self.delta

    def to_dict(self) -> dict[str, Any]:
        data = _fractions_dict(self, "rho", "delta", "epsilon_delta")
        data["epsilon"] = None if self.epsilon is None else _encode(self.epsilon)
        return data


def _worst(costs: list[Any]) -> Any:
    """The largest of same-type costs, or None if any is None (helper of ParallelEvent)."""
    if any(cost is None for cost in costs):
        return None
    if isinstance(costs[0], PureDP):
        return PureDP(max(cost.epsilon for cost in costs))
    if isinstance(costs[0], ApproxDP):
        return ApproxDP(max(c.epsilon for c in costs), max(c.delta for c in costs))
    return ZCDP(max(cost.rho for cost in costs))


@dataclass(frozen=True)
class ParallelEvent(PrivacyEvent):
    """Releases on disjoint partitions of the data (each person in at most one partition).

    Parallel composition (McSherry 2009, Theorem 4): the cost is the worst of the parts, in every
    measure (pure, (ε, δ), zCDP and each Rényi order).
    """

    events: tuple[PrivacyEvent, ...]
    kind: ClassVar[str] = "parallel"

    def __init__(self, events: Iterable[PrivacyEvent]) -> None:
        parts = tuple(events)
        if not parts or not all(isinstance(event, PrivacyEvent) for event in parts):
            raise fail("ParallelEvent", "events", "a non-empty sequence of PrivacyEvent", events)
        object.__setattr__(self, "events", parts)

    def pure_cost(self) -> PureDP | None:
        result: PureDP | None = _worst([event.pure_cost() for event in self.events])
        return result

    def approx_cost(self) -> ApproxDP | None:
        result: ApproxDP | None = _worst([event.approx_cost() for event in self.events])
        return result

    def zcdp_cost(self) -> ZCDP | None:
        result: ZCDP | None = _worst([event.zcdp_cost() for event in self.events])
        return result

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "events": [event.to_dict() for event in self.events]}


@dataclass(frozen=True)
class RepeatedEvent(PrivacyEvent):
    """``count`` adaptive repetitions of ``event``; costs compose sequentially.

    Costs here are basic composition (Dwork et al. 2006; zCDP: Bun & Steinke 2016, Lemma 2.3);
    accountants may do better (advanced, optimal, Rényi or PLD composition).
    """

    event: PrivacyEvent
    count: int
    kind: ClassVar[str] = "repeated"

    def __init__(self, event: PrivacyEvent, count: object) -> None:
        if not isinstance(event, PrivacyEvent):
            raise fail("RepeatedEvent", "event", "a PrivacyEvent", event)
        object.__setattr__(self, "event", event)
        object.__setattr__(self, "count", check_int("RepeatedEvent", "count", count, minimum=1))

    def pure_cost(self) -> PureDP | None:
        pure = self.event.pure_cost()
        return None if pure is None else PureDP(self.count * pure.epsilon)

    def approx_cost(self) -> ApproxDP | None:
        approx = self.event.approx_cost()
        if approx is None or self.count * approx.delta >= 1:
            return None
        return ApproxDP(self.count * approx.epsilon, self.count * approx.delta)

    def zcdp_cost(self) -> ZCDP | None:
        zcdp = self.event.zcdp_cost()
        return None if zcdp is None else ZCDP(self.count * zcdp.rho)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "event": self.event.to_dict(), "count": self.count}


def _summed(costs: list[Any]) -> Any:
    """The sum of same-type costs, or None if any is None (helper of ComposedEvent)."""
    if any(cost is None for cost in costs):
        return None
    if isinstance(costs[0], PureDP):
        return PureDP(sum((c.epsilon for c in costs), Fraction(0)))
    if isinstance(costs[0], ApproxDP):
        delta = sum((c.delta for c in costs), Fraction(0))
        return None if delta >= 1 else ApproxDP(sum((c.epsilon for c in costs), Fraction(0)), delta)
    return ZCDP(sum((cost.rho for cost in costs), Fraction(0)))


@dataclass(frozen=True)
class ComposedEvent(PrivacyEvent):
    """Several releases made together (e.g. the statistics of one query), composed
    sequentially: costs add in every measure (basic composition, Dwork et al. 2006; zCDP and
    approximate zCDP, Bun & Steinke 2016, Lemmas 2.3 and 8.3), and accountants that know a part
    (a :class:`GaussianEvent`'s σ) may compose the parts more tightly."""

    events: tuple[PrivacyEvent, ...]
    kind: ClassVar[str] = "composed"

    def __init__(self, events: Iterable[PrivacyEvent]) -> None:
        parts = tuple(events)
        if not parts or not all(isinstance(event, PrivacyEvent) for event in parts):
            raise fail("ComposedEvent", "events", "a non-empty sequence of PrivacyEvent", events)
        object.__setattr__(self, "events", parts)

    def pure_cost(self) -> PureDP | None:
        result: PureDP | None = _summed([event.pure_cost() for event in self.events])
        return result

    def approx_cost(self) -> ApproxDP | None:
        result: ApproxDP | None = _summed([event.approx_cost() for event in self.events])
        return result

    def zcdp_cost(self) -> ZCDP | None:
        result: ZCDP | None = _summed([event.zcdp_cost() for event in self.events])
        return result

    def approx_zcdp_cost(self) -> tuple[ZCDP, Fraction] | None:
        pairs = [event.approx_zcdp_cost() for event in self.events]
        if any(pair is None for pair in pairs):
            return None
        rho = sum((pair[0].rho for pair in pairs if pair is not None), Fraction(0))
        delta = sum((pair[1] for pair in pairs if pair is not None), Fraction(0))
        return None if delta >= 1 else (ZCDP(rho), delta)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "events": [event.to_dict() for event in self.events]}


def _event_from_dict(data: Mapping[str, Any]) -> PrivacyEvent:
    if not isinstance(data, Mapping):
        raise fail("PrivacyEvent.from_dict", "data", "a mapping produced by to_dict()", data)
    kind = data.get("kind")
    if kind == PureEvent.kind:
        return PureEvent(_decode(data, "epsilon"))
    if kind == ApproxEvent.kind:
        return ApproxEvent(_decode(data, "epsilon"), _decode(data, "delta"))
    if kind == LaplaceEvent.kind:
        return LaplaceEvent(_decode(data, "scale"), _decode(data, "l1_sensitivity"))
    if kind == GaussianEvent.kind:
        return GaussianEvent(_decode(data, "sigma"), _decode(data, "l2_sensitivity"))
    if kind == ZCDPEvent.kind:
        return ZCDPEvent(_decode(data, "rho"))
    if kind == ConcentratedEvent.kind:
        epsilon = None if data.get("epsilon") is None else _decode(data, "epsilon")
        return ConcentratedEvent(
            _decode(data, "rho"), _decode(data, "delta"), epsilon, _decode(data, "epsilon_delta")
        )
    if kind == ParallelEvent.kind and isinstance(data.get("events"), list):
        return ParallelEvent(_event_from_dict(part) for part in data["events"])
    if kind == ComposedEvent.kind and isinstance(data.get("events"), list):
        return ComposedEvent(_event_from_dict(part) for part in data["events"])
    if kind == RepeatedEvent.kind and isinstance(data.get("event"), Mapping):
        return RepeatedEvent(_event_from_dict(data["event"]), data.get("count"))
    raise fail(
        "PrivacyEvent.from_dict",
        "data",
        "a dict with a known 'kind' (pure, approx, laplace, gaussian, zcdp, concentrated, "
        "parallel, repeated, composed)",
        data,
    )
