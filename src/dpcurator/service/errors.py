"""Errors specific to the HTTP service, each mapped to one RFC 7807 problem type by the app."""

from __future__ import annotations

from dpcurator.errors import AuthError, DPError


class NotFoundError(DPError, LookupError):
    """The resource does not exist, or the caller may not know that it exists."""


class ConflictError(DPError):
    """The request conflicts with the current state (a duplicate name, a reused request key)."""


class ForbiddenError(AuthError):
    """The caller is authenticated but its role may not do this (owner-only endpoints)."""


class RateLimitedError(AuthError):
    """Too many failed sign-ins from one client; retry after ``retry_after`` seconds."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
