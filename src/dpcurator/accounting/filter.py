"""Privacy filters (a fixed total budget) and odometers (spend tracking only).

A filter charges *before* a release: :meth:`PrivacyFilter.reserve` atomically checks that all
events so far plus the new one compose within the budget and records the event, or raises
:class:`~dpcurator.errors.BudgetExceededError` and changes nothing. A reservation is final once
noise has been drawn: a failure after that keeps the charge. :meth:`Reservation.cancel` exists
only for failures *before* any noise was drawn (e.g. the engine could not compute the exact
aggregate); call :meth:`Reservation.commit` just before drawing noise, after which cancelling
is refused.

A filter is a valid privacy filter for adaptively chosen events (Rogers, Roth, Ullman & Vadhan
2016) only with an accountant whose ``supports_adaptive`` is true (basic, zCDP, Rényi); the
others are accepted only with ``fixed_sequence=True``, a promise that the sequence of mechanism
parameters was fixed in advance.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol, overload

from dpcurator._validation import fail
from dpcurator.accounting.accountants import Accountant, BasicAccountant
from dpcurator.accounting.budget import Budget
from dpcurator.accounting.events import PrivacyEvent
from dpcurator.core.measures import ZCDP, ApproxDP, Measure, PureDP, require_measure
from dpcurator.errors import BudgetExceededError, InternalInvariantError


class _Ledger(Protocol):
    def _cancel(self, reservation: Reservation) -> None: ...


@dataclass(eq=False)
class Reservation:
    """A recorded charge. Final once committed; see :meth:`cancel` for the one exception."""

    event: PrivacyEvent
    description: str
    number: int
    _owner: _Ledger = field(repr=False)
    _state: str = field(default="reserved", repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def state(self) -> str:
        """ "reserved", "committed" or "cancelled"."""
        return self._state

    def commit(self) -> None:
        """Mark that noise is about to be drawn: from now on the charge can never be undone."""
        with self._lock:
            if self._state == "cancelled":
                raise InternalInvariantError(f"Reservation {self.number} was cancelled already.")
            self._state = "committed"

    def cancel(self) -> None:
        """Undo the charge. Allowed ONLY if no noise for this release was drawn.

        Cancelling after noise was drawn would under-count the privacy loss; commit() prevents
        it. Cancelling twice is a no-op.
        """
        with self._lock:
            if self._state == "committed":
                raise InternalInvariantError(
                    f"Reservation {self.number} is committed: its noise may have been drawn, so "
                    "its charge is final."
                )
            if self._state == "cancelled":
                return
            self._state = "cancelled"
        self._owner._cancel(self)


class BudgetFilter(Protocol):
    """What the curator needs from a budget ledger (in-memory here, database in the service)."""

    def reserve(self, event: PrivacyEvent, *, description: str = "") -> Reservation:
        """Charge ``event`` if it fits, else raise BudgetExceededError and change nothing."""
        ...

    def remaining(self) -> Measure:
        """The budget left (componentwise budget minus spent)."""
        ...

    def spent(self) -> Measure:
        """The composed cost of all live reservations, in the budget's measure."""
        ...

    def events(self) -> tuple[PrivacyEvent, ...]:
        """The events of all live (reserved or committed) reservations, in order."""
        ...


def _difference(budget: Measure, spent: Measure) -> Measure:
    """Budget minus spent, componentwise, floored at 0 (spent is in the budget's measure)."""
    if isinstance(budget, ZCDP):
        used = spent.rho if isinstance(spent, ZCDP) else Fraction(0)
        return ZCDP(max(budget.rho - used, Fraction(0)))
    used_approx = ApproxDP(0, 0) if isinstance(spent, ZCDP) else spent.to_approx()
    epsilon = max(budget.to_approx().epsilon - used_approx.epsilon, Fraction(0))
    if isinstance(budget, PureDP):
        return PureDP(epsilon)
    return ApproxDP(epsilon, max(budget.delta - used_approx.delta, Fraction(0)))


class _EventLog:
    """Thread-safe ordered list of live reservations (shared by filter and odometer)."""

    def __init__(self, accountant: Accountant) -> None:
        if not isinstance(accountant, Accountant):
            raise fail(type(self).__name__, "accountant", "an Accountant", accountant)
        self.accountant = accountant
        self._lock = threading.Lock()
        self._live: list[Reservation] = []
        self._numbers = itertools.count(1)
        self._spent: Measure | None = None  # the composed cost of the live events, when known

    def _cancel(self, reservation: Reservation) -> None:
        with self._lock:
            self._live.remove(reservation)
            self._spent = None

    def events(self) -> tuple[PrivacyEvent, ...]:
        """The events of all live reservations, in the order they were made."""
        with self._lock:
            return tuple(reservation.event for reservation in self._live)

    def _new(self, event: PrivacyEvent, description: str) -> Reservation:
        reservation = Reservation(event, description, next(self._numbers), self)
        self._live.append(reservation)
        return reservation


class _Events(Sequence[PrivacyEvent]):
    """The events of a list of reservations, read on demand (no copy per reservation)."""

    def __init__(self, reservations: list[Reservation]) -> None:
        self._reservations = reservations

    def __len__(self) -> int:
        return len(self._reservations)

    @overload
    def __getitem__(self, index: int) -> PrivacyEvent: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[PrivacyEvent]: ...

    def __getitem__(self, index: int | slice) -> PrivacyEvent | Sequence[PrivacyEvent]:
        if isinstance(index, slice):
            return [reservation.event for reservation in self._reservations[index]]
        return self._reservations[index].event


class PrivacyFilter(_EventLog):
    """An in-memory, thread-safe privacy filter: refuses any event that would exceed the budget.

    Args:
        budget: a :class:`Budget` or a PureDP / ApproxDP / ZCDP measure.
        accountant: how events compose (default :class:`BasicAccountant`).
        fixed_sequence: required (True) for accountants not valid adaptively (see module doc).
    """

    def __init__(
        self,
        budget: Budget | Measure,
        accountant: Accountant | None = None,
        *,
        fixed_sequence: bool = False,
    ) -> None:
        super().__init__(BasicAccountant() if accountant is None else accountant)
        measure = budget.as_measure() if isinstance(budget, Budget) else budget
        self.budget: Measure = require_measure("PrivacyFilter", "budget", measure)
        if not self.accountant.supports_adaptive and not fixed_sequence:
            raise fail(
                "PrivacyFilter",
                "accountant",
                "valid for adaptively chosen events",
                self.accountant,
                "Its bound assumes the sequence is fixed in advance; pass fixed_sequence=True "
                "only if that holds, or use BasicAccountant, ZCDPAccountant or RDPAccountant.",
            )

    def reserve(self, event: PrivacyEvent, *, description: str = "") -> Reservation:
        """Atomically charge ``event``; raise BudgetExceededError (nothing charged) if it won't fit.

        Invalid events (e.g. one the accountant cannot express) raise ParameterError, also
        without charging.
        """
        if not isinstance(event, PrivacyEvent):
            raise fail("PrivacyFilter.reserve", "event", "a PrivacyEvent", event)
        with self._lock:
            current = _Events(self._live)  # a view: only read if composition must start over
            spent = self._spent_locked(current)
            total = self.accountant.extend(spent, current, event, self.budget)
            if not self.accountant.within(total, self.budget):
                requested = self.accountant.cost_in([event], self.budget)
                raise BudgetExceededError(requested, _difference(self.budget, spent))
            reservation = self._new(event, description)
            self._spent = total
            return reservation

    def spent(self) -> Measure:
        """The composed cost of all live reservations, in the budget's measure."""
        with self._lock:
            return self._spent_locked(_Events(self._live))

    def _spent_locked(self, events: Sequence[PrivacyEvent]) -> Measure:
        if self._spent is None:
            self._spent = self.accountant.cost_in(events, self.budget)
        return self._spent

    def remaining(self) -> Measure:
        """Budget minus spent, componentwise and floored at 0.

        With a non-additive accountant (advanced, Rényi, PLD) this is indicative: an event fits
        when the *composition* fits, which can differ from comparing its own cost to this.
        """
        return _difference(self.budget, self.spent())

    def __repr__(self) -> str:
        return f"PrivacyFilter(budget={self.budget}, accountant={self.accountant!r})"


class PrivacyOdometer(_EventLog):
    """Tracks spend without a limit: every reservation succeeds; :meth:`spent` reports the total.

    Reports are the accountant's ``total`` (pass ``delta`` for accountants that need one). For
    adaptively chosen events, basic composition is a valid odometer (Rogers, Roth, Ullman &
    Vadhan 2016); for others it is a report of the composed cost of the recorded sequence.
    """

    def __init__(self, accountant: Accountant | None = None) -> None:
        super().__init__(BasicAccountant() if accountant is None else accountant)

    def reserve(self, event: PrivacyEvent, *, description: str = "") -> Reservation:
        """Record ``event`` (never refused)."""
        if not isinstance(event, PrivacyEvent):
            raise fail("PrivacyOdometer.reserve", "event", "a PrivacyEvent", event)
        with self._lock:
            return self._new(event, description)

    def spent(self, delta: object = None) -> Measure:
        """The accountant's total of all live reservations."""
        return self.accountant.total(self.events(), delta)
