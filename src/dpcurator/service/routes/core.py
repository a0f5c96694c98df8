"""The ``/v1`` endpoints. Each one authenticates the caller, then delegates to the service.

The dependencies are ``async``: FastAPI runs them on the event loop instead of handing each one
to the thread pool. A token verified recently is found in the authority's cache without blocking;
only a cache miss (database + argon2) runs in the thread pool.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request
from starlette.concurrency import run_in_threadpool

from dpcurator.core import display
from dpcurator.core.measures import ZCDP, ApproxDP
from dpcurator.errors import ENGINE_FAILURE_MESSAGE, ParameterError
from dpcurator.service import bodies as b
from dpcurator.service import schemas as s
from dpcurator.service.auth import Identity
from dpcurator.service.curator import NoiseRequest
from dpcurator.service.errors import NotFoundError
from dpcurator.service.idempotency import IdempotencyKey
from dpcurator.service.json_response import FiniteJSONResponse as _Json
from dpcurator.service.ledger.accounts import charge_cost
from dpcurator.service.ledger.budgets import BudgetView, Cost, cost_of, grant_budget
from dpcurator.service.models import Charge, Dataset, Principal, PublishedRelease
from dpcurator.service.operations import BatchQuery, CuratorService
from dpcurator.service.problem_docs import document_problems

router = APIRouter(prefix="", dependencies=[Depends(s.refuse_nul_parameters)])


async def _service(request: Request) -> CuratorService:
    service: CuratorService = request.app.state.service
    return service


Service = Annotated[CuratorService, Depends(_service)]


async def _identity(
    request: Request,
    service: Service,
    authorization: Annotated[str | None, Header()] = None,
) -> Identity:
    client = request.client.host if request.client else "unknown"
    identity = service.authority.cached(authorization, client)
    if identity is not None:
        return identity
    return await run_in_threadpool(service.authority.authenticate, authorization, client)


Caller = Annotated[Identity, Depends(_identity)]


async def _owner(who: Caller) -> Identity:
    who.require_owner()
    return who


Owner = Annotated[Identity, Depends(_owner)]


def _budget_out(view: BudgetView | None) -> s.BudgetOut | None:
    return None if view is None else _view_out(view)


def _view_out(view: BudgetView) -> s.BudgetOut:
    return s.BudgetOut.model_validate(s.budget_json(view))


def _principal_out(p: Principal) -> b.PrincipalOut:
    return b.PrincipalOut(id=p.id, name=p.name, role=p.role, created_at=p.created_at)  # type: ignore[arg-type]


def _history_out(c: Charge, *, analyst: bool = False) -> b.HistoryEntry:
    """A ledger entry; an analyst sees only the constant failure text (an entry written before
    failures were recorded that way may hold an engine's message)."""
    error = ENGINE_FAILURE_MESSAGE if analyst and c.error is not None else c.error
    return b.HistoryEntry(
        id=c.id,
        principal_id=c.principal_id,
        dataset_id=c.dataset_id,
        kind=c.kind,
        sql=c.query_text,
        cost=s.CostOut.of(charge_cost(c)),
        status=c.status,
        replay_of=c.replay_of,
        created_at=c.created_at,
        completed_at=c.completed_at,
        result=c.result,
        error=error,
    )


def _release_out(r: PublishedRelease) -> b.ReleaseOut:
    return b.ReleaseOut(
        id=r.id,
        dataset_id=r.dataset_id,
        name=r.name,
        charge_id=r.charge_id,
        created_by=r.created_by,
        created_at=r.created_at,
        results=r.results,
    )


def _dataset_out(service: CuratorService, who: Identity, d: Dataset) -> b.DatasetOut:
    return b.DatasetOut(
        id=d.id,
        name=d.name,
        schema=service.schema(d),
        replay_enabled=d.replay_enabled,
        budget=_budget_out(service.own_budget(who, d)),
        cap=_budget_out(service.cap(who, d)),
    )


@router.get("/v1/health", tags=["meta"])
def health() -> dict[str, str]:
    """Liveness probe (no authentication, touches nothing)."""
    return {"status": "ok"}


@router.get("/v1/me", tags=["meta"])
def me(who: Caller) -> b.MeOut:
    """The caller's identity."""
    return b.MeOut(id=who.principal_id, name=who.name, role=who.role, token_id=who.token_id)


# -- datasets ---------------------------------------------------------------------------


@router.get("/v1/datasets", tags=["datasets"])
def list_datasets(service: Service, who: Caller) -> list[b.DatasetOut]:
    """The datasets the caller may query, with public schema and budgets."""
    return [_dataset_out(service, who, d) for d in service.visible_datasets(who)]


@router.post("/v1/datasets", tags=["datasets"], status_code=201)
def register_dataset(service: Service, who: Owner, body: b.DatasetIn) -> b.DatasetOut:
    """Register a dataset (owners)."""
    dataset = service.register_dataset(
        who,
        body.id,
        name=body.name or body.id,
        source=body.source,
        metadata_doc=body.metadata,
        cap=body.cap(),
        replay_enabled=body.replay_enabled,
        accounting=body.accounting,
    )
    return _dataset_out(service, who, dataset)


@router.get("/v1/datasets/{dataset_id}", tags=["datasets"])
def get_dataset(service: Service, who: Caller, dataset_id: str) -> b.DatasetOut:
    """One dataset: public schema, the caller's budget (analysts) or the cap (owners)."""
    return _dataset_out(service, who, service.visible_dataset(who, dataset_id))


@router.patch("/v1/datasets/{dataset_id}", tags=["datasets"])
def patch_dataset(
    service: Service, who: Owner, dataset_id: str, body: b.DatasetPatch
) -> b.DatasetOut:
    """Change the global cap or the replay switch (owners)."""
    current = service.ledger.dataset(dataset_id)
    cap: Cost | None = None if body.cap_rho is None else ZCDP(s.exact(body.cap_rho))
    if body.cap_epsilon is not None or body.cap_delta is not None:
        old = cost_of(current.cap_epsilon, current.cap_delta)
        cap = ApproxDP(
            old.epsilon if body.cap_epsilon is None else s.exact(body.cap_epsilon),
            old.delta if body.cap_delta is None else s.exact(body.cap_delta),
        )
    dataset = service.ledger.update_dataset(
        dataset_id,
        cap=cap,
        replay_enabled=body.replay_enabled,
        by=who.principal_id,
        accounting=body.accounting,
    )
    return _dataset_out(service, who, dataset)


@router.get("/v1/datasets/{dataset_id}/budget", tags=["datasets"])
def get_budget(service: Service, who: Caller, dataset_id: str) -> s.BudgetOut:
    """The caller's budget on a dataset (for owners: the global cap)."""
    dataset = service.visible_dataset(who, dataset_id)
    view = service.own_budget(who, dataset) or service.cap(who, dataset)
    out = _budget_out(view)
    if out is None:
        raise NotFoundError(f"No dataset with id {dataset_id!r}.")
    return out


# -- queries ----------------------------------------------------------------------------


@router.post("/v1/datasets/{dataset_id}/queries", tags=["queries"], response_model=b.QueryOut)
async def run_query(
    service: Service,
    who: Caller,
    dataset_id: str,
    body: b.QueryIn,
    idempotency_key: IdempotencyKey = None,
) -> _Json:
    """Answer a query: reserve the budget atomically, run, release.

    A retry with the same ``Idempotency-Key`` header returns the first answer at no cost. The
    work runs in the thread pool in ONE hop (a sync endpoint would add hops for serialisation).
    """
    delta = s.exact(body.delta)
    rho = None if body.rho is None else s.exact(body.rho)
    noise = NoiseRequest(body.noise, rho, body.clipping)
    epsilon = None if body.accuracy is not None else s.exact(body.epsilon or 0)
    answer = await run_in_threadpool(
        service.answer,
        who,
        dataset_id,
        body.sql,
        epsilon,
        delta,
        request_key=idempotency_key,
        accuracy=body.accuracy,
        noise=noise,
    )
    charge = answer.charge
    remaining = answer.remaining
    # The hot path: plain dicts in the shape of QueryOut (the documented response model), JSON
    # encoded once, without validating the service's own output through pydantic again.
    return _Json(
        {
            "charge_id": charge.id,
            "dataset_id": charge.dataset_id,
            "sql": charge.query_text,
            "replayed": answer.replayed,
            "cost": s.cost_json(charge_cost(charge)),
            "remaining": None if remaining is None else s.budget_json(remaining),
            "release": charge.result or {},
        }
    )


@router.post("/v1/datasets/{dataset_id}/queries:estimate", tags=["queries"])
def estimate_query(
    service: Service, who: Caller, dataset_id: str, body: b.QueryIn
) -> b.EstimateOut:
    """The cost and expected accuracy of a query; nothing runs and nothing is charged."""
    epsilon = None if body.epsilon is None else s.exact(body.epsilon)
    rho = None if body.rho is None else s.exact(body.rho)
    noise = NoiseRequest(body.noise, rho, body.clipping)
    estimate = service.estimate(
        who, dataset_id, body.sql, epsilon, s.exact(body.delta), accuracy=body.accuracy, noise=noise
    )
    return b.EstimateOut(
        dataset_id=dataset_id,
        sql=body.sql,
        cost=s.CostOut.of(estimate.cost),
        remaining=_budget_out(estimate.remaining),
        fits=estimate.fits,
        estimate=estimate.details,
    )


@router.get("/v1/datasets/{dataset_id}/queries", tags=["queries"])
def query_history(
    service: Service,
    who: Caller,
    dataset_id: str,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[b.HistoryEntry]:
    """The caller's own history on a dataset (owners: everyone's), newest first."""
    entries = service.history(who, dataset_id, limit=limit)
    return [_history_out(c, analyst=not who.is_owner) for c in entries]


# -- published releases -----------------------------------------------------------------


@router.post("/v1/datasets/{dataset_id}/releases", tags=["releases"], status_code=201)
def publish(
    service: Service,
    who: Owner,
    dataset_id: str,
    body: b.BatchIn,
    idempotency_key: IdempotencyKey = None,
) -> b.ReleaseOut:
    """Run a batch once against the global cap and publish it (owners). A retry with the same
    ``Idempotency-Key`` and body returns the release published first, charged once."""
    queries = [BatchQuery(q.sql, s.exact(q.epsilon), s.exact(q.delta)) for q in body.queries]
    published = service.publish(who, dataset_id, body.name, queries, request_key=idempotency_key)
    return _release_out(published)


@router.get("/v1/datasets/{dataset_id}/releases", tags=["releases"])
def list_releases(service: Service, who: Caller, dataset_id: str) -> list[b.ReleaseOut]:
    """Releases published on a dataset (free to read)."""
    dataset = service.visible_dataset(who, dataset_id)
    return [_release_out(r) for r in service.ledger.releases(dataset.id)]


@router.get("/v1/releases/{release_id}", tags=["releases"])
def get_release(service: Service, who: Caller, release_id: str) -> b.ReleaseOut:
    """One published release (free to read)."""
    return _release_out(service.visible_release(who, release_id))


# -- analysts, tokens, grants, audit (owners) -------------------------------------------


def _analyst(service: CuratorService, who: Identity, analyst_id: str) -> Principal:
    """The analyst ``analyst_id``, or the calling owner themselves; another owner is answered
    as an unknown id (404): an owner who could issue or list another owner's tokens could act
    as that owner, e.g. on the streams only their creator may write."""
    unknown = NotFoundError(f"No analyst with id {analyst_id!r}.")
    try:
        principal = service.ledger.principal(analyst_id)
    except NotFoundError:
        raise unknown from None
    if principal.role != "analyst" and principal.id != who.principal_id:
        raise unknown
    return principal


@router.get("/v1/analysts", tags=["owners"])
def list_analysts(service: Service, _who: Owner) -> list[b.PrincipalOut]:
    """Every analyst."""
    return [_principal_out(p) for p in service.ledger.principals("analyst")]


@router.post("/v1/analysts", tags=["owners"], status_code=201)
def create_analyst(service: Service, who: Owner, body: b.AnalystIn) -> b.IssuedTokenOut:
    """Create an analyst; its token is in the response and shown only once."""
    principal, issued = service.create_principal(
        body.name, "analyst", expires_in=body.expires_in, by=who.principal_id
    )
    return b.IssuedTokenOut(
        principal=_principal_out(principal),
        token_id=issued.token_id,
        token=issued.token,
        expires_at=issued.expires_at,
    )


@router.post("/v1/analysts/{analyst_id}/tokens", tags=["owners"], status_code=201)
def issue_token(service: Service, who: Owner, analyst_id: str, body: b.TokenIn) -> b.IssuedTokenOut:
    """Issue another token for an analyst, or for the calling owner (shown once)."""
    principal = _analyst(service, who, analyst_id)
    issued = service.authority.issue(principal.id, expires_in=body.expires_in, by=who.principal_id)
    return b.IssuedTokenOut(
        principal=_principal_out(principal),
        token_id=issued.token_id,
        token=issued.token,
        expires_at=issued.expires_at,
    )


@router.get("/v1/analysts/{analyst_id}/tokens", tags=["owners"])
def list_tokens(service: Service, who: Owner, analyst_id: str) -> list[b.TokenOut]:
    """The tokens of an analyst, or of the calling owner (ids only, never secrets)."""
    principal = _analyst(service, who, analyst_id)
    return [
        b.TokenOut(
            token_id=t.token_id,
            principal_id=t.principal_id,
            created_at=t.created_at,
            expires_at=t.expires_at,
            revoked=t.revoked_at is not None,
        )
        for t in service.ledger.tokens(principal.id)
    ]


@router.put("/v1/analysts/{analyst_id}/grants/{dataset_id}", tags=["owners"])
def set_grant(
    service: Service, who: Owner, analyst_id: str, dataset_id: str, body: b.GrantIn
) -> b.GrantOut:
    """Give an analyst access to a dataset with this total budget (refused when the dataset's
    cap could never pay the grant's δ)."""
    budget = body.budget()
    _analyst(service, who, analyst_id)  # first: another owner's id reads as an unknown one
    check_grant_within_cap(budget, service.ledger.cap_view(dataset_id).total, dataset_id)
    service.ledger.set_grant(
        analyst_id, dataset_id, budget, by=who.principal_id, accounting=body.accounting
    )
    view = service.ledger.grant_view(analyst_id, dataset_id)
    assert view is not None  # just set
    return b.GrantOut(analyst_id=analyst_id, dataset_id=dataset_id, budget=_view_out(view))


def check_grant_within_cap(grant: Cost, cap: Cost, dataset_id: str) -> None:
    """Refuse (ParameterError, nothing changed) a grant whose δ the dataset's (ε, δ) cap can
    never pay: a δ above the cap's, or a ρ grant on a cap with δ = 0 (a ρ release costs some
    δ > 0 in (ε, δ)). Every release is charged to both, so such a grant would only ever be
    refused by the cap."""
    if not isinstance(cap, ApproxDP):
        return
    cap_delta = display.amount_text(cap.delta, up=False).lstrip("=≥")
    change = (
        f"Raise the cap's delta first (PATCH /v1/datasets/{dataset_id} with cap_delta; "
        f"dpcurator serve --cap-delta), or grant "
    )
    if isinstance(grant, ZCDP):
        if cap.delta == 0:
            raise ParameterError(
                f"A rho grant on dataset {dataset_id!r} could never be spent: its cap has "
                f"delta = 0, and every rho release costs some delta > 0. {change}an epsilon "
                "with delta = 0."
            )
        return
    if grant.delta > cap.delta:
        asked = display.amount_text(grant.delta, up=True).lstrip("=≤")
        raise ParameterError(
            f"The grant's delta ({asked}) is more than the cap of dataset {dataset_id!r} "
            f"allows (delta = {cap_delta}): releases with delta > 0 would always be refused by "
            f"the cap. {change}delta <= {cap_delta}."
        )


@router.get("/v1/analysts/{analyst_id}/grants", tags=["owners"])
def list_grants(service: Service, who: Owner, analyst_id: str) -> list[b.GrantOut]:
    """An analyst's budgets on every granted dataset."""
    principal = _analyst(service, who, analyst_id)
    return [
        b.GrantOut(
            analyst_id=g.principal_id,
            dataset_id=g.dataset_id,
            budget=_view_out(
                service.ledger.grant_view(g.principal_id, g.dataset_id) or grant_budget(g)
            ),
        )
        for g in service.ledger.grants(principal_id=principal.id)
    ]


@router.delete("/v1/tokens/{token_id}", tags=["meta"], status_code=204)
def revoke_token(service: Service, who: Caller, token_id: str) -> None:
    """Revoke a token: owners may revoke any token, analysts only their own."""
    found = service.ledger.token(token_id)
    if found is None or (not who.is_owner and found[0].principal_id != who.principal_id):
        raise NotFoundError(f"No token with id {token_id!r}.")
    service.authority.revoke(token_id, by=who.principal_id)


@router.get("/v1/audit", tags=["owners"])
def audit(
    service: Service, _who: Owner, limit: Annotated[int, Query(ge=1, le=1000)] = 200
) -> list[b.AuditOut]:
    """The audit log, newest first."""
    return [
        b.AuditOut(
            id=e.id,
            at=e.at,
            principal_id=e.principal_id,
            action=e.action,
            dataset_id=e.dataset_id,
            detail=json.loads(json.dumps(e.detail)),
        )
        for e in service.ledger.audit_log(limit)
    ]


@router.get("/v1/ledger", tags=["owners"])
def ledger_entries(
    service: Service, _who: Owner, limit: Annotated[int, Query(ge=1, le=1000)] = 200
) -> list[b.HistoryEntry]:
    """Every ledger entry (charges and replays), newest first."""
    return [_history_out(c) for c in service.ledger.history(limit=limit)]


document_problems(router)
