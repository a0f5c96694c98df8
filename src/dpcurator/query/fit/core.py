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
  :func:`~dpcurator.estimators.regression.regression_from_gram` need; both sensitivities are
  multiplied by the rows in which neighbours differ (the privacy unit's ``rows_changed``: r,
  or 2r under replace-one, whether or not a person column bounds them). The zCDP ρ is the largest
  whose (ε, δ) conversion (Canonne, Kamath & Steinke 2020) fits the requested (ε, δ), which is
  what is charged (:mod:`dpcurator.query.fit.linear` plans it).
* ``logistic_regression``, ``mle`` and ``sample_and_aggregate`` (any user function): the engine
  returns each person's bounded rows of the estimator's columns (grouped by person and values
  with their multiplicities: the rows stay inside the trusted curator). Logistic regression is
  objective perturbation by default (ε-DP, or (ε, δ)-DP with δ > 0; the rows in which
  neighbours differ, ``rows_changed`` of the privacy unit, bound the shift of the objective), or
  sample-and-aggregate with
  ``method="sample_and_aggregate"``. Sample-and-aggregate fits (that method, ``mle`` and
  ``sample_and_aggregate``) form their blocks by a keyed hash of the person id (user-level
  privacy: one person moves one block estimate; without a person column each row draws its
  block, so a person of r rows moves up to r, and replace-one doubles either); they are ε-DP: δ
  must be 0, ε is charged and the estimator runs at ε/steps (the privacy unit's
  ``estimator_steps``, group privacy).
* ``ptr_regression`` (or ``linear_regression`` with ``method="l1"``): Dwork & Lei's robust
  L1 regression by propose-test-release on block fits, (ε, δ)-DP, NR when a test fails
  (:mod:`dpcurator.query.fit.ptr`).

On a table with a person column the ENGINE forms the blocks of these block-based fits and
fetches at most ``max_rows`` rows (:mod:`dpcurator.query.fit.rows`: a public cap, the same
guarantee).

Every parameter combination is decided by :func:`plan_fit` before the charge: the method and its
options (``blocks`` only with sample-and-aggregate, at most
:data:`~dpcurator.query.plan.limits.MAX_FIT_BLOCKS`; δ only with objective perturbation), the
parameter box, and every noise scale the estimator can draw (objective perturbation's
calibration is built at plan time; a sample-and-aggregate scale is checked at one block, its
largest, and :data:`BLOCK_NOISE_SHARE` of ε, below the least share any of its mechanisms gets).
After the charge nothing raises (tests/test_fit_parameters.py walks the combinations).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final, Literal, Protocol

import numpy as np

from dpcurator._validation import check_int, check_positive, check_probability, fail
from dpcurator.accounting.events import PrivacyEvent
from dpcurator.core.measures import ApproxDP, PureDP
from dpcurator.errors import DPError
from dpcurator.estimators.logistic import METHODS, logistic_regression
from dpcurator.estimators.mle import MODELS, dp_mle
from dpcurator.estimators.objective_perturbation import Perturbation
from dpcurator.estimators.release import Estimate, FloatArray
from dpcurator.estimators.sample_aggregate import BlockEstimator, Box, sample_and_aggregate
from dpcurator.mechanisms import Laplace
from dpcurator.query import ir
from dpcurator.query.columns import ColumnMeta
from dpcurator.query.fit.columns import (
    OWNER,
    column_names,
    label_column,
    numeric_columns,
    parameter_box,
    required_column,
)
from dpcurator.query.fit.linear import plan_linear
from dpcurator.query.fit.ptr import plan_ptr
from dpcurator.query.fit.rows import FitPlan, Run, block_sample, rows_finish, rows_plan, seeded
from dpcurator.query.plan.limits import MAX_FIT_BLOCKS, MAX_FIT_FEATURES, check_at_most
from dpcurator.query.plan.validation import check_epsilon
from dpcurator.query.release.after_charge import after_charge
from dpcurator.query.schema import Metadata
from dpcurator.random import Rng, default_rng

FitKind = Literal[
    "linear_regression", "logistic_regression", "mle", "sample_and_aggregate", "ptr_regression"
]
FIT_KINDS: Final = (
    "linear_regression", "logistic_regression", "mle", "sample_and_aggregate", "ptr_regression"
)  # fmt: skip
#: ``fit("linear_regression", method="l1")`` is ``fit("ptr_regression")``.
L1_ROUTE: Final = ("linear_regression", "l1")
#: The default public bound of a :class:`FitRequest`'s logistic coefficients in standardised
#: units: each feature rescaled to [-1, 1] by its public bounds, |θ_j| <= b, which bounds the
#: logit's change over a feature's half range (:func:`standardised_box` gives the data-unit box).
DEFAULT_COEFFICIENT_BOUND: Final = 10.0
#: Objective perturbation's shares of ε for its ridge and for its interval's Hessian, passed to
#: the estimator and used by the plan to build the same calibration before the charge.
OP_SHARES: Final = (Fraction(1, 4), Fraction(1, 4))
#: A share of ε below the least any sample-and-aggregate mechanism receives (the person count
#: 1/10, logistic's spread 9/40, the means >= 63/100 with the winsorised mean's quartiles, which
#: are permute-and-flip selections no ε > 0 refuses): the plan checks the noise at this share.
BLOCK_NOISE_SHARE: Final = Fraction(1, 16)


@dataclass(frozen=True)
class FitRequest:
    """A model asked for by name: SQL ``REGRESS``/``LOGISTIC``
    (:mod:`dpcurator.query.frontend.fit`), ``POST /v1/datasets/{id}/fits`` and ``dpcurator fit``.
    Every field is public; the budget is given separately.

    ``kind`` is ``linear_regression`` or ``logistic_regression``; ``y`` the response and ``x``
    the features; ``coef_bound`` the public box [-b, b] of every logistic coefficient in data
    units, or None (the default) for |θ| <= :data:`DEFAULT_COEFFICIENT_BOUND` in standardised
    units (:func:`standardised_box`); ``method`` and ``blocks`` choose the logistic route
    (:func:`plan_fit`), or ``method="l1"`` makes a linear regression the robust PTR L1
    regression, whose ``coef_bound`` is required (no default box: a linear coefficient's scale
    is the response's over the feature's).
    """

    kind: Literal["linear_regression", "logistic_regression"]
    y: str
    x: tuple[str, ...]
    fit_intercept: bool = True
    coef_bound: float | None = None
    method: str | None = None
    blocks: int | None = None

    def plan(self, metadata: Metadata, *, epsilon: float, delta: float) -> FitPlan:
        """The :func:`plan_fit` of this request (refusals free)."""
        if self.kind == "linear_regression" and self.method == "l1":
            if self.coef_bound is None:
                raise fail(
                    OWNER, "coef_bound", "a public coefficient bound b for method 'l1' (every "
                    "coefficient in [-b, b], in data units)", None,
                )  # fmt: skip
            bound = check_positive(OWNER, "coef_bound", self.coef_bound)
            return plan_fit(
                metadata, self.kind, epsilon=epsilon, delta=delta, y=self.y, x=self.x,
                fit_intercept=self.fit_intercept, lower=-bound, upper=bound, method="l1",
                blocks=self.blocks,
            )  # fmt: skip
        if self.kind == "linear_regression":
            return plan_fit(
                metadata, self.kind, epsilon=epsilon, delta=delta, y=self.y, x=self.x,
                fit_intercept=self.fit_intercept,
            )  # fmt: skip
        if not self.fit_intercept:
            raise fail(OWNER, "fit_intercept", f"True for {self.kind}", self.fit_intercept)
        lower: object
        upper: object
        if self.coef_bound is None:
            features = numeric_columns(metadata, column_names("x", self.x))
            lower, upper = standardised_box(features, DEFAULT_COEFFICIENT_BOUND)
        else:
            bound = check_positive(OWNER, "coef_bound", self.coef_bound)
            lower, upper = -bound, bound
        return plan_fit(
            metadata, self.kind, epsilon=epsilon, delta=delta, y=self.y, x=self.x,
            lower=lower, upper=upper, method=self.method, blocks=self.blocks,
        )  # fmt: skip

    def describe(self) -> str:
        """The request as one line (the ledger's query text, and its replay fingerprint)."""
        options = [] if self.fit_intercept else ["no intercept"]
        if self.kind == "logistic_regression" or self.method == "l1":
            options.append(f"coef_bound={self.coef_bound!r}")
        options.extend(
            f"{name}={value!r}"
            for name, value in (("method", self.method), ("blocks", self.blocks))
            if value is not None
        )
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
    method: str | None = None,
    max_rows: int | None = None,
) -> FitPlan:
    """The plan of a fit, from the request and the metadata only (refusals charge nothing).

    ``y``/``x`` name the response and feature columns (``mle``: ``y`` is the data column;
    ``sample_and_aggregate``: ``x`` are the columns passed to ``estimator``). ``lower``/``upper``
    bound the estimated parameters (logistic coefficients, MLE parameters, the user function's
    output, the L1 regression's coefficients); they are public, like the columns' bounds in
    the metadata. ``method``: ``"l1"`` makes a linear regression ``ptr_regression``; (logistic
    regression): ``objective_perturbation`` (the default; ``lower``/``upper`` clamp the
    release, default |θ| <= :data:`DEFAULT_COEFFICIENT_BOUND` in standardised units)
    or ``sample_and_aggregate``; ``blocks`` fixes the number of blocks
    of a sample-and-aggregate fit (default: chosen from a noisy count of persons) and
    ``max_rows`` caps the rows it fetches from the engine (default
    :data:`~dpcurator.query.fit.rows.DEFAULT_MAX_ROWS`; :mod:`dpcurator.query.fit.rows`).
    """
    eps = check_epsilon(OWNER, epsilon)
    features = column_names("x", x)
    kind, method = ("ptr_regression", None) if (kind, method) == L1_ROUTE else (kind, method)
    chosen = _method(kind, method, blocks, len(features))
    if max_rows is not None and (kind == "linear_regression" or chosen == METHODS[0]):
        raise fail(OWNER, "max_rows", "None without blocks (the cap is the blocks')", max_rows)
    if kind == "ptr_regression":
        return plan_ptr(
            metadata, required_column("y", y), features, epsilon=eps, delta=delta, lower=lower,
            upper=upper, blocks=blocks, max_rows=max_rows, fit_intercept=fit_intercept,
        )  # fmt: skip
    if kind == "linear_regression":
        response = required_column("y", y)
        return plan_linear(
            metadata, response, x=features, epsilon=eps, delta=delta, fit_intercept=fit_intercept
        )
    if chosen == "objective_perturbation":
        return _plan_perturbed(
            metadata, required_column("y", y), features, eps, delta=delta, bounds=(lower, upper)
        )
    if delta != 0:
        raise fail(OWNER, "delta", f"0 for {kind} by sample-and-aggregate (ε-DP)", delta)
    # one neighbour is `steps` add/remove steps of the estimator's unit (a person when the
    # blocks are keyed by person ids, else a row): run at ε/steps (group privacy)
    steps = metadata.unit.estimator_steps(keyed_by_person=True)
    inner = eps / steps
    if kind == "logistic_regression":
        if not features:
            raise fail(OWNER, "x", "at least one feature column", list(features))
        metas = (
            *numeric_columns(metadata, features),
            label_column(metadata, required_column("y", y)),
        )
        box = parameter_box(lower, upper, len(features) + 1)
        rows = metadata.unit.rows
        run = _logistic(metas[:-1], box, rows=rows, method=str(chosen), blocks=blocks)
        terms = ("intercept", *features)
    elif kind == "mle":
        if model not in MODELS:
            raise fail(OWNER, "model", f"one of {', '.join(sorted(MODELS))}", model)
        metas = numeric_columns(metadata, (required_column("y", y),))
        box = parameter_box(lower, upper, len(MODELS[model].parameters))
        run = _mle(str(model), box, blocks)
        terms = MODELS[str(model)].parameters
    else:
        if not callable(estimator):
            raise fail(OWNER, "estimator", "a function of a block of rows", estimator)
        if not features:
            raise fail(OWNER, "x", "at least one column", list(features))
        metas = numeric_columns(metadata, features)
        box = parameter_box(lower, upper, None)
        run = _user(estimator, box, blocks)
        terms = tuple(f"theta_{i}" for i in range(box.dimension))
    width = _check_block_noise(inner, box)
    sample = block_sample(metadata, blocks, max_rows)
    finish = rows_finish(metadata, metas, run, inner, sample)
    columns = tuple(m.name for m in metas)
    exact = rows_plan(metadata, metas, sample)
    statistic = "the sum of the block estimates"
    return FitPlan(kind, columns, PureDP(eps), exact, finish, terms, statistic, width * steps)


def _method(kind: str, method: str | None, blocks: int | None, features: int) -> str | None:
    """The logistic method (None for other kinds), after the checks every kind shares."""
    if kind not in FIT_KINDS:
        raise fail(OWNER, "kind", f"one of {', '.join(FIT_KINDS)}", kind)
    if method is not None and kind != "logistic_regression":
        raise fail(OWNER, "method", f"None for {kind} (methods are logistic_regression's)", method)
    check_at_most(f"The number of {kind} features", features, "MAX_FIT_FEATURES", MAX_FIT_FEATURES)
    if blocks is not None:
        check_int(OWNER, "blocks", blocks, minimum=1)
        check_at_most("The number of blocks", blocks, "MAX_FIT_BLOCKS", MAX_FIT_BLOCKS)
        if kind == "linear_regression":
            raise fail(OWNER, "blocks", "None for linear_regression (AdaSSP)", blocks)
    if kind != "logistic_regression":
        return None
    chosen = METHODS[0] if method is None else method
    if chosen not in METHODS:
        raise fail(OWNER, "method", f"one of {', '.join(METHODS)}", method)
    if chosen == "objective_perturbation" and blocks is not None:
        raise fail(OWNER, "blocks", "None with objective perturbation (blocks are "
                   "method='sample_and_aggregate''s)", blocks)  # fmt: skip
    return chosen


def _plan_perturbed(
    metadata: Metadata,
    y: str,
    features: tuple[str, ...],
    epsilon: Fraction,
    *,
    delta: float,
    bounds: tuple[object, object],
) -> FitPlan:
    """Logistic regression by objective perturbation: ε-DP, or (ε, δ)-DP with δ > 0; its
    calibration (ridge, noise, Hessian noise) is built here, so any refusal is free."""
    check_probability(OWNER, "delta", delta, open_high=True)
    if not features:
        raise fail(OWNER, "x", "at least one feature column", list(features))
    metas = (*numeric_columns(metadata, features), label_column(metadata, y))
    size, rows = len(features) + 1, metadata.unit.rows_changed
    if bounds[0] is None and bounds[1] is None:  # the default public box, as FitRequest's
        bounds = standardised_box(metas[:-1], DEFAULT_COEFFICIENT_BOUND)
    box = parameter_box(*bounds, size)
    _calibrated(lambda: Perturbation.of(
        epsilon, delta, size, rows_per_person=rows, jacobian_share=OP_SHARES[0],
        hessian_share=OP_SHARES[1]))  # fmt: skip
    run = _logistic(metas[:-1], box, rows=rows, method="objective_perturbation", delta=delta)
    cost: PureDP | ApproxDP = ApproxDP(epsilon, delta) if delta > 0 else PureDP(epsilon)
    finish = rows_finish(metadata, metas, run, epsilon)
    columns = tuple(m.name for m in metas)
    statistic = "the objective's gradient (objective perturbation)"
    return FitPlan(
        "logistic_regression", columns, cost, rows_plan(metadata, metas), finish,
        ("intercept", *features), statistic, float(rows),
    )  # fmt: skip


def standardised_box(features: Sequence[ColumnMeta], bound: float) -> tuple[FloatArray, FloatArray]:
    """The data-unit box of logistic coefficients (intercept first) with |θ_j| <= ``bound`` in
    standardised units, u_j = (x_j - m_j)/h_j the feature rescaled to [-1, 1] by its public
    bounds (midpoint m_j, half range h_j): β_j = θ_j/h_j and β_0 = θ_0 - Σ_j θ_j m_j/h_j, so
    |β_j| <= bound/h_j and |β_0| <= bound·(1 + Σ_j |m_j|/h_j). A bound in standardised units
    limits the logit's change over each feature's half range whatever the feature's units."""
    mids = np.array([(float(m.lower or 0) + float(m.upper or 0)) / 2 for m in features])
    halves = np.array([(float(m.upper or 0) - float(m.lower or 0)) / 2 for m in features])
    intercept = 1 + float(np.sum(np.abs(mids) / halves))
    high: FloatArray = bound * np.concatenate([[intercept], 1 / halves])
    return -high, high


def _calibrated(build: Callable[[], object]) -> None:
    """Build a mechanism's calibration at plan time: a scale out of the exact samplers' range
    is refused here, free, naming ε (the same construction would fail after the charge)."""
    try:
        build()
    except DPError as exc:
        raise fail(
            OWNER, "epsilon", f"large enough for the fit's noise ({exc})", "too small"
        ) from None


def _check_block_noise(epsilon: Fraction, box: Box) -> float:
    """The L1 width of the parameter box (the sum of block estimates' sensitivity), after
    checking every sample-and-aggregate noise scale at one block and :data:`BLOCK_NOISE_SHARE`
    of ε (each mechanism's largest scale: a finer split of blocks or ε only shrinks it)."""
    with np.errstate(over="ignore"):
        width = float(np.sum(box.upper - box.lower))
    if not math.isfinite(width):
        raise fail(OWNER, "upper", "a parameter box of finite total width (sum of upper - "
                   "lower)", "an overflowing width")  # fmt: skip
    sensitivity = Fraction(max(width, box.dimension + 1))
    _calibrated(
        lambda: Laplace.for_epsilon_floats(epsilon * BLOCK_NOISE_SHARE, sensitivity, box.dimension)
    )
    return width


# ----------------------------------------------------------------------------------------------
# Sample-and-aggregate estimators on the fetched bounded rows


def _logistic(
    features: Sequence[ColumnMeta],
    box: Box | None,
    *,
    rows: int,
    method: str,
    blocks: int | None = None,
    delta: float = 0.0,
) -> Run:
    """Objective perturbation (each person's ``rows`` bound the gradient and Hessian shifts;
    the shares of ε are :data:`OP_SHARES`, as planned) or sample-and-aggregate."""
    x_low = [m.lower for m in features]
    x_high = [m.upper for m in features]
    low, high = (None, None) if box is None else (box.lower, box.upper)

    def run(table: FloatArray, person: Any, alpha: float, eps: Fraction, rng: Rng) -> Estimate:
        return logistic_regression(
            table[:, :-1], table[:, -1], epsilon=float(eps), x_lower=x_low, x_upper=x_high,
            coef_lower=low, coef_upper=high, blocks=blocks, person=person, delta=delta,
            alpha=alpha, rng=rng, method=method, rows_per_person=rows,
            jacobian_share=float(OP_SHARES[0]), hessian_share=float(OP_SHARES[1]),
        )  # fmt: skip

    return run


def _mle(model: str, box: Box, blocks: int | None) -> Run:
    def run(table: FloatArray, person: Any, alpha: float, eps: Fraction, rng: Rng) -> Estimate:
        return dp_mle(
            model, table[:, 0], epsilon=float(eps), lower=box.lower, upper=box.upper,
            blocks=blocks, person=person, alpha=alpha, rng=rng,
        )  # fmt: skip

    return run


def _user(estimator: BlockEstimator, box: Box, blocks: int | None) -> Run:
    def run(table: FloatArray, person: Any, alpha: float, eps: Fraction, rng: Rng) -> Estimate:
        return sample_and_aggregate(
            estimator, table, epsilon=float(eps), lower=box.lower, upper=box.upper,
            blocks=blocks, person=person, alpha=alpha, rng=rng,
        )  # fmt: skip

    return run


class FitSession(Protocol):
    """What a fit needs of the :class:`~dpcurator.query.session.Session` it runs on: the public
    metadata, the randomness and the charge-then-compute step (the session calls the fits, so
    they take it through this protocol rather than importing it)."""

    @property
    def metadata(self) -> Metadata: ...
    @property
    def rng(self) -> Rng | None: ...
    def compute_exact(
        self, plans: Sequence[ir.AggregatePlan], event: PrivacyEvent, *, description: str
    ) -> list[ir.ExactResult]: ...


def run_fit(session: FitSession, plan: FitPlan, alpha: float) -> Estimate:
    """Charge the plan's cost, let the engine compute, then post-process (total after the charge).

    :meth:`Session.compute_exact <dpcurator.query.session.Session.compute_exact>` checks the
    engine plan (free), reserves and commits the event, and computes; the estimator then runs on
    the exact result under the same constant-error rule as every release.
    """
    rng = session.rng or default_rng()
    exact = seeded(plan.exact, rng)
    (result,) = session.compute_exact([exact], plan.event, description=plan.describe())
    return after_charge(lambda: plan.finish(result, alpha, rng))
