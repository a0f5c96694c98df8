"""Model fits as tables: what SQL (``SELECT REGRESS(...)``), the HTTP API and the CLI release.

A fit (:mod:`dpcurator.query.fit.core`) releases an :class:`~dpcurator.estimators.release.Estimate`:
a vector of coefficients with their (1-α) intervals, or NR ("no reply", Dwork & Lei 2009). Here it
becomes a :class:`~dpcurator.query.release.core.Release` keyed by the public ``term`` names
(``intercept``, then the features), with the value columns ``coefficient`` and ``p_value`` (the
Wald test of H0: coefficient = 0 under the noise, :mod:`dpcurator.estimators.wald`), so a fit
reads, prints and serialises like every query. The term names come from the plan (public); an
NR is a release with no rows (the decision to answer is itself DP, and its cost stands).

:func:`fit_dict` adds what the table alone does not say: the method and paper, whether the
intervals cover the privacy noise only or also the sampling (``covers``), and ``replied``.
:func:`estimate_fit` (``fits:estimate``) and :func:`estimate_fit_sql` (:meth:`Session.estimate
<dpcurator.query.session.Session.estimate>` of fit SQL, so ``queries:estimate``) are the free
estimate-before-spend: the cost and the terms, from public inputs only. Their half-widths are
None: a coefficient's interval depends on the data (XᵀX, or the spread of the block estimates),
which nothing public bounds usefully.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpcurator._validation import fail
from dpcurator.core.measures import ApproxDP
from dpcurator.errors import UnsupportedQueryError
from dpcurator.estimators.release import Estimate
from dpcurator.estimators.wald import wald_test
from dpcurator.query.fit.core import FitRequest, FitSession, run_fit
from dpcurator.query.fit.rows import FitPlan
from dpcurator.query.frontend.fit import parse_fit_sql
from dpcurator.query.plan.clipping import refuse_clipping
from dpcurator.query.release.core import Release
from dpcurator.query.release.estimate import CostEstimate, MechanismUse, ValueColumn
from dpcurator.query.release.estimate import Estimate as Value
from dpcurator.query.schema import Metadata

#: The group column and the value columns of a fit's table (``p_value``: the Wald test of H0:
#: coefficient = 0, :mod:`dpcurator.estimators.wald`).
TERM, COEFFICIENT, P_VALUE = "term", "coefficient", "p_value"


def fit_table(plan: FitPlan, fit: Estimate) -> Release:
    """The fit as a table: one row per term (none for NR), each coefficient with its CI and
    the Wald p-value of H0: coefficient = 0 (NaN where no test applies: :func:`wald_test`)."""
    rows: list[tuple[tuple[str], tuple[Value, Value]]] = []
    if fit.value is not None:
        lows = fit.ci_low if fit.ci_low is not None else [None] * len(plan.terms)
        highs = fit.ci_high if fit.ci_high is not None else [None] * len(plan.terms)
        wald = wald_test(fit)
        tests = [math.nan] * len(plan.terms) if wald is None else wald.p_value.tolist()
        for term, value, low, high, p in zip(
            plan.terms, fit.value, lows, highs, tests, strict=True
        ):
            interval = (None, None) if low is None or high is None else (float(low), float(high))
            rows.append(((term,), (Value(float(value), *interval), Value(float(p), None, None))))
    bound = () if fit.at_bound is None or not rows else tuple(bool(b) for b in fit.at_bound)
    return Release(
        (TERM,),
        (COEFFICIENT, P_VALUE),
        tuple(rows),
        plan.cost,
        (_mechanism(plan, fit.method),),
        fit.alpha,
        (_column(fit), ValueColumn(P_VALUE, COEFFICIENT, "test", covers=None)),
        warnings=_box_warning(plan.terms, bound),
        at_bound=bound,
    )


def _box_warning(terms: tuple[str, ...], bound: tuple[bool, ...]) -> tuple[str, ...]:
    """The warning naming the terms whose value or interval the public box clamped (none when
    no box applies: ``bound`` is then empty)."""
    if not bound:
        return ()
    names = [term for term, hit in zip(terms, bound, strict=True) if hit]
    if not names:
        return ()
    return (
        f"the public coefficient box clamped the value or interval of {', '.join(names)} "
        "(at_box_bound): the estimate may lie outside the box, so these numbers show the box's "
        "edge, not the data; widen the box (coef_bound, or lower/upper) or spend more ε",
    )


def _column(fit: Estimate) -> ValueColumn:
    """The coefficient column: what its interval covers (the estimator's), columns clamped."""
    covers = None if fit.covers is None else fit.covers.value
    return ValueColumn(COEFFICIENT, COEFFICIENT, "coefficient", covers=covers, clamped=True)


def _mechanism(plan: FitPlan, method: str) -> MechanismUse:
    """The record of the fit's mechanism (its scale is the estimator's, not one number)."""
    cost = plan.cost
    return MechanismUse(
        column=COEFFICIENT,
        statistic=plan.statistic,
        mechanism=method,
        scale=None,
        sensitivity=plan.sensitivity,
        epsilon=cost.epsilon,
        delta=cost.delta if isinstance(cost, ApproxDP) else Fraction(0),
    )


@dataclass(frozen=True)
class FitCostEstimate(CostEstimate):
    """The estimate of a fit asked for in SQL: a :class:`CostEstimate` (``ci_halfwidths`` None:
    data-dependent) that also names the ``model`` and its ``terms``."""

    model: str = ""
    terms: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The estimate's JSON form with ``model`` and ``terms``."""
        return {**super().to_dict(), "model": self.model, "terms": list(self.terms)}


def fit_dict(plan: FitPlan, fit: Estimate) -> dict[str, Any]:
    """The JSON form of a fit: its table's (:meth:`Release.to_dict`) plus ``model``, ``terms``,
    ``replied`` (False for NR), ``method``, ``covers`` (``noise`` or ``noise+sampling``) and
    ``at_box_bound`` (per term, whether the public box clamped it; None without a box) and
    ``wald`` (per term, the Wald ``z`` and ``p_value`` of H0: coefficient = 0, None where no
    test applies; None for NR or a noise-only interval: :mod:`dpcurator.estimators.wald`)."""
    wald = wald_test(fit)
    return {
        **fit_table(plan, fit).to_dict(),
        "wald": None
        if wald is None
        else {
            term: None if math.isnan(z) else {"z": z, "p_value": p}
            for term, z, p in zip(plan.terms, wald.z.tolist(), wald.p_value.tolist(), strict=True)
        },
        "model": plan.kind,
        "terms": list(plan.terms),
        "replied": fit.replied,
        "method": fit.method,
        "covers": _column(fit).covers,
        "at_box_bound": None
        if fit.at_bound is None or fit.value is None
        else {term: bool(hit) for term, hit in zip(plan.terms, fit.at_bound, strict=True)},
    }


def estimate_fit(plan: FitPlan, alpha: float) -> dict[str, Any]:
    """What a fit would cost, from public inputs only (nothing runs, nothing is charged)."""
    cost = plan.cost if isinstance(plan.cost, ApproxDP) else plan.cost.to_approx()
    return {
        "model": plan.kind,
        "terms": list(plan.terms),
        "cost": {
            "epsilon": float(cost.epsilon),
            "delta": float(cost.delta),
            "epsilon_exact": str(cost.epsilon),
            "delta_exact": str(cost.delta),
        },
        "alpha": alpha,
        "ci_halfwidths": dict.fromkeys(plan.terms),
    }


def fit_on(
    session: FitSession, request: FitRequest, *, epsilon: float, delta: float, alpha: float
) -> dict[str, Any]:
    """Plan (free refusals), charge through the session's filter, fit: :func:`fit_dict`."""
    plan = request.plan(session.metadata, epsilon=epsilon, delta=delta)
    return fit_dict(plan, run_fit(session, plan, alpha))


def plan_fit_sql(
    query: object,
    metadata: Metadata,
    *,
    epsilon: float | None,
    delta: float,
    options: Mapping[str, object],
) -> FitPlan | None:
    """The plan of a ``REGRESS``/``LOGISTIC`` query (None when ``query`` is no fit: an ordinary
    query) given the options of :meth:`Session.sql <dpcurator.query.session.Session.sql>`
    (``clipping``, ``accuracy``, ``noise``, ``rho``): all refused (free) but ε and δ. A fit
    chooses its own noise and has no clipping report, and a coefficient's interval depends on
    the data, so no public ε meets an accuracy target."""
    request = parse_fit_sql(query, metadata) if isinstance(query, str) else None
    if request is None:
        return None
    refuse_clipping(options.get("clipping"), "a model fit")
    if options.get("noise") is not None or options.get("rho") is not None:
        raise UnsupportedQueryError(
            "Model fits (REGRESS, LOGISTIC) choose their own noise: drop noise and rho, "
            "and give epsilon (and delta)."
        )
    accuracy = options.get("accuracy")
    if accuracy is not None or epsilon is None:
        raise fail("Session.sql", "accuracy", f"None for {request.kind}; give epsilon", accuracy)
    return request.plan(metadata, epsilon=epsilon, delta=delta)


def release_fit(session: FitSession, plan: FitPlan, alpha: float) -> Release:
    """:meth:`Session.sql <dpcurator.query.session.Session.sql>` of a ``REGRESS``/``LOGISTIC``
    query (planned by :func:`plan_fit_sql`): the fit's table."""
    return fit_table(plan, run_fit(session, plan, alpha))


def estimate_fit_sql(plan: FitPlan, alpha: float) -> FitCostEstimate:
    """:meth:`Session.estimate <dpcurator.query.session.Session.estimate>` of a fit query: its
    cost, mechanism and terms from public inputs; the coefficient's half-width is None."""
    return FitCostEstimate(
        plan.cost.labelled("cost"),
        (_mechanism(plan, plan.kind),),
        {COEFFICIENT: None},
        alpha,
        model=plan.kind,
        terms=plan.terms,
    )


__all__ = [
    "COEFFICIENT",
    "P_VALUE",
    "TERM",
    "FitCostEstimate",
    "estimate_fit",
    "estimate_fit_sql",
    "fit_dict",
    "fit_on",
    "fit_table",
    "plan_fit_sql",
    "release_fit",
]
