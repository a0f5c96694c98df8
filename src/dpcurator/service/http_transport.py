"""The client's HTTP/1.1 transport, on the standard library (:mod:`http.client`).

The command line makes one or two calls per run, so what it pays at start-up counts: this module
imports in about a millisecond where an HTTP library with connection pools, HTTP/2 and proxy
support takes 0.1-0.2 s of CPU. It keeps one keep-alive connection per client and opens a new
one when that connection has been idle for longer than :data:`REUSE_SECONDS` (below a server's
keep-alive timeout, uvicorn's 5 s by default), so a request is never written to a connection the
server has already closed. A failed request is never retried: a POST that may have reached the
server is the caller's to retry (with its Idempotency-Key).
"""

from __future__ import annotations

import http.client
import json as json_module
import ssl
import time
from typing import Any
from urllib.parse import urlencode, urlsplit

#: Seconds of idleness after which the next request opens a new connection.
REUSE_SECONDS = 2.0


class TransportError(OSError):
    """The server could not be reached, or closed the connection without an answer."""


class Response:
    """A finished HTTP response: status, headers (lower-case names) and body."""

    def __init__(self, status_code: int, reason: str, headers: dict[str, str], body: bytes):
        self.status_code = status_code
        self.reason_phrase = reason
        self.headers = headers
        self.content = body

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON (:class:`ValueError` if it is not JSON)."""
        return json_module.loads(self.content)


class Transport:
    """Requests to one base URL (``http://`` or ``https://`` with the system's certificates),
    each with ``headers`` added and ``timeout`` seconds for connecting and for each read."""

    def __init__(self, base_url: str, *, headers: dict[str, str], timeout: float) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TransportError(f"not an http(s) URL: {base_url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._headers = headers
        self._timeout = timeout
        self._connection: http.client.HTTPConnection | None = None
        self._last_used = 0.0

    def _connect(self) -> http.client.HTTPConnection:
        fresh = time.monotonic() - self._last_used < REUSE_SECONDS
        if self._connection is not None and fresh:
            return self._connection
        self.close()
        if self._https:
            # certificates are loaded only for an https curator
            self._connection = http.client.HTTPSConnection(
                self._host, self._port, timeout=self._timeout, context=ssl.create_default_context()
            )
        else:
            self._connection = http.client.HTTPConnection(
                self._host, self._port, timeout=self._timeout
            )
        return self._connection

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        headers: dict[str, str] | None = None,
        params: dict[str, Any] | None = None,
    ) -> Response:
        """Send one request and read its whole answer."""
        target = self._prefix + path + ("?" + urlencode(params) if params else "")
        sent = {**self._headers, **(headers or {})}
        body = None
        if json is not None:
            body = json_module.dumps(json).encode("utf-8")
            sent["Content-Type"] = "application/json"
        connection = self._connect()
        try:
            connection.request(method, target, body=body, headers=sent)
            answer = connection.getresponse()
            content = answer.read()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise TransportError(f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc)) from exc
        self._last_used = time.monotonic()
        if answer.will_close:
            self.close()
        found = {name.lower(): value for name, value in answer.getheaders()}
        return Response(answer.status, answer.reason, found, content)

    def get(self, path: str, *, params: dict[str, Any] | None = None) -> Response:
        return self.request("GET", path, params=params)

    def post(
        self, path: str, *, json: Any = None, headers: dict[str, str] | None = None
    ) -> Response:
        return self.request("POST", path, json=json, headers=headers)

    def close(self) -> None:
        """Close the connection (the next request opens a new one)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None
