"""The HTTP API (FastAPI): versioned under ``/v1``, errors as RFC 7807 problem documents.

Every ``/v1`` endpoint except ``/v1/health`` requires ``Authorization: Bearer <token>``. Owners
manage datasets, analysts, budgets and batch releases; analysts see only the datasets granted to
them, their own budget and their own history. The web console is served from ``/console/``;
the OpenAPI description from ``/v1/openapi.json`` (no interactive docs page: Swagger UI would load
scripts from a CDN, which the Content-Security-Policy forbids). Responses are strict JSON
(:mod:`dpcurator.service.json_response`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dpcurator.core.measures import ApproxDP
from dpcurator.errors import (
    AuthError,
    BackendError,
    BudgetExceededError,
    DomainError,
    DPError,
    ParameterError,
    UnsupportedQueryError,
)
from dpcurator.service import schemas as s
from dpcurator.service.errors import ConflictError, ForbiddenError, NotFoundError, RateLimitedError
from dpcurator.service.json_response import FiniteJSONResponse
from dpcurator.service.ledger.health import LedgerUnavailableError
from dpcurator.service.operations import CuratorService
from dpcurator.service.refusals import RefusalsLimitedError
from dpcurator.service.routes.core import router
from dpcurator.service.routes.fit import router as fit_router
from dpcurator.service.routes.jobs import router as jobs_router
from dpcurator.service.routes.pmw import router as pmw_router
from dpcurator.service.routes.streams import router as streams_router
from dpcurator.service.routes.synth import router as synth_router
from dpcurator.service.validation_text import translated

PROBLEM = "application/problem+json"
STATIC_DIR = Path(__file__).parent / "static"
DEFAULT_MAX_BODY = 1 << 20

#: (status, problem type slug, title) per error class; the first matching class wins.
_PROBLEMS: list[tuple[type[Exception], int, str, str]] = [
    (RefusalsLimitedError, 429, "rate-limited", "Too many refused queries"),
    (RateLimitedError, 429, "rate-limited", "Too many failed sign-ins"),
    (ForbiddenError, 403, "forbidden", "Forbidden"),
    (AuthError, 401, "unauthorized", "Authentication required"),
    (NotFoundError, 404, "not-found", "Not found"),
    (BudgetExceededError, 409, "budget-exceeded", "Privacy budget exceeded"),
    (ConflictError, 409, "conflict", "Conflict"),
    (UnsupportedQueryError, 422, "unsupported-query", "Query refused by the planner"),
    (ParameterError, 422, "invalid-parameter", "Invalid parameter"),
    (DomainError, 422, "invalid-data", "Invalid data or metadata"),
    (BackendError, 502, "engine-error", "The engine failed"),
    (LedgerUnavailableError, 503, "ledger-unavailable", "The privacy ledger is unavailable"),
]


def problem(status: int, slug: str, title: str, detail: str, **extra: Any) -> JSONResponse:
    """An RFC 7807 problem document."""
    body = {"type": f"urn:dpcurator:problem:{slug}", "title": title, "status": status}
    body["detail"] = detail
    body.update(extra)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return FiniteJSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def _problem_for(exc: DPError) -> JSONResponse:
    for cls, status, slug, title in _PROBLEMS:
        if isinstance(exc, cls):
            extra: dict[str, Any] = {}
            if isinstance(exc, BudgetExceededError):
                extra = {
                    "requested": _cost_dict(exc.requested),
                    "remaining": _cost_dict(exc.remaining),
                }
            response = problem(status, slug, title, str(exc), **extra)
            if isinstance(exc, RateLimitedError | LedgerUnavailableError):
                response.headers["Retry-After"] = str(exc.retry_after)
            return response
    return problem(500, "internal", "Internal error", "An internal invariant failed.")


def _cost_dict(cost: Any) -> dict[str, Any] | None:
    if not isinstance(cost, ApproxDP):
        return None
    return s.CostOut.of(cost).model_dump()


class BodyLimit:
    """ASGI middleware: refuse request bodies larger than ``max_body`` bytes with 413."""

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            await self._refuse(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_body:
                raise _BodyTooLargeError
            return message

        try:
            await self.app(scope, limited, send)
        except _BodyTooLargeError:
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem(
            413, "body-too-large", "Request body too large", f"The limit is {self.max_body} bytes."
        )
        await response(scope, receive, send)


class _BodyTooLargeError(Exception):
    """Raised inside :class:`BodyLimit` when a streamed body passes the limit."""


SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_SECURITY_HEADERS_RAW = [
    (k.lower().encode("latin-1"), v.encode()) for k, v in SECURITY_HEADERS.items()
]


class SecurityHeaders:
    """ASGI middleware: add :data:`SECURITY_HEADERS` to every response that lacks them.

    A plain ASGI middleware rather than ``@app.middleware("http")``, whose request/response
    streaming wrapper costs about a millisecond per request.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in _SECURITY_HEADERS_RAW if k not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)


class ConnectionRecycler:
    """ASGI middleware: close each keep-alive connection after ``requests`` responses.

    With several worker processes on one port, a client's connection stays with whichever worker
    accepted it; clients that connect at once may all land on one worker and leave the others
    idle. A connection closed now and then makes its client connect again, and the accepting
    worker is then most likely an idle one, so the load spreads out (a reconnect on loopback
    costs far less than the requests it carries).
    """

    def __init__(self, app: ASGIApp, *, requests: int = 100) -> None:
        self.app = app
        self.requests = requests
        self._served: dict[tuple[str, int], int] = {}  # client address -> responses so far

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        if scope["type"] != "http" or client is None:
            await self.app(scope, receive, send)
            return
        address = (client[0], client[1])
        served = self._served.get(address, 0) + 1
        if served < self.requests:
            if len(self._served) > 10_000:  # addresses of connections closed early
                self._served.clear()
            self._served[address] = served
            await self.app(scope, receive, send)
            return
        self._served.pop(address, None)

        async def closing(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, closing)


def create_app(
    service: CuratorService, *, max_body: int = DEFAULT_MAX_BODY, threads: int | None = None
) -> FastAPI:
    """Build the ASGI application around a :class:`CuratorService`.

    ``threads`` (if given) sizes the worker thread pool at start-up (anyio's default is 40).
    """

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if threads is not None:
            anyio.to_thread.current_default_thread_limiter().total_tokens = threads
        await anyio.to_thread.run_sync(service.open_datasets)
        yield

    app = FastAPI(
        lifespan=lifespan,
        title="dpcurator",
        version="1",
        summary="A trusted curator for differentially private statistics.",
        openapi_url="/v1/openapi.json",
        docs_url=None,  # Swagger UI loads from a CDN, which the console's CSP forbids
        redoc_url=None,
        default_response_class=FiniteJSONResponse,
    )

    @app.exception_handler(DPError)
    async def _dp_error(_request: Request, exc: DPError) -> JSONResponse:
        return _problem_for(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return problem(400, "malformed-json", "Malformed JSON", "The body is not valid JSON.")
        detail, cleaned = translated(errors)  # in the client's words, not pydantic's
        return problem(422, "invalid-request", "Invalid request", detail, errors=cleaned)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        slug = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
        return problem(exc.status_code, slug, str(exc.detail), str(exc.detail))

    @app.exception_handler(Exception)
    async def _internal(_request: Request, _exc: Exception) -> JSONResponse:
        return problem(
            500, "internal", "Internal error", "The server failed; nothing was released."
        )

    # -- console ----------------------------------------------------------------------------

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/console/")

    app.state.service = service
    app.include_router(router)
    app.include_router(fit_router)
    app.include_router(streams_router)
    app.include_router(pmw_router)
    app.include_router(synth_router)
    app.include_router(jobs_router)
    app.mount("/console", StaticFiles(directory=STATIC_DIR, html=True), name="console")
    app.add_middleware(BodyLimit, max_body=max_body)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(ConnectionRecycler)
    return app
