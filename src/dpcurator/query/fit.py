"""Statistical estimators on a session's table: :meth:`Session.fit <dpcurator.query.session.
Session.fit>`.

Every fit follows the order of every release (:mod:`dpcurator.query.session`): a :class:`FitPlan`
is made from the request and the public metadata alone (unknown columns, missing bounds, too
many features, a wrong δ are refused here, free), its cost is reserved and committed in the
session's budget filter, only then does the engine read the table, and everything after the
charge is total (an exception becomes the one constant ``ENGINE_FAILURE_MESSAGE``; degenerate
data gives NR or a ridge solution, never an error).

* ``linear_regression``: AdaSSP (Wang 2018) by sufficient statistics the ENGINE computes. Each
  column is clamped to its public bounds (NULL -> its fill) and rescaled to [-1, 1] inside the
  plan; the Gram matrix Σ z zᵀ of z = (1, u, v) is one ungrouped :class:`~dpcurator.query.ir.
  AggregatePlan` of a COUNT and one fixed-point SUM per upper-triangle entry, so DuckDB or Spark
  add up the products and only (d + 2)(d + 3)/2 numbers leave the engine. Each entry a row adds
  lies in [-1, 1] (the aggregate clamps it), which is what the sensitivities of
  :func:`~dpcurator.estimators.regression.regression_from_gram` need; a person's rows are bounded
  by ``max_rows_per_person`` and both sensitivities multiplied by it. The zCDP ρ is the largest
  whose (ε, δ) conversion (Canonne, Kamath & Steinke 2020) fits the requested (ε, δ), which is
  what is charged.
* ``logistic_regression``, ``mle`` and ``sample_and_aggregate`` (any user function): the engine
  returns each person's bounded rows of the estimator's columns (grouped by person and values
  with their multiplicities: the rows stay inside the trusted curator), and the library
  estimator forms its blocks by a keyed hash of the person id (user-level privacy: one person
  moves one block estimate). These are ε-DP: δ must be 0 and ε is charged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np

from dpcurator._validation import check_int, check_positive, check_probability, fail
from dpcurator.accounting import ApproxEvent, PureEvent
from dpcurator.accounting.events import PrivacyEvent
from dpcurator.core.measures import ZCDP, ApproxDP, PureDP
from dpcurator.errors import UnsupportedQueryError
from dpcurator.estimators.logistic import logistic_regression
from dpcurator.estimators.mle import MODELS, dp_mle
from dpcurator.estimators.regression import Scaling, regression_from_gram
from dpcurator.estimators.release import Estimate, FloatArray
from dpcurator.estimators.sample_aggregate import BlockEstimator, Box, sample_and_aggregate
from dpcurator.query import ir
from dpcurator.query.after_charge import after_charge
from dpcurator.query.schema import ColumnMeta, Metadata
from dpcurator.query.validation import check_epsilon
from dpcurator.random import Rng, default_rng

if TYPE_CHECKING:
    from dpcurator.query.session import Session

FitKind = Literal["linear_regression", "logistic_regression", "mle", "sample_and_aggregate"]
FIT_KINDS: Final = ("linear_regression", "logistic_regression", "mle", "sample_and_aggregate")
#: The most feature columns of one fit (the Gram plan has (d + 2)(d + 3)/2 aggregates).
MAX_FIT_FEATURES: Final = 16
#: Fixed-point grid 2^k of the Gram entries (each in [-1, 1]): rounding moves an entry by at
#: most 2^-31 per row, far below the noise, and 2^63 grid units hold 8·10^9 rows.
GRAM_GRID_EXPONENT: Final = -30
#: The default public bound |coefficient| <= b of a :class:`FitRequest`'s logistic fit.
DEFAULT_COEFFICIENT_BOUND: Final = 10.0
#: Share of ρ paying for AdaSSP's ridge (the regression library's default).
EIGEN_SHARE: Final = Fraction(1, 10)

_OWNER = "Session.fit"


@dataclass(frozen=True)
class FitPlan:
    """A fit decided from public inputs: what the engine computes, what is charged, and the
    post-processing that turns the engine's exact result into an :class:`Estimate`."""

    kind: str
    columns: tuple[str, ...]
    cost: PureDP | ApproxDP
    exact: ir.AggregatePlan
    finish: Callable[[ir.ExactResult, float, Rng], Estimate]
    #: The public names of the released coordinates (``intercept``, the features, ...).
    terms: tuple[str, ...]
    #: What the main mechanism perturbs, and its sensitivity per person (public): the L2 of
    #: the scaled Gram matrix (AdaSSP), or the L1 of the sum of block estimates (a person
    #: moves one block estimate inside the parameter box).
    statistic: str
    sensitivity: float

    @property
    def event(self) -> PrivacyEvent:
        """The event charged to the budget filter: exactly the requested cost."""
        if isinstance(self.cost, ApproxDP):
            return ApproxEvent(self.cost.epsilon, self.cost.delta)
        return PureEvent(self.cost.epsilon)

    def describe(self) -> str:
        """The ledger description of the charge."""
        return f"fit {self.kind}({', '.join(self.columns)})"


@dataclass(frozen=True)
class FitRequest:
    """A model asked for by name: SQL ``REGRESS``/``LOGISTIC`` (:mod:`dpcurator.query.sql_fit`),
    ``POST /v1/datasets/{id}/fits`` and ``dpcurator fit``. Every field is public; the budget is
    given separately.

    ``kind`` is ``linear_regression`` or ``logistic_regression``; ``y`` the response and ``x``
    the features; ``coef_bound`` the public box [-b, b] of every logistic coefficient (the
    parameter space, data units; default :data:`DEFAULT_COEFFICIENT_BOUND`).
    """

    kind: Literal["linear_regression", "logistic_regression"]
    y: str
    x: tuple[str, ...]
    fit_intercept: bool = True
    coef_bound: float = DEFAULT_COEFFICIENT_BOUND

    def plan(self, metadata: Metadata, *, epsilon: float, delta: float) -> FitPlan:
        """The :func:`plan_fit` of this request (refusals free)."""
        if self.kind == "linear_regression":
            return plan_fit(
                metadata, self.kind, epsilon=epsilon, delta=delta, y=self.y, x=self.x,
                fit_intercept=self.fit_intercept,
            )  # fmt: skip
        if not self.fit_intercept:
            raise fail(_OWNER, "fit_intercept", f"True for {self.kind}", self.fit_intercept)
        bound = check_positive(_OWNER, "coef_bound", self.coef_bound)
        return plan_fit(
            metadata, self.kind, epsilon=epsilon, delta=delta, y=self.y, x=self.x,
            lower=-bound, upper=bound,
        )  # fmt: skip

    def describe(self) -> str:
        """The request as one line (the ledger's query text, and its replay fingerprint)."""
        options = [] if self.fit_intercept else ["no intercept"]
        if self.kind == "logistic_regression":
            options.append(f"coef_bound={self.coef_bound!r}")
        tail = f" [{', '.join(options)}]" if options else ""
        return f"FIT {self.kind}: {self.y} ~ {' + '.join(self.x)}{tail}"


def plan_fit(
    metadata: Metadata,
    kind: str,
    *,
    epsilon: float,
    delta: float = 0.0,
    y: str | None = None,
    x: Sequence[str] = (),
    fit_intercept: bool = True,
    model: str | None = None,
    estimator: BlockEstimator | None = None,
    lower: object = None,
    upper: object = None,
    blocks: int | None = None,
) -> FitPlan:
    """The plan of a fit, from the request and the metadata only (refusals charge nothing).

    ``y``/``x`` name the response and feature columns (``mle``: ``y`` is the data column;
    ``sample_and_aggregate``: ``x`` are the columns passed to ``estimator``). ``lower``/``upper``
    bound the estimated parameters (logistic coefficients, MLE parameters, the user function's
    output); they are public, like the columns' bounds in the metadata.
    """
    eps = check_epsilon(_OWNER, epsilon)
    features = _names("x", x)
    if kind == "linear_regression":
        response = _required("y", y)
        return _plan_linear(
            metadata, response, x=features, epsilon=eps, delta=delta, fit_intercept=fit_intercept
        )
    if kind not in FIT_KINDS:
        raise fail(_OWNER, "kind", f"one of {', '.join(FIT_KINDS)}", kind)
    if delta != 0:
        raise fail(_OWNER, "delta", f"0 for {kind} (an ε-DP sample-and-aggregate)", delta)
    if blocks is not None:
        check_int(_OWNER, "blocks", blocks, minimum=1)
    if kind == "logistic_regression":
        if not features:
            raise fail(_OWNER, "x", "at least one feature column", list(features))
        metas = (*_numeric(metadata, features), _label(metadata, _required("y", y)))
        box = _box(lower, upper, len(features) + 1)
        rows = metadata.max_rows_per_person if metadata.person_column is not None else 1
        run = _logistic(metas[:-1], box, blocks, rows)
        terms = ("intercept", *features)
    elif kind == "mle":
        if model not in MODELS:
            raise fail(_OWNER, "model", f"one of {', '.join(sorted(MODELS))}", model)
        metas = _numeric(metadata, (_required("y", y),))
        box = _box(lower, upper, len(MODELS[model].parameters))
        run = _mle(str(model), box, blocks)
        terms = MODELS[str(model)].parameters
    else:
        if not callable(estimator):
            raise fail(_OWNER, "estimator", "a function of a block of rows", estimator)
        if not features:
            raise fail(_OWNER, "x", "at least one column", list(features))
        metas = _numeric(metadata, features)
        box = _box(lower, upper, None)
        run = _user(estimator, box, blocks)
        terms = tuple(f"theta_{i}" for i in range(box.dimension))
    finish = _rows_finish(metadata, metas, run, eps)
    columns = tuple(m.name for m in metas)
    exact = _rows_plan(metadata, metas)
    width = float(np.sum(box.upper - box.lower))
    blocks_sum = "the sum of the block estimates"
    return FitPlan(kind, columns, PureDP(eps), exact, finish, terms, blocks_sum, width)


def _names(name: str, values: Sequence[str]) -> tuple[str, ...]:
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise fail(_OWNER, name, "a sequence of column names", values)
    return tuple(values)


def _required(name: str, value: str | None) -> str:
    if not isinstance(value, str):
        raise fail(_OWNER, name, "a column name", value)
    return value


def _numeric(metadata: Metadata, names: Sequence[str]) -> tuple[ColumnMeta, ...]:
    """The metadata of numeric columns with public bounds (refused otherwise, free)."""
    if len(set(names)) != len(names):
        raise fail(_OWNER, "x", "distinct columns (y included)", list(names))
    metas = tuple(metadata.column(name) for name in names)
    for meta in metas:
        if meta.name == metadata.person_column:
            raise UnsupportedQueryError(
                f"Column {meta.name!r} is the person column: it cannot be a fit's variable."
            )
        if not meta.is_numeric:
            raise UnsupportedQueryError(
                f"Column {meta.name!r} is declared {meta.type}: a fit needs numeric columns."
            )
        if meta.lower is None or meta.upper is None:
            raise UnsupportedQueryError(
                f"Column {meta.name!r} has no public bounds in the metadata (lower/upper): a fit "
                "clamps every variable to its bounds."
            )
    return metas


def _label(metadata: Metadata, name: str) -> ColumnMeta:
    """The 0/1 response of a logistic regression: a bool column, or a numeric one clamped to
    [0, 1] (:func:`~dpcurator.estimators.logistic.logistic_regression` thresholds it)."""
    meta = metadata.column(name)
    if meta.type == "bool":
        return replace(meta, type="int", lower=0, upper=1, fill=0)
    (numeric,) = _numeric(metadata, (name,))
    return replace(numeric, lower=0, upper=1, fill=0)


def _fill(meta: ColumnMeta) -> float:
    """The public value of a NULL: the declared fill, else the midpoint of the bounds."""
    assert meta.lower is not None  # checked by _numeric
    assert meta.upper is not None
    if isinstance(meta.fill, int | float) and not isinstance(meta.fill, bool):
        return float(meta.fill)
    return (meta.lower + meta.upper) / 2


def _box(lower: object, upper: object, size: int | None) -> Box:
    """The public parameter box (validated before the charge), broadcast to ``size``."""
    if lower is None or upper is None:
        raise fail(_OWNER, "upper", "given with lower: public bounds of the parameters", upper)
    if size is None:
        return Box.of(_OWNER, lower, upper)
    try:
        low = np.broadcast_to(np.asarray(lower, np.float64), (size,))
        high = np.broadcast_to(np.asarray(upper, np.float64), (size,))
    except (TypeError, ValueError) as exc:
        raise fail(_OWNER, "lower", f"a number or {size} numbers", lower) from exc
    return Box.of(_OWNER, low, high)


# ----------------------------------------------------------------------------------------------
# Linear regression by engine-computed sufficient statistics


def zcdp_for(epsilon: Fraction, delta: float) -> Fraction:
    """The largest ρ (to 2^-40 relative) whose (ε, δ) conversion is at most (ε, δ)."""
    low, high = 0.0, float(epsilon)  # ρ <= ε always: ε(ρ) >= ρ
    for _ in range(60):
        middle = (low + high) / 2
        if ZCDP(middle).to_approx(delta).epsilon <= epsilon:
            low = middle
        else:
            high = middle
    return Fraction(low)


def _plan_linear(
    metadata: Metadata,
    y: str,
    *,
    x: tuple[str, ...],
    epsilon: Fraction,
    delta: float,
    fit_intercept: bool,
) -> FitPlan:
    if not x:
        raise fail(_OWNER, "x", "at least one feature column", list(x))
    if len(x) > MAX_FIT_FEATURES:
        raise UnsupportedQueryError(
            f"linear_regression takes at most {MAX_FIT_FEATURES} features (MAX_FIT_FEATURES); "
            f"got {len(x)}."
        )
    check_probability(_OWNER, "delta", delta, open_low=True, open_high=True)
    metas = _numeric(metadata, (*x, y))
    scaling = Scaling.of(
        len(x),
        ([m.lower for m in metas[:-1]], [m.upper for m in metas[:-1]]),
        (metas[-1].lower, metas[-1].upper),
        fit_intercept,
        _OWNER,
    )
    rho = zcdp_for(epsilon, delta)
    if rho <= 0:
        raise fail(_OWNER, "epsilon", f"large enough for a positive zCDP ρ at δ = {delta}", epsilon)
    x_mid, x_half, y_mid, y_half = scaling.centres()
    mids, halves = [*x_mid.tolist(), y_mid], [*x_half.tolist(), y_half]
    scaled = [_scaled(m, mid, half) for m, mid, half in zip(metas, mids, halves, strict=True)]
    z: list[ir.Expr | None] = [None, *scaled]  # None: the constant 1 of the intercept
    aggregates = [ir.ExactAggregate("n", "count")]
    for i in range(len(z)):
        for j in range(max(i, 1), len(z)):
            left, right = z[i], z[j]
            assert right is not None  # j >= 1
            value = right if left is None else ir.BinOp("*", left, right)
            aggregates.append(
                ir.ExactAggregate(f"g_{i}_{j}", "sum", value, -1.0, 1.0, 0.0, GRAM_GRID_EXPONENT)
            )
    bound = replace(metadata.contribution_bound, max_groups=1)
    exact = ir.AggregatePlan(metadata.table, tuple(aggregates), bound=bound)
    rows = metadata.max_rows_per_person
    cost = ApproxDP(epsilon, delta)

    def finish(result: ir.ExactResult, alpha: float, rng: Rng) -> Estimate:
        values = result.groups.get((), {})
        size = len(z)
        gram = np.zeros((size, size))
        gram[0, 0] = float(values.get("n", 0))  # type: ignore[arg-type]
        unit = math.ldexp(1.0, GRAM_GRID_EXPONENT)
        for i in range(size):
            for j in range(max(i, 1), size):
                gram[i, j] = gram[j, i] = unit * float(values.get(f"g_{i}_{j}", 0))  # type: ignore[arg-type]
        release = regression_from_gram(
            gram, scaling, rho=rho, eigen_share=EIGEN_SHARE, alpha=alpha, rng=rng,
            rows_per_person=rows,
        )  # fmt: skip
        return replace(release, cost=cost)

    terms = ("intercept", *x) if fit_intercept else x
    statistic, sensitivity = "the Gram matrix of the scaled rows", float(rows * len(z))
    return FitPlan("linear_regression", (*x, y), cost, exact, finish, terms, statistic, sensitivity)


def _scaled(meta: ColumnMeta, mid: float, half: float) -> ir.Expr:
    """(clamp(column, lower, upper) - mid) / half, NULL -> the column's fill (or midpoint)."""
    assert meta.lower is not None  # checked by _numeric
    assert meta.upper is not None
    column = ir.Col(meta.name)
    low, high = ir.Lit(float(meta.lower)), ir.Lit(float(meta.upper))
    clamped = ir.Case(
        (
            (ir.IsNull(column), ir.Lit(float(_fill(meta)))),
            (ir.Compare("<", column, low), low),
            (ir.Compare(">", column, high), high),
        ),
        column,
    )
    return ir.BinOp("*", ir.BinOp("-", clamped, ir.Lit(float(mid))), ir.Lit(1.0 / half))


# ----------------------------------------------------------------------------------------------
# Sample-and-aggregate estimators on the fetched bounded rows

_Run = Callable[[FloatArray, Any, float, Fraction, Rng], Estimate]


def _rows_plan(metadata: Metadata, metas: Sequence[ColumnMeta]) -> ir.AggregatePlan:
    """Each person's bounded rows of ``metas``: groups (person, values...) with their counts."""
    person = metadata.person_column
    names = ([] if person is None else [metadata.column(person).name]) + [m.name for m in metas]
    groups = tuple(ir.GroupColumn(f"c{i}", ir.Col(name)) for i, name in enumerate(names))
    rows = metadata.max_rows_per_person
    bound = replace(metadata.contribution_bound, max_groups=rows, max_rows_per_group=rows)
    return ir.AggregatePlan(
        metadata.table, (ir.ExactAggregate("n", "count"),), group_by=groups, bound=bound
    )


def _rows_finish(
    metadata: Metadata, metas: Sequence[ColumnMeta], run: _Run, epsilon: Fraction
) -> Callable[[ir.ExactResult, float, Rng], Estimate]:
    has_person = metadata.person_column is not None
    limit = metadata.max_rows_per_person
    fills = [_fill(m) for m in metas]

    def finish(result: ir.ExactResult, alpha: float, rng: Rng) -> Estimate:
        kept: dict[object, int] = {}
        data: list[list[float]] = []
        people: list[object] = []
        for key in sorted(result.groups, key=repr):
            count = int(result.groups[key]["n"])  # type: ignore[call-overload]
            pid = key[0] if has_person else None
            values = key[1:] if has_person else key
            row = [f if v is None else float(v) for v, f in zip(values, fills, strict=True)]
            take = min(count, limit - kept.get(pid, 0)) if has_person else count
            kept[pid] = kept.get(pid, 0) + take
            data.extend([row] * take)
            people.extend([pid] * take)
        table = np.asarray(data, np.float64).reshape(-1, len(metas))
        return run(table, people if has_person else None, alpha, epsilon, rng)

    return finish


def _logistic(features: Sequence[ColumnMeta], box: Box, blocks: int | None, rows: int) -> _Run:
    """Objective perturbation (each person's ``rows`` bound the gradient and Hessian shifts),
    or sample-and-aggregate when ``blocks`` is given."""
    method = "objective_perturbation" if blocks is None else "sample_and_aggregate"
    x_low = [m.lower for m in features]
    x_high = [m.upper for m in features]

    def run(table: FloatArray, person: Any, alpha: float, eps: Fraction, rng: Rng) -> Estimate:
        return logistic_regression(
            table[:, :-1], table[:, -1], epsilon=float(eps), x_lower=x_low, x_upper=x_high,
            coef_lower=box.lower, coef_upper=box.upper, blocks=blocks, person=person,
            alpha=alpha, rng=rng, method=method, rows_per_person=rows,
        )  # fmt: skip

    return run


def _mle(model: str, box: Box, blocks: int | None) -> _Run:
    def run(table: FloatArray, person: Any, alpha: float, eps: Fraction, rng: Rng) -> Estimate:
        return dp_mle(
            model, table[:, 0], epsilon=float(eps), lower=box.lower, upper=box.upper,
            blocks=blocks, person=person, alpha=alpha, rng=rng,
        )  # fmt: skip

    return run


def _user(estimator: BlockEstimator, box: Box, blocks: int | None) -> _Run:
    def run(table: FloatArray, person: Any, alpha: float, eps: Fraction, rng: Rng) -> Estimate:
        return sample_and_aggregate(
            estimator, table, epsilon=float(eps), lower=box.lower, upper=box.upper,
            blocks=blocks, person=person, alpha=alpha, rng=rng,
        )  # fmt: skip

    return run


def run_fit(session: Session, plan: FitPlan, alpha: float) -> Estimate:
    """Charge the plan's cost, let the engine compute, then post-process (total after the charge).

    :meth:`Session.compute_exact <dpcurator.query.session.Session.compute_exact>` checks the
    engine plan (free), reserves and commits the event, and computes; the estimator then runs on
    the exact result under the same constant-error rule as every release.
    """
    (result,) = session.compute_exact([plan.exact], plan.event, description=plan.describe())
    rng = session.rng or default_rng()
    return after_charge(lambda: plan.finish(result, alpha, rng))
