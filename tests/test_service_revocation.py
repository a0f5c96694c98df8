"""Revocation reaches every server process before its next answer (issue 24 §1).

Two real ``dpcurator serve`` processes share one ledger (SQLite file, then PostgreSQL). An
analyst's token is used on both (each process then holds it in its token cache), revoked through
one path, and then every process is sent charged queries with it: each must answer 401 and the
ledger must hold no new charge. The paths: ``DELETE /v1/tokens/{id}`` on one process (the other
never hears of it but through the ledger), and ``dpcurator admin revoke-token`` (a third process
writing the ledger directly, which no server hears of).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from dpcurator.cli import main
from dpcurator.service.ledger import Ledger
from tests._service_helpers import ledger_url, new_analyst
from tests.service_fixtures import PEOPLE_METADATA, LiveServer, postgres_server, write_people

__all__ = ["ledger_url", "postgres_server"]

QUERY = {"sql": "SELECT COUNT(*) AS n FROM people", "epsilon": 0.01}
#: Charged queries sent to each process after the revocation (with a /v1/me, 4 failed sign-ins
#: per process and token: under the 10 per client address after which failures are answered 429).
AFTER = 3


@pytest.fixture
def two_servers(tmp_path: Path, ledger_url: str) -> Iterator[tuple[list[str], str, str]]:
    """Two server processes on one ledger: their URLs, the owner's token and the ledger URL."""
    csv_path = write_people(tmp_path / "people.csv")
    meta = tmp_path / "people.json"
    meta.write_text(json.dumps(PEOPLE_METADATA), encoding="utf-8")
    common = ["--data", str(csv_path), "--metadata", str(meta), "--ledger", ledger_url]
    with ExitStack() as stack:
        first = LiveServer([*common, "--cap-epsilon", "1000"])
        stack.callback(first.stop)
        first.start(wait_lines=1)
        owner_token = first.first_lines[0].removeprefix("owner token: ")
        second = LiveServer(common)  # the ledger exists: no new owner, the dataset is known
        stack.callback(second.stop)
        second.start()
        yield [first.url, second.url], owner_token, ledger_url


def _charged(url: str) -> int:
    ledger = Ledger(url)
    try:
        return len(ledger.history())
    finally:
        ledger.close()


def _warm(urls: list[str], token: str) -> None:
    """Use ``token`` on every process (each caches it), with a charged query."""
    for url in urls:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as client:
            assert client.post("/v1/datasets/people/queries", json=QUERY).status_code == 200
            assert client.get("/v1/me").status_code == 200


def _assert_refused_everywhere(urls: list[str], token: str, ledger: str) -> None:
    before = _charged(ledger)
    for url in urls:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as client:
            statuses = [
                client.post("/v1/datasets/people/queries", json=QUERY).status_code
                for _ in range(AFTER)
            ]
            assert statuses == [401] * AFTER, url
            assert client.get("/v1/me").status_code == 401
    assert _charged(ledger) == before


def test_revocation_over_http_reaches_every_process(
    two_servers: tuple[list[str], str, str],
) -> None:
    urls, owner_token, ledger = two_servers
    _, _, token = new_analyst(urls[0], owner_token, 10)
    _warm(urls, token)
    token_id = token.split("_")[1]
    with httpx.Client(base_url=urls[0], headers={"Authorization": f"Bearer {token}"}) as client:
        assert client.delete(f"/v1/tokens/{token_id}").status_code == 204  # by its analyst
    _assert_refused_everywhere(urls, token, ledger)
    # The owner revokes another token on the SECOND process: the first refuses it at once too.
    _, _, other = new_analyst(urls[0], owner_token, 10)
    _warm(urls, other)
    with httpx.Client(base_url=urls[1], headers={"Authorization": f"Bearer {owner_token}"}) as c:
        assert c.delete(f"/v1/tokens/{other.split('_')[1]}").status_code == 204
    _assert_refused_everywhere(urls, other, ledger)


def test_revocation_by_the_admin_command_reaches_every_process(
    two_servers: tuple[list[str], str, str],
) -> None:
    urls, owner_token, ledger = two_servers
    _, _, token = new_analyst(urls[0], owner_token, 10)
    _warm(urls, token)
    assert main(["admin", "--ledger", ledger, "revoke-token", token.split("_")[1]]) == 0
    _assert_refused_everywhere(urls, token, ledger)
