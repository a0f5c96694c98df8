"""Robust L1 regression by propose-test-release (Dwork & Lei 2009; Dwork & Smith 2009, Section
3.2, eq. 5): the B-robust least-absolute-deviations fit
β̂ = argmin_β Σ_i |y_i - x_iᵀβ| / ||x_i||.

**What is implemented.** Dwork & Lei test the stability of β̂ on the whole data set; the exact
distance to instability of an L1 fit (how many rows must change before β̂ moves by more than the
proposed bound) is a combinatorial search with no practical algorithm. We test stability by
*subsampling* instead: the rows are split into ``blocks`` disjoint blocks (a keyed hash of the
person id, else a uniform draw per row, as in
:func:`~dpcurator.estimators.sample_aggregate.block_ids`), eq. 5 is solved on each block by a
deterministic linear program (HiGHS, fixed tolerances), each block fit is clamped into the
public box [lower_j, upper_j] (the box's middle when a block's program fails or the block is too
small), and each coordinate of the released fit is the median of the k block fits, released by
:func:`~dpcurator.estimators.ptr.ptr_median` (scale proposed by :func:`~dpcurator.estimators.ptr.
ptr_iqr`, a subroutine call; test of the distance to instability of that median; Laplace noise
or NR).

**Privacy guarantee**: (ε, δ)-DP, at the user level when ``person`` ids are given. Adding or
removing one person changes the rows of one block only, so it *replaces* one of the k block fits
(k is public). ``ptr_median`` is (ε/p, δ/p)-DP under that replacement: its rank arguments use the
fixed count k (the order statistic of rank r of a k-set after k' replacements lies between
x_(r-k') and x_(r+k'), so the ranges nest as for add/remove and the distances stay 1-Lipschitz),
and its noisy count has sensitivity 0. The p coordinates compose to (ε, δ); NR of any
coordinate is the release's NR (post-processing). The interval of each coordinate covers the
median of the clamped block fits against the noise (:attr:`Covers.NOISE`), coordinate-wise.
"""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from dpcurator._validation import check_int, check_positive, check_probability, fail
from dpcurator.core.measures import ApproxDP
from dpcurator.core.numbers import float_down, to_fraction
from dpcurator.estimators.ptr import ptr_median
from dpcurator.estimators.release import Covers, Estimate, FloatArray, as_float_array, no_reply
from dpcurator.estimators.sample_aggregate import Box, block_estimates, block_ids
from dpcurator.random import Rng, default_rng

#: HiGHS options of the block programs: fixed, so a block's fit is a function of its rows only.
SOLVER_OPTIONS = {
    "primal_feasibility_tolerance": 1e-9,
    "dual_feasibility_tolerance": 1e-9,
    "presolve": True,
}

METHOD = "Dwork-Lei B-robust L1 regression (propose-test-release on block fits)"


def l1_fit(design: FloatArray, response: FloatArray) -> FloatArray:
    """eq. 5 by linear programming: min Σ w_i (u_i + v_i) s.t. Xβ + u - v = y, u, v >= 0,
    w_i = 1/||x_i|| (rows with x_i = 0 do not depend on β: weight 0). NaN where it fails."""
    rows, dims = design.shape
    if rows < dims:
        return np.full(dims, np.nan)
    norms = np.linalg.norm(design, axis=1)
    weights = np.divide(1.0, norms, out=np.zeros(rows), where=norms > 0)
    identity = sparse.identity(rows, format="csr")
    constraints = sparse.hstack([sparse.csr_matrix(design), identity, -identity], format="csr")
    cost = np.concatenate([np.zeros(dims), weights, weights])
    limits = [(None, None)] * dims + [(0, None)] * (2 * rows)
    solved = linprog(
        cost, A_eq=constraints, b_eq=response, bounds=limits, method="highs",
        options=SOLVER_OPTIONS,
    )  # fmt: skip
    if solved.status != 0:
        return np.full(dims, np.nan)
    return np.asarray(solved.x[:dims], dtype=np.float64)


def fit_rows(rows: FloatArray) -> FloatArray:
    """:func:`l1_fit` of a block of [x | y] rows."""
    return l1_fit(rows[:, :-1], rows[:, -1])


def ptr_l1_regression(
    x: object,
    y: object,
    *,
    epsilon: float,
    delta: float,
    lower: object,
    upper: object,
    blocks: int,
    intercept: bool = True,
    person: object = None,
    alpha: float = 0.05,
    rng: Rng | None = None,
) -> Estimate:
    """The B-robust L1 regression of y on x (a column of ones first when ``intercept``) by
    propose-test-release on ``blocks`` block fits (see the module docstring for the method and
    its (ε, δ)-DP guarantee). ``lower``/``upper``: the public box of the p coefficients (scalars
    or vectors of length p). Non-finite x or y values count as 0. Returns the p coefficients
    with coordinate-wise (1-α) noise intervals, or NR."""
    owner = "ptr_l1_regression"
    design = as_float_array(owner, "x", x, ndim=2)
    response = as_float_array(owner, "y", y, ndim=1)
    if response.shape[0] != design.shape[0]:
        raise fail(owner, "y", f"one value per row of x ({design.shape[0]})", response.shape[0])
    if intercept:
        design = np.hstack([np.ones((design.shape[0], 1)), design])
    dims = design.shape[1]
    try:
        ends = [np.broadcast_to(np.asarray(end, dtype=np.float64), dims) for end in (lower, upper)]
    except (TypeError, ValueError) as exc:
        raise fail(
            owner, "lower/upper", f"numbers or vectors of length {dims}", (lower, upper)
        ) from exc
    box = Box.of(owner, *ends)
    eps = Fraction(check_positive(owner, "epsilon", epsilon))
    dlt = float(check_probability(owner, "delta", delta, open_low=True, open_high=True))
    level = float(check_probability(owner, "alpha", alpha, open_low=True, open_high=True))
    count = int(check_int(owner, "blocks", blocks, minimum=2))
    if person is not None and len(person) != design.shape[0]:  # type: ignore[arg-type]
        raise fail(owner, "person", f"one id per row ({design.shape[0]})", "another length")
    source = rng or default_rng()
    eps_each, delta_each = float_down(eps / dims), dlt / dims
    total = ApproxDP(to_fraction(eps_each) * dims, to_fraction(delta_each) * dims)
    table = np.nan_to_num(np.hstack([design, response[:, None]]), nan=0, posinf=0, neginf=0)
    ids = block_ids(table.shape[0], count, person, source)
    with warnings.catch_warnings():  # a solver warning would tell the analyst about a block
        warnings.simplefilter("ignore")
        fits = block_estimates(fit_rows, table, ids, count, box)
    coordinates = [
        ptr_median(
            fits[:, j], epsilon=eps_each, delta=delta_each, lower=float(box.lower[j]),
            upper=float(box.upper[j]), alpha=level, rng=source,
        )
        for j in range(dims)
    ]  # fmt: skip
    if not all(c.replied for c in coordinates):
        return no_reply(total, METHOD, level)
    parts = [
        np.array([float(c.value), float(c.ci_low), float(c.ci_high)])  # type: ignore[arg-type]
        for c in coordinates
    ]
    value, low, high = np.array(parts).T
    return Estimate(value, low, high, Covers.NOISE, level, total, METHOD)
