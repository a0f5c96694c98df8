"""The service's only door to the query layer: datasets as :class:`Session` objects, and the
ledger-backed :class:`BudgetFilter` they charge.

A :class:`Catalog` opens each registered dataset once (public metadata + data source) and keeps
it, with a plan cache (always) and, if the catalog is built with ``result_cache=True``, an
exact-result cache per dataset (see :mod:`dpcurator.query.session`: every release is still
charged in full and gets fresh noise; a cache hit skips only the engine). Every request gets a
Session whose budget filter is a :class:`LedgerFilter`: when the Session reserves the query's
privacy event — after planning from public metadata, before touching any data — the filter runs
the ledger's atomic reservation, so a refused query reads no data and costs nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any, cast

import duckdb

from dpcurator.accounting.budget import Budget
from dpcurator.accounting.events import PrivacyEvent
from dpcurator.accounting.filter import BudgetFilter, PrivacyFilter, Reservation
from dpcurator.core.measures import ApproxDP, Measure, PureDP
from dpcurator.errors import InternalInvariantError
from dpcurator.query.backends import Backend, DuckDBBackend, open_backend
from dpcurator.query.caches import PlanCache, ResultCache, new_plan_cache, new_result_cache
from dpcurator.query.fit.release import FitCostEstimate
from dpcurator.query.hypothesis.release import TestCostEstimate
from dpcurator.query.plan.planner import plan_event
from dpcurator.query.precomputed import precomputed_columns
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from dpcurator.service.cluster import SparkSettings, cluster_source, open_on_cluster
from dpcurator.service.data_root import data_file, unreadable
from dpcurator.service.ledger import Ledger
from dpcurator.service.ledger.accounts import basic_cost, basic_event
from dpcurator.service.ledger.budgets import BudgetView, Cost
from dpcurator.service.ledger.charges import ChargeRequest
from dpcurator.service.models import Dataset


class AlreadyCharged(Exception):  # noqa: N818  # a control-flow signal, not an error
    """The request key belongs to a charge that was already released (or failed): do not run."""

    def __init__(self, charge_id: int) -> None:
        super().__init__(charge_id)
        self.charge_id = charge_id


class LedgerFilter:
    """A :class:`BudgetFilter` whose reservations are rows of the ledger (one per request).

    ``template`` describes the request (who, which dataset, the SQL, the request key); the cost
    and events are filled in from the event the Session reserves.
    """

    def __init__(self, ledger: Ledger, template: ChargeRequest) -> None:
        self._ledger = ledger
        self._template = template
        self._live: list[Reservation] = []
        self.charge_id: int | None = None
        self.budget: BudgetView | None = None

    def reserve(self, event: PrivacyEvent, *, description: str = "") -> Reservation:
        """Charge the ledger atomically (or raise BudgetExceededError, changing nothing)."""
        if self.charge_id is not None:
            raise InternalInvariantError("A service request reserves its budget exactly once.")
        request = replace(self._template, cost=basic_cost(event), events=[event.to_dict()])
        reserved = self._ledger.reserve(request)
        if reserved.reused and reserved.status != "reserved":
            raise AlreadyCharged(reserved.charge_id)
        if request.request_key is not None:  # retriable elsewhere: renew the claim meanwhile
            self._ledger.hold_claim(reserved.charge_id)
        self.charge_id = reserved.charge_id
        self.budget = reserved.budget
        reservation = Reservation(event, description, reserved.charge_id, self)
        self._live.append(reservation)
        return reservation

    def _cancel(self, reservation: Reservation) -> None:
        """Refund a reservation cancelled before any noise was drawn."""
        self._ledger.cancel(reservation.number)
        self._ledger.drop_claim(reservation.number)
        self._live.remove(reservation)
        self.charge_id = None

    def require_charge(self) -> int:
        """The id of the charge made for this request (the Session must have reserved)."""
        if self.charge_id is None:
            raise InternalInvariantError("The release finished without reserving its budget.")
        return self.charge_id

    def _view(self) -> tuple[Measure, Measure]:
        template = self._template
        if template.charge_grant:
            view = self._ledger.grant_view(template.principal_id, template.dataset_id)
            if view is None:
                return ApproxDP(0, 0), ApproxDP(0, 0)
        else:
            view = self._ledger.cap_view(template.dataset_id)
        return view.spent, view.remaining

    def spent(self) -> Measure:
        """What the caller has spent on this dataset (all requests, from the ledger)."""
        return self._view()[0]

    def remaining(self) -> Measure:
        """What the caller has left on this dataset."""
        return self._view()[1]

    def events(self) -> tuple[PrivacyEvent, ...]:
        """The events reserved by this request."""
        return tuple(r.event for r in self._live)


def _exact(value: Fraction) -> float:
    """Pass an exact Fraction where the Session annotates float: the planner reads any Real
    exactly (``to_fraction``), so ε = 1/10 is charged as exactly 1/10."""
    return cast("float", value)


def _budget(
    epsilon: Fraction | None, accuracy: dict[str, float | str] | None, rho: Fraction | None
) -> float | None:
    """ε for the Session, or None when accuracy targets or a ρ choose the cost."""
    if accuracy is not None or rho is not None or epsilon is None:
        return None
    return _exact(epsilon)


@dataclass(frozen=True)
class NoiseRequest:
    """The noise an analyst asks for: a family (``laplace`` | ``gaussian``; None: the planner
    chooses, :mod:`dpcurator.query.plan.noise`) and/or a zCDP cost ``rho`` instead of ε."""

    family: str | None = None
    rho: Fraction | None = None
    clipping: float | None = None  # the clipping report's share of ε (query.plan.clipping)

    def options(self) -> dict[str, Any]:
        """The Session's keyword arguments."""
        rho = None if self.rho is None else _exact(self.rho)
        return {"noise": self.family, "rho": rho, "clipping": self.clipping}


@dataclass
class DatasetRuntime:
    """A registered dataset opened for querying: public metadata, engine and caches."""

    metadata: Metadata
    backend: Backend
    plans: PlanCache
    results: ResultCache | None

    def schema(self) -> dict[str, Any]:
        """The public metadata (what analysts may see)."""
        return self.metadata.to_dict()

    def session(self, budget_filter: BudgetFilter) -> Session:
        """A Session on this dataset charging ``budget_filter`` (shares the caches)."""
        return Session(
            self.backend,
            self.metadata,
            budget_filter=budget_filter,
            plan_cache=self.plans,
            result_cache=self.results,
        )

    def estimate(
        self,
        sql: str,
        epsilon: Fraction | None,
        delta: Fraction,
        *,
        accuracy: dict[str, float | str] | None = None,
        noise: NoiseRequest | None = None,
    ) -> tuple[Cost, dict[str, Any], PrivacyEvent]:
        """Cost, expected accuracy and the event a release would charge, from public metadata
        only (``accuracy`` instead of ε: the smallest cost meeting those CI half-widths,
        :mod:`dpcurator.query.plan.accuracy`; ``noise``: the family and/or a ρ cost)."""
        noise = noise or NoiseRequest()
        session = self.session(PrivacyFilter(Budget(0)))
        options: dict[str, Any] = {
            "epsilon": _budget(epsilon, accuracy, noise.rho),
            "delta": _exact(delta),
            "accuracy": accuracy,
            **noise.options(),
        }
        estimate = session.estimate(sql, **options)
        cost = estimate.cost
        exact_cost = cost.to_approx() if isinstance(cost, PureDP) else cost
        if isinstance(estimate, FitCostEstimate | TestCostEstimate):  # no query plan: (ε, δ)
            assert isinstance(exact_cost, ApproxDP)  # fits and tests cost an ε (and δ)
            return exact_cost, estimate.to_dict(), basic_event(exact_cost)
        return exact_cost, estimate.to_dict(), plan_event(session.plan(sql, **options))

    def run(
        self,
        sql: str,
        epsilon: Fraction | None,
        delta: Fraction,
        budget_filter: BudgetFilter,
        *,
        accuracy: dict[str, float | str] | None = None,
        noise: NoiseRequest | None = None,
    ) -> dict[str, Any]:
        """Plan, reserve through ``budget_filter``, compute and release; the release as JSON.
        With ``accuracy`` (``epsilon`` None), the plan meeting those targets; with
        ``noise.rho``, a release at that zCDP cost."""
        noise = noise or NoiseRequest()
        session = self.session(budget_filter)
        release = session.sql(
            sql,
            epsilon=_budget(epsilon, accuracy, noise.rho),
            delta=_exact(delta),
            accuracy=accuracy,
            **noise.options(),
        )
        return release.to_dict()


class Catalog:
    """Opens registered datasets once and keeps them (thread-safe).

    Args:
        engine: the query engine of file sources.
        result_cache: keep each dataset's exact aggregates per exact plan (see the module
            docstring); off by default, but always on for a dataset loaded into a private
            DuckDB copy, which nothing writes after loading (its aggregates never change).
        precompute: load CSV and Parquet datasets into memory with fixed-point and key-code
            columns (see :meth:`dpcurator.Session.from_data`); on by default, off for files
            larger than memory. DuckDB database files are never copied.
        threads: DuckDB's worker threads per dataset (default: one per core).
        data_root: the directory under which registered files must lie (default: none, so
            nothing can be registered; see :mod:`dpcurator.service.data_root`).
        spark: serve every dataset from this Spark cluster (the engine is then ``spark``;
            see :mod:`dpcurator.service.cluster` for what may be registered).
    """

    def __init__(
        self,
        *,
        engine: str = "duckdb",
        result_cache: bool = False,
        precompute: bool = True,
        threads: int | None = None,
        data_root: Path | None = None,
        spark: SparkSettings | None = None,
    ) -> None:
        self.engine = "spark" if spark is not None else engine
        self.spark = spark
        self.data_root = data_root
        self.result_cache = result_cache
        self.precompute = precompute
        self.threads = threads
        self._runtimes: dict[str, DatasetRuntime] = {}
        self._lock = threading.Lock()

    def check(
        self, source: dict[str, Any], metadata_doc: dict[str, Any]
    ) -> tuple[dict[str, Any], Backend]:
        """Validate a data source and metadata before registration.

        Returns the normalised metadata and the data opened with its declared types, so the OWNER
        learns at registration that data and metadata disagree (DomainError naming the column),
        not an analyst's first query. Hand the backend to :meth:`adopt` (or close it). Only files
        under ``data_root`` are opened, and errors never show the file's contents.
        """
        if self.spark is not None:
            source = cluster_source(source, self.spark, self.data_root)
        else:
            data_file(source.get("path"), self.data_root)
        metadata = Metadata.from_dict(metadata_doc)
        with unreadable(metadata):
            backend = self._open(source, metadata)
        return metadata.to_dict(), backend

    def adopt(self, dataset: Dataset, backend: Backend) -> None:
        """Serve ``dataset`` from a backend opened by :meth:`check` (the data is not read twice)."""
        with self._lock:
            previous = self._runtimes.pop(dataset.id, None)
            if previous is not None:
                previous.backend.close()
            self._runtimes[dataset.id] = self._runtime(
                Metadata.from_dict(dataset.metadata_doc), backend
            )

    def runtime(self, dataset: Dataset) -> DatasetRuntime:
        """The opened dataset (opened on first use, e.g. after a restart)."""
        with self._lock:
            runtime = self._runtimes.get(dataset.id)
            if runtime is None:
                metadata = Metadata.from_dict(dataset.metadata_doc)
                runtime = self._runtime(metadata, self._open(dataset.source, metadata))
                self._runtimes[dataset.id] = runtime
            return runtime

    def _runtime(self, metadata: Metadata, backend: Backend) -> DatasetRuntime:
        unchanging = isinstance(backend, DuckDBBackend) and backend.loaded_copy(metadata.table)
        return DatasetRuntime(
            metadata,
            backend,
            new_plan_cache(),
            new_result_cache() if self.result_cache or unchanging else None,
        )

    def _open(self, source: dict[str, Any], metadata: Metadata) -> Backend:
        if self.spark is not None:
            return open_on_cluster(self.spark, source, metadata)
        path = str(source["path"])
        is_database = path.endswith(".duckdb")
        data: object = duckdb.connect(path, read_only=True) if is_database else path
        return open_backend(
            data,
            table=metadata.table,
            engine="duckdb" if is_database else self.engine,
            column_types=metadata.column_types(),
            precomputed=precomputed_columns(metadata)
            if self.precompute and not is_database
            else None,
            threads=self.threads,
        )

    def close(self) -> None:
        """Close every opened engine."""
        with self._lock:
            for runtime in self._runtimes.values():
                runtime.backend.close()
            self._runtimes.clear()

    @staticmethod
    def prepaid_filter(total: ApproxDP) -> PrivacyFilter:
        """An in-memory filter holding exactly a batch's prepaid (already charged) budget."""
        return PrivacyFilter(Budget(total.epsilon, total.delta))
