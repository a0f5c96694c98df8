"""SQL calls that are a release of their own, asked for alone in a SELECT: the model fits
(``REGRESS``, ``LOGISTIC``: :mod:`dpcurator.query.fit.release`) and the hypothesis tests
(``TTEST``, ``ANOVA``, ``PROPTEST``, ``CHI2``, ``KS``: :mod:`dpcurator.query.hypothesis.release`).

:meth:`Session.sql <dpcurator.query.session.Session.sql>` and :meth:`Session.estimate
<dpcurator.query.session.Session.estimate>` ask :func:`plan_lone_call` first: a plan (refusals
free, from public inputs) when the text is such a call, None for an ordinary query.
"""

from __future__ import annotations

from collections.abc import Mapping

from dpcurator.query.fit.core import FitSession
from dpcurator.query.fit.release import estimate_fit_sql, plan_fit_sql, release_fit
from dpcurator.query.fit.rows import FitPlan
from dpcurator.query.hypothesis.plan import TestPlan
from dpcurator.query.hypothesis.release import estimate_test_sql, plan_test_sql, release_test
from dpcurator.query.release.core import Release
from dpcurator.query.release.estimate import CostEstimate
from dpcurator.query.schema import Metadata

LonePlan = FitPlan | TestPlan


def plan_lone_call(
    query: object,
    metadata: Metadata,
    *,
    epsilon: float | None,
    delta: float,
    options: Mapping[str, object],
) -> LonePlan | None:
    """The plan of a fit or test query, or None for an ordinary query."""
    fit = plan_fit_sql(query, metadata, epsilon=epsilon, delta=delta, options=options)
    if fit is not None:
        return fit
    return plan_test_sql(query, metadata, epsilon=epsilon, delta=delta, options=options)


def release_lone_call(session: FitSession, plan: LonePlan, alpha: float) -> Release:
    """Charge, compute and release the planned fit or test (its table)."""
    if isinstance(plan, TestPlan):
        return release_test(session, plan, alpha)
    return release_fit(session, plan, alpha)


def estimate_lone_call(plan: LonePlan, alpha: float) -> CostEstimate:
    """The free estimate of the planned fit or test (cost and mechanisms; no half-widths)."""
    if isinstance(plan, TestPlan):
        return estimate_test_sql(plan, alpha)
    return estimate_fit_sql(plan, alpha)
