"""The mean tests on a session table: one-sample and Welch t, one-way ANOVA.

The tests of :mod:`dpcurator.estimators.hypothesis` release noisy moments (count, centred sum,
centred sum of squares) of values in public [L, U] (:func:`~dpcurator.estimators.hypothesis.
release_moments`). On a session table the engine reads the column once, after the one charge:
a histogram of each compared group over :data:`RESOLUTION_BINS` equal public bins of [L, U]
(values clamped to [L, U], NULL and NaN at the midpoint, each person's rows bounded by the
metadata, rows of other groups dropped). Each row becomes the midpoint of its bin, a value in
[L, U], so the moments of those values have exactly the per-row bounds the tests' noise is
calibrated for, asked of ``metadata.unit`` (as for the χ² verbs, :mod:`dpcurator.api.kinds`);
the values are read at the resolution (U - L)/4096, far below the noise of a mean at any ε a
test can afford. Everything after the release is the tests' own post-processing
(``*_from_moments``: the parametric bootstrap of Ferrando, Wang & Sheldon 2022). ε-DP under
``epsilon``, ρ-zCDP under ``rho``; the conformance matrix has a row for each verb.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpcurator._validation import check_real, fail
from dpcurator.accounting.events import PureEvent, ZCDPEvent
from dpcurator.api.budget import Cost
from dpcurator.api.kinds import hypothesis_setup
from dpcurator.errors import UnsupportedQueryError
from dpcurator.estimators.hypothesis import (
    HypothesisTestResult,
    anova_from_moments,
    one_sample_from_moments,
    release_moments,
    welch_from_moments,
)
from dpcurator.estimators.hypothesis.core import FloatArray, Setup
from dpcurator.estimators.hypothesis.means import BOOTSTRAP, check_alternative
from dpcurator.query import ir
from dpcurator.query.fit.columns import difference_column
from dpcurator.query.session import Session as QuerySession
from dpcurator.synth.domain import SynthDomain

#: Equal public bins of [L, U] at which the engine reads a tested column.
RESOLUTION_BINS = 4096
#: The histogram's name in the engine plan (distinct from any column name a group may have).
_HISTOGRAM = "__resolution_histogram"


def grouped_values(
    owner: str,
    session: QuerySession,
    plan: Setup,
    column: str,
    groups: tuple[str, Sequence[object] | None] | None,
    *,
    least: int = 1,
    most: int | None = None,
    minus: str | None = None,
) -> tuple[list[FloatArray], float, float]:
    """Check the public inputs (free; between ``least`` and ``most`` groups), charge, then each
    group's values at the bins' midpoints (one group when ``groups`` is None; else the column
    ``by`` and the keys compared) and the public bounds. With ``minus`` the values are each
    row's ``column - minus`` (both clamped to their bounds), in [L - U', U - L']."""
    metadata = session.metadata
    metas = [metadata.column(name) for name in (column, *([minus] if minus else []))]
    for meta in metas:
        if meta.type not in ("int", "float") or meta.lower is None or meta.upper is None:
            raise UnsupportedQueryError(
                f"{owner}: column {meta.name!r} needs a numeric type with public bounds (lower "
                "and upper) in the metadata."
            )
    meta = metas[0]
    low, high = float(meta.lower), float(meta.upper)  # type: ignore[arg-type]
    value: ir.Expr = ir.Col(meta.name)
    if minus is not None:
        value, low, high = difference_column(meta, metas[1])
    grouping: tuple[ir.GroupColumn, ...] = ()
    keys: list[tuple[ir.ScalarValue, ...]] = [()]
    if groups is not None:
        by, chosen = groups
        domain = SynthDomain.from_metadata(metadata, [by])
        (by_domain,) = domain.columns
        if by_domain.keys is None:
            raise fail(owner, "by", "a column with public keys", by)
        known = by_domain.keys
        wanted = list(known if chosen is None else chosen)
        if len(set(map(repr, wanted))) != len(wanted) or any(k not in known for k in wanted):
            raise fail(owner, "groups", f"distinct keys of {by!r} among {list(known)}", chosen)
        if not least <= len(wanted) <= (most or len(wanted)):
            count = f"{least} keys" if most == least else f"at least {least} keys"
            raise fail(owner, "groups", f"{count} of {by!r} among {list(known)}", chosen)
        picked = [known[known.index(k)] for k in wanted]
        grouping, keys = (by_domain.group_column(),), [(k,) for k in picked]
    histogram = ir.ExactAggregate(
        _HISTOGRAM,
        "histogram",
        value,
        low,
        high,
        (low + high) / 2,
        bins=RESOLUTION_BINS,
    )
    exact = ir.AggregatePlan(
        table=metadata.table,
        aggregates=(histogram,),
        group_by=grouping,
        group_keys=tuple(keys) if grouping else None,
        bound=metadata.contribution_bound,
    )
    event = ZCDPEvent(plan.budget) if plan.concentrated else PureEvent(plan.budget)
    (result,) = session.compute_exact([exact], event, description=f"{owner}({column})")
    width = (high - low) / RESOLUTION_BINS
    midpoints = low + (np.arange(RESOLUTION_BINS) + 0.5) * width
    values = []
    for key in keys:
        counts = result.groups.get(key, {}).get(_HISTOGRAM)
        found = np.zeros(RESOLUTION_BINS, np.int64) if counts is None else np.asarray(counts)
        values.append(np.repeat(midpoints, found))
    return values, low, high


def t_test(  # noqa: PLR0917 (the test's public inputs)
    session: QuerySession,
    cost: Cost,
    column: str,
    mean: float | None,
    groups: tuple[str, Sequence[object] | None] | None,
    alternative: str,
    simulations: int,
    paired: str | None = None,
) -> HypothesisTestResult:
    """One-sample t of H0: mean(column) = ``mean`` (``groups`` None), Welch's t of H0: equal
    means in the two compared groups, or (``paired``) the one-sample t of each row's
    ``column - paired`` against ``mean`` (default 0)."""
    owner = "Session.ttest"
    side = check_alternative(owner, alternative)
    if paired is not None:
        if groups is not None:
            raise fail(
                owner, "paired", "not given with by (a pair is two columns of a row)", paired
            )
        mean = 0.0 if mean is None else mean
    if (mean is None) == (groups is None):
        raise fail(owner, "mean", "given for a one-sample test, or by given (exactly one)", mean)
    if mean is not None:
        check_real(owner, "mean", mean)
    plan = hypothesis_setup(owner, session, cost, simulations)
    values, low, high = grouped_values(
        owner, session, plan, column, groups, least=2, most=2, minus=paired
    )
    moments = release_moments(plan, values, low, high)
    _, estimate, _, mean_var = moments.summary()
    if mean is not None:
        t, p = one_sample_from_moments(moments, float(mean), plan, side)
        name, of = (
            ("one-sample t", column) if paired is None else ("paired t", f"{column} - {paired}")
        )
        return HypothesisTestResult(
            name, t, p, plan.cost, f"studentised noisy mean, {BOOTSTRAP}",
            f"mean of {of} = {mean:g} ({side})", moments.released(),
            moments.noise_scales(), float(estimate[0] + moments.centre), plan.simulations,
            {"standard error (sampling and noise)": float(np.sqrt(mean_var[0]))},
        )  # fmt: skip
    t, p = welch_from_moments(moments, plan, side)
    return HypothesisTestResult(
        "two-sample t (Welch)", t, p, plan.cost, f"Welch t with the noise, {BOOTSTRAP}",
        f"equal means of {column} in two groups of {groups and groups[0]} ({side})",
        moments.released(),
        moments.noise_scales(), float(estimate[0] - estimate[1]), plan.simulations,
        {"standard error (sampling and noise)": float(np.sqrt(mean_var.sum()))},
    )  # fmt: skip


def anova(
    session: QuerySession,
    cost: Cost,
    column: str,
    groups: tuple[str, Sequence[object] | None],
    simulations: int,
) -> HypothesisTestResult:
    """One-way ANOVA of H0: equal means of ``column`` in the compared groups (at least 2)."""
    owner = "Session.anova"
    plan = hypothesis_setup(owner, session, cost, simulations)
    values, low, high = grouped_values(owner, session, plan, column, groups, least=2)
    moments = release_moments(plan, values, low, high)
    statistic, p = anova_from_moments(moments, plan)
    return HypothesisTestResult(
        "one-way ANOVA", statistic, p, plan.cost,
        f"inverse-variance (Welch) between-group statistic with the noise, {BOOTSTRAP}",
        f"all {len(values)} group means of {column} are equal", moments.released(),
        moments.noise_scales(), None, plan.simulations,
    )  # fmt: skip


__all__ = ["RESOLUTION_BINS", "anova", "grouped_values", "t_test"]
