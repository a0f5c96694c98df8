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

from typing import Any


class DPError(Exception):
    """Base class of every dpcurator error."""


class ParameterError(DPError, ValueError):
    """A parameter is invalid (wrong type, out of range, NaN or infinite)."""


class DomainError(DPError, ValueError):
    """Data or metadata lies outside what a component accepts."""


class BudgetExceededError(DPError):
    """A release would exceed the remaining privacy budget; nothing was charged.

    Attributes:
        requested: the cost of the refused release.
        remaining: the budget that was left (unchanged by the refusal).
    """

    def __init__(self, requested: Any, remaining: Any, *, what: str = "privacy budget") -> None:
        self.requested = requested
        self.remaining = remaining
        super().__init__(
            f"The {what} is exhausted: the release costs {requested} but only {remaining} "
            "remains. Nothing was charged. Ask for a cheaper release (smaller epsilon/delta/rho) "
            "or a larger budget from the data owner."
        )


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
