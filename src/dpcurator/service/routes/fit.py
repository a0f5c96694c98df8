"""Model fits over HTTP: ``POST /v1/datasets/{id}/fits`` and ``.../fits:estimate``.

A fit is charged like a query (:meth:`CuratorService.charged
<dpcurator.service.operations.CuratorService.charged>`): planned from the public metadata
(refusals free, 422 naming the parameter or column), the cost reserved atomically in the ledger
before any data is read (409 budget-exceeded changes nothing), a retry with the same
``Idempotency-Key`` returns the first answer, an engine failure after the charge is the constant
:data:`~dpcurator.errors.ENGINE_FAILURE_MESSAGE`, and the ledger entry (``FIT ...`` as its query
text) shows in the caller's history. The answer holds the coefficients with their (1-α)
intervals (:func:`~dpcurator.query.fit.release.fit_dict`). ``fits:estimate`` is free: the cost
and whether it fits the budgets, from public inputs only.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, cast

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from dpcurator.accounting.filter import BudgetFilter
from dpcurator.core.measures import ApproxDP
from dpcurator.query.fit.core import FitRequest
from dpcurator.query.fit.release import estimate_fit, fit_on
from dpcurator.service import bodies as b
from dpcurator.service import schemas as s
from dpcurator.service.curator import DatasetRuntime
from dpcurator.service.idempotency import IdempotencyKey
from dpcurator.service.jobs import (
    Submission,
    Wrap,
    fit_is_long,
    no_hook,
    prefers_async,
    register_kind,
)
from dpcurator.service.json_response import FiniteJSONResponse
from dpcurator.service.ledger.accounts import charge_cost
from dpcurator.service.ledger.budgets import BudgetView
from dpcurator.service.models import Charge
from dpcurator.service.operations import fingerprint, fits_budget
from dpcurator.service.problem_docs import document_problems
from dpcurator.service.routes.core import Caller, Service
from dpcurator.service.routes.jobs import ACCEPTED, Prefer, submit, wants_job

router = APIRouter(prefix="", dependencies=[Depends(s.refuse_nul_parameters)])

_KINDS = {"linear": "linear_regression", "logistic": "logistic_regression"}


def fit_request(body: b.FitIn) -> FitRequest:
    """The library request of an HTTP body (validated again, free, when planned)."""
    return FitRequest(
        kind=cast("Any", _KINDS[body.model]),
        y=body.response,
        x=tuple(body.predictors),
        fit_intercept=body.fit_intercept,
        coef_bound=body.coef_bound,
        method=body.method,
        blocks=body.blocks,
    )


def _text(request: FitRequest, alpha: float) -> str:
    """The ledger's description of a fit (and, with its cost, its replay fingerprint)."""
    return f"{request.describe()} (alpha {alpha!r})"


def _exact(value: Fraction) -> float:
    """An exact Fraction where the library annotates float (it reads any Real exactly)."""
    return cast("float", value)


def _body(charge: Charge, *, replayed: bool, remaining: BudgetView | None) -> dict[str, Any]:
    """The answer of a fit (the synchronous route's body, and a job's result)."""
    return {
        "charge_id": charge.id,
        "dataset_id": charge.dataset_id,
        "request": charge.query_text,
        "replayed": replayed,
        "cost": s.cost_json(charge_cost(charge)),
        "remaining": None if remaining is None else s.budget_json(remaining),
        "fit": charge.result or {},
    }


register_kind("fit", lambda charge: _body(charge, replayed=False, remaining=None))


@router.post(
    "/v1/datasets/{dataset_id}/fits", tags=["fits"], response_model=b.FitOut, responses=ACCEPTED
)
async def run_fit(
    service: Service,
    who: Caller,
    dataset_id: str,
    body: b.FitIn,
    *,
    idempotency_key: IdempotencyKey = None,
    prefer: Prefer = None,
) -> FiniteJSONResponse:
    """Fit a model: reserve its cost atomically, compute, release the coefficients with CIs.
    With ``Prefer: respond-async``, or at least ``ASYNC_FIT_BLOCKS`` blocks, the fit runs as a
    background job once its cost is reserved: 202 and the job to poll (``GET /v1/jobs/{id}``)."""
    request = fit_request(body)
    epsilon, delta = s.exact(body.epsilon), s.exact(body.delta)
    text = _text(request, body.alpha)
    print_ = fingerprint(text, epsilon, delta)

    def compute(wrap: Wrap) -> dict[str, Any]:
        def run(runtime: DatasetRuntime, budget: BudgetFilter) -> dict[str, Any]:
            return fit_on(
                runtime.session(wrap(budget)), request, epsilon=_exact(epsilon),
                delta=_exact(delta), alpha=body.alpha,
            )  # fmt: skip

        answer = service.charged(
            who,
            dataset_id,
            text,
            print_,
            run,
            request_key=idempotency_key,
            requested={"epsilon": str(epsilon), "delta": str(delta)},
        )
        return _body(answer.charge, replayed=answer.replayed, remaining=answer.remaining)

    if wants_job(prefer, fit_is_long(body.blocks)):
        job = Submission("fit", dataset_id, print_, idempotency_key, compute, body.blocks)
        return await submit(service, who, job, preferred=prefers_async(prefer))
    return FiniteJSONResponse(await run_in_threadpool(compute, no_hook))


@router.post("/v1/datasets/{dataset_id}/fits:estimate", tags=["fits"])
def estimate_fit_route(
    service: Service, who: Caller, dataset_id: str, body: b.FitIn
) -> b.FitEstimateOut:
    """The cost of a fit and whether it fits; nothing runs and nothing is charged."""
    request = fit_request(body)
    access = service.access(who, dataset_id)
    budget = access.budget
    metadata = service.catalog.runtime(access.dataset).metadata
    epsilon, delta = s.exact(body.epsilon), s.exact(body.delta)
    plan = request.plan(metadata, epsilon=_exact(epsilon), delta=_exact(delta))
    cost = plan.cost if isinstance(plan.cost, ApproxDP) else plan.cost.to_approx()
    return b.FitEstimateOut(
        dataset_id=dataset_id,
        request=_text(request, body.alpha),
        cost=s.CostOut.of(cost),
        remaining=None if budget is None else s.BudgetOut.model_validate(s.budget_json(budget)),
        fits=fits_budget(access, cost),
        estimate=estimate_fit(plan, body.alpha),
    )


document_problems(router)
