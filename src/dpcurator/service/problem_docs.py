"""The error responses of each route in the OpenAPI document (issue 24, item 7).

Every error the service answers is an RFC 7807 problem document (``application/problem+json``,
:func:`dpcurator.service.app.problem`). :func:`document_problems` lists, per route, the statuses
it can answer, derived from what the route is:

* 400 (malformed JSON) and 413 (body too large): routes with a body; 413 on every route, whose
  body limit applies whatever the route declares;
* 422 (invalid request or parameter): routes with any parameter or body;
* 401 (no or a bad token) and 429 (too many failed sign-ins or refusals): authenticated routes;
* 403 (owners only): routes that need an owner;
* 404 (no such id, or not visible to the caller): routes with an id in their path, and routes
  that name a dataset;
* 409 (budget exceeded, a conflicting state or idempotency key) and 502 (the engine failed after
  the charge, the constant text): routes that change state;
* 503 (the ledger is unreachable, with ``Retry-After``): every route that reads the ledger.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.dependencies.utils import get_flat_params
from fastapi.routing import APIRoute

PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
    },
    "additionalProperties": True,
}

DESCRIPTIONS = {
    400: "Malformed JSON body",
    401: "Authentication required (no token, or an unknown, expired or revoked one)",
    403: "Forbidden (owners only, or another owner's resource)",
    404: "No such resource, or not visible to the caller",
    409: "Conflict: privacy budget exceeded, a conflicting state, or an Idempotency-Key "
    "used for another request or still running",
    413: "Request body too large",
    422: "Invalid request: a field, parameter or query refused (the problem names it)",
    429: "Too many failed sign-ins or refused queries (Retry-After)",
    502: "The engine failed after the charge (the charge stands)",
    503: "The ledger is unavailable (Retry-After); nothing was charged",
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` entries of these statuses, each a problem document."""
    return {
        status: {
            "description": DESCRIPTIONS[status],
            "content": {"application/problem+json": {"schema": PROBLEM_SCHEMA}},
        }
        for status in statuses
    }


def _calls(route: APIRoute) -> set[str]:
    names: set[str] = set()
    pending = list(route.dependant.dependencies)
    while pending:
        dependency = pending.pop()
        names.add(getattr(dependency.call, "__name__", ""))
        pending.extend(dependency.dependencies)
    return names


def statuses_of(route: APIRoute) -> list[int]:
    """The error statuses a route can answer (see the module docstring)."""
    calls = _calls(route)
    if "_maybe_caller" in calls:  # authenticates when a token is given
        calls.add("_identity")
    dependant = route.dependant
    found = {413}
    if dependant.body_params:
        found |= {400, 422}
    if get_flat_params(dependant):  # any parameter, the dependencies' included
        found.add(422)
    if "_identity" in calls:
        found |= {401, 429, 503}
    if "_owner" in calls:
        found.add(403)
    if dependant.path_params:
        found.add(404)
    if (route.methods or set()) & {"POST", "PUT", "PATCH", "DELETE"} and "_identity" in calls:
        found |= {404, 409, 502}
    return sorted(found)


def document_problems(router: APIRouter) -> None:
    """Add each route's problem responses to its OpenAPI entry (replacing FastAPI's default
    422, which describes a body the service never sends)."""
    for route in router.routes:
        if isinstance(route, APIRoute):
            route.responses = {**problems(*statuses_of(route)), **route.responses}
