"""Background jobs in the ledger database: the ``jobs`` table and its statements (issue 24, item 4).

A job is a long release computed by a background thread of one server process after its charge
was reserved (:mod:`dpcurator.service.jobs`). Its row is written in the ledger database, so any
worker sharing the ledger answers a poll: who created it (``principal_id``), the charge it
computes (``charge_id``, reserved before the row exists), its status (``queued`` while it waits
for a slot, ``running``, ``done`` or ``failed``), its progress (a fraction and a short text, from
public inputs only), the server computing it (``server``, that process's boot id) and, once
done, the same body the synchronous route answers (``result``), or the problem it ended with
(``error``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from dpcurator.service.errors import NotFoundError
from dpcurator.service.models import Job, utcnow

if TYPE_CHECKING:
    from dpcurator.service.ledger.database import LedgerDatabase

#: The statuses of a job; ``done`` and ``failed`` are final.
STATUSES = ("queued", "running", "done", "failed")
FINAL = ("done", "failed")


class JobRows:
    """The statements on ``jobs``, run in the transactions of a ledger (``ledger._transaction``)."""

    def __init__(self, ledger: LedgerDatabase) -> None:
        self._ledger = ledger

    def start(self, job: Job) -> Job:
        """Insert ``job``, or take over the row of the same charge (a retry resuming a job
        whose server died): the row's id is kept, its status, server and progress replaced."""
        with self._ledger._transaction(write=True) as s:
            row = s.scalar(select(Job).where(Job.charge_id == job.charge_id).limit(1))
            if row is None:
                s.add(job)
                return job
            row.status, row.server, row.progress = job.status, job.server, job.progress
            row.error, row.finished_at = None, None
            return row

    def get(self, job_id: str) -> Job:
        """The job, or NotFoundError."""
        with self._ledger._transaction(write=False) as s:
            row = s.get(Job, job_id)
        if row is None:
            raise NotFoundError(f"No job with id {job_id!r}.")
        return row

    def by_charge(self, charge_id: int) -> Job | None:
        """The job computing a charge, if any."""
        with self._ledger._transaction(write=False) as s:
            return s.scalar(select(Job).where(Job.charge_id == charge_id).limit(1))

    def of(self, principal_id: str, *, limit: int) -> list[Job]:
        """A principal's jobs, newest first."""
        query = (
            select(Job)
            .where(Job.principal_id == principal_id)
            .order_by(Job.created_at.desc(), Job.id)
            .limit(limit)
        )
        with self._ledger._transaction(write=False) as s:
            return list(s.scalars(query))

    def update(self, job_id: str, *, server: str | None = None, **values: Any) -> bool:
        """Set columns of a job that is not final (and, with ``server``, still computed by that
        server); whether it was updated."""
        with self._ledger._transaction(write=True) as s:
            row = s.get(Job, job_id)
            if row is None or row.status in FINAL or (server is not None and row.server != server):
                return False
            for name, value in values.items():
                setattr(row, name, value)
            if values.get("status") in FINAL:
                row.finished_at = utcnow()
            return True
