"""The ``/v1`` endpoints of issue 16: sparse vector, private streams and local-model surveys.

Authenticated like every other route (:mod:`dpcurator.service.routes.core`). Sparse vector and
stream creation reserve their whole charge in the ledger before any data is read; reading a stream's
latest release or a survey's estimates costs nothing (post-processing).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from dpcurator.service import schemas as s
from dpcurator.service.auth import Identity
from dpcurator.service.errors import ForbiddenError, NotFoundError
from dpcurator.service.idempotency import (
    IdempotencyKey,
    KeyedChange,
    request_fingerprint,
)
from dpcurator.service.jobs import (
    Submission,
    Wrap,
    no_hook,
    prefers_async,
    register_kind,
    sparse_is_long,
)
from dpcurator.service.json_response import FiniteJSONResponse
from dpcurator.service.ledger.accounts import charge_cost
from dpcurator.service.ledger.budgets import BudgetView
from dpcurator.service.models import Charge, Stream, Survey
from dpcurator.service.operations import CuratorService
from dpcurator.service.problem_docs import document_problems
from dpcurator.service.routes.core import Caller, Owner, Service
from dpcurator.service.routes.jobs import ACCEPTED, Prefer, submit, wants_job
from dpcurator.service.stores.sparse import MAX_QUERIES, SparseQuestion, answer_sparse
from dpcurator.service.stores.streams import StreamSpec, StreamStore
from dpcurator.service.stores.surveys import SurveyStore

router = APIRouter(prefix="", dependencies=[Depends(s.refuse_nul_parameters)])

Finite = s.Bound
MAX_BATCH = 100_000


_Strict = s.RequestModel


class SparseIn(_Strict):
    """Which of these queries exceed ``threshold``? At most ``c`` positives, ε charged once."""

    queries: Annotated[list[s.Sql], Field(min_length=1, max_length=MAX_QUERIES)]
    threshold: Finite
    c: Annotated[int, Field(ge=1, le=MAX_QUERIES)] = 1
    epsilon: s.Epsilon
    numeric: bool = False  # numeric sparse: also a noisy value of each positive


class StreamIn(_Strict):
    """A new stream: ``count``/``sum`` (horizon, bounds), ``density`` (universe, outputs) or
    ``incidence`` (universe, outputs, modulus); a pan-private stream tracks its universe, or a
    public random ``sample_size`` of it (at most ``MAX_STREAM_TRACKED`` users either way, and a
    state of at most ``MAX_STREAM_STATE_BYTES``). ``correlated_count``/``correlated_sum`` take
    ``rho`` instead of ``epsilon`` (ρ-zCDP; ``horizon`` may be omitted: unknown), and
    ``kary_count``/``kary_sum`` an optional ``branching``; their sums take an optional
    power-of-two ``resolution``."""

    kind: Annotated[
        str,
        Field(
            pattern=r"^(count|sum|density|incidence|correlated_count|correlated_sum"
            r"|kary_count|kary_sum)$"
        ),
    ]
    epsilon: s.Epsilon | None = None
    rho: s.Rho | None = None
    resolution: Annotated[float, Field(gt=0, le=2**40, allow_inf_nan=False)] | None = None
    branching: Annotated[int, Field(ge=2, le=64)] | None = None
    horizon: Annotated[int, Field(ge=1, le=10**12)] | None = None
    lower: Finite = 0.0
    upper: Finite = 1.0
    universe: Annotated[int, Field(ge=1, le=10**15)] | None = None
    sample_size: Annotated[int, Field(ge=1)] | None = None  # tracked users (at most the universe)
    output_epsilon: s.Epsilon | None = None
    outputs: Annotated[int, Field(ge=1, le=10_000)] = 1
    max_events_per_person: Annotated[int, Field(ge=1, le=10**6)] | None = None
    modulus: Annotated[int, Field(ge=2, le=2**16)] | None = None


class EventsIn(_Strict):
    """A batch of events: 0/1 or values for count/sum streams, user ids for density streams;
    ``persons``: each event's person id (user-level count/sum streams only)."""

    values: Annotated[list[int | float], Field(max_length=MAX_BATCH)]
    persons: Annotated[list[int | s.Name], Field(max_length=MAX_BATCH)] | None = None


class SurveyIn(_Strict):
    """A new survey over public categories, randomised by respondents at ``epsilon``."""

    name: s.Name
    categories: Annotated[list[s.Name], Field(min_length=2, max_length=1_000)]
    epsilon: s.Epsilon


class ResponsesIn(_Strict):
    """Already-randomised reports: category indices (see ``client.randomize_answers``)."""

    reports: Annotated[list[Annotated[int, Field(ge=0)]], Field(max_length=MAX_BATCH)]


def _stream_out(stream: Stream) -> dict[str, Any]:
    return {
        "id": stream.id,
        "dataset_id": stream.dataset_id,
        "kind": stream.kind,
        "params": stream.params,
        "latest": stream.latest,
    }


def _survey_out(survey: Survey) -> dict[str, Any]:
    return {
        "id": survey.id,
        "name": survey.name,
        "categories": survey.categories,
        "epsilon": float(Fraction(survey.epsilon)),
        "epsilon_exact": survey.epsilon,
        "reports": sum(survey.counts),
    }


def _visible_stream(service: CuratorService, who: Identity, stream_id: str) -> Stream:
    """The stream, if the caller may read it: owners read every stream (only owners create
    them), nobody else any (else 404, as for an unknown id: an analyst does not learn that it
    exists)."""
    stream = StreamStore(service.ledger).get(stream_id)
    if not who.is_owner and stream.created_by != who.principal_id:
        raise NotFoundError(f"No stream with id {stream_id!r}.")
    service.visible_dataset(who, stream.dataset_id)
    return stream


def _writable_stream(service: CuratorService, who: Identity, stream_id: str) -> Stream:
    """The stream, if the caller may post events to it and release its estimates: only the
    owner who created it (other owners, who may read it: 403; anyone else: 404)."""
    stream = _visible_stream(service, who, stream_id)
    if stream.created_by != who.principal_id:
        raise ForbiddenError(
            f"Only the owner who created stream {stream_id!r} may post its events and release "
            "its estimates; ask that owner, or create a stream of your own."
        )
    return stream


def _sparse_body(charge: Charge, *, replayed: bool, remaining: BudgetView | None) -> dict[str, Any]:
    """The answer of a sparse vector request (the synchronous body, and a job's result)."""
    return {
        "charge_id": charge.id,
        "dataset_id": charge.dataset_id,
        "replayed": replayed,
        "cost": s.cost_json(charge_cost(charge)),
        "remaining": None if remaining is None else s.budget_json(remaining),
        "release": charge.result or {},
    }


register_kind("sparse_vector", lambda c: _sparse_body(c, replayed=False, remaining=None))


@router.post("/v1/datasets/{dataset_id}/sparse-vector", tags=["queries"], responses=ACCEPTED)
async def sparse_vector(
    service: Service,
    who: Caller,
    dataset_id: str,
    body: SparseIn,
    *,
    idempotency_key: IdempotencyKey = None,
    prefer: Prefer = None,
) -> FiniteJSONResponse:
    """Sparse vector: flags for the queries above the threshold, stopping after ``c``. A retry
    with the same ``Idempotency-Key`` and body gets the first answer, charged once. With
    ``Prefer: respond-async``, or at least ``ASYNC_SPARSE_QUERIES`` queries, it runs as a
    background job once ε is reserved: 202 and the job to poll (``GET /v1/jobs/{id}``)."""
    question = SparseQuestion(
        body.queries, body.threshold, body.c, s.exact(body.epsilon), body.numeric
    )

    def compute(wrap: Wrap) -> dict[str, Any]:
        answer = answer_sparse(
            service, who, dataset_id, question, request_key=idempotency_key, wrap=wrap
        )
        return _sparse_body(answer.charge, replayed=answer.replayed, remaining=answer.remaining)

    if wants_job(prefer, sparse_is_long(len(body.queries))):
        job = Submission(
            "sparse_vector", dataset_id, question.fingerprint(), idempotency_key, compute
        )
        return await submit(service, who, job, preferred=prefers_async(prefer))
    return FiniteJSONResponse(await run_in_threadpool(compute, no_hook))


@router.post("/v1/datasets/{dataset_id}/streams", tags=["streams"], status_code=201)
def create_stream(
    service: Service,
    who: Owner,
    dataset_id: str,
    body: StreamIn,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """Create a stream; its whole ε (or ρ) is charged to the dataset's cap now (owners). A retry
    with the same ``Idempotency-Key`` and body returns the stream created first, charged once."""
    spec = StreamSpec(
        kind=body.kind,
        epsilon=None if body.epsilon is None else s.exact(body.epsilon),
        rho=None if body.rho is None else s.exact(body.rho),
        resolution=body.resolution,
        branching=body.branching,
        horizon=body.horizon,
        lower=body.lower,
        upper=body.upper,
        universe=body.universe,
        output_epsilon=None if body.output_epsilon is None else s.exact(body.output_epsilon),
        outputs=body.outputs,
        max_events_per_person=body.max_events_per_person,
        modulus=body.modulus,
        sample_size=body.sample_size,
    )
    stream = StreamStore(service.ledger).create(who, dataset_id, spec, request_key=idempotency_key)
    return {**_stream_out(stream), "cost": s.cost_json(spec.cost())}


@router.get("/v1/streams/{stream_id}", tags=["streams"])
def get_stream(service: Service, who: Caller, stream_id: str) -> dict[str, Any]:
    """A stream's parameters and its latest private release with its CI (free)."""
    return _stream_out(_visible_stream(service, who, stream_id))


@router.post("/v1/streams/{stream_id}/events", tags=["streams"])
def post_events(
    service: Service,
    who: Caller,
    stream_id: str,
    body: EventsIn,
    *,
    per_event: Annotated[bool, Query()] = False,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """Ingest a batch of events; count/sum streams release their running total after every
    event (``per_event=true``: all of the batch's releases; always: the last, with its CI).
    A retry with the same ``Idempotency-Key`` and body gets the first answer; its events are
    ingested once."""
    visible = _writable_stream(service, who, stream_id)
    store = StreamStore(service.ledger)

    def answer(stream: Stream, releases: list[float]) -> dict[str, Any]:
        out = {**_stream_out(stream), "accepted": len(body.values)}
        if per_event:
            out["releases"] = releases
        return out

    if idempotency_key is None:
        return {**answer(*store.ingest(stream_id, body.values, body.persons)), "replayed": False}
    change = KeyedChange(
        principal_id=who.principal_id,
        key=idempotency_key,
        kind="events",
        text=f"EVENTS {stream_id} ({len(body.values)} events)",
        fingerprint=request_fingerprint(
            "events", stream=stream_id, body=body.model_dump(), per_event=per_event
        ),
    )
    out, replayed = store.ingest_once(
        visible.id, body.values, body.persons, change=change, answer=answer
    )
    return {**out, "replayed": replayed}


@router.post("/v1/streams/{stream_id}/estimates", tags=["streams"])
def release_estimate(
    service: Service,
    who: Caller,
    stream_id: str,
    at_least: Annotated[int | None, Query(ge=1)] = None,
) -> dict[str, Any]:
    """Release a density stream's next paid estimate, or an incidence stream's fraction of
    users seen ``at_least`` times."""
    _writable_stream(service, who, stream_id)
    return _stream_out(StreamStore(service.ledger).estimate(stream_id, at_least))


@router.post("/v1/surveys", tags=["surveys"], status_code=201)
def create_survey(service: Service, who: Owner, body: SurveyIn) -> dict[str, Any]:
    """Create a local-model survey (owners)."""
    store = SurveyStore(service.ledger)
    return _survey_out(store.create(who, body.name, body.categories, s.exact(body.epsilon)))


@router.get("/v1/surveys/{survey_id}", tags=["surveys"])
def get_survey(service: Service, _who: Caller, survey_id: str) -> dict[str, Any]:
    """A survey's public parameters (what the client randomises with)."""
    return _survey_out(SurveyStore(service.ledger).get(survey_id))


@router.post("/v1/surveys/{survey_id}/responses", tags=["surveys"])
def submit_responses(
    service: Service, _who: Caller, survey_id: str, body: ResponsesIn
) -> dict[str, Any]:
    """Add already-randomised reports."""
    total = SurveyStore(service.ledger).submit(survey_id, body.reports)
    return {"accepted": len(body.reports), "reports": total}


@router.get("/v1/surveys/{survey_id}/estimates", tags=["surveys"])
def survey_estimates(service: Service, _who: Caller, survey_id: str) -> dict[str, Any]:
    """Unbiased frequency estimates with (1-α) CIs (free: post-processing)."""
    out = SurveyStore(service.ledger).estimate(survey_id)
    return {"reports": out.reports, "alpha": out.alpha, "rows": out.rows}


document_problems(router)
