"""What each Session verb runs and how its output becomes a :class:`~dpcurator.api.result.Result`.

Every function here receives a session whose filter is a :class:`~dpcurator.api.budget.Charging`
(so each reservation reaches the analyst's filter, converted exactly) and the resolved
:class:`~dpcurator.api.budget.Cost`; the algorithms themselves (:mod:`dpcurator.synth`,
:mod:`dpcurator.mining`, :mod:`dpcurator.interactive.pmw`,
:mod:`dpcurator.estimators.hypothesis`) state and prove their guarantees. The chi-square verbs
release their contingency counts through the session (``exact_marginals``: one charge, then the
engine's counts of the public cells, bounded per person by the metadata), add the tests' own
noise (:func:`~dpcurator.estimators.hypothesis.core.release_counts`) and compute the statistic
and p-value with the tests' post-processing (``*_from_table``).

**Guarantee of the test verbs.** Each row of the (bounded) table falls in at most one released
cell, so the count vector's sensitivity is the unit's: L1 ``count_l1(cells)`` under ε (discrete
Laplace, ε-DP) and Δ₂² ``count_l2_squared(cells)`` under ρ (discrete Gaussian, ρ-zCDP; Canonne,
Kamath & Steinke 2020), asked of ``metadata.unit`` whose per-person bounds the engine enforces;
rows outside the compared cells (another group of the z-test) fall in none. Statistic and
p-value are post-processing: the noise-aware parametric bootstrap of Gaboardi, Lim, Rogers &
Vadhan (2016) for χ², of Ferrando, Wang & Sheldon (2022) for the two proportions and the
binned Kolmogorov–Smirnov test (its cells: a group's key × a bin of public cut points). The
conformance matrix has a row for each (tests/test_privacy_matrix.py, ``session: ...``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from dpcurator._validation import check_int, fail
from dpcurator.accounting.events import PrivacyEvent, PureEvent, ZCDPEvent
from dpcurator.api.budget import Cost, total_cost
from dpcurator.api.result import Result
from dpcurator.estimators.hypothesis import (
    HypothesisTestResult,
    goodness_of_fit_from_table,
    independence_from_table,
)
from dpcurator.estimators.hypothesis.core import Setup, as_tuple, release_counts
from dpcurator.estimators.hypothesis.ks import ks_result
from dpcurator.estimators.hypothesis.means import check_alternative
from dpcurator.estimators.hypothesis.proportions import two_proportion_result
from dpcurator.interactive.pmw import PrivateMultiplicativeWeights
from dpcurator.mining import ID3, PCA, GaussianNB, KMeans
from dpcurator.query.hypothesis.plan import TestRequest, increasing_cuts, plan_test
from dpcurator.query.session import Session as QuerySession
from dpcurator.random import default_rng
from dpcurator.synth.aim import aim
from dpcurator.synth.common import SyntheticData
from dpcurator.synth.domain import SynthDomain
from dpcurator.synth.measure import exact_marginals
from dpcurator.synth.mst import mst
from dpcurator.synth.mwem import mwem

#: The synthesizers of :meth:`Session.synthesize <dpcurator.api.Session.synthesize>` and their
#: native guarantee (``zcdp``: ρ-zCDP, ``pure``: ε-DP).
SYNTHESIZERS = {"mst": "zcdp", "aim": "zcdp", "mwem": "pure"}


def synthetic(
    session: QuerySession, cost: Cost, method: str, options: dict[str, Any]
) -> SyntheticData:
    """Run synthesizer ``method`` at the resolved cost (its own free refusals first)."""
    if method == "mst":
        workload = options.pop("workload")
        if workload is not None:
            raise fail(
                "Session.synthesize", "workload", "left out for MST (it picks its own)", workload
            )
        return mst(session, rho=cost.rho, **options)
    if method == "aim":
        return aim(session, rho=cost.rho, **options)
    return mwem(session, epsilon=cost.epsilon, **options)


def synthetic_result(data: SyntheticData, events: list[PrivacyEvent]) -> Result:
    return Result(
        f"synthetic data ({data.method.upper()})",
        {"records": data.frame},
        total_cost(events),
        tuple(events),
        detail=data,
        frame=lambda r: r.detail.frame.copy(),
    )


def kmeans_result(model: KMeans, columns: Sequence[str], events: list[PrivacyEvent]) -> Result:
    centers = model.cluster_centers_
    return Result(
        "k-means",
        {"cluster_centers": centers, "iterations": model.n_iter_},
        total_cost(events),
        tuple(events),
        detail=model,
        frame=lambda _r: pd.DataFrame(centers, columns=list(columns)).rename_axis("cluster"),
    )


def pca_result(model: PCA, columns: Sequence[str], events: list[PrivacyEvent]) -> Result:
    values = {
        "components": model.components_,
        "explained_variance": model.explained_variance_,
        "mean": model.mean_,
    }

    def frame(_r: Result) -> pd.DataFrame:
        table = pd.DataFrame(model.components_, columns=list(columns)).rename_axis("component")
        table["explained_variance"] = model.explained_variance_
        return table

    return Result("PCA", values, total_cost(events), tuple(events), detail=model, frame=frame)


def naive_bayes_result(
    model: GaussianNB, columns: Sequence[str], events: list[PrivacyEvent]
) -> Result:
    values = {
        "classes": model.classes_,
        "class_prior": model.class_prior_,
        "theta": model.theta_,
        "var": model.var_,
    }

    def frame(_r: Result) -> pd.DataFrame:
        table = pd.DataFrame({"class": model.classes_, "prior": model.class_prior_})
        for j, name in enumerate(columns):
            assert model.theta_ is not None  # fitted
            assert model.var_ is not None
            table[f"mean_{name}"] = model.theta_[:, j]
            table[f"var_{name}"] = model.var_[:, j]
        return table

    return Result(
        "naive Bayes", values, total_cost(events), tuple(events), detail=model, frame=frame
    )


def tree_result(model: ID3, columns: Sequence[str], events: list[PrivacyEvent]) -> Result:
    rules = tree_rules(model, columns)
    return Result(
        "decision tree (ID3)",
        {"rules": rules, "levels": model.n_iter_},
        total_cost(events),
        tuple(events),
        detail=model,
        frame=lambda _r: pd.DataFrame(rules, columns=["conditions", "prediction"]),
    )


def tree_rules(model: ID3, columns: Sequence[str]) -> list[tuple[str, object]]:
    """The fitted tree as (conditions, predicted class) per leaf, left to right."""
    assert model.root_ is not None  # fitted
    assert model.keys_ is not None
    assert model.classes_ is not None
    keys, classes = model.keys_, model.classes_
    rules: list[tuple[str, object]] = []
    stack = [(model.root_, "")]
    while stack:
        node, path = stack.pop()
        if node.attribute is None or not node.children:
            rules.append((path or "(all rows)", classes[node.label].item()))
            continue
        name = columns[node.attribute]
        for value in sorted(node.children, reverse=True):
            test = f"{name} = {keys[node.attribute][value]!r}"
            stack.append((node.children[value], f"{path} and {test}" if path else test))
    return rules


def pmw_result(curator: PrivateMultiplicativeWeights, events: list[PrivacyEvent]) -> Result:
    return Result(
        "private multiplicative weights",
        {"noisy_rows": curator.noisy_size, "max_updates": curator.max_updates},
        total_cost(events),
        tuple(events),
        detail=curator,
    )


def hypothesis_setup(owner: str, session: QuerySession, cost: Cost, simulations: int) -> Setup:
    """The tests' public setup on a session table: the unit is the metadata's, whose per-person
    bounds the engine enforces (so a user-level unit is accepted here, unlike on arrays)."""
    draws = check_int(owner, "simulations", simulations, minimum=1)
    budget = cost.rho if cost.rho is not None else cost.epsilon
    assert budget is not None  # resolved: exactly one
    rng = session.rng or default_rng()
    return Setup(budget, cost.rho is not None, session.metadata.unit, draws, rng)


def chi_square(
    session: QuerySession,
    cost: Cost,
    columns: Sequence[str],
    probabilities: Sequence[float] | None,
    simulations: int,
) -> tuple[HypothesisTestResult, SynthDomain]:
    """Chi-square independence of two columns, or goodness of fit of one column to
    ``probabilities`` (one per public category), on the session's table."""
    owner = "Session.chi2"
    if isinstance(columns, str) or len(columns) != (1 if probabilities is not None else 2):
        wanted = "one column with probabilities" if probabilities is not None else "two columns"
        raise fail(owner, "columns", wanted, columns)
    domain = SynthDomain.from_metadata(session.metadata, list(columns))
    clique = domain.names
    domain.check_marginal(clique)
    p0 = None
    if probabilities is not None:
        p0 = np.asarray(probabilities, dtype=np.float64).reshape(-1)
        cells = domain.cells(clique)
        if p0.size != cells or not (np.all(np.isfinite(p0)) and np.all(p0 > 0)):
            raise fail(owner, "probabilities", f"{cells} finite values > 0", probabilities)
        p0 = p0 / p0.sum()
    plan = hypothesis_setup(owner, session, cost, simulations)
    event = ZCDPEvent(plan.budget) if plan.concentrated else PureEvent(plan.budget)
    counts = exact_marginals(session, domain, [clique], event, description=f"chi2 {clique}")
    table, noise = release_counts(plan, counts[clique])
    if p0 is not None:
        statistic, p = goodness_of_fit_from_table(table, noise, p0, plan)
        test, null = "chi-square goodness of fit", "the category probabilities are the given ones"
        name = "counts"
    else:
        statistic, p = independence_from_table(table, noise, plan)
        test, null = "chi-square independence", f"{clique[0]} and {clique[1]} are independent"
        name = "table (row-major)"
    result = HypothesisTestResult(
        test, statistic, p, plan.cost,
        "parametric bootstrap under the noise (Gaboardi et al. 2016)", null,
        {name: as_tuple(table)}, {name: noise.scale}, None, plan.simulations,
    )  # fmt: skip
    return result, domain


def two_proportions(  # noqa: PLR0917 (the test's public inputs)
    session: QuerySession,
    cost: Cost,
    outcome: str,
    by: str,
    groups: Sequence[object] | None,
    alternative: str,
    simulations: int,
) -> HypothesisTestResult:
    """Two-proportion z-test of H0: ``outcome`` (0/1 or bool, public keys) has the same rate of
    successes (1 or True) in the two ``groups`` of ``by`` (public keys; default: its two keys).
    The exact 2x2 table of those groups is noised as one release (the other groups' rows fall in
    no cell)."""
    owner = "Session.proportions_ztest"
    side = check_alternative(owner, alternative)
    domain = SynthDomain.from_metadata(session.metadata, [by, outcome])
    clique = domain.names
    by_keys, outcome_keys = (domain.column(name).keys for name in clique)
    if by_keys is None:
        raise fail(owner, "by", "a column with public keys", by)
    if outcome_keys is None or 1 not in outcome_keys or 0 not in outcome_keys:
        raise fail(owner, "outcome", "a column whose public keys hold 1 and 0 (or a bool)", outcome)
    chosen = list(by_keys if groups is None else groups)
    if len(chosen) != 2 or chosen[0] == chosen[1] or any(g not in by_keys for g in chosen):
        raise fail(owner, "groups", f"two distinct keys of {by!r} among {list(by_keys)}", groups)
    rows = [by_keys.index(g) for g in chosen]
    cells = [outcome_keys.index(1), outcome_keys.index(0)]
    plan = hypothesis_setup(owner, session, cost, simulations)
    event = ZCDPEvent(plan.budget) if plan.concentrated else PureEvent(plan.budget)
    counts = exact_marginals(session, domain, [clique], event, description=f"z-test {clique}")
    table, noise = release_counts(plan, counts[clique][np.ix_(rows, cells)])
    null = f"equal rates of {outcome} in {by} = {chosen[0]!r} and {chosen[1]!r} ({side})"
    return replace(two_proportion_result(table, noise, plan, side), null=null)


def kolmogorov_smirnov(  # noqa: PLR0917 (the test's public inputs)
    session: QuerySession,
    cost: Cost,
    column: str,
    by: str,
    cuts: Sequence[float],
    simulations: int,
) -> HypothesisTestResult:
    """Binned two-sample Kolmogorov–Smirnov test of ``column`` between the two public keys of
    ``by`` at the public ``cuts``: the engine's counts of the (key, bin) cells that SQL
    ``KS(x, g, c1, ...)`` plans (:mod:`dpcurator.query.hypothesis.plan`; its refusals are free),
    one charge, then the test's own noise at ε or ρ (module docstring: each row in one cell)."""
    owner = "Session.ks"
    try:
        numbers = tuple(float(c) for c in cuts)
    except (TypeError, ValueError):
        raise fail(owner, "cuts", "a sequence of increasing finite numbers", cuts) from None
    if not increasing_cuts(numbers):
        raise fail(owner, "cuts", "a sequence of increasing finite numbers", cuts)
    exact = plan_test(
        session.metadata, TestRequest("ks", column, by, numbers=numbers), epsilon=1.0
    ).exact  # fmt: skip  (the engine plan: no ε in it)
    plan = hypothesis_setup(owner, session, cost, simulations)
    event = ZCDPEvent(plan.budget) if plan.concentrated else PureEvent(plan.budget)
    (result,) = session.compute_exact([exact], event, description=f"ks {column} by {by}")
    cells = exact.group_keys or ()
    found = [int(result.groups.get(cell, {}).get("n", 0)) for cell in cells]  # type: ignore[call-overload]
    table, noise = release_counts(plan, np.asarray(found, np.int64).reshape(2, -1))
    return ks_result(table, noise, plan, (str(cells[0][0]), str(cells[-1][0])))


def hypothesis_result(result: HypothesisTestResult, events: list[PrivacyEvent]) -> Result:
    values: dict[str, Any] = {"statistic": result.statistic, "p_value": result.p_value}
    if result.estimate is not None:
        values["estimate"] = result.estimate
    values.update({name: np.asarray(v) for name, v in result.released.items()})
    return Result(
        result.test,
        values,
        total_cost(events),
        tuple(events),
        detail=result,
        frame=lambda _r: pd.DataFrame(
            [{"test": result.test, "statistic": result.statistic, "p_value": result.p_value}]
        ),
    )


__all__ = ["SYNTHESIZERS"]
