"""Hypothesis tests as releases: what SQL (``SELECT TTEST(x, g) FROM t``), the HTTP API and the
CLI return.

A test (:mod:`dpcurator.query.hypothesis.plan`) gives a
:class:`~dpcurator.estimators.hypothesis.core.HypothesisTestResult`; here it becomes a
:class:`TestRelease`: a :class:`~dpcurator.query.release.core.Release` keyed by a public
``figure`` name (``statistic``, ``p_value``, ``estimate``, then every released noisy statistic by
cell, e.g. ``n[a]``, ``mean[a]``), with one value column ``value`` and no intervals, so it reads
and serialises like every query; :meth:`TestRelease.to_dict` adds a ``test`` object (the test's
name, H0, method, statistic, p-value, estimate, simulations, released statistics and noise
scales) and ``print`` shows the test's report. Every figure is a noisy release or
post-processing of one: publishable.

:func:`plan_test_sql` refuses, free, what a test cannot honour (``accuracy``: no public ε meets a
p-value target; ``noise``/``rho``: tests use discrete Laplace noise at ε; ``clipping``; δ > 0: a
test is ε-DP), :func:`release_test` charges through the session's filter, and
:func:`estimate_test_sql` is the free estimate-before-spend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dpcurator._validation import fail
from dpcurator.errors import UnsupportedQueryError
from dpcurator.estimators.hypothesis.core import HypothesisTestResult
from dpcurator.estimators.hypothesis.moments import WEIGHTS
from dpcurator.query.fit.core import FitSession
from dpcurator.query.frontend.hypothesis import parse_test_sql
from dpcurator.query.hypothesis.plan import FUNCTION, TestPlan, plan_test
from dpcurator.query.plan.clipping import refuse_clipping
from dpcurator.query.release.after_charge import after_charge
from dpcurator.query.release.core import Release
from dpcurator.query.release.estimate import CostEstimate, MechanismUse, ValueColumn
from dpcurator.query.release.estimate import Estimate as Value
from dpcurator.query.schema import Metadata
from dpcurator.random import default_rng

#: The group column and the value column of a test's table.
FIGURE, VALUE = "figure", "value"
OWNER_SQL = "Session.sql"


@dataclass(frozen=True)
class TestRelease(Release):
    """A test's release: the table of figures, and the test's result (``result``)."""

    __test__ = False  # not a pytest class

    result: HypothesisTestResult | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The table's JSON form (:meth:`Release.to_dict`) plus ``test``: the test's name, H0,
        method, statistic, p-value, estimate, simulations M, the released statistics and their
        noise scales, and further figures (``extra``)."""
        base = super().to_dict()
        result = self.result
        if result is None:
            return base
        test = {
            "name": result.test,
            "null": result.null,
            "method": result.method,
            "statistic": result.statistic,
            "p_value": result.p_value,
            "estimate": result.estimate,
            "simulations": result.simulations,
            "released": {name: list(values) for name, values in result.released.items()},
            "noise": dict(result.noise),
            "extra": dict(result.extra),
        }
        return {**base, "test": test}

    def summary(self, max_lines: int | None = None) -> str:
        """The test's report (:meth:`HypothesisTestResult.summary`)."""
        return super().summary(max_lines) if self.result is None else self.result.summary()


def tabulate_test(plan: TestPlan, result: HypothesisTestResult, alpha: float) -> TestRelease:
    """The result as a table of figures (module docstring)."""
    figures: list[tuple[str, float]] = [
        ("statistic", result.statistic),
        ("p_value", result.p_value),
    ]
    if result.estimate is not None:
        figures.append(("estimate", result.estimate))
    figures += list(result.extra.items())
    for name, values in result.released.items():
        labels = plan.labels if len(plan.labels) == len(values) else range(len(values))
        figures += [(f"{name}[{label}]", v) for label, v in zip(labels, values, strict=True)]
    rows = tuple(((name,), (Value(float(value), None, None),)) for name, value in figures)
    clamped = plan.request.kind in ("t", "anova")
    column = ValueColumn(VALUE, VALUE, "test", covers=None, clamped=clamped)
    mechanisms = _mechanisms(plan, result.noise)
    return TestRelease(
        (FIGURE,), (VALUE,), rows, plan.cost, mechanisms, alpha, (column,), result=result
    )


def _mechanisms(plan: TestPlan, noise: Mapping[str, float]) -> tuple[MechanismUse, ...]:
    """The record of the discrete Laplace draws: the three moment vectors at their shares of ε,
    or the one vector of cell counts at ε, with their sensitivities (public) and scales (the
    result's ``noise``; before a release, sensitivity / ε-share)."""
    eps = plan.cost.epsilon
    if plan.request.kind in ("t", "anova"):
        names: Sequence[str] = ("n", "sum", "sum of centred squares")
        shares: Sequence[Fraction] = WEIGHTS
    else:
        names, shares = ("cell counts",), (Fraction(1),)
    given = list(noise.values())
    uses = []
    for index, (name, share) in enumerate(zip(names, shares, strict=True)):
        sensitivity = plan.sensitivities[index]
        scale = given[index] if given else sensitivity / float(eps * share)
        uses.append(MechanismUse(VALUE, name, "discrete Laplace", scale, sensitivity, eps * share))
    return tuple(uses)


def plan_test_sql(
    query: object,
    metadata: Metadata,
    *,
    epsilon: float | None,
    delta: float,
    options: Mapping[str, object],
) -> TestPlan | None:
    """The plan of a test query (None when ``query`` calls no test: an ordinary query), given
    the options of :meth:`Session.sql <dpcurator.query.session.Session.sql>`: all refused, free,
    but ε (module docstring)."""
    request = parse_test_sql(query, metadata)
    if request is None:
        return None
    function = FUNCTION[request.kind]
    refuse_clipping(options.get("clipping"), "a hypothesis test")
    if options.get("noise") is not None or options.get("rho") is not None:
        raise UnsupportedQueryError(
            f"{function} releases its statistics with discrete Laplace noise at epsilon: drop "
            "noise and rho, and give epsilon."
        )
    accuracy = options.get("accuracy")
    if accuracy is not None or epsilon is None:
        raise fail(OWNER_SQL, "accuracy", f"None for {function}; give epsilon", accuracy)
    if delta:
        raise fail(OWNER_SQL, "delta", f"0 for {function} (an ε-DP test)", delta)
    return plan_test(metadata, request, epsilon=epsilon)


def release_test(session: FitSession, plan: TestPlan, alpha: float) -> TestRelease:
    """Charge the plan's ε through the session's filter, let the engine compute the exact
    statistics, then add the noise and test (total after the charge). The session comes through
    the fits' protocol (metadata, rng, ``compute_exact``), not by importing it."""
    rng = session.rng or default_rng()
    (result,) = session.compute_exact([plan.exact], plan.event, description=plan.describe())
    return after_charge(lambda: tabulate_test(plan, plan.finish(result, rng), alpha))


@dataclass(frozen=True)
class TestCostEstimate(CostEstimate):
    """The estimate of a test asked for in SQL: its cost (``ci_halfwidths`` None: a test has
    no interval) and the ``test`` it runs."""

    __test__ = False  # not a pytest class

    test: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The estimate's JSON form with ``test``."""
        return {**super().to_dict(), "test": self.test}


def estimate_test_sql(plan: TestPlan, alpha: float) -> TestCostEstimate:
    """:meth:`Session.estimate <dpcurator.query.session.Session.estimate>` of a test query:
    its ε and mechanisms from public inputs; nothing runs."""
    return TestCostEstimate(
        plan.cost.labelled("cost"), _mechanisms(plan, {}), {VALUE: None}, alpha,
        test=plan.describe(),
    )  # fmt: skip


__all__ = [
    "FIGURE",
    "VALUE",
    "TestCostEstimate",
    "TestRelease",
    "estimate_test_sql",
    "plan_test_sql",
    "release_test",
    "tabulate_test",
]
