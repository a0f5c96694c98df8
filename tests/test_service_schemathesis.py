"""Property-based API fuzzing from the published OpenAPI spec (schemathesis, in-process ASGI):
no request, valid or not, may produce a 5xx; every error is a problem document."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from dpcurator.core.measures import ApproxDP
from dpcurator.service.app import create_app
from dpcurator.service.server import build_service
from tests.service_fixtures import PEOPLE_METADATA, cheap_hasher, write_people

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("schemathesis"),
    # Schemathesis drives ASGI apps through Starlette's TestClient, which warns about httpx.
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

# One private directory per test process: pytest-xdist workers collect this module concurrently.
_ROOT = Path(tempfile.mkdtemp(prefix="dpcurator-schemathesis-"))
_LEDGER = _ROOT / "ledger.sqlite3"
_SERVICE = build_service(
    f"sqlite:///{_LEDGER}", hasher=cheap_hasher(), max_failures=10**9, data_root=_ROOT
)
_, _OWNER = _SERVICE.create_principal("owner", "owner")
_SERVICE.register_dataset(
    _SERVICE.authority.authenticate(f"Bearer {_OWNER.token}", "setup"),
    "people",
    name="people",
    source={"path": str(write_people(_ROOT / "people.csv", rows=200))},
    metadata_doc=PEOPLE_METADATA,
    cap=ApproxDP(10**6, 0),
    replay_enabled=False,
)


@pytest.fixture(scope="module", autouse=True)
def _close_service() -> Iterator[None]:
    yield
    _SERVICE.close()
    shutil.rmtree(_ROOT, ignore_errors=True)


schema = schemathesis.openapi.from_asgi("/v1/openapi.json", create_app(_SERVICE))


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case: schemathesis.Case) -> None:
    response = case.call(headers={"Authorization": f"Bearer {_OWNER.token}"})
    case.validate_response(response, checks=[not_a_server_error])
    if response.status_code >= 400:
        assert response.headers["content-type"][0].startswith("application/problem+json")
