"""Long releases as background jobs with progress (issue 24, item 4).

A charged route that can take long (a fit with many blocks, a sparse vector of many queries)
answers ``202 Accepted`` with a job to poll (``Location: /v1/jobs/{id}``) when the client asks
for it (``Prefer: respond-async``, RFC 7240) or when its PUBLIC parameters predict long work
(:func:`fit_is_long`, :func:`sparse_is_long`: thresholds on the request alone, never on the
data). The order is that of every release, and of synthetic publishing
(:mod:`dpcurator.service.stores.synth`):

1. The route's synchronous computation starts in a background thread: it plans (a refusal is
   free and answered as the synchronous route answers it: the client never sees a job) and
   reserves the charge in the ledger.
2. Right after the reservation, before any data is read, the job's row is written to the ledger
   database (:mod:`dpcurator.service.ledger.jobs`) and the request is answered 202: a job
   exists only for a reserved charge.
3. The thread computes (at most :data:`MAX_RUNNING` jobs per process; the others are
   ``queued``), writing its progress to the row, then the same body the synchronous route
   would answer (``done``), or, if it fails after the charge, the constant engine failure
   (``failed``, ``charged: true``): the charge stands, as for every release.

Any worker sharing the ledger answers a poll (the row is in the database). A job whose server
died is reported ``failed`` (``reason: interrupted``, ``charged: true``) once its charge's claim
lapsed (:mod:`dpcurator.service.ledger.lease`): the server renews the claim while it computes.
Submitted with an ``Idempotency-Key``, a retry with the same key and body returns the same job
(one charge); after its server died, that retry resumes it (the claim is taken over, the same
charge computed once more and released once, as a retried synchronous request is).

Progress is a fraction and a short text of public inputs only: the phase, and for block-based
fits whose number of blocks the analyst chose, block ``b`` of ``k``
(:mod:`dpcurator.core.progress`). Who may poll: the job's creator, and owners (who see every
ledger entry); for anyone else it does not exist (404).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from dpcurator.accounting.events import PrivacyEvent
from dpcurator.accounting.filter import BudgetFilter, Reservation
from dpcurator.core import progress
from dpcurator.core.measures import Measure
from dpcurator.errors import ENGINE_FAILURE_MESSAGE, DPError
from dpcurator.service.auth import Identity, random_id
from dpcurator.service.errors import ConflictError, NotFoundError
from dpcurator.service.idempotency import same_request
from dpcurator.service.ledger import Ledger
from dpcurator.service.ledger.accounts import charge_cost
from dpcurator.service.ledger.jobs import FINAL, JobRows
from dpcurator.service.models import Charge, Job, utcnow
from dpcurator.service.operations import CuratorService
from dpcurator.service.schemas import cost_json

#: Background jobs computing at once per server process (the others wait, ``queued``).
MAX_RUNNING = 2
#: A job writes its progress at most this often (seconds), and at every change of phase.
PROGRESS_SECONDS = 0.5
#: A fit runs as a job when it asks for at least this many blocks (a public parameter).
ASYNC_FIT_BLOCKS = 1_000
#: A sparse vector request runs as a job when it holds at least this many queries.
ASYNC_SPARSE_QUERIES = 50
#: How long a keyed duplicate waits for the job of a request racing it (seconds).
_DUPLICATE_WAIT = 2.0

_SLOTS = threading.BoundedSemaphore(MAX_RUNNING)
_LOG = logging.getLogger("dpcurator.service")
_BODIES: dict[str, Callable[[Charge], dict[str, Any]]] = {}

Wrap = Callable[[BudgetFilter], BudgetFilter]


def register_kind(kind: str, body_of: Callable[[Charge], dict[str, Any]]) -> None:
    """Declare a job kind and how its synchronous body is rebuilt from its released charge (a
    server that died between completing the charge and writing the job's result)."""
    _BODIES[kind] = body_of


def prefers_async(prefer: str | None) -> bool:
    """Whether a ``Prefer`` header (RFC 7240) holds the ``respond-async`` preference."""
    if not prefer:
        return False
    for preference in prefer.split(","):
        name = preference.split(";", 1)[0].split("=", 1)[0].strip().lower()
        if name == "respond-async":
            return True
    return False


def fit_is_long(blocks: int | None) -> bool:
    """Whether a fit runs as a job whatever the client prefers: from the blocks it asks for."""
    return blocks is not None and blocks >= ASYNC_FIT_BLOCKS


def sparse_is_long(queries: int) -> bool:
    """Whether a sparse vector request runs as a job: from its number of queries."""
    return queries >= ASYNC_SPARSE_QUERIES


def no_hook(budget: BudgetFilter) -> BudgetFilter:
    """The synchronous route's filter, unchanged."""
    return budget


@dataclass(frozen=True)
class Submission:
    """A long request: its kind, dataset and fingerprint (the route's, for the request key),
    and ``compute``, the synchronous route's whole computation returning its body, whose
    Session charges the filter it is given through ``wrap``. ``blocks``: the number of blocks
    the analyst chose (public), when the computation reports block progress."""

    kind: str
    dataset_id: str
    fingerprint: str
    request_key: str | None
    compute: Callable[[Wrap], dict[str, Any]]
    blocks: int | None = None


@dataclass(frozen=True)
class Submitted:
    """What a submission answers: a job (202), or the synchronous body when nothing was
    reserved for a job (a replay, or a key answered synchronously before)."""

    job: Job | None = None
    body: dict[str, Any] | None = None


class _Hooked:
    """A budget filter that tells the job when its charge is reserved (then waits for a slot)."""

    def __init__(self, inner: BudgetFilter, reserved: Callable[[int], None]) -> None:
        self._inner = inner
        self._reserved = reserved

    def reserve(self, event: PrivacyEvent, *, description: str = "") -> Reservation:
        reservation = self._inner.reserve(event, description=description)
        self._reserved(reservation.number)
        return reservation

    def remaining(self) -> Measure:
        return self._inner.remaining()

    def spent(self) -> Measure:
        return self._inner.spent()

    def events(self) -> tuple[PrivacyEvent, ...]:
        return self._inner.events()


@dataclass
class _Run:
    """What the job thread tells the request waiting for it."""

    job_id: str
    ready: threading.Event = field(default_factory=threading.Event)
    charge_id: int | None = None
    slot: bool = False
    error: BaseException | None = None
    body: dict[str, Any] | None = None


class JobStore:
    """Start, poll and list background jobs through the service's ledger."""

    def __init__(self, service: CuratorService) -> None:
        self.service = service
        self.ledger: Ledger = service.ledger
        self.rows = JobRows(self.ledger)

    # -- submission -------------------------------------------------------------------------

    def submit(self, identity: Identity, submission: Submission) -> Submitted:
        """Start ``submission`` as a job once its charge is reserved (see the module docstring).

        Raises:
            DPError: the route's own refusal (free) or failure, as it answers synchronously.
        """
        job_id = f"job_{random_id(9)}"
        key = submission.request_key
        if key is not None:
            earlier = self._keyed(identity, submission)
            if earlier is not None and not _resumable(earlier):
                return Submitted(job=earlier)
            job_id = earlier.id if earlier is not None else job_id
        run = _Run(job_id)
        thread = threading.Thread(
            target=self._work,
            args=(identity, submission, run),
            name=f"job-{job_id}",
            daemon=True,
        )
        thread.start()
        run.ready.wait()
        if run.error is not None:
            if key is not None and isinstance(run.error, ConflictError):
                racing = self._racing(identity, submission)
                if racing is not None:
                    return Submitted(job=racing)
            raise run.error
        if run.charge_id is None:
            return Submitted(body=run.body)
        return Submitted(job=self.rows.get(job_id))

    def _keyed(self, identity: Identity, submission: Submission) -> Job | None:
        """The job of an earlier request with this key (409 if it asked something else)."""
        assert submission.request_key is not None
        charge = self.ledger.charge_by_key(identity.principal_id, submission.request_key)
        if charge is None:
            return None
        dataset = self.service.visible_dataset(identity, submission.dataset_id)
        same_request(charge, submission.fingerprint, dataset.id)
        job = self.rows.by_charge(charge.id)
        return None if job is None else self._alive(job)

    def _racing(self, identity: Identity, submission: Submission) -> Job | None:
        """The job of a concurrent request with the same key, once its row is written."""
        deadline = time.monotonic() + _DUPLICATE_WAIT
        while True:
            job = self._keyed(identity, submission)
            if job is not None or time.monotonic() > deadline:
                return job
            time.sleep(0.02)

    def _work(self, identity: Identity, submission: Submission, run: _Run) -> None:
        """The job thread: the route's computation, with the job written at its reservation."""
        boot = self.ledger.boot_id
        reporter = _Reporter(self.rows, run.job_id, boot, submission.blocks)

        def reserved(charge_id: int) -> None:
            self.rows.start(
                Job(
                    id=run.job_id,
                    principal_id=identity.principal_id,
                    dataset_id=self.service.visible_dataset(identity, submission.dataset_id).id,
                    kind=submission.kind,
                    charge_id=charge_id,
                    status="queued",
                    progress={"done": 0.0, "message": "charged; waiting for a free slot"},
                    server=boot,
                )
            )
            self.ledger.hold_claim(charge_id)
            run.charge_id = charge_id
            run.ready.set()
            _SLOTS.acquire()
            run.slot = True
            reporter.phase("running", 0.05, "computing")

        try:
            with progress.listening(reporter.blocks):
                body = submission.compute(lambda budget: _Hooked(budget, reserved))
        except BaseException as exc:  # the request's error, or the job's failure
            if run.charge_id is None:
                run.error = exc
            else:
                self._failed(run.job_id, exc)
        else:
            if run.charge_id is None:
                run.body = body
            else:
                done = {"done": 1.0, "message": "done"}
                self.rows.update(run.job_id, server=boot, status="done", result=body, progress=done)
        finally:
            if run.slot:
                _SLOTS.release()
            if run.charge_id is not None:
                self.ledger.drop_claim(run.charge_id)
            run.ready.set()

    def _failed(self, job_id: str, exc: BaseException) -> None:
        """Record a job that failed after its charge was reserved (its charge stands, unless
        the computation refunded it before any noise: then it was refused, free)."""
        job = self.rows.get(job_id)
        charge = self.ledger.charge(job.charge_id)
        charged = charge.status != "cancelled"
        if charged or not isinstance(exc, DPError):
            error = {"reason": "engine-failure", "detail": ENGINE_FAILURE_MESSAGE}
            if not isinstance(exc, DPError) or str(exc) != ENGINE_FAILURE_MESSAGE:
                _LOG.error("job %s failed after its charge", job_id, exc_info=exc)
        else:
            error = {"reason": "refused", "detail": str(exc)}
        self.rows.update(
            job_id, server=self.ledger.boot_id, status="failed", error={**error, "charged": charged}
        )

    # -- polling ----------------------------------------------------------------------------

    def get(self, identity: Identity, job_id: str) -> Job:
        """The job, if the caller created it or is an owner (else 404, as for an unknown id)."""
        try:
            job = self.rows.get(job_id)
        except NotFoundError:
            job = None
        if job is None or not (identity.is_owner or job.principal_id == identity.principal_id):
            raise NotFoundError(f"No job with id {job_id!r}.")
        return self._alive(job)

    def list(self, identity: Identity, *, limit: int) -> list[Job]:
        """The caller's jobs, newest first."""
        return [self._alive(job) for job in self.rows.of(identity.principal_id, limit=limit)]

    def _alive(self, job: Job) -> Job:
        """A job as its charge tells it: one whose server is gone is finished from its charge
        (done if the charge was released, failed otherwise; see the module docstring)."""
        if job.status in FINAL or job.server == self.ledger.boot_id:
            return job
        charge = self.ledger.charge(job.charge_id)
        if charge.status == "released" and job.kind in _BODIES:
            result = _BODIES[job.kind](charge)
            self.rows.update(job.id, status="done", result=result, progress=_DONE)
        elif charge.status == "failed":
            error = {"reason": "engine-failure", "detail": ENGINE_FAILURE_MESSAGE, "charged": True}
            self.rows.update(job.id, status="failed", error=error)
        elif charge.status == "reserved" and claim_lapsed(self.ledger, charge, job.created_at):
            error = {
                "reason": "interrupted",
                "detail": "The server computing this job stopped before it finished. Its "
                "charge stands; a retry with the same Idempotency-Key resumes it.",
                "charged": True,
            }
            self.rows.update(job.id, server=job.server, status="failed", error=error)
        else:
            return job
        return self.rows.get(job.id)

    def charge(self, job: Job) -> Charge:
        """The job's charge (its cost and whether it stands)."""
        return self.ledger.charge(job.charge_id)


_DONE = {"done": 1.0, "message": "done"}


def _resumable(job: Job) -> bool:
    return job.status == "failed" and (job.error or {}).get("reason") == "interrupted"


def claim_lapsed(ledger: Ledger, charge: Charge, since: Any) -> bool:
    """Whether the server computing a reserved charge is gone: its claim (renewed while it
    computes) is older than the lease (:mod:`dpcurator.service.ledger.lease`)."""
    seen = charge.claimed_at or since
    return bool(utcnow() - seen > timedelta(seconds=ledger.lease_seconds))


class _Reporter:
    """Writes a job's progress to its row: phases at once, block progress at most every
    :data:`PROGRESS_SECONDS`, and only for the number of blocks the request named (public)."""

    def __init__(self, rows: JobRows, job_id: str, server: str, blocks: int | None) -> None:
        self._rows = rows
        self._job_id = job_id
        self._server = server
        self._blocks = blocks
        self._last = 0.0

    def phase(self, status: str, done: float, message: str) -> None:
        self._rows.update(
            self._job_id,
            server=self._server,
            status=status,
            progress={"done": done, "message": message},
        )
        self._last = time.monotonic()

    def blocks(self, done: int, total: int) -> None:
        """A block-based estimator's position (ignored unless ``total`` is the request's)."""
        if total != self._blocks or time.monotonic() - self._last < PROGRESS_SECONDS:
            return
        try:
            fraction = round(0.05 + 0.9 * done / total, 4)
            message = f"block {done} of {total}"
            self._rows.update(
                self._job_id, server=self._server, progress={"done": fraction, "message": message}
            )
            self._last = time.monotonic()
        except Exception:  # progress is best effort; the computation goes on
            _LOG.exception("writing the progress of job %s failed", self._job_id)


def job_json(job: Job, charge: Charge) -> dict[str, Any]:
    """A job as the API shows it: status, progress, cost, and the result once done."""
    finished = job.finished_at
    return {
        "id": job.id,
        "kind": job.kind,
        "dataset_id": job.dataset_id,
        "status": job.status,
        "progress": job.progress,
        "charge_id": job.charge_id,
        "charged": charge.status != "cancelled",
        "cost": cost_json(charge_cost(charge)),
        "result": job.result if job.status == "done" else None,
        "error": job.error,
        "location": f"/v1/jobs/{job.id}",
        "created_at": job.created_at.isoformat() + "Z",
        "finished_at": None if finished is None else finished.isoformat() + "Z",
    }
