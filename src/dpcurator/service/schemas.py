"""The HTTP API's field types, numeric input policy and cost displays (pydantic; the resources'
bodies built from them are in :mod:`dpcurator.service.bodies`).

Privacy parameters arrive as JSON numbers and are read as the DECIMAL the client wrote
(``0.1`` means exactly 1/10), so ten queries at ε = 0.1 fit a budget of ε = 1. They leave as both a
float (for display) and an exact fraction string (for accounting).

Timestamps leave as ISO-8601 in UTC with the offset written (``2025-01-31T12:00:00.5Z``): the
ledger stores naive UTC, which :data:`UtcTime` marks as such.
"""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction
from typing import Annotated, Any, Literal

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from dpcurator.accounting.concentrated import Concentrated
from dpcurator.core.measures import ZCDP, ApproxDP
from dpcurator.query.plan.limits import MIN_EPSILON
from dpcurator.service.ledger.budgets import BudgetView, Cost

#: The numeric input policy (issue 24, item 6), enforced here for every request body:
#:
#: * numbers are JSON numbers: every request model is strict, so ``true`` or ``"0.1"`` where a
#:   number is expected is refused (422 naming the field), never read as 1 or 0.1;
#: * a privacy parameter (ε, ρ, and a budget's ε or ρ) is 0 (budgets only) or lies in
#:   [:data:`PRIVACY_MIN`, :data:`PRIVACY_MAX`]; δ is 0 or lies in [:data:`DELTA_MIN`, 1). Read
#:   as the decimal the client wrote (at most 17 significant digits), such a value is an exact
#:   fraction of under 70 characters, which the ledger's text columns hold with room to spare
#:   (and sums of them, whose denominators are powers of ten no larger);
#: * a bound or threshold in table units is finite with magnitude at most :data:`BOUND_MAX`
#:   (every engine then represents it, and its sums over 10^12 events, within a double);
#: * no string anywhere in a body, a path or a query parameter holds a NUL character (no
#:   ledger database stores one).
PRIVACY_MIN = MIN_EPSILON  # 1e-9: the planner's least ε (noise scales stay exact)
PRIVACY_MAX = 1e6
DELTA_MIN = 1e-30
BOUND_MAX = 1e15


def _zero_or_at_least(least: float, what: str) -> AfterValidator:
    def check(value: float) -> float:
        if value != 0 and value < least:
            raise ValueError(f"{what} must be 0 or at least {least:g}; got {value!r}")
        return value

    return AfterValidator(check)


Epsilon = Annotated[
    float,
    Field(
        ge=PRIVACY_MIN,
        le=PRIVACY_MAX,
        allow_inf_nan=False,
        description=f"ε in [{PRIVACY_MIN:g}, {PRIVACY_MAX:g}]",
    ),
]
Delta = Annotated[
    float,
    Field(ge=0, lt=1, allow_inf_nan=False, description=f"δ = 0 or δ in [{DELTA_MIN:g}, 1)"),
    _zero_or_at_least(DELTA_MIN, "delta"),
]
BudgetEpsilon = Annotated[
    float,
    Field(ge=0, le=PRIVACY_MAX, allow_inf_nan=False, description="a budget's ε (0 or more)"),
    _zero_or_at_least(PRIVACY_MIN, "epsilon"),
]
Rho = Annotated[
    float,
    Field(
        ge=PRIVACY_MIN,
        le=PRIVACY_MAX,
        allow_inf_nan=False,
        description=f"ρ (zCDP) in [{PRIVACY_MIN:g}, {PRIVACY_MAX:g}]",
    ),
]
BudgetRho = Annotated[
    float,
    Field(ge=0, le=PRIVACY_MAX, allow_inf_nan=False, description="a budget's ρ (zCDP)"),
    _zero_or_at_least(PRIVACY_MIN, "rho"),
]
Bound = Annotated[
    float,
    Field(
        ge=-BOUND_MAX,
        le=BOUND_MAX,
        allow_inf_nan=False,
        description=f"a value in table units, |x| <= {BOUND_MAX:g}",
    ),
]
Clipping = Annotated[
    float,
    Field(
        gt=0,
        lt=1,
        allow_inf_nan=False,
        description="the share of epsilon spent on a report of the rows outside the bounds of "
        "clamped outputs (dpcurator.query.plan.clipping)",
    ),
]
Noise = Annotated[
    Literal["laplace", "gaussian"] | None,
    Field(description="the noise family (default: the planner's choice, Gaussian where narrower)"),
]
Accounting = Annotated[
    Literal["basic", "concentrated"] | None,
    Field(
        description="basic: (ε, δ) costs add up; concentrated: events replayed through the "
        "adaptive filter (needs δ > 0 or a ρ budget; default: as set before, else concentrated "
        "for δ > 0 or ρ and basic for a pure ε)"
    ),
]
Sql = Annotated[str, Field(min_length=1, max_length=20_000)]
Accuracy = Annotated[
    dict[
        Annotated[str, Field(min_length=1, max_length=200)],
        Annotated[float, Field(ge=0, le=BOUND_MAX, allow_inf_nan=False)]
        | Annotated[str, Field(max_length=64)],
    ],
    Field(
        min_length=1,
        max_length=64,
        description="CI half-width per output column, or relative: '5%', '5% of 2000'",
    ),
]
Name = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[\w .@-]+$")]
DatasetId = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


#: A timestamp of the ledger (naive UTC) as an aware UTC datetime, so it is written with its
#: offset.
UtcTime = Annotated[datetime, AfterValidator(_utc)]


def exact(value: float) -> Fraction:
    """The decimal a client wrote as an exact fraction (``0.1`` -> 1/10)."""
    return Fraction(repr(value))


def _nul_free(value: Any, where: str) -> None:
    """Refuse a NUL character in any string of ``value`` (keys included), naming where."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError(f"{where} holds a NUL character (\\u0000); remove it")
    elif isinstance(value, dict):
        for key, item in value.items():
            _nul_free(key, f"a key of {where}")
            _nul_free(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _nul_free(item, f"{where}[{i}]")


class RequestModel(BaseModel):
    """The base of every request body: unknown fields refused, numbers strict (JSON numbers
    only) and no NUL character in any string (see the numeric input policy above)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, value in data.items():
                _nul_free(value, str(key))
        return data


async def refuse_nul_parameters(request: Request) -> None:
    """A router dependency: refuse a NUL character in a path or query parameter (422)."""
    params = [("path", k, v) for k, v in request.path_params.items()]
    params += [("query", k, v) for k, v in request.query_params.multi_items()]
    bad = [
        {"loc": (where, name), "msg": "holds a NUL character (\\u0000); remove it"}
        | {"type": "value_error", "input": value}
        for where, name, value in params
        if "\x00" in str(value)
    ]
    if bad:
        raise RequestValidationError(bad)


def budget_of(epsilon: float | None, delta: float, rho: float | None) -> Cost:
    """A budget as the client wrote it: ρ if given, else (ε, δ) (exact decimals)."""
    if rho is not None:
        return ZCDP(exact(rho))
    return ApproxDP(exact(epsilon or 0), exact(delta))


#: The (ε, δ) fields of a ρ cost, all null.
_NO_APPROX: dict[str, float | str | None] = dict.fromkeys(
    ("epsilon", "delta", "epsilon_exact", "delta_exact")
)


def cost_json(cost: Cost) -> dict[str, float | str | None]:
    """An exact cost in the shape of :class:`CostOut` (plain JSON, for the hot path): ε and δ,
    or ρ for a zCDP cost (the other fields null)."""
    if isinstance(cost, ZCDP):
        return {**_NO_APPROX, "rho": float(cost.rho), "rho_exact": str(cost.rho)}
    return {
        "epsilon": float(cost.epsilon),
        "delta": float(cost.delta),
        "epsilon_exact": str(cost.epsilon),
        "delta_exact": str(cost.delta),
        "rho": None,
        "rho_exact": None,
    }


def _parts_json(parts: Concentrated) -> dict[str, float | str]:
    return {
        "epsilon": float(parts.xi),
        "rho": float(parts.rho),
        "delta": float(parts.delta),
        "epsilon_exact": str(parts.xi),
        "rho_exact": str(parts.rho),
        "delta_exact": str(parts.delta),
    }


def budget_json(view: BudgetView) -> dict[str, Any]:
    """A budget in the shape of :class:`BudgetOut` (plain JSON, for the hot path)."""
    out: dict[str, Any] = {
        "total": cost_json(view.total),
        "spent": cost_json(view.spent),
        "remaining": cost_json(view.remaining),
        "accounting": view.accounting,
    }
    if view.native is not None:
        out["native"] = {
            "limits": _parts_json(view.native.limits),
            "spent": _parts_json(view.native.spent),
            "remaining": _parts_json(view.native.remaining),
        }
    return out


class CostOut(BaseModel):
    """A privacy cost or budget: floats for display, exact fractions for accounting; ε and δ,
    or ρ (zCDP) for a ρ cost or budget."""

    epsilon: float | None = None
    delta: float | None = None
    epsilon_exact: str | None = None
    delta_exact: str | None = None
    rho: float | None = None
    rho_exact: str | None = None

    @classmethod
    def of(cls, cost: Cost) -> CostOut:
        """Describe an exact cost."""
        return cls.model_validate(cost_json(cost))


class PartsOut(BaseModel):
    """A concentrated budget's parts (:class:`~dpcurator.accounting.ConcentratedFilter`): ε of
    the basic route, ρ of the Rényi route and the δ of approximate events."""

    epsilon: float
    rho: float
    delta: float
    epsilon_exact: str
    rho_exact: str
    delta_exact: str


class NativeOut(BaseModel):
    """A concentrated budget in its own terms: each part's limit, spending and remainder."""

    limits: PartsOut
    spent: PartsOut
    remaining: PartsOut


class BudgetOut(BaseModel):
    """A budget with what has been spent and what remains, in its measure ((ε, δ) or ρ);
    ``accounting`` is ``basic`` ((ε, δ) add up) or ``concentrated`` (events replayed through
    the adaptive filter, whose parts ``native`` shows)."""

    total: CostOut
    spent: CostOut
    remaining: CostOut
    accounting: Literal["basic", "concentrated"] = "basic"
    native: NativeOut | None = None
