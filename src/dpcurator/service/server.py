"""Assemble and start a curator: ledger + token authority + catalog + app (used by the CLI).

On first start against an empty ledger an owner is created and its token returned once; with
``demo=True`` the built-in demo dataset (``dpcurator/demo/``: one data file and one metadata
file) is registered and a demo analyst is created with a budget on it. A demo start on an
existing ledger issues fresh owner and analyst tokens and revokes every earlier token of those
two principals, so restarts never pile up live, never-expiring tokens.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import uvicorn
import yaml
from argon2 import PasswordHasher
from fastapi import FastAPI

from dpcurator.core.measures import ApproxDP
from dpcurator.errors import DomainError, ParameterError
from dpcurator.service.app import create_app
from dpcurator.service.auth import Identity, TokenAuthority
from dpcurator.service.cluster import SparkSettings
from dpcurator.service.curator import Catalog
from dpcurator.service.ledger import Ledger
from dpcurator.service.operations import CuratorService

DEMO_DIR = Path(__file__).resolve().parent.parent / "demo"
DEMO_DATASET = "demo"
#: The demo analyst's grant: a δ > 0 so that releases needing one (a linear fit, Gaussian noise,
#: keys found by partition selection) work as documented; within the demo cap's δ.
DEMO_ANALYST_BUDGET = ApproxDP(5, Fraction(1, 10**6))
#: The demo dataset's global cap (``serve --demo``; ``--cap-epsilon``/``--cap-delta`` override).
DEMO_CAP = ApproxDP(50, Fraction(1, 10**5))
#: Worker threads of the request thread pool (anyio's default, 40, only adds GIL contention).
DEFAULT_THREADS = 8
#: The GIL switch interval while serving with a PostgreSQL ledger (CPython's default is 5 ms):
#: a request holding row locks waits for the GIL after every round trip to the database, so a
#: short interval shortens the hold (measured: ~+20% q/s, lower p99, while every reservation was
#: a transaction of several round trips; now only a retried request's is, and both intervals
#: serve about alike: 400-547 q/s at 5 ms, 422-525 at 1 ms). With SQLite the default serves
#: best (measured).
POSTGRES_SWITCH_INTERVAL = 0.001
#: Seconds a worker of a multi-process server may take to answer its supervisor's health-check
#: ping before it is killed and replaced (uvicorn's default is 5). The ping is answered by a
#: thread of the worker, which needs the worker's GIL and a CPU: on a saturated machine (or while
#: a request's C code holds the GIL) 5 s were exceeded, and each replacement re-imported
#: everything and reopened the datasets, which saturated the machine further: a restart loop.
#: Every request's work is bounded (:mod:`dpcurator.query.plan.limits`), so a worker silent for a
#: minute is hung, not busy. The same bound is the time a replacement has to start (SIGHUP).
WORKER_HEALTHCHECK_TIMEOUT = 60

#: The environment variable through which a multi-process server configures its workers.
WORKER_CONFIG_ENV = "DPCURATOR_WORKER_CONFIG"


@dataclass(frozen=True)
class Bootstrap:
    """Tokens created at start-up (each shown once): owner (first start), demo analyst."""

    owner_token: str | None
    analyst_token: str | None


def build_service(
    ledger_url: str,
    *,
    hasher: PasswordHasher | None = None,
    max_failures: int = 10,
    engine: str = "duckdb",
    result_cache: bool = False,
    precompute: bool = True,
    boot_id: str | None = None,
    engine_threads: int | None = None,
    data_root: Path | None = None,
    spark: SparkSettings | None = None,
) -> CuratorService:
    """Open the ledger and wire the service together.

    ``result_cache`` keeps exact aggregates per exact plan and ``precompute`` loads file datasets
    with their fixed-point columns (see :class:`dpcurator.service.curator.Catalog`); ``boot_id``
    identifies the server (see :class:`~dpcurator.service.ledger.Ledger`); ``engine_threads``
    caps each dataset's DuckDB threads; only files under ``data_root`` can be registered (none
    without one, see :mod:`dpcurator.service.data_root`); ``spark`` serves every dataset
    from that Spark cluster (see :mod:`dpcurator.service.cluster`).
    """
    ledger = Ledger(ledger_url, boot_id=boot_id)
    authority = TokenAuthority(ledger, hasher=hasher, max_failures=max_failures)
    catalog = Catalog(
        engine=engine,
        result_cache=result_cache,
        precompute=precompute,
        threads=engine_threads,
        data_root=data_root,
        spark=spark,
    )
    return CuratorService(ledger, authority, catalog)


def serve(
    service: CuratorService,
    *,
    host: str,
    port: int,
    log_level: str = "warning",
    access_log: bool = True,
    threads: int = DEFAULT_THREADS,
    switch_interval: float | None = None,
    workers: int = 1,
    forwarded_allow_ips: str | None = None,
    on_ready: Callable[[], None] | None = None,
    worker_healthcheck_timeout: int = WORKER_HEALTHCHECK_TIMEOUT,
) -> None:
    """Serve the API with uvicorn (uvloop event loop, httptools parser) until interrupted.

    The client address of a request (which failed sign-ins are counted against) is the TCP
    peer: ``X-Forwarded-For`` is believed only from the comma-separated proxy addresses in
    ``forwarded_allow_ips`` (uvicorn's own default would believe any local process).

    ``on_ready`` is called (from another thread) once the server answers ``/v1/health``, i.e.
    after its start-up, which opens the registered datasets.

    Everything built so far (modules, the service, the app) is moved out of the garbage
    collector's reach (``gc.freeze``), so that full collections stay short while serving.
    ``switch_interval`` (seconds) is the GIL switch interval; by default
    :data:`POSTGRES_SWITCH_INTERVAL` with a PostgreSQL ledger, CPython's own otherwise.

    With ``workers`` > 1, ``service`` is closed and that many worker processes serve the port,
    each with its own service on the same ledger (uvicorn's supervisor restarts a worker that
    dies, or that leaves its health-check ping unanswered for ``worker_healthcheck_timeout``
    seconds, by default :data:`WORKER_HEALTHCHECK_TIMEOUT`). They share the ledger's boot id, so
    a retried request that is still running in another worker is refused (409), never run
    twice. Each worker opens the datasets itself
    (memory: one copy per worker) and keeps its own caches and failed-sign-in counts.
    """
    if switch_interval is None and not service.ledger.url.startswith("sqlite"):
        switch_interval = POSTGRES_SWITCH_INTERVAL
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "loop": "uvloop",
        "http": "httptools",
        "log_level": log_level,
        "access_log": access_log,
        "proxy_headers": forwarded_allow_ips is not None,
    }
    if forwarded_allow_ips is not None:
        options["forwarded_allow_ips"] = forwarded_allow_ips
    if on_ready is not None:
        _call_when_serving("127.0.0.1" if host in ("0.0.0.0", "::") else host, port, on_ready)
    if workers > 1:
        catalog = service.catalog
        worker = WorkerConfig(
            service.ledger.url,
            service.ledger.boot_id,
            catalog.result_cache,
            catalog.precompute,
            catalog.engine,
            threads,
            switch_interval,
            max(1, (os.cpu_count() or 1) // workers),  # the workers share the cores
            None if catalog.data_root is None else str(catalog.data_root),
            None if catalog.spark is None else catalog.spark.to_dict(),
        )
        service.close()  # each worker opens its own ledger connections and datasets
        os.environ[WORKER_CONFIG_ENV] = json.dumps(asdict(worker))
        uvicorn.run(
            "dpcurator.service.server:worker_app",
            factory=True,
            workers=workers,
            timeout_worker_healthcheck=worker_healthcheck_timeout,
            **options,
        )
        return
    config = uvicorn.Config(create_app(service, threads=threads), **options)
    _settle(switch_interval)
    uvicorn.Server(config).run()


def require_free_port(host: str, port: int) -> None:
    """Raise ParameterError unless ``host:port`` can be listened on (checked as uvicorn binds).

    Checked before anything starts: otherwise a server already on the port would answer the
    start-up's health poll and the user would be pointed at it.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ParameterError(
                f"Cannot listen on --host {host} --port {port}: {exc.strerror}. Is another "
                "server running there? Stop it or choose another --port."
            ) from None


def _call_when_serving(host: str, port: int, callback: Callable[[], None]) -> None:
    """Call ``callback`` from a daemon thread as soon as ``/v1/health`` answers 200."""
    address = f"[{host}]" if ":" in host else host

    def poll() -> None:
        while True:
            try:
                with urllib.request.urlopen(f"http://{address}:{port}/v1/health", timeout=1) as r:
                    if r.status == 200:
                        callback()
                        return
            except OSError:  # not listening yet (URLError and timeouts are OSErrors)
                pass
            time.sleep(0.05)

    threading.Thread(target=poll, name="announce-when-serving", daemon=True).start()


def _settle(switch_interval: float | None) -> None:
    """Set the GIL switch interval and freeze what exists out of the garbage collector's way.

    Unfrozen at exit: the interpreter's last collections then free what was frozen (frozen,
    DuckDB's nanobind objects outlived them and printed "nanobind: leaked ..." at every exit).
    """
    if switch_interval is not None:
        sys.setswitchinterval(switch_interval)
    gc.collect()
    gc.freeze()
    atexit.unregister(gc.unfreeze)  # once, however many servers this process ran
    atexit.register(gc.unfreeze)


@dataclass(frozen=True)
class WorkerConfig:
    """What each worker process of a multi-process server needs to build its own service."""

    ledger_url: str
    boot_id: str
    result_cache: bool
    precompute: bool
    engine: str
    threads: int
    switch_interval: float | None
    engine_threads: int
    data_root: str | None
    spark: dict[str, Any] | None = None


def worker_app() -> FastAPI:
    """The app of one worker process of a multi-process server (a uvicorn app factory reading
    its :class:`WorkerConfig` from the environment variable ``WORKER_CONFIG_ENV``)."""
    config = WorkerConfig(**json.loads(os.environ[WORKER_CONFIG_ENV]))
    service = build_service(
        config.ledger_url,
        engine=config.engine,
        result_cache=config.result_cache,
        precompute=config.precompute,
        boot_id=config.boot_id,
        engine_threads=config.engine_threads,
        data_root=None if config.data_root is None else Path(config.data_root),
        spark=None if config.spark is None else SparkSettings.from_dict(config.spark),
    )
    app = create_app(service, threads=config.threads)
    _settle(config.switch_interval)
    return app


def read_metadata(path: Path) -> dict[str, Any]:
    """A metadata file (YAML or JSON) as a dict."""
    with path.open(encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    if not isinstance(data, dict):
        raise DomainError(f"The metadata file {path} does not hold a mapping.")
    return data


def demo_files(directory: Path = DEMO_DIR) -> tuple[Path, Path]:
    """The demo data file and its metadata file."""
    data = sorted([*directory.glob("*.parquet"), *directory.glob("*.csv")])
    meta = sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])
    if not data or not meta:
        raise DomainError(f"No demo data and metadata files found in {directory}.")
    return data[0], meta[0]


def bootstrap(
    service: CuratorService,
    *,
    demo: bool,
    data: Path | None = None,
    metadata: Path | None = None,
    dataset_id: str | None = None,
    cap: ApproxDP = DEMO_CAP,
    source: dict[str, str] | None = None,
) -> Bootstrap:
    """Create the first owner if none exists, register the given (or demo) dataset if new
    (``source``: where the data is instead of ``data``, e.g. a table on a Spark cluster)."""
    owners = service.ledger.principals("owner")
    owner_token = None
    if owners:
        owner = owners[0]
    else:
        owner, issued = service.create_principal("owner", "owner")
        owner_token = issued.token
    who = Identity(owner.id, owner.name, owner.role, "bootstrap")
    if demo:
        data, metadata = demo_files()
        dataset_id = DEMO_DATASET
    analyst_token = None
    if data is not None and source is None:
        source = {"path": str(data.resolve())}
        dataset_id = dataset_id or data.stem
    if source is not None and metadata is not None:
        dataset_id = dataset_id or "data"
        known = {d.id for d in service.ledger.datasets()}
        if dataset_id not in known:
            service.register_dataset(
                who,
                dataset_id,
                name=dataset_id,
                source=source,
                metadata_doc=read_metadata(metadata),
                cap=cap,
                replay_enabled=demo,
            )
    if demo and dataset_id is not None:
        analysts = {p.name: p for p in service.ledger.principals("analyst")}
        if "demo-analyst" in analysts:
            analyst = analysts["demo-analyst"]
            _revoke_tokens(service, analyst.id, by=owner.id)
            analyst_token = service.authority.issue(analyst.id).token
        else:
            analyst, issued = service.create_principal("demo-analyst", "analyst")
            analyst_token = issued.token
            service.ledger.set_grant(analyst.id, dataset_id, DEMO_ANALYST_BUDGET, by=owner.id)
        if owner_token is None:
            _revoke_tokens(service, owner.id, by=owner.id)
            owner_token = service.authority.issue(owner.id).token
    return Bootstrap(owner_token, analyst_token)


def _revoke_tokens(service: CuratorService, principal_id: str, *, by: str) -> None:
    """Revoke every live token of a principal."""
    for token in service.ledger.tokens(principal_id):
        if token.revoked_at is None:
            service.authority.revoke(token.token_id, by=by)
