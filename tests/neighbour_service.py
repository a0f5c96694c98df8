"""The neighbour adversary against the HTTP service: one curator per table, observed over HTTP.

Each :class:`ServedTable` is a full service (SQLite ledger, DuckDB with precomputed columns and
the service's result cache, the app on a real uvicorn server in a thread) serving one table as
dataset ``people`` to one analyst with a large grant. Queries go to every served table in the
same order, so ledger ids and budgets advance alike and are part of the observation.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from types import TracebackType

import httpx
import pandas as pd

from dpcurator.query.release.estimate import Estimate
from dpcurator.service.app import create_app
from dpcurator.service.server import build_service
from tests.neighbour_queries import (
    Observation,
    demo_metadata,
    public_plan,
    release_shape,
)
from tests.neighbour_sql import NeighbourQuery
from tests.service_fixtures import ThreadServer, cheap_hasher

DATASET = "people"


class ServedTable:
    """A curator service serving ``frame`` (a context manager; :meth:`observe` queries it);
    ``accounting`` of its cap and grant (``concentrated``: events replayed through the zCDP
    filter, which ρ queries need); ``variant`` the metadata declared (:data:`~tests.
    neighbour_queries.VARIANTS`)."""

    def __init__(
        self, frame: pd.DataFrame, *, accounting: str = "basic", variant: str = "demo"
    ) -> None:
        self._accounting = accounting
        self._variant = variant
        self._dir = tempfile.TemporaryDirectory(prefix="dpc-neighbour-")
        root = Path(self._dir.name)
        self._csv = root / "people.csv"
        frame.to_csv(self._csv, index=False)
        self._service = build_service(
            f"sqlite:///{root / 'ledger.sqlite3'}", hasher=cheap_hasher(), data_root=root
        )
        _, owner = self._service.create_principal("owner", "owner")
        self._server = ThreadServer(create_app(self._service))
        self._owner_token = owner.token

    def __enter__(self) -> ServedTable:
        self._server.__enter__()
        token = self.register(self._server.client(self._owner_token), self._csv)
        self._client = self._server.client(token)
        return self

    def register(self, owner: httpx.Client, path: Path) -> str:
        """As ``owner``, register the table at ``path`` and grant an analyst a large budget on
        it; the analyst's token."""
        created = owner.post(
            "/v1/datasets",
            json={
                "id": DATASET,
                "source": {"path": str(path)},
                "metadata": demo_metadata(self._variant).to_dict(),
                "cap_epsilon": 1e6,
                "cap_delta": 0.5,
                "accounting": self._accounting,
            },
        )
        assert created.status_code == 201, created.text
        analyst = owner.post("/v1/analysts", json={"name": "adversary"}).json()
        granted = owner.put(
            f"/v1/analysts/{analyst['principal']['id']}/grants/{DATASET}",
            json={"epsilon": 1e6, "delta": 0.5, "accounting": self._accounting},
        )
        assert granted.status_code == 200, granted.text
        return str(analyst["token"])

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.__exit__(exc_type, exc, traceback)
        self._service.close()
        self._dir.cleanup()

    def observe(
        self, query: NeighbourQuery, *, noise: str | None = None, rho: float | None = None
    ) -> Observation:
        """POST ``query`` as the analyst (with the ``noise`` family, at ``rho`` instead of ε if
        given) and observe everything but the noisy numbers."""
        request = {"sql": query.sql, "epsilon": query.epsilon, "delta": query.delta, "noise": noise}
        if rho is not None:
            request |= {"epsilon": None, "rho": rho}
        response = self._client.post(f"/v1/datasets/{DATASET}/queries", json=request)
        budget = self._client.get(f"/v1/datasets/{DATASET}/budget").json()
        body = response.json()
        if response.status_code != 200:
            detail = json.dumps(body, sort_keys=True)
            return Observation(f"HTTP {response.status_code}", detail, json.dumps(budget))
        release = body.pop("release")
        rows = [
            (
                tuple(row["group"][c] for c in release["group_columns"]),
                [Estimate(**row["values"][c]) for c in release["value_columns"]],
            )
            for row in release["rows"]
        ]
        return Observation(
            "HTTP 200",
            charge=json.dumps({"answer": body, "budget": budget}, sort_keys=True),
            **release_shape(
                public_plan(query, noise=noise, rho=rho, variant=self._variant),
                release["group_columns"],
                release["value_columns"],
                rows,
                release["alpha"],
            ),
        )
