"""Synthetic data and contingency tables published by the curator, stored in the ledger database.

An owner plans a release (:mod:`dpcurator.service.stores.synth_plan`: free, nothing read), then
publishes it: the charge is reserved against the dataset's global cap (one ledger entry, kind
``synthetic``) BEFORE any data is read, a row of ``synthetic_releases``
(:class:`~dpcurator.service.ledger.database.SyntheticRelease`) records the job, and a background
thread computes it (AIM and MST take tens of seconds; one job at a time per server process, so
their memory does not add up). The thread writes its progress to the row, then the released
frame as Parquet, and completes the charge; if it fails, the charge is marked failed and stands
(its noise may have been drawn). A server that dies mid-job leaves the charge spent: the row is
reported ``interrupted`` once the charge's claim has lapsed (see
:mod:`dpcurator.service.ledger.lease`; the test is the background jobs' own,
:func:`dpcurator.service.jobs.claim_lapsed`). Reserve -> compute -> complete, as for queries: the
charge is never lost.

Reading is post-processing and free: whoever may see the dataset (the owner, analysts with a
grant), or anyone when the owner marked the release public, reads its metadata and data; nobody
is charged. What a reader observes besides the released values depends on public inputs only:
the request, its charge, and the shape of the output (columns from the metadata; rows as asked,
or the noisy total when not given).
"""

from __future__ import annotations

import io
import json
import logging
import threading
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd
from sqlalchemy import select

from dpcurator.core.measures import ApproxDP
from dpcurator.errors import ENGINE_FAILURE_MESSAGE
from dpcurator.service.auth import Identity, random_id
from dpcurator.service.errors import ConflictError, NotFoundError
from dpcurator.service.idempotency import request_fingerprint, same_request, stored_result
from dpcurator.service.jobs import claim_lapsed
from dpcurator.service.ledger.budgets import BudgetView, cost_of
from dpcurator.service.ledger.charges import ChargeRequest
from dpcurator.service.ledger.database import SyntheticRelease, found
from dpcurator.service.models import Charge, utcnow
from dpcurator.service.operations import CuratorService
from dpcurator.service.schemas import cost_json
from dpcurator.service.stores.synth_plan import SynthPlan, SynthSpec, plan_release

#: Formats of the released data.
FORMATS = ("csv", "parquet", "json")
_ENGINE_LOG = logging.getLogger("dpcurator.engine")
#: One synthetic job at a time per process (AIM and MST each take up to a few GB).
_ONE_JOB = threading.Semaphore(1)


@dataclass(frozen=True)
class Published:
    """A release just started: its row and the dataset's cap after the charge."""

    release: SyntheticRelease
    cap: BudgetView | None


class SynthStore:
    """Plan, publish and read synthetic releases through the service's ledger and catalog."""

    def __init__(self, service: CuratorService) -> None:
        self.service = service
        self.ledger = service.ledger

    def plan(self, identity: Identity, dataset_id: str, spec: SynthSpec) -> SynthPlan:
        """The release's charge and expected errors (owners; free, nothing read)."""
        identity.require_owner()
        dataset = self.service.visible_dataset(identity, dataset_id)
        runtime = self.service.catalog.runtime(dataset)
        return plan_release(spec, runtime.backend, runtime.metadata)

    def publish(
        self,
        identity: Identity,
        dataset_id: str,
        spec: SynthSpec,
        *,
        public: bool,
        request_key: str | None = None,
    ) -> Published:
        """Plan (free refusals), charge the dataset's cap, then compute in the background. A
        retry with the same ``request_key`` returns the release started first, running or
        done (:mod:`dpcurator.service.idempotency`)."""
        plan = self.plan(identity, dataset_id, spec)
        dataset = self.service.visible_dataset(identity, dataset_id)
        runtime = self.service.catalog.runtime(dataset)
        print_ = request_fingerprint("synthetic", public=public, **spec.to_json())
        if request_key is not None:
            earlier = self._keyed(identity, request_key, print_, dataset.id)
            if earlier is not None:
                return earlier
        release_id = f"syn_{random_id(9)}"
        text = json.dumps({"synthetic": release_id, **spec.to_json()}, sort_keys=True)
        request = ChargeRequest.owner_release(
            identity.principal_id,
            dataset.id,
            kind="synthetic",
            text=text,
            cost=plan.cost,
            events=[plan.event.to_dict()],
        )
        reserved = self.ledger.reserve(
            replace(request, fingerprint=print_, request_key=request_key)
        )
        done = stored_result(reserved)
        if done is not None:  # finished between the look-up and the reservation
            return Published(self._row(str(done["synthetic_id"])), None)
        self.ledger.hold_claim(reserved.charge_id)
        params = {**spec.to_json(), "expected_errors": plan.errors, "event": plan.event.to_dict()}
        row = SyntheticRelease(
            id=release_id,
            dataset_id=dataset.id,
            kind=spec.kind,
            params=params,
            charge_id=reserved.charge_id,
            public=public,
            status="running",
            progress={"message": "queued", "done": 0.0, "server": self.ledger.boot_id},
            created_by=identity.principal_id,
        )
        try:
            with self.ledger._transaction(write=True) as s:
                s.add(row)
        except Exception as exc:
            self.ledger.drop_claim(reserved.charge_id)
            raise self.service._failed(reserved.charge_id, exc) from None
        job = threading.Thread(
            target=self._compute,
            args=(release_id, plan, runtime),
            name=f"synthetic-{release_id}",
            daemon=True,
        )
        job.start()
        return Published(row, reserved.budget)

    def _keyed(
        self, identity: Identity, key: str, print_: str, dataset_id: str
    ) -> Published | None:
        """The release of an earlier request with this key, once its row exists (409 if the
        key was used for another request)."""
        charge = self.ledger.charge_by_key(identity.principal_id, key)
        if charge is None:
            return None
        same_request(charge, print_, dataset_id)
        with self.ledger._transaction(write=False) as s:
            row = s.scalar(
                select(SyntheticRelease).where(SyntheticRelease.charge_id == charge.id).limit(1)
            )
        return None if row is None else Published(row, self.ledger.cap_view(dataset_id))

    def _compute(self, release_id: str, plan: SynthPlan, runtime: Any) -> None:
        """The job: compute, store the frame, complete the charge (or record the failure)."""
        charge_id = self._row(release_id).charge_id
        try:
            with _ONE_JOB:
                self._progress(release_id, "running", 0.0)
                frame = plan.run(
                    runtime.backend,
                    runtime.metadata,
                    lambda message, done: self._progress(release_id, message, done),
                )
                data = _parquet(frame)
            with self.ledger._transaction(write=True) as s:
                row = found(s.get(SyntheticRelease, release_id), "synthetic release", release_id)
                row.data, row.rows, row.status = data, len(frame), "done"
                row.progress = {**row.progress, "message": "done", "done": 1.0}
                row.finished_at = utcnow()
            self.ledger.complete(charge_id, {"synthetic_id": release_id})
        except Exception as exc:
            _ENGINE_LOG.error(
                "synthetic release %s failed after its charge", release_id, exc_info=exc
            )
            self.ledger.fail(charge_id, ENGINE_FAILURE_MESSAGE)
            self._finish_failed(release_id, "failed")
        finally:
            self.ledger.drop_claim(charge_id)

    def _progress(self, release_id: str, message: str, done: float) -> None:
        with self.ledger._transaction(write=True) as s:
            row = found(s.get(SyntheticRelease, release_id), "synthetic release", release_id)
            row.progress = {**row.progress, "message": message, "done": round(done, 4)}

    def _finish_failed(self, release_id: str, status: str) -> None:
        with self.ledger._transaction(write=True) as s:
            row = found(s.get(SyntheticRelease, release_id), "synthetic release", release_id)
            if row.status == "running":
                row.status, row.finished_at = status, utcnow()

    def _row(self, release_id: str) -> SyntheticRelease:
        with self.ledger._transaction(write=False) as s:
            return found(s.get(SyntheticRelease, release_id), "synthetic release", release_id)

    def get(self, identity: Identity | None, release_id: str) -> SyntheticRelease:
        """The release, if the caller may see it (public releases: anyone; else whoever sees
        its dataset); otherwise 404, as for an unknown id."""
        try:
            release = self._row(release_id)
            if not (release.public and release.status == "done"):
                if identity is None:
                    raise NotFoundError(release_id)
                self.service.visible_dataset(identity, release.dataset_id)
        except NotFoundError as exc:
            raise NotFoundError(f"No synthetic release with id {release_id!r}.") from exc
        return self._check_alive(release)

    def _check_alive(self, release: SyntheticRelease) -> SyntheticRelease:
        """A running job whose server is gone (its charge's claim lapsed) is ``interrupted``;
        its charge stands."""
        if release.status != "running" or release.progress.get("server") == self.ledger.boot_id:
            return release
        with self.ledger._transaction(write=False) as s:
            charge = found(s.get(Charge, release.charge_id), "charge", release.charge_id)
        if charge.status == "reserved" and claim_lapsed(self.ledger, charge, release.created_at):
            self._finish_failed(release.id, "interrupted")
            return self._row(release.id)
        return release

    def list(self, identity: Identity, dataset_id: str) -> list[SyntheticRelease]:
        """The dataset's synthetic releases, newest first (whoever sees the dataset)."""
        dataset = self.service.visible_dataset(identity, dataset_id)
        query = (
            select(SyntheticRelease)
            .where(SyntheticRelease.dataset_id == dataset.id)
            .order_by(SyntheticRelease.created_at.desc(), SyntheticRelease.id)
        )
        with self.ledger._transaction(write=False) as s:
            rows = list(s.scalars(query))
        return [self._check_alive(r) for r in rows]

    def cost(self, release: SyntheticRelease) -> ApproxDP:
        """The release's charge, from the ledger."""
        with self.ledger._transaction(write=False) as s:
            charge = found(s.get(Charge, release.charge_id), "charge", release.charge_id)
        return cost_of(charge.epsilon, charge.delta)


def _parquet(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def read_frame(release: SyntheticRelease) -> pd.DataFrame:
    """The released frame (409 while the job runs, or when it failed or was interrupted)."""
    if release.status != "done" or release.data is None:
        raise ConflictError(
            f"Synthetic release {release.id!r} is {release.status}; its data is available once "
            "it is done."
        )
    return pd.read_parquet(io.BytesIO(release.data))


def encode(release: SyntheticRelease, fmt: str) -> tuple[bytes, str]:
    """The release's data in ``fmt`` (``csv``, ``parquet`` or ``json`` records) and its media
    type."""
    if fmt == "parquet":
        read_frame(release)
        assert release.data is not None
        return release.data, "application/vnd.apache.parquet"
    frame = read_frame(release)
    if fmt == "csv":
        return frame.to_csv(index=False).encode(), "text/csv"
    return frame.to_json(orient="records").encode(), "application/json"


def release_json(release: SyntheticRelease, cost: ApproxDP) -> dict[str, Any]:
    """A release's public description: request, cost, status, progress, size (never data)."""
    progress = {k: v for k, v in release.progress.items() if k != "server"}
    finished = release.finished_at
    return {
        "id": release.id,
        "dataset_id": release.dataset_id,
        "kind": release.kind,
        "params": release.params,
        "public": release.public,
        "status": release.status,
        "progress": progress,
        "rows": release.rows,
        "charge_id": release.charge_id,
        "cost": cost_json(cost),
        "created_at": release.created_at.isoformat() + "Z",
        "finished_at": None if finished is None else finished.isoformat() + "Z",
    }
