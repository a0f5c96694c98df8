"""DP logistic regression: objective perturbation (default) or sample-and-aggregate, with CIs.

The route of the seed (Dwork & Smith 2009, Section 3.1; Smith 2008, "Efficient, differentially
private point estimators"; Nissim, Raskhodnikova & Smith 2007 for sample-and-aggregate): features
are clamped to public bounds (NaN -> the bound's midpoint) and rescaled to [-1, 1]; an outcome
counts as 1 when it is >= 0.5 (else, and when missing, as 0). The rows are split into k disjoint
blocks (a keyed hash of the person id, or uniformly at random); on each block the logistic MLE
(Newton's method with a fixed ridge of 0.3 in scaled units, so it exists under separation) is bias
corrected by the half-sample jackknife 2·θ̂(B) - (θ̂(B_even) + θ̂(B_odd))/2, which removes the
O(1/t) bias of a block of t rows, the ridge's included; the block estimate is converted to data
units and clamped to the public coefficient box Θ = Π_j [coef_lower_j, coef_upper_j] (a failed
fit gets the box's centre).

**Privacy guarantee**: ε-DP (user level with ``person`` ids), by basic composition of:
a Laplace count of persons choosing k = round(ñ^0.6) when ``blocks`` is not given
(``count_share``; Lemma 11's range ω(√n), o(n^{2/3})); the Laplace mean of the k block
estimates, whose L1 sensitivity is Σ_j (upper_j - lower_j)/k since one person changes one block
estimate inside Θ; the Laplace mean of the squared, box-normalised block estimates
((θ_b - c)/h)² ∈ [0, 1]^p (sensitivity p/k, ``spread_share`` of the rest); and, with
``clipping_share`` > 0, the clipping report of :mod:`dpcurator.estimators.clipping` (row level
only). Everything else is post-processing of these releases and public inputs.

**Intervals** (noise + sampling): a parametric bootstrap (Ferrando, Wang & Sheldon 2022): the
mean of k block estimates is simulated as normal around the release with variance V/k, V the
between-block variance (the subsample-and-aggregate variance estimate of Evans, King,
Schwenzfeier & Thakurta 2023), plus fresh Laplace noise of the released scale; the interval is the
basic bootstrap interval at α/2. V is a (1 - α/2) upper bound computed from the released moments
and their noise half-widths, so the noisy variance estimate cannot make the interval too narrow
(union bound: α in total). Clamping of block estimates to Θ biases the release when Θ is too
narrow; the interval does not include that bias.

The default route of :func:`logistic_regression` is objective perturbation
(:mod:`dpcurator.estimators.objective_perturbation`), several times more accurate at equal ε
(benchmarks/estimators.py); this sample-and-aggregate route is ``method="sample_and_aggregate"``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from fractions import Fraction

import numpy as np
import numpy.typing as npt
from scipy.special import expit

from dpcurator._validation import check_int, check_positive, check_probability, fail
from dpcurator.core.measures import ApproxDP, PureDP
from dpcurator.core.numbers import to_fraction
from dpcurator.estimators.clipping import clipping_pure, outside
from dpcurator.estimators.objective_perturbation import (
    SOLVER_STEPS,
    Perturbation,
    perturbed_logistic,
)
from dpcurator.estimators.regression import Scaling
from dpcurator.estimators.release import (
    Cost,
    Covers,
    Estimate,
    FloatArray,
    as_float_array,
    noisy,
    standard_normals,
)
from dpcurator.estimators.sample_aggregate import (
    BlockEstimator,
    Box,
    block_estimates,
    block_ids,
    default_blocks,
    noisy_people,
)
from dpcurator.mechanisms import Laplace
from dpcurator.random import Rng, default_rng

#: The ridge penalty of the block fits, in scaled units (removed to first order by the jackknife).
RIDGE = 0.3

#: Newton steps of a block fit before it counts as not converged.
NEWTON_STEPS = 50

#: Replicates of the parametric bootstrap.
BOOTSTRAP_REPLICATES = 2000

#: The two routes of :func:`logistic_regression`, the default first.
METHODS = ("objective_perturbation", "sample_and_aggregate")


def ridge_logistic(design: FloatArray, label: FloatArray, ridge: float = RIDGE) -> FloatArray:
    """The ridge-penalised logistic MLE by Newton's method (NaN if it does not converge)."""
    coef = np.zeros(design.shape[1])
    penalty = ridge * np.eye(design.shape[1])
    for _ in range(NEWTON_STEPS):
        prob = expit(design @ coef)
        gradient = design.T @ (label - prob) - ridge * coef
        hessian = (design * (prob * (1 - prob))[:, None]).T @ design + penalty
        step = np.linalg.solve(hessian, gradient)
        coef = coef + step
        if np.abs(step).max() < 1e-10:
            return coef
    return np.full_like(coef, np.nan)


def _block_fit(scaling: Scaling) -> BlockEstimator:
    """The block estimator: jackknife bias-corrected ridge MLE, in data units."""

    def fit(rows: FloatArray) -> FloatArray:
        design, label = rows[:, :-1], rows[:, -1]
        whole = ridge_logistic(design, label)
        halves = ridge_logistic(design[::2], label[::2]) + ridge_logistic(design[1::2], label[1::2])
        return scaling.original(2 * whole - halves / 2)

    return fit


def _variance_bound(
    moment: FloatArray,
    mean: FloatArray,
    half: FloatArray,
    mechs: tuple[Laplace, Laplace],
    alpha: float,
) -> FloatArray:
    """A (1 - α/2) upper bound of the box-normalised variance of the block estimates.

    Var = E[w²] - (E w)² for w = (θ_b - c)/h: the noisy second moment plus its noise half-width,
    minus the smallest square of the mean its noise interval allows (α/4 each).
    """
    spread_mech, mean_mech = mechs
    high = moment + spread_mech.ci_halfwidth_floats(alpha / 4)
    smallest = np.maximum(np.abs(mean) - mean_mech.ci_halfwidth_floats(alpha / 4) / half, 0.0)
    return np.asarray(np.clip(high - smallest**2, 0.0, 1.0))


def _box(owner: str, lower: object, upper: object, size: int) -> Box:
    try:
        low = np.broadcast_to(np.asarray(lower, np.float64), (size,))
        high = np.broadcast_to(np.asarray(upper, np.float64), (size,))
    except ValueError as exc:
        raise fail(
            owner, "coef_upper", f"a scalar or {size} bounds (intercept first)", upper
        ) from exc
    return Box.of(owner, low, high)


def _rows_within(person: object, rows: int, limit: int) -> npt.NDArray[np.bool_]:
    """Keep each person's first ``limit`` rows (a public bound; rows beyond it are dropped)."""
    if person is None:
        return np.ones(rows, np.bool_)
    seen: dict[object, int] = {}
    keep = np.zeros(rows, np.bool_)
    ids: Iterable[object] = person  # type: ignore[assignment]
    for i, pid in enumerate(ids):
        seen[pid] = seen.get(pid, 0) + 1
        keep[i] = seen[pid] <= limit
    return keep


def logistic_regression(
    X: object,
    y: object,
    *,
    epsilon: float,
    x_lower: object,
    x_upper: object,
    coef_lower: object = None,
    coef_upper: object = None,
    method: str = "objective_perturbation",
    delta: float = 0.0,
    rows_per_person: int = 1,
    jacobian_share: float = 0.25,
    hessian_share: float = 0.25,
    blocks: int | None = None,
    person: object = None,
    alpha: float = 0.05,
    count_share: float = 0.1,
    spread_share: float = 0.25,
    clipping_share: float = 0.0,
    solver_steps: int = SOLVER_STEPS,
    rng: Rng | None = None,
) -> Estimate:
    """DP logistic regression of a 0/1 ``y`` on ``X`` (numpy / pandas / Polars).

    Returns (intercept, coefficients...) in data units with noise + sampling intervals.
    ``x_lower``/``x_upper`` bound the features (public); an outcome counts as 1 when >= 0.5.

    ``method="objective_perturbation"`` (the default, the more accurate: see
    benchmarks/estimators.py): ε-DP, or (ε, δ)-DP with ``delta`` > 0
    (:mod:`dpcurator.estimators.objective_perturbation`); ``jacobian_share`` of ε sets the
    ridge, ``hessian_share`` pays for the interval; with ``person`` ids each person's first
    ``rows_per_person`` rows are used (a public bound). ``coef_lower``/``coef_upper``, when
    given, clamp the value and the interval (public, post-processing). ``solver_steps`` is the
    public Newton budget before the solver's gradient certificate is checked (a deterministic
    continuation follows when it is not reached; the charge never depends on it).

    ``method="sample_and_aggregate"``: ε-DP (module docstring); needs the coefficient box
    (scalars or one bound per coefficient, intercept first); ``count_share`` of ε chooses the
    number of blocks when ``blocks`` is not given, ``spread_share`` of the rest pays for the
    interval's sampling part.

    ``clipping_share`` of ε (default 0: none) pays for the clipping report (rows only: refused
    with ``person``).
    """
    owner = "logistic_regression"
    design = as_float_array(owner, "X", X, ndim=2)
    target = as_float_array(owner, "y", y, ndim=1)
    rows, d = design.shape
    if target.shape[0] != rows:
        raise fail(owner, "y", f"one value per row of X ({rows})", target.shape[0])
    if person is not None and len(person) != rows:  # type: ignore[arg-type]
        raise fail(owner, "person", f"one id per row ({rows})", "another length")
    if method not in METHODS:
        raise fail(owner, "method", f"one of {', '.join(METHODS)}", method)
    scaling = Scaling.of(d, (x_lower, x_upper), (-1, 1), True, owner)
    if method == "sample_and_aggregate" and (coef_lower is None or coef_upper is None):
        raise fail(owner, "coef_upper", "coefficient bounds with sample_and_aggregate", None)
    box = None
    if coef_lower is not None or coef_upper is not None:
        box = _box(owner, coef_lower, coef_upper, d + 1)
    eps = to_fraction(check_positive(owner, "epsilon", epsilon))
    level = float(check_probability(owner, "alpha", alpha, open_low=True, open_high=True))
    clip = to_fraction(check_probability(owner, "clipping_share", clipping_share, open_high=True))
    if clip > 0 and person is not None:
        raise fail(owner, "clipping_share", "0 with person ids (the report is row level)", clip)
    source = rng or default_rng()
    if method == "objective_perturbation":
        if blocks is not None:
            raise fail(owner, "blocks", "None with objective perturbation", blocks)
        check_probability(owner, "delta", delta, open_high=True)
        plan = Perturbation.of(
            eps * (1 - clip), float(delta), d + 1,
            rows_per_person=check_int(owner, "rows_per_person", rows_per_person, minimum=1),
            jacobian_share=to_fraction(check_probability(
                owner, "jacobian_share", jacobian_share, open_low=True, open_high=True)),
            hessian_share=to_fraction(check_probability(
                owner, "hessian_share", hessian_share, open_low=True, open_high=True)),
            solver_steps=solver_steps,
        )  # fmt: skip
        keep = _rows_within(person, rows, rows_per_person)
        z = scaling.rows(design[keep], target[keep])
        theta, draws = perturbed_logistic(
            z[:, :-1], np.where(z[:, -1] >= 0.5, 1.0, 0.0), plan, level, source
        )
        value = scaling.original(theta)
        low, high = np.quantile(scaling.original(draws), [level / 2, 1 - level / 2], axis=0)
        low, high = np.minimum(low, value), np.maximum(high, value)
        value, low, high, bound = clamp_to_box(box, value, low, high)
        cost: Cost = ApproxDP(eps, delta) if delta > 0 else PureDP(eps)
        name = (
            "DP logistic regression (objective perturbation, Chaudhuri et al. 2011, with "
            "approximate minima perturbation, Iyengar et al. 2019)"
        )
        release = Estimate(
            value, low, high, Covers.NOISE_AND_SAMPLING, level, cost, name, at_bound=bound
        )
    else:
        if delta != 0:
            raise fail(owner, "delta", "0 with sample-and-aggregate (ε-DP)", delta)
        assert box is not None
        release = _sample_and_aggregate(
            design, target, scaling, box, eps=eps * (1 - clip), level=level, source=source,
            blocks=blocks, person=person, shares=(count_share, spread_share),
        )  # fmt: skip
    if clip == 0:
        return release
    below, above = outside(design, scaling.x_low, scaling.x_high)
    report = clipping_pure(below, above, epsilon=eps * clip, rng=source, alpha=level)
    cost = PureDP(eps) if delta == 0 else ApproxDP(eps, delta)
    return replace(release, cost=cost, clipping=report)


def _sample_and_aggregate(
    design: FloatArray,
    target: FloatArray,
    scaling: Scaling,
    box: Box,
    *,
    eps: Fraction,
    level: float,
    source: Rng,
    blocks: int | None,
    person: object,
    shares: tuple[float, float],
) -> Estimate:
    """The ε-DP sample-and-aggregate release (module docstring)."""
    owner = "logistic_regression"
    rows, d = design.shape
    share = to_fraction(check_probability(owner, "count_share", shares[0], open_high=True))
    spread = to_fraction(
        check_probability(owner, "spread_share", shares[1], open_low=True, open_high=True)
    )
    if blocks is not None:
        check_int(owner, "blocks", blocks, minimum=1)
        share = Fraction(0)
    elif share == 0:
        raise fail(owner, "count_share", "> 0 when blocks is not given", shares[0])
    k = blocks or default_blocks(noisy_people(rows, person, eps * share, source))
    eps_spread = eps * (1 - share) * spread
    eps_mean = eps * (1 - share) - eps_spread
    z = scaling.rows(design, target)
    z[:, -1] = z[:, -1] >= 0.5
    ids = block_ids(rows, k, person, source)
    estimates = block_estimates(_block_fit(scaling), z, ids, k, box)
    centre, half = (box.lower + box.upper) / 2, (box.upper - box.lower) / 2
    widths = sum(
        Fraction(float(u)) - Fraction(float(lo)) for lo, u in zip(box.lower, box.upper, strict=True)
    )
    mean_mech = Laplace.for_epsilon_floats(eps_mean, widths / k, d + 1)
    value = noisy(mean_mech, mean_mech.scale, estimates.mean(axis=0), source, centre)
    spread_mech = Laplace.for_epsilon_floats(eps_spread, Fraction(d + 1, k), d + 1)
    normalised = np.mean(((estimates - centre) / half) ** 2, axis=0)
    moment = noisy(spread_mech, spread_mech.scale, normalised, source, 0.5)
    mechs = (spread_mech, mean_mech)
    variance = _variance_bound(moment, (value - centre) / half, half, mechs, level)
    reps = BOOTSTRAP_REPLICATES
    sampled = standard_normals(source, reps * (d + 1)).reshape(reps, d + 1)
    noise = noisy(mean_mech, mean_mech.scale, np.zeros(reps * (d + 1)), source)
    draws = sampled * half * np.sqrt(variance / k) + noise.reshape(reps, d + 1)
    q_low, q_high = np.quantile(draws, [level / 4, 1 - level / 4], axis=0)
    value, low, high, bound = clamp_to_box(box, value, value - q_high, value - q_low)
    return Estimate(
        value, low, high, Covers.NOISE_AND_SAMPLING, level, PureDP(eps),
        "DP logistic regression (sample-and-aggregate of bias-corrected MLEs, Smith 2008)",
        at_bound=bound,
    )  # fmt: skip


def clamp_to_box(
    box: Box | None, value: FloatArray, low: FloatArray, high: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, npt.NDArray[np.bool_] | None]:
    """(value, low, high) clamped to the public box, and per coordinate whether the clamp
    changed any of them (None without a box). Post-processing of the noisy release: the flag
    depends on the noisy values and the public box only. Clamping the interval's ends equals
    clamping every bootstrap draw before its quantiles (the clamp is monotone), so an interval
    that covered a parameter inside the box still covers it."""
    if box is None:
        return value, low, high, None
    clamped = [np.clip(v, box.lower, box.upper) for v in (value, low, high)]
    bound = np.zeros(np.shape(value), np.bool_)
    for before, after in zip((value, low, high), clamped, strict=True):
        bound |= np.asarray(before) != after
    return clamped[0], clamped[1], clamped[2], bound


__all__ = ["clamp_to_box", "logistic_regression", "ridge_logistic"]
