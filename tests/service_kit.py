"""A served people dataset with an owner and one analyst (alice, ε = 1), shared by the service
tests that only need that much (PMW mode, sparse vector and streams)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from dpcurator.service.app import create_app
from dpcurator.service.operations import CuratorService
from dpcurator.service.server import build_service
from tests.service_fixtures import (
    ThreadServer,
    add_analyst,
    add_people_dataset,
    cheap_hasher,
    write_people,
)


@dataclass
class Kit:
    """A server with an owner, one analyst (alice, ε = 1) and the people dataset; ``tokens`` are
    the owner's and alice's bearer tokens."""

    service: CuratorService
    server: ThreadServer
    owner: httpx.Client
    alice: httpx.Client
    tokens: tuple[str, str]


@contextmanager
def people_kit(
    root: Path,
    *,
    url: str | None = None,
    rows: int = 2000,
    tokens: tuple[str, str] | None = None,
) -> Iterator[Kit]:
    """A server on the ledger at ``url`` (default: a SQLite file under ``root``) serving
    :func:`write_people`'s table of ``rows`` rows from ``root``; without ``tokens``, register
    the owner, the dataset and alice first (with them, reuse the stored ledger, as after a
    restart)."""
    url = url or f"sqlite:///{root / 'ledger.sqlite3'}"
    service = build_service(url, hasher=cheap_hasher(), data_root=root)
    try:
        with ThreadServer(create_app(service)) as server:
            if tokens is None:
                _, issued = service.create_principal("owner", "owner")
                owner = server.client(issued.token)
                add_people_dataset(owner, write_people(root / "people.csv", rows))
                tokens = (issued.token, add_analyst(owner, "alice", 1)["token"])
            yield Kit(service, server, server.client(tokens[0]), server.client(tokens[1]), tokens)
    finally:
        service.close()
