"""The exception tree of dpcurator.

Every error a user can cause derives from :class:`DPError`, so ``except DPError`` catches all of
them. The tree::

    DPError
    ├── ParameterError (ValueError)   a parameter is invalid: wrong type, out of range, NaN
    ├── DomainError (ValueError)      data or metadata outside what a component accepts
    ├── BudgetExceededError           a release does not fit the remaining budget (nothing charged)
    ├── UnsupportedQueryError         a query construct the planner refuses, named in the message
    ├── BackendError                  an engine failed to compute an exact aggregate
    ├── AuthError                     missing, invalid or revoked credentials; wrong role
    └── InternalInvariantError        a bug in dpcurator: please report it

Messages follow one format: they name the parameter, the constraint, the value received and, where
useful, a hint ("The 'epsilon' parameter of laplace must be > 0. Got -1.0.").
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any


class DPError(Exception):
    """Base class of every dpcurator error."""


class ParameterError(DPError, ValueError):
    """A parameter is invalid (wrong type, out of range, NaN or infinite)."""


class DomainError(DPError, ValueError):
    """Data or metadata lies outside what a component accepts."""


class BudgetExceededError(DPError):
    """A release would exceed the remaining privacy budget; nothing was charged.

    The message names each budget parameter (epsilon, delta, rho) the release asks for more of
    than is left, with both figures (the cost rounded up, what is left rounded down, to 4
    significant digits), and what to change.

    Attributes:
        requested: the cost of the refused release.
        remaining: the budget that was left (unchanged by the refusal).
    """

    def __init__(self, requested: Any, remaining: Any, *, what: str = "privacy budget") -> None:
        self.requested = requested
        self.remaining = remaining
        short = _shortfalls(requested, remaining)
        if short:
            gap = "; ".join(f"{name}: {asked} asked, {left} left" for name, asked, left in short)
            change = " and ".join(name for name, _, _ in short)
            advice = f"Ask for a smaller {change}, or for a larger budget from the data owner."
        else:
            gap = "the composition with what was already spent exceeds the budget"
            advice = "Ask for a cheaper release, or for a larger budget from the data owner."
        super().__init__(
            f"The {what} is not enough for this release ({gap}). Nothing was charged. {advice}"
        )


#: The budget components a refusal may name, by their parameter names.
_COMPONENTS = ("epsilon", "delta", "rho")


def _shortfalls(requested: Any, remaining: Any) -> list[tuple[str, str, str]]:
    """(parameter, cost rounded up, remainder rounded down) for each component asked beyond
    what is left; only components both sides carry are compared."""
    out = []
    for name in _COMPONENTS:
        asked, left = getattr(requested, name, None), getattr(remaining, name, None)
        if isinstance(asked, int | Fraction) and isinstance(left, int | Fraction) and asked > left:
            out.append(
                (name, _rounded(Fraction(asked), up=True), _rounded(Fraction(left), up=False))
            )
    return out


def _rounded(value: Fraction, *, up: bool, digits: int = 4) -> str:
    """``value`` to ``digits`` significant digits, rounded outward (up or down), for people."""
    if value == 0:
        return "0"
    exponent = math.floor(math.log10(abs(value))) - digits + 1
    scale = Fraction(10) ** exponent
    steps = value / scale
    whole = math.ceil(steps) if up else math.floor(steps)
    return f"{float(whole * scale):.{digits}g}"


class UnsupportedQueryError(DPError):
    """A query uses a construct the planner refuses (the construct is named in the message)."""


#: The only text an analyst sees when an engine fails after a charge. Engine text can carry
#: private values, so it goes to the owner's server log (logger ``dpcurator.engine``) only.
ENGINE_FAILURE_MESSAGE = (
    "The engine failed to compute this release; the charge stands. The data owner can find the "
    "details in the server log."
)


class BackendError(DPError):
    """An engine failed to compute an exact aggregate."""


class AuthError(DPError):
    """Credentials are missing, invalid, revoked, or lack the required role."""


class InternalInvariantError(DPError):
    """An internal invariant failed: this is a bug in dpcurator."""
