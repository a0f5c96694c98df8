"""The ``/v1`` endpoints of the private multiplicative weights mode
(:mod:`~dpcurator.service.stores.pmw`).

Owners open a mode on a dataset (its whole ε charged to the dataset's cap at once); whoever may
see the dataset reads the mode's public counters and asks counting queries, which cost them
nothing.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import Field

from dpcurator.service import schemas as s
from dpcurator.service.idempotency import IdempotencyKey
from dpcurator.service.problem_docs import document_problems
from dpcurator.service.routes.core import Caller, Owner, Service
from dpcurator.service.stores.pmw import PmwSpec, PmwStore, mode_json

router = APIRouter(prefix="", dependencies=[Depends(s.refuse_nul_parameters)])

Scalar = str | bool | int | float
Values = Scalar | Annotated[list[Scalar], Field(max_length=1_000)]


class PmwIn(s.RequestModel):
    """A new PMW mode: columns (public keys), total ε, threshold T (rows), max updates c; T and
    c left out are set from public inputs, k = ``queries`` (the expected number of queries)."""

    epsilon: s.Epsilon
    threshold: Annotated[float, Field(gt=0, le=s.BOUND_MAX, allow_inf_nan=False)] | None = None
    max_updates: Annotated[int, Field(ge=1, le=10_000)] | None = None
    queries: Annotated[int, Field(ge=1, le=10_000_000)] = 1000
    columns: Annotated[list[s.Name], Field(min_length=1, max_length=32)] | None = None
    when_exhausted: Annotated[str, Field(pattern=r"^(refuse|synthetic)$")] = "refuse"


class PmwQueryIn(s.RequestModel):
    """One counting query: ``sql`` or ``where`` ({column: value or [values]}), not both."""

    sql: s.Sql | None = None
    where: Annotated[dict[s.Name, Values], Field(max_length=32)] | None = None


@router.post("/v1/datasets/{dataset_id}/pmw", tags=["pmw"], status_code=201)
def open_pmw(
    service: Service,
    who: Owner,
    dataset_id: str,
    body: PmwIn,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """Open a PMW mode on a dataset; its whole ε is charged to the dataset's cap now (owners).
    A retry with the same ``Idempotency-Key`` and body returns the mode opened first, charged
    once."""
    spec = PmwSpec(
        epsilon=s.exact(body.epsilon),
        threshold=body.threshold,
        max_updates=body.max_updates,
        queries=body.queries,
        columns=body.columns,
        when_exhausted=body.when_exhausted,
    )
    opened = PmwStore(service).open(who, dataset_id, spec, request_key=idempotency_key)
    cap = None if opened.cap is None else s.budget_json(opened.cap)
    return {**mode_json(opened.mode), "cost": s.cost_json(opened.cost), "cap": cap}


@router.get("/v1/pmw/{mode_id}", tags=["pmw"])
def get_pmw(service: Service, who: Caller, mode_id: str) -> dict[str, Any]:
    """A mode's public parameters and counters (free)."""
    return mode_json(PmwStore(service).get(who, mode_id)[0])


@router.post("/v1/pmw/{mode_id}/queries", tags=["pmw"])
def ask_pmw(service: Service, who: Caller, mode_id: str, body: PmwQueryIn) -> dict[str, Any]:
    """Answer one counting query (free for the caller: the mode's ε was paid when it opened)."""
    answer = PmwStore(service).answer(who, mode_id, body.sql, body.where)
    interval = {"ci_low": answer.ci_low, "ci_high": answer.ci_high, "alpha": answer.alpha}
    return {"value": answer.value, "source": answer.source, **interval, **mode_json(answer.mode)}


document_problems(router)
