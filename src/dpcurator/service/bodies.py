"""The resources' request and response bodies of the HTTP API (pydantic models; with the field
types and the numeric input policy of :mod:`dpcurator.service.schemas`, they define the OpenAPI
spec): queries, estimates and history; datasets, analysts, tokens and grants; batch releases and
audits; fits.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dpcurator.query.plan.limits import MAX_FIT_BLOCKS
from dpcurator.service.ledger.budgets import Cost
from dpcurator.service.schemas import (
    Accounting,
    Accuracy,
    BudgetEpsilon,
    BudgetOut,
    BudgetRho,
    Clipping,
    CostOut,
    DatasetId,
    Delta,
    Epsilon,
    Name,
    Noise,
    RequestModel,
    Rho,
    Sql,
    UtcTime,
    budget_of,
)


class QueryIn(RequestModel):
    """A SQL query and the privacy cost the analyst is willing to pay for it: ``epsilon`` (with
    ``delta``), ``rho`` (a zCDP cost: discrete Gaussian noise), or ``accuracy`` (95% CI
    half-width per output column, e.g. ``{"n": 50}``) for the smallest cost meeting those
    targets (exactly one of the three). ``noise`` names the family (``laplace`` |
    ``gaussian``); by default the planner picks Gaussian when δ > 0 makes it narrower.
    ``clipping``: the share of ``epsilon`` spent on a clipping report (``release.clipping``)."""

    sql: Sql
    epsilon: Epsilon | None = None
    delta: Delta = 0.0
    accuracy: Accuracy | None = None
    rho: Rho | None = None
    noise: Noise = None
    clipping: Clipping | None = None

    @model_validator(mode="after")
    def _one_budget(self) -> QueryIn:
        if [self.epsilon, self.accuracy, self.rho].count(None) != 2:
            raise ValueError("give exactly one of 'epsilon', 'rho' and 'accuracy'")
        return self


class QueryOut(BaseModel):
    """The answer to a query: the release, its cost and the budget left afterwards."""

    charge_id: int
    dataset_id: str
    sql: str
    replayed: bool
    cost: CostOut
    remaining: BudgetOut | None
    release: dict[str, Any]


class EstimateOut(BaseModel):
    """The cost and expected accuracy of a query, computed from public metadata only."""

    dataset_id: str
    sql: str
    cost: CostOut
    remaining: BudgetOut | None
    fits: bool
    estimate: dict[str, Any]


class HistoryEntry(BaseModel):
    """One ledger entry as its owner (or a data owner) sees it."""

    id: int
    principal_id: str
    dataset_id: str
    kind: str
    sql: str
    cost: CostOut
    status: str
    replay_of: int | None
    created_at: UtcTime
    completed_at: UtcTime | None
    result: dict[str, Any] | None
    error: str | None


class DatasetIn(RequestModel):
    """Register a dataset: where its rows are, its public metadata and its global cap."""

    id: DatasetId
    name: Name | None = None
    source: dict[str, Any] = Field(
        description="{'path': 'file.parquet|csv'} or {'path': 'db.duckdb', 'table': 'name'}"
    )
    metadata: dict[str, Any] = Field(description="public metadata (dpcurator or SmartNoise)")
    cap_epsilon: BudgetEpsilon | None = None
    cap_delta: Delta = 0.0
    cap_rho: BudgetRho | None = None
    accounting: Accounting = None
    replay_enabled: bool = False

    @model_validator(mode="after")
    def _one_cap(self) -> DatasetIn:
        if (self.cap_epsilon is None) == (self.cap_rho is None):
            raise ValueError("give exactly one of 'cap_epsilon' and 'cap_rho'")
        return self

    def cap(self) -> Cost:
        """The cap as an exact (ε, δ) or ρ."""
        return budget_of(self.cap_epsilon, self.cap_delta, self.cap_rho)


class DatasetPatch(RequestModel):
    """Change the global cap or the replay switch of a dataset."""

    cap_epsilon: BudgetEpsilon | None = None
    cap_delta: Delta | None = None
    cap_rho: BudgetRho | None = None
    accounting: Accounting = None
    replay_enabled: bool | None = None


class DatasetOut(BaseModel):
    """A dataset as a caller may see it: public metadata and budgets, never rows."""

    id: str
    name: str
    schema_: dict[str, Any] = Field(alias="schema")
    replay_enabled: bool
    budget: BudgetOut | None = Field(description="the caller's own budget (analysts)")
    cap: BudgetOut | None = Field(description="the global cap (owners only)")

    model_config = ConfigDict(populate_by_name=True)


class AnalystIn(RequestModel):
    """Create an analyst (a token is issued and shown once)."""

    name: Name
    expires_in: Annotated[float, Field(gt=0, le=3.2e7, allow_inf_nan=False)] | None = None


class PrincipalOut(BaseModel):
    """An owner or analyst."""

    id: str
    name: str
    role: Literal["owner", "analyst"]
    created_at: UtcTime


class TokenOut(BaseModel):
    """A token's public description (never its secret)."""

    token_id: str
    principal_id: str
    created_at: UtcTime
    expires_at: UtcTime | None
    revoked: bool


class IssuedTokenOut(BaseModel):
    """A new token: ``token`` is shown here once and cannot be recovered later."""

    principal: PrincipalOut
    token_id: str
    token: str
    expires_at: UtcTime | None


class TokenIn(RequestModel):
    """Issue another token for a principal."""

    expires_in: Annotated[float, Field(gt=0, le=3.2e7, allow_inf_nan=False)] | None = None


class GrantIn(RequestModel):
    """Set an analyst's total budget on a dataset: ``epsilon`` (with ``delta``) or ``rho``."""

    epsilon: BudgetEpsilon | None = None
    delta: Delta = 0.0
    rho: BudgetRho | None = None
    accounting: Accounting = None

    @model_validator(mode="after")
    def _one_budget(self) -> GrantIn:
        if (self.epsilon is None) == (self.rho is None):
            raise ValueError("give exactly one of 'epsilon' and 'rho'")
        return self

    def budget(self) -> Cost:
        """The budget as an exact (ε, δ) or ρ."""
        return budget_of(self.epsilon, self.delta, self.rho)


class GrantOut(BaseModel):
    """An analyst's budget on a dataset."""

    analyst_id: str
    dataset_id: str
    budget: BudgetOut


class BatchQueryIn(RequestModel):
    """One query of a published batch, at a given ε (accuracy targets are for queries)."""

    sql: Sql
    epsilon: Epsilon
    delta: Delta = 0.0


class BatchIn(RequestModel):
    """A batch of queries to run once and publish."""

    name: Name
    queries: Annotated[list[BatchQueryIn], Field(min_length=1, max_length=100)]


class ReleaseOut(BaseModel):
    """A published batch release: readable by anyone with access, at no cost."""

    id: str
    dataset_id: str
    name: str
    charge_id: int
    created_by: str
    created_at: UtcTime
    results: list[dict[str, Any]]


class AuditOut(BaseModel):
    """One audit event."""

    id: int
    at: UtcTime
    principal_id: str | None
    action: str
    dataset_id: str | None
    detail: dict[str, Any]


class MeOut(BaseModel):
    """The caller."""

    id: str
    name: str
    role: str
    token_id: str


ColumnName = Annotated[str, Field(min_length=1, max_length=200)]


class FitIn(RequestModel):
    """A model fit on the dataset's table (:mod:`dpcurator.query.fit.core`): the response, the
    predictors, the cost (ε, and δ > 0 for ``linear``) and the level 1-``alpha`` of the
    coefficients' intervals. ``coef_bound`` is a public parameter of ``logistic``: every
    coefficient lies in [-coef_bound, coef_bound] (default: |coefficient| <=
    DEFAULT_COEFFICIENT_BOUND in standardised units,
    :func:`dpcurator.query.fit.core.standardised_box`); ``method`` and ``blocks`` choose its route
    (:func:`dpcurator.query.fit.core.plan_fit`); ``method: "l1"`` makes ``linear`` the robust PTR L1
    regression (δ > 0, ``coef_bound`` required; the reply may be NR)."""

    model: Literal["linear", "logistic"]
    response: ColumnName
    predictors: Annotated[list[ColumnName], Field(min_length=1, max_length=16)]
    epsilon: Epsilon
    delta: Delta = 0.0
    alpha: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.05
    fit_intercept: bool = True
    coef_bound: Annotated[float, Field(gt=0, le=1e12, allow_inf_nan=False)] | None = None
    method: Literal["objective_perturbation", "sample_and_aggregate", "l1"] | None = None
    blocks: Annotated[int, Field(ge=1, le=MAX_FIT_BLOCKS)] | None = None


class FitOut(BaseModel):
    """A released fit: the coefficients with their intervals, its cost and the budget left."""

    charge_id: int
    dataset_id: str
    request: str
    replayed: bool
    cost: CostOut
    remaining: BudgetOut | None
    fit: dict[str, Any] = Field(
        description="rows (term -> coefficient with ci_low/ci_high), model, terms, replied "
        "(false: NR, no reply), method, covers (noise, or noise+sampling), cost, ci_level"
    )


class FitEstimateOut(BaseModel):
    """The cost of a fit and whether it fits the budgets, from public metadata only."""

    dataset_id: str
    request: str
    cost: CostOut
    remaining: BudgetOut | None
    fits: bool
    estimate: dict[str, Any]
