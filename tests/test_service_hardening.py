"""Smaller service hardening: demo restarts revoke earlier demo tokens, no page loads scripts
from a CDN, and every response is strict JSON (no ``Infinity``/``NaN``)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dpcurator.errors import AuthError
from dpcurator.service.app import create_app, problem
from dpcurator.service.json_response import FiniteJSONResponse
from dpcurator.service.operations import CuratorService
from dpcurator.service.server import DEMO_DIR, bootstrap, build_service
from tests.service_fixtures import ThreadServer, cheap_hasher


def _strict(text: str) -> Any:
    """Parse RFC 8259 JSON, refusing the ``Infinity``/``NaN`` extensions."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _demo_service(ledger: str) -> CuratorService:
    return build_service(ledger, hasher=cheap_hasher(), data_root=DEMO_DIR)


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[ThreadServer, str]]:
    """The demo dataset served in a thread; yields the server and the demo analyst's token."""
    service = _demo_service(f"sqlite:///{tmp_path / 'l.sqlite3'}")
    started = bootstrap(service, demo=True)
    assert started.analyst_token is not None
    with ThreadServer(create_app(service)) as server:
        yield server, started.analyst_token
    service.close()


def test_a_demo_restart_revokes_the_earlier_demo_tokens(tmp_path: Path) -> None:
    ledger = f"sqlite:///{tmp_path / 'l.sqlite3'}"
    first_service = _demo_service(ledger)
    first = bootstrap(first_service, demo=True)
    first_service.close()
    service = _demo_service(ledger)
    second = bootstrap(service, demo=True)
    for old, new in (
        (first.owner_token, second.owner_token),
        (first.analyst_token, second.analyst_token),
    ):
        assert old is not None
        assert new is not None
        with pytest.raises(AuthError, match="revoked"):
            service.authority.authenticate(f"Bearer {old}", "c")
        assert service.authority.authenticate(f"Bearer {new}", "c")
    for principal in service.ledger.principals():
        live = [t for t in service.ledger.tokens(principal.id) if t.revoked_at is None]
        assert len(live) == 1, principal.name
    service.close()


def test_no_docs_page_loads_scripts_from_a_cdn(demo: tuple[ThreadServer, str]) -> None:
    server, _ = demo
    client = server.client()
    assert client.get("/v1/docs").status_code == 404
    assert client.get("/v1/openapi.json").status_code == 200
    console = client.get("/console/").text
    assert "https://" not in console
    assert "http://" not in console


def test_non_finite_numbers_are_written_as_null() -> None:
    body = FiniteJSONResponse({"v": [math.inf, -math.inf, math.nan, 1.5]}).body
    assert _strict(bytes(body).decode()) == {"v": [None, None, None, 1.5]}
    refused = problem(422, "x", "X", "detail", bound=math.inf)
    assert _strict(bytes(refused.body).decode())["bound"] is None
