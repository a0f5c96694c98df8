"""The ``/v1/jobs`` endpoints: poll the background jobs of long releases (issue 24, item 4).

``GET /v1/jobs/{id}`` answers a job's status (``queued``, ``running``, ``done``, ``failed``),
progress, cost and, once done, the body its route answers synchronously; ``GET /v1/jobs`` lists
the caller's jobs. Both are free and read the ledger only, so any worker answers them. A route
that may run long (:mod:`dpcurator.service.jobs`) answers 202 with the same job document and a
``Location`` header through :func:`submit`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from dpcurator.service import schemas as s
from dpcurator.service.auth import Identity
from dpcurator.service.jobs import JobStore, Submission, job_json, prefers_async
from dpcurator.service.json_response import FiniteJSONResponse
from dpcurator.service.operations import CuratorService
from dpcurator.service.problem_docs import document_problems
from dpcurator.service.routes.core import Caller, Service

router = APIRouter(prefix="", dependencies=[Depends(s.refuse_nul_parameters)])

#: The ``Prefer`` header (RFC 7240): ``respond-async`` asks for 202 and a job to poll.
Prefer = Annotated[
    str | None,
    Header(
        max_length=200,
        description="RFC 7240 preferences; `respond-async` answers 202 Accepted with a job to "
        "poll at `Location` (`GET /v1/jobs/{id}`) instead of waiting for the result. Long "
        "requests (decided from their public parameters) answer 202 whatever is preferred.",
    ),
]


class JobProgress(BaseModel):
    """How far a job is: a fraction in [0, 1] and a short text (public inputs only)."""

    done: float
    message: str


class JobOut(BaseModel):
    """A background job: its status, progress, charge and, once ``done``, the body its route
    answers synchronously (``result``); ``failed`` says why and whether the charge stands
    (``error.charged``)."""

    id: str
    kind: str
    dataset_id: str
    status: Literal["queued", "running", "done", "failed"]
    progress: JobProgress
    charge_id: int
    charged: bool
    cost: s.CostOut
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    location: str
    created_at: str
    finished_at: str | None


#: The OpenAPI entry of a route's 202 answer.
ACCEPTED: dict[int | str, dict[str, Any]] = {
    202: {
        "description": "Accepted: the charge is reserved and the release runs as a background "
        "job; poll `Location` (`GET /v1/jobs/{id}`).",
        "model": JobOut,
        "headers": {"Location": {"schema": {"type": "string"}, "description": "the job"}},
    }
}


def _json(store: JobStore, job: Any) -> dict[str, Any]:
    return job_json(job, store.charge(job))


async def submit(
    service: CuratorService,
    who: Identity,
    submission: Submission,
    *,
    preferred: bool,
) -> FiniteJSONResponse:
    """Run ``submission`` as a job and answer 202 with it (or the synchronous body, 200, when
    no job was needed: a replay or a request key answered before)."""
    store = JobStore(service)
    submitted = await run_in_threadpool(store.submit, who, submission)
    if submitted.job is None:
        return FiniteJSONResponse(submitted.body)
    body = await run_in_threadpool(_json, store, submitted.job)
    headers = {"Location": body["location"], "Retry-After": "1"}
    if preferred:
        headers["Preference-Applied"] = "respond-async"
    return FiniteJSONResponse(body, status_code=202, headers=headers)


def wants_job(prefer: str | None, long: bool) -> bool:
    """Whether a request runs as a job: asked (``Prefer: respond-async``) or predicted long."""
    return long or prefers_async(prefer)


@router.get("/v1/jobs/{job_id}", tags=["jobs"], response_model=JobOut)
def get_job(service: Service, who: Caller, job_id: str) -> FiniteJSONResponse:
    """A job's status, progress and, once done, its result (its creator or an owner; free)."""
    store = JobStore(service)
    return FiniteJSONResponse(_json(store, store.get(who, job_id)))


@router.get("/v1/jobs", tags=["jobs"], response_model=list[JobOut])
def list_jobs(
    service: Service, who: Caller, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> FiniteJSONResponse:
    """The caller's jobs, newest first (free)."""
    store = JobStore(service)
    return FiniteJSONResponse([_json(store, job) for job in store.list(who, limit=limit)])


document_problems(router)
