"""The events of a count or bounded-sum stream: public bounds, grid units and the user-level cap.

Shared by :class:`~dpcurator.streams.ContinualSum`,
:class:`~dpcurator.streams.CorrelatedContinualSum` and :class:`~dpcurator.streams.KaryContinualSum`
(one implementation of their common rules): values are clamped to the public [lower, upper] and
rounded to a public power-of-two ``resolution`` (NaN counts as ``lower``, ±inf clamp; counts take
any non-zero value as 1 and NaN as 0), so one event moves the stream by at most
``span = upper - lower`` grid units. User level (``max_events_per_person=k``): events past a
person's k-th hold the null value (0 clamped to the bounds) in their time slot, so the clock stays
public and neighbouring streams (all events of one person) differ in at most k slots.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Final

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_bounds, check_int, check_positive, fail
from dpcurator.core.numbers import to_fraction
from dpcurator.mechanisms import Laplace

#: Largest |running sum| in grid units that the int64 arithmetic of the trees accepts.
MAX_UNITS = 2**62


def _layout(
    owner: str, lower: object, upper: object, resolution: object
) -> tuple[Fraction, int, int]:
    """The grid step and the checked bounds in grid units (floor of the lower, ceiling of the
    upper); raises ParameterError naming the bad parameter."""
    low, high = check_bounds(owner, lower, upper)
    if resolution is None:
        step = Fraction(2) ** (math.floor(math.log2(high - low)) - 16)
    else:
        step = to_fraction(check_positive(owner, "resolution", resolution))
        if step.numerator & (step.numerator - 1) or step.denominator & (step.denominator - 1):
            raise fail(owner, "resolution", "a power of two (2**k)", resolution)
    return step, math.floor(to_fraction(low) / step), math.ceil(to_fraction(high) / step)


#: Bounds of these exact types (None: the default resolution) have their layout computed once:
#: a stream per run of a simulation or per request would otherwise redo the exact arithmetic.
_CACHED_TYPES: Final = (int, float, Fraction, type(None))
_cached_layout = functools.lru_cache(maxsize=256, typed=True)(_layout)


class EventGrid:
    """The public bounds, grid and per-person cap of a stream's events."""

    def __init__(
        self,
        owner: str,
        lower: float,
        upper: float,
        resolution: float | None,
        max_events_per_person: int | None,
        *,
        counting: bool = False,
    ) -> None:
        self.owner = owner
        self.counting = counting
        self.max_events_per_person = (
            None
            if max_events_per_person is None
            else check_int(owner, "max_events_per_person", max_events_per_person, minimum=1)
        )
        bounds = (lower, upper, resolution)
        if all(type(value) in _CACHED_TYPES for value in bounds):
            layout = _cached_layout(owner, *bounds)
        else:
            layout = _layout(owner, *bounds)
        self.resolution, self.lo_units, self.hi_units = layout
        # checked above; read again so that -0.0 stays -0.0 (the cache holds it as 0.0)
        self.lower, self.upper = float(lower), float(upper)
        self.span = self.hi_units - self.lo_units  # what one event can move, in grid units
        self.null_units = min(max(0, self.lo_units), self.hi_units)  # 0 clamped to the bounds
        self.events_per_person: dict[int | str, int] = {}  # user level: events kept so far

    @property
    def events(self) -> int:
        """k: the events one privacy unit can change (1 at event level)."""
        return self.max_events_per_person or 1

    def to_units(self, values: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The batch in grid units, clamped (counts: 0/1); no check of the persons."""
        array = np.asarray(values, dtype=np.float64).reshape(-1)
        if self.counting:
            counted: npt.NDArray[np.int64] = ((array != 0) & ~np.isnan(array)).astype(np.int64)
            return counted
        filled = np.where(np.isnan(array), self.lower, array)
        clamped = np.clip(filled, self.lower, self.upper)
        rounded = np.rint(clamped / float(self.resolution))
        return np.clip(rounded, self.lo_units, self.hi_units).astype(np.int64)

    def check_persons(self, size: int, persons: Sequence[int | str] | None, owner: str) -> None:
        """Raise ParameterError (before anything is ingested) when ``persons`` does not fit the
        level: None at event level, one id per event of the batch of ``size`` at user level."""
        if self.max_events_per_person is None:
            if persons is not None:
                raise fail(owner, "persons", "None (an event-level stream)", "person ids")
            return
        if persons is None or len(persons) != size:
            got = "None" if persons is None else f"{len(persons)} ids"
            raise fail(owner, "persons", f"one person id per event ({size})", got)

    def units(
        self, values: npt.ArrayLike, persons: Sequence[int | str] | None, owner: str
    ) -> npt.NDArray[np.int64]:
        """The batch in grid units, clamped, after :meth:`check_persons`."""
        units = self.to_units(values)
        self.check_persons(units.size, persons, owner)
        return units

    def check_horizon(self, horizon: int, given: object) -> None:
        """Refuse (at construction) a horizon whose running sums could overflow int64 (``given``:
        the horizon as the caller wrote it, for the message)."""
        extreme = max(abs(self.lo_units), abs(self.hi_units))
        if extreme * horizon >= MAX_UNITS:
            raise fail(
                self.owner,
                "horizon",
                f"at most {MAX_UNITS // max(extreme, 1)} at this resolution and these bounds",
                given,
                "Use a coarser resolution or a shorter horizon.",
            )

    def cap(self, units: npt.NDArray[np.int64], persons: Sequence[int | str] | None) -> None:
        """User level: replace (in place) each event past its person's k-th by the null value."""
        k = self.max_events_per_person
        if k is None or persons is None:
            return
        seen = self.events_per_person
        for i, person in enumerate(persons):
            used = seen.get(person, 0)
            if used >= k:
                units[i] = self.null_units
            else:
                seen[person] = used + 1

    def rounding(self, time: int) -> float:
        """How far the grid can move the clamped running sum at ``time`` (0 for counts)."""
        return 0.0 if self.counting else time * float(self.resolution) / 2


@functools.lru_cache(maxsize=256)
def node_noise(epsilon: Fraction, sensitivity: int) -> Laplace:
    """The Laplace noise that makes a tree's releases ε-DP for its ``sensitivity`` (an immutable
    mechanism of public parameters, built once per pair: a stream per run of a simulation or per
    request would otherwise redo its exact arithmetic and checks)."""
    return Laplace.for_epsilon(epsilon, sensitivity)


def check_batch(owner: str, time: int, size: int, horizon: int) -> None:
    """Refuse, before anything is ingested, a batch of ``size`` events past the ``horizon``."""
    if time + size > horizon:
        raise fail(
            owner,
            "values",
            f"at most {horizon - time} more events (horizon {horizon})",
            f"a batch of {size}",
        )


class GridStream:
    """What a stream built on an :class:`EventGrid` exposes of it (public parameters and the
    user-level counts, which are curator state, never released)."""

    grid: EventGrid

    @property
    def max_events_per_person(self) -> int | None:
        return self.grid.max_events_per_person

    @property
    def lower(self) -> float:
        return self.grid.lower

    @property
    def upper(self) -> float:
        return self.grid.upper

    @property
    def resolution(self) -> Fraction:
        return self.grid.resolution

    @property
    def events_per_person(self) -> dict[int | str, int]:
        """User level: the events kept so far of each person (curator state)."""
        return self.grid.events_per_person

    @events_per_person.setter
    def events_per_person(self, kept: dict[int | str, int]) -> None:
        self.grid.events_per_person = kept
