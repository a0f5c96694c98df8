"""Model fits as tables: what SQL (``SELECT REGRESS(...)``), the HTTP API and the CLI release.

A fit (:mod:`dpcurator.query.fit`) releases an :class:`~dpcurator.estimators.release.Estimate`:
a vector of coefficients with their (1-α) intervals, or NR ("no reply", Dwork & Lei 2009). Here it
becomes a :class:`~dpcurator.query.release.Release` keyed by the public ``term`` names
(``intercept``, then the features), with one value column ``coefficient``, so a fit reads,
prints and serialises like every query. The term names come from the plan (public); an NR is a
release with no rows (the decision to answer is itself DP, and its cost stands).

:func:`fit_dict` adds what the table alone does not say: the method and paper, whether the
intervals cover the privacy noise only or also the sampling (``covers``), and ``replied``.
:func:`estimate_fit` is the free estimate-before-spend: the cost and the terms, from public inputs
only. Its half-widths are None: a coefficient's interval depends on the data (XᵀX, or the spread
of the block estimates), which nothing public bounds usefully.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dpcurator._validation import fail
from dpcurator.core.measures import ApproxDP
from dpcurator.estimators.release import Estimate
from dpcurator.query.fit import FitPlan, FitRequest, run_fit
from dpcurator.query.release import Estimate as Value
from dpcurator.query.release import MechanismUse, Release, ValueColumn

if TYPE_CHECKING:
    from dpcurator.query.session import Session

#: The group column and the value column of a fit's table.
TERM, COEFFICIENT = "term", "coefficient"


def fit_table(plan: FitPlan, fit: Estimate) -> Release:
    """The fit as a table: one row per term (none for NR), each coefficient with its CI."""
    rows: list[tuple[tuple[str], tuple[Value]]] = []
    if fit.value is not None:
        lows = fit.ci_low if fit.ci_low is not None else [None] * len(plan.terms)
        highs = fit.ci_high if fit.ci_high is not None else [None] * len(plan.terms)
        for term, value, low, high in zip(plan.terms, fit.value, lows, highs, strict=True):
            interval = (None, None) if low is None or high is None else (float(low), float(high))
            rows.append(((term,), (Value(float(value), *interval),)))
    cost = plan.cost
    mechanism = MechanismUse(
        column=COEFFICIENT,
        statistic=plan.statistic,
        mechanism=fit.method,
        scale=None,
        sensitivity=plan.sensitivity,
        epsilon=cost.epsilon,
        delta=cost.delta if isinstance(cost, ApproxDP) else Fraction(0),
    )
    return Release(
        (TERM,),
        (COEFFICIENT,),
        tuple(rows),
        cost,
        (mechanism,),
        fit.alpha,
        (ValueColumn(COEFFICIENT, COEFFICIENT, "coefficient"),),
    )


def fit_dict(plan: FitPlan, fit: Estimate) -> dict[str, Any]:
    """The JSON form of a fit: its table's (:meth:`Release.to_dict`) plus ``model``, ``terms``,
    ``replied`` (False for NR), ``method`` and ``covers`` (``noise`` or ``noise+sampling``)."""
    return {
        **fit_table(plan, fit).to_dict(),
        "model": plan.kind,
        "terms": list(plan.terms),
        "replied": fit.replied,
        "method": fit.method,
        "covers": None if fit.covers is None else fit.covers.value,
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
    session: Session, request: FitRequest, *, epsilon: float, delta: float, alpha: float
) -> dict[str, Any]:
    """Plan (free refusals), charge through the session's filter, fit: :func:`fit_dict`."""
    plan = request.plan(session.metadata, epsilon=epsilon, delta=delta)
    return fit_dict(plan, run_fit(session, plan, alpha))


def release_fit(
    session: Session,
    request: FitRequest,
    *,
    epsilon: float | None,
    delta: float,
    alpha: float,
    accuracy: object,
) -> Release:
    """:meth:`Session.sql <dpcurator.query.session.Session.sql>` of a ``REGRESS``/``LOGISTIC``
    query: the fit's table. Accuracy targets are refused (free): a coefficient's interval
    depends on the data, so no public ε meets a target."""
    if accuracy is not None or epsilon is None:
        raise fail("Session.sql", "accuracy", f"None for {request.kind}; give epsilon", accuracy)
    plan = request.plan(session.metadata, epsilon=epsilon, delta=delta)
    return fit_table(plan, run_fit(session, plan, alpha))


__all__ = ["COEFFICIENT", "TERM", "estimate_fit", "fit_dict", "fit_on", "fit_table"]
