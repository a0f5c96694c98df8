"""Robust L1 regression through :meth:`Session.fit <dpcurator.query.session.Session.fit>`:
``fit("ptr_regression", y=..., x=[...], lower=..., upper=..., epsilon=..., delta=...)`` (or
``fit("linear_regression", method="l1", ...)``).

The B-robust least-absolute-deviations fit of Dwork & Lei (2009) (Dwork & Smith 2009, Section
3.2, eq. 5) by propose-test-release on block fits:
:func:`~dpcurator.estimators.ptr_regression.ptr_l1_regression`, whose docstring gives the
(ε, δ)-DP argument (one person replaces one of the k block fits; each coordinate's median is a
PTR release; NR when a test fails). Here the blocks are the engine's
(:mod:`dpcurator.query.fit.rows`: a keyed hash of the person id, at most ``max_rows`` rows
fetched, the same one-block-per-person argument), k = ``blocks`` (default
:func:`default_ptr_blocks`, a rule of ε, δ and p) is public, and the requested (ε, δ) is
charged before the engine reads. Every refusal is decided here from public inputs (δ in
(0, 1), the coefficient box, the noise scales at the least share of ε any of its mechanisms
gets); after the charge the fit answers a value or NR, never an error.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from typing import Any, Final

import numpy as np

from dpcurator._validation import check_probability, fail
from dpcurator.core.measures import ApproxDP
from dpcurator.errors import DPError
from dpcurator.estimators.ptr import ptr_threshold
from dpcurator.estimators.ptr_regression import ptr_l1_regression
from dpcurator.estimators.release import Estimate, FloatArray
from dpcurator.mechanisms import Laplace
from dpcurator.query.fit.columns import OWNER, numeric_columns, parameter_box
from dpcurator.query.fit.rows import FitPlan, block_sample, rows_finish, rows_plan
from dpcurator.query.plan.limits import MAX_FIT_BLOCKS
from dpcurator.query.schema import Metadata
from dpcurator.random import Rng

#: Blocks per unit of the IQR test's threshold T in the default number of blocks. Of the two
#: cascaded cell grids (ratio 1.2, offsets 0 and 1/2) one leaves the IQR of k well-behaved
#: block fits at least 4.6% of it from a cell edge, and each change moves both quartiles one
#: rank (about IQR/(0.43k) for near-normal fits), so the distance to instability is >= k/100:
#: k = 200·T passes the test with a margin of 2 (Dwork & Lei 2009, Section 3).
BLOCKS_PER_THRESHOLD: Final = 200


def default_ptr_blocks(epsilon: Fraction, delta: float, terms: int) -> int:
    """The public default k = 200·T (at most MAX_FIT_BLOCKS), T the threshold of each
    coordinate's IQR test (ε/(4p), δ/(4p): half to the IQR subroutine, half per cascade try):
    the least k at which the tests pass on stable data. It needs about 10k persons or more
    (blocks of ~10 rows); with fewer the block fits are poor and the answer is likely NR."""
    share = float(epsilon) / (4 * terms)
    threshold = ptr_threshold(share, delta / (4 * terms))
    return min(MAX_FIT_BLOCKS, BLOCKS_PER_THRESHOLD * threshold)


#: The least share of a coordinate's ε any mechanism of ptr_median receives (its Laplace count,
#: ε/20 with the IQR subroutine taking half): the plan checks the noise scales at it.
LEAST_SHARE: Final = Fraction(1, 20)


def plan_ptr(
    metadata: Metadata,
    y: str,
    x: tuple[str, ...],
    *,
    epsilon: Fraction,
    delta: float,
    lower: object,
    upper: object,
    blocks: int | None,
    max_rows: int | None,
    fit_intercept: bool,
) -> FitPlan:
    """The plan of a PTR L1 regression (refusals free, before the charge)."""
    dlt = float(check_probability(OWNER, "delta", delta, open_low=True, open_high=True))
    if not x:
        raise fail(OWNER, "x", "at least one feature column", list(x))
    metas = numeric_columns(metadata, (*x, y))
    terms = ("intercept", *x) if fit_intercept else x
    box = parameter_box(lower, upper, len(terms))
    with np.errstate(over="ignore"):
        width = float(np.sum(box.upper - box.lower))
    if not np.isfinite(width):
        raise fail(OWNER, "upper", "a coefficient box of finite total width", "an overflow")
    count = default_ptr_blocks(epsilon, dlt, len(terms)) if blocks is None else blocks
    if count < 2:
        raise fail(OWNER, "blocks", ">= 2 for ptr_regression (a median of block fits)", count)
    least = epsilon * LEAST_SHARE / len(terms) / metadata.unit.estimator_steps(keyed_by_person=True)
    try:  # the count's and the widest release's noise at the least share of ε (free)
        Laplace.for_epsilon(least, 1)
        Laplace.for_epsilon_floats(least, Fraction(max(width, 1.0)), 1)
    except DPError as exc:
        raise fail(
            OWNER, "epsilon", f"large enough for the fit's noise ({exc})", "too small"
        ) from None
    cost = ApproxDP(epsilon, Fraction(dlt))
    # group privacy over the estimator's steps (a person a step with person ids, else a row;
    # two sides under replace-one): (ε/t, δ') for one step is (ε, t·e^((t-1)ε/t)·δ') for t
    # steps (Dwork & Roth 2014, Theorem 2.2 and its (ε, δ) form), so δ' = δ/(t·e^ε) suffices
    steps = metadata.unit.estimator_steps(keyed_by_person=True)
    inner_delta = dlt / (steps * math.exp(float(epsilon))) if steps > 1 else dlt

    def run(table: FloatArray, person: Any, alpha: float, eps: Fraction, rng: Rng) -> Estimate:
        release = ptr_l1_regression(
            table[:, :-1], table[:, -1], epsilon=float(eps), delta=inner_delta, lower=box.lower,
            upper=box.upper, blocks=count, intercept=fit_intercept, person=person, alpha=alpha,
            rng=rng,
        )  # fmt: skip
        return replace(release, cost=cost)

    sample = block_sample(metadata, count, max_rows)
    finish = rows_finish(metadata, metas, run, epsilon / steps, sample)
    statistic = "the coordinate medians of the block L1 fits (propose-test-release)"
    return FitPlan(
        "ptr_regression", (*x, y), cost, rows_plan(metadata, metas, sample), finish, terms,
        statistic, width,
    )  # fmt: skip
