"""The ``/v1`` endpoints of synthetic releases (:mod:`~dpcurator.service.stores.synth`).

Owners see a release's charge and expected errors for free (``synthetic:estimate``), then
publish it (``synthetic``: charged once to the dataset's global cap, computed in the background,
answered 202 with the job to poll). Whoever may see the dataset, or anyone when the release is
public, reads it for free: ``GET /v1/synthetic/{id}`` (request, cost, status, progress) and
``GET /v1/synthetic/{id}/data?format=csv|parquet|json``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from pydantic import Field

from dpcurator.service import schemas as s
from dpcurator.service.auth import Identity
from dpcurator.service.idempotency import IdempotencyKey
from dpcurator.service.operations import fits_budget
from dpcurator.service.problem_docs import document_problems
from dpcurator.service.routes.core import Caller, Owner, Service, _identity
from dpcurator.service.stores.synth import FORMATS, SynthStore, encode, release_json
from dpcurator.service.stores.synth_plan import KINDS, SynthSpec

router = APIRouter(prefix="", dependencies=[Depends(s.refuse_nul_parameters)])

Columns = Annotated[list[s.Name], Field(min_length=1, max_length=64)]


class SynthIn(s.RequestModel):
    """A synthetic release: the kind, the budget ((ε, δ) or ρ with δ), columns (default: every
    column), marginals (kind ``marginals``: the tables, default every 1- and 2-way one; AIM and
    MWEM: the workload, default every 2-way one), rows to sample (default: the noisy total)."""

    kind: Annotated[str, Field(pattern=rf"^({'|'.join(KINDS)})$")]
    epsilon: s.Epsilon | None = None
    delta: s.Delta = 0.0
    rho: s.Rho | None = None
    columns: Columns | None = None
    marginals: Annotated[list[Columns], Field(min_length=1, max_length=1_000)] | None = None
    rows: Annotated[int, Field(ge=1, le=10_000_000)] | None = None

    def spec(self) -> SynthSpec:
        """The library-side request (exact budget)."""
        return SynthSpec(
            kind=self.kind,
            epsilon=None if self.epsilon is None else s.exact(self.epsilon),
            delta=s.exact(self.delta),
            rho=None if self.rho is None else s.exact(self.rho),
            columns=self.columns,
            marginals=self.marginals,
            rows=self.rows,
        )


class PublishIn(SynthIn):
    """A release to publish; ``public``: readable by anyone, without a token."""

    public: bool = False


async def _maybe_caller(
    request: Request,
    service: Service,
    authorization: Annotated[str | None, Header()] = None,
) -> Identity | None:
    """The caller, or None without an Authorization header (public releases only)."""
    if authorization is None:
        return None
    return await _identity(request, service, authorization)


MaybeCaller = Annotated[Identity | None, Depends(_maybe_caller)]


@router.post("/v1/datasets/{dataset_id}/synthetic:estimate", tags=["synthetic"])
def estimate_synthetic(
    service: Service, who: Owner, dataset_id: str, body: SynthIn
) -> dict[str, Any]:
    """The charge and expected per-marginal errors of a release (owners; free)."""
    plan = SynthStore(service).plan(who, dataset_id, body.spec())
    access = service.access(who, dataset_id)
    cap = service.cap(who, access.dataset)
    return {
        "kind": body.kind,
        "cost": s.cost_json(plan.cost),
        "event": plan.event.to_dict(),
        "expected_errors": plan.errors,
        "fits_cap": fits_budget(access, plan.cost),
        "cap": None if cap is None else s.budget_json(cap),
    }


@router.post("/v1/datasets/{dataset_id}/synthetic", tags=["synthetic"], status_code=202)
def publish_synthetic(
    service: Service,
    who: Owner,
    dataset_id: str,
    body: PublishIn,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """Charge the dataset's cap once and start computing the release (owners); poll
    ``GET /v1/synthetic/{id}`` for its progress. A retry with the same ``Idempotency-Key`` and
    body returns the release started first (running or finished), charged once."""
    store = SynthStore(service)
    published = store.publish(
        who, dataset_id, body.spec(), public=body.public, request_key=idempotency_key
    )
    cap = None if published.cap is None else s.budget_json(published.cap)
    return {**release_json(published.release, store.cost(published.release)), "cap": cap}


@router.get("/v1/datasets/{dataset_id}/synthetic", tags=["synthetic"])
def list_synthetic(service: Service, who: Caller, dataset_id: str) -> list[dict[str, Any]]:
    """The dataset's synthetic releases with their cost (whoever sees the dataset; free)."""
    store = SynthStore(service)
    return [release_json(r, store.cost(r)) for r in store.list(who, dataset_id)]


@router.get("/v1/synthetic/{release_id}", tags=["synthetic"])
def get_synthetic(service: Service, who: MaybeCaller, release_id: str) -> dict[str, Any]:
    """A release's request, cost, status and progress (free)."""
    store = SynthStore(service)
    release = store.get(who, release_id)
    return release_json(release, store.cost(release))


@router.get("/v1/synthetic/{release_id}/data", tags=["synthetic"])
def get_synthetic_data(
    service: Service,
    who: MaybeCaller,
    release_id: str,
    fmt: Annotated[str, Query(alias="format", pattern=rf"^({'|'.join(FORMATS)})$")] = "csv",
) -> Response:
    """The released table (free: post-processing)."""
    body, media = encode(SynthStore(service).get(who, release_id), fmt)
    return Response(body, media_type=media)


document_problems(router)
