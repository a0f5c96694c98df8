"""Synthetic releases in the service (dpcurator.service.stores.synth), over HTTP on a real uvicorn
server with the demo table: the estimate is free, publishing charges the dataset's cap once
(before any data is read) and runs as a job, analysts and (for public releases) anyone download
for free, non-owners cannot publish, a restart keeps the release; D and D minus one person give
the same statuses, schema and size. Every test runs on a SQLite and a PostgreSQL ledger."""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from dpcurator.service.app import create_app
from dpcurator.service.client import CuratorClient
from dpcurator.service.server import build_service
from tests.neighbour_queries import demo_frame, demo_metadata
from tests.service_fixtures import (
    ThreadServer,
    cheap_hasher,
    fresh_postgres_url,
    postgres_server,
)

__all__ = ["postgres_server"]

VICTIM = 4322
#: A quick release: MWEM over three public-key columns of the demo table.
MWEM: dict[str, Any] = {
    "kind": "mwem",
    "epsilon": 1.0,
    "columns": ["sex", "region", "education"],
    "rows": 500,
}


#: A new, empty ledger for a test directory: its SQLAlchemy URL.
NewLedger = Callable[[Path], str]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def new_ledger(request: pytest.FixtureRequest) -> NewLedger:
    """Makes ledgers of the parametrized kind (one per server root; a restart reuses its URL)."""
    if request.param == "sqlite":
        return lambda root: f"sqlite:///{root / 'ledger.sqlite3'}"
    base = request.getfixturevalue("postgres_server")
    return lambda _root: fresh_postgres_url(base)


@dataclass
class Kit:
    """A server with an owner, one analyst (alice, ε = 1 on ``people``) and the demo table."""

    server: ThreadServer
    owner: httpx.Client
    alice: httpx.Client
    anonymous: httpx.Client
    tokens: tuple[str, str]
    ledger: str


@contextmanager
def _kit(
    root: Path, frame: pd.DataFrame, ledger: str, tokens: tuple[str, str] | None = None
) -> Iterator[Kit]:
    """A server on ``ledger`` with data under ``root``; without ``tokens``, register everything
    first (with them, reuse the stored ledger, as after a restart)."""
    service = build_service(ledger, hasher=cheap_hasher(), data_root=root)
    try:
        with ThreadServer(create_app(service)) as server:
            if tokens is None:
                frame.to_csv(root / "people.csv", index=False)
                _, issued = service.create_principal("owner", "owner")
                owner = server.client(issued.token)
                created = owner.post(
                    "/v1/datasets",
                    json={
                        "id": "people",
                        "source": {"path": str(root / "people.csv")},
                        "metadata": demo_metadata().to_dict(),
                        "cap_epsilon": 10,
                        "cap_delta": 1e-6,
                    },
                )
                assert created.status_code == 201, created.text
                alice = owner.post("/v1/analysts", json={"name": "alice"}).json()
                granted = owner.put(
                    f"/v1/analysts/{alice['principal']['id']}/grants/people", json={"epsilon": 1}
                )
                assert granted.status_code == 200, granted.text
                tokens = (issued.token, alice["token"])
            yield Kit(
                server,
                server.client(tokens[0]),
                server.client(tokens[1]),
                server.client(),
                tokens,
                ledger,
            )
    finally:
        service.close()


def _cap_spent(owner: httpx.Client) -> dict[str, Any]:
    spent: dict[str, Any] = owner.get("/v1/datasets/people").json()["cap"]["spent"]
    return spent


def _wait(client: httpx.Client, release_id: str, timeout: float = 300) -> dict[str, Any]:
    """Poll the job until it is no longer running."""
    deadline = time.monotonic() + timeout
    while True:
        got = client.get(f"/v1/synthetic/{release_id}")
        assert got.status_code == 200, got.text
        body: dict[str, Any] = got.json()
        if body["status"] != "running" or time.monotonic() > deadline:
            return body
        time.sleep(0.2)


def test_estimate_is_free_and_publish_charges_once(tmp_path: Path, new_ledger: NewLedger) -> None:
    with _kit(tmp_path, demo_frame(), new_ledger(tmp_path)) as kit:
        before = _cap_spent(kit.owner)
        estimate = kit.owner.post("/v1/datasets/people/synthetic:estimate", json=MWEM)
        assert estimate.status_code == 200, estimate.text
        assert estimate.json()["cost"]["epsilon_exact"] == "1"
        assert estimate.json()["expected_errors"][0]["noise_std"] > 0
        assert _cap_spent(kit.owner) == before
        published = kit.owner.post("/v1/datasets/people/synthetic", json={**MWEM, "public": True})
        assert published.status_code == 202, published.text
        job = published.json()
        assert job["cost"]["epsilon_exact"] == "1"
        assert _cap_spent(kit.owner)["epsilon"] == before["epsilon"] + 1
        done = _wait(kit.owner, job["id"])
        assert done["status"] == "done", done
        assert done["progress"]["done"] == 1.0
        assert done["rows"] == 500
        grant_before = kit.alice.get("/v1/datasets/people/budget").json()
        frames = {}
        for fmt in ("csv", "parquet", "json"):
            got = kit.alice.get(f"/v1/synthetic/{job['id']}/data", params={"format": fmt})
            assert got.status_code == 200, got.text
            frames[fmt] = got.content
        frame = pd.read_parquet(io.BytesIO(frames["parquet"]))
        assert list(frame.columns) == MWEM["columns"]
        assert len(frame) == 500
        assert set(frame["sex"]) <= {"F", "M"}
        assert len(pd.read_csv(io.BytesIO(frames["csv"]))) == 500
        # public: readable without a token
        assert kit.anonymous.get(f"/v1/synthetic/{job['id']}/data").status_code == 200
        assert kit.alice.get("/v1/datasets/people/budget").json() == grant_before
        assert _cap_spent(kit.owner)["epsilon"] == before["epsilon"] + 1
        listed = kit.alice.get("/v1/datasets/people/synthetic").json()
        assert [(r["id"], r["cost"]["epsilon_exact"]) for r in listed] == [(job["id"], "1")]
        history = kit.owner.get("/v1/datasets/people/queries").json()
        assert [(h["kind"], h["status"]) for h in history] == [("synthetic", "released")]


def test_non_owners_cannot_publish_and_private_releases_need_a_grant(
    tmp_path: Path, new_ledger: NewLedger
) -> None:
    with _kit(tmp_path, demo_frame(), new_ledger(tmp_path)) as kit:
        before = _cap_spent(kit.owner)
        for path in ("synthetic", "synthetic:estimate"):
            refused = kit.alice.post(f"/v1/datasets/people/{path}", json=MWEM)
            assert refused.status_code == 403, refused.text
        assert _cap_spent(kit.owner) == before
        job = kit.owner.post("/v1/datasets/people/synthetic", json=MWEM).json()
        assert _wait(kit.owner, job["id"])["status"] == "done"
        assert kit.alice.get(f"/v1/synthetic/{job['id']}/data").status_code == 200
        assert kit.anonymous.get(f"/v1/synthetic/{job['id']}").status_code == 404
        assert kit.anonymous.get(f"/v1/synthetic/{job['id']}/data").status_code == 404


def test_free_refusals_before_the_charge(tmp_path: Path, new_ledger: NewLedger) -> None:
    with _kit(tmp_path, demo_frame(), new_ledger(tmp_path)) as kit:
        before = _cap_spent(kit.owner)
        bad = [
            ({**MWEM, "columns": ["pid"]}, "pid"),  # no public keys or bounds
            ({**MWEM, "delta": 1e-9}, "delta"),  # MWEM is pure ε
            ({"kind": "mst", "epsilon": 1.0}, "delta"),  # zCDP needs δ > 0
            ({"kind": "fourier", "epsilon": 1.0}, "delta"),  # so do the Fourier tables
            ({"kind": "fourier", "epsilon": 1.0, "delta": 1e-9, "rows": 5}, "rows"),
            ({**MWEM, "epsilon": 100.0}, None),  # over the cap: 409
        ]
        for body, word in bad:
            refused = kit.owner.post("/v1/datasets/people/synthetic", json=body)
            assert refused.status_code in (409, 422), refused.text
            if word is not None:
                assert word in refused.json()["detail"], refused.text
        assert _cap_spent(kit.owner) == before
        assert kit.owner.get("/v1/datasets/people/synthetic").json() == []


def test_restart_keeps_the_release(tmp_path: Path, new_ledger: NewLedger) -> None:
    with _kit(tmp_path, demo_frame(), new_ledger(tmp_path)) as kit:
        job = kit.owner.post("/v1/datasets/people/synthetic", json=MWEM).json()
        first = _wait(kit.owner, job["id"])
        data = kit.alice.get(f"/v1/synthetic/{job['id']}/data").content
        tokens = kit.tokens
    with _kit(tmp_path, demo_frame(), kit.ledger, tokens) as again:
        assert again.owner.get(f"/v1/synthetic/{job['id']}").json() == first
        assert again.alice.get(f"/v1/synthetic/{job['id']}/data").content == data


def test_client_publishes_and_downloads(tmp_path: Path, new_ledger: NewLedger) -> None:
    with (
        _kit(tmp_path, demo_frame(), new_ledger(tmp_path)) as kit,
        CuratorClient(kit.server.url, kit.tokens[0]) as owner,
        CuratorClient(kit.server.url, kit.tokens[1]) as alice,
    ):
        estimate = owner.estimate_synthetic("people", **MWEM)
        assert estimate["cost"]["epsilon_exact"] == "1"
        release = owner.publish_synthetic("people", wait=True, **MWEM)
        assert release["status"] == "done"
        frame = alice.synthetic_data(release["id"])
        assert list(frame.columns) == MWEM["columns"]
        assert len(frame) == 500
        assert [r["id"] for r in alice.synthetic_releases("people")] == [release["id"]]


def _observe(frame: pd.DataFrame, root: Path, ledger: str, body: dict[str, Any]) -> list[Any]:
    """What one owner's publication shows besides the released values."""
    with _kit(root, frame, ledger) as kit:
        estimate = kit.owner.post("/v1/datasets/people/synthetic:estimate", json=body)
        published = kit.owner.post("/v1/datasets/people/synthetic", json=body)
        done = _wait(kit.owner, published.json()["id"])
        assert done["status"] == "done", done
        data = kit.alice.get(f"/v1/synthetic/{done['id']}/data", params={"format": "parquet"})
        released = pd.read_parquet(io.BytesIO(data.content))
        public = {k: v for k, v in done.items() if k not in ("id", "created_at", "finished_at")}
        return [
            estimate.status_code,
            estimate.json(),
            published.status_code,
            public,
            data.status_code,
            list(released.columns),
            [str(t) for t in released.dtypes],
            len(released),
        ]


@pytest.mark.parametrize(
    "body",
    [
        MWEM,
        {"kind": "marginals", "epsilon": 1.0, "columns": ["sex", "employed"]},
        {"kind": "fourier", "epsilon": 1.0, "delta": 1e-9, "columns": ["sex", "region", "age"]},
    ],
    ids=["mwem", "marginals", "fourier"],
)
def test_neighbours_differ_only_in_values(
    tmp_path: Path, new_ledger: NewLedger, body: dict[str, Any]
) -> None:
    full = demo_frame()
    without = full[full["pid"] != VICTIM]
    assert len(without) == len(full) - 1
    (tmp_path / "d").mkdir()
    (tmp_path / "d-1").mkdir()
    d, d_minus_1 = tmp_path / "d", tmp_path / "d-1"
    seen = _observe(full, d, new_ledger(d), body)
    assert seen == _observe(without, d_minus_1, new_ledger(d_minus_1), body)


def test_a_zcdp_release_on_a_concentrated_cap_is_charged_its_rho(
    tmp_path: Path, new_ledger: NewLedger
) -> None:
    """The cap (ε 10, δ 1e-6) has concentrated accounting: a marginals release at ρ = 0.5 must
    use 0.5 of its ρ, not close the Rényi route by its converted ε (≈ 6.47, δ 1e-9)."""
    with _kit(tmp_path, demo_frame(), new_ledger(tmp_path)) as kit:
        body = {"kind": "marginals", "rho": 0.5, "delta": 1e-9, "columns": ["sex", "region"]}
        published = kit.owner.post("/v1/datasets/people/synthetic", json=body)
        assert published.status_code == 202, published.text
        assert _wait(kit.owner, published.json()["id"])["status"] == "done"
        cap = kit.owner.get("/v1/datasets/people").json()["cap"]
        assert cap["accounting"] == "concentrated"
        spent_rho = Fraction(cap["native"]["spent"]["rho_exact"])
        assert Fraction(49, 100) < spent_rho <= Fraction(1, 2)  # σ rounded up: at most ρ
        assert Fraction(cap["native"]["remaining"]["rho_exact"]) > Fraction(9, 10)
        # the conversion is still what a basic ledger would charge: the release records both
        history = kit.owner.get("/v1/datasets/people/queries").json()
        assert [h["kind"] for h in history] == ["synthetic"]
