"""DP linear regression by noisy sufficient statistics (AdaSSP, Wang 2018) under zCDP.

Rows are clamped to public bounds (NaN -> the bound's midpoint) and rescaled by those bounds to
u ∈ [-1, 1]^d, v ∈ [-1, 1] (which also conditions the normal equations). With z = (1, u, v):

* the Gram matrix G = Σ z zᵀ (it holds n, Σu, UᵀU, Uᵀv and vᵀv) is released with discrete
  Gaussian noise on its upper triangle: one row moves it by ||z zᵀ||_F = ||z||² <= d + 2 in L2;
* the smallest eigenvalue of the design Gram matrix is released with discrete Gaussian noise: by
  Weyl's inequality one row moves it by at most ||(1, u)||² <= d + 1.

**Privacy guarantee**: ρ-zCDP (Bun & Steinke 2016; discrete Gaussian of Canonne, Kamath & Steinke
2020), ρ = ρ_λ + ρ_G by composition, for add/remove of one row (one row per person). The ridge
λ = max(0, σ_G(2√p + √(2 ln(1/η))) - λ̃_low), with λ̃_low a (1-η) lower bound of the noisy
eigenvalue, makes the noisy design matrix positive definite with high probability (AdaSSP's
adaptive ridge), and θ̂ = (Ũᵀ Ũ + λI)⁻¹ Ũᵀṽ; everything after the noise is post-processing.
The noisy Gram matrix and eigenvalue are formed in unbounded integers on the mechanism's grid
(:mod:`dpcurator.estimators.noisy_wide`), so entries up to n never saturate at large ρ.
Degenerate data (singular UᵀU, few rows) cannot raise: the ridge and a least-squares solve give
a finite answer, and a noisy count below p + 1 gives NR (decided on the noisy value).

**Intervals** (noise + sampling): a parametric bootstrap of the whole release (Ferrando, Wang &
Sheldon 2022). Each replicate draws a true design around the released one (the released design is
itself noisy), Uᵀv from its sampling distribution N(D θ̂, σ̂²D) at the fitted residual variance,
fresh noise on the Gram matrix and on the smallest eigenvalue (so a fresh ridge λ), and refits.
The ridge shrinks: a replicate's mean is about M θ̂ with M the mean of (D + E + λI)⁻¹ D, so the
pivot is θ̂ - Mθ and the interval is the bias-corrected basic interval M⁻¹(θ̂ - pivot quantiles),
in the original units. Without the design draw and the bias correction the interval covered 0.66
at n = 100, ρ = 0.005 (tests/test_estimators_coverage.py). The interval's ends are the order
statistics k and B + 1 - k of the B pivots, k = floor((B + 1) α / 2), which cover a draw
exchangeable with them with probability >= 1 - α (interpolated quantiles, about the (k+1)-th,
covered 1 - α - 0.005 at B = 400: the Wald tests' type-I error was 0.055 at α = 0.05).
Where a released diagonal entry of the design (n, Σu_j²) is below z_{1-η} σ_G (not significantly
positive: the true design is unknown and the bootstrap's draws of it, made positive, sit above
the released one, so the interval is too narrow: its Wald test rejected 0.08 of null data sets at
n = 100, ε = 0.1) the release is marked not ``testable`` (:mod:`dpcurator.estimators.wald`).
Clamping bias is not included in the interval; with ``clipping_share`` > 0 that share of ρ
releases the share of rows clamping changed (:mod:`dpcurator.estimators.clipping`, ρ-zCDP,
composed) as the release's ``clipping``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np
from scipy.special import ndtri

from dpcurator._validation import check_positive, check_probability, fail
from dpcurator.core.measures import ZCDP
from dpcurator.core.numbers import to_fraction
from dpcurator.estimators.clipping import clipping_zcdp, outside
from dpcurator.estimators.noisy_wide import release_wide
from dpcurator.estimators.release import (
    Covers,
    Estimate,
    FloatArray,
    as_float_array,
    check_bounds,
    no_reply,
    noisy,
    standard_normals,
)
from dpcurator.mechanisms import Gaussian
from dpcurator.random import Rng, default_rng

#: Replicates of the parametric bootstrap.
BOOTSTRAP_REPLICATES = 400

#: Failure probability η of the ridge's eigenvalue bounds.
RIDGE_ETA = 0.05


def gaussian_for_floats(rho: Fraction, sensitivity: Fraction, dimension: int) -> Gaussian:
    """The discrete Gaussian whose grid-rounded release of ``dimension`` floats is ρ-zCDP."""
    mech = Gaussian.for_rho(rho, sensitivity)
    while mech.rho_for_floats(sensitivity, dimension) > rho:
        mech = Gaussian(mech.sigma * (1 + Fraction(1, 2**20)))
    return mech


def _solve(gram: FloatArray, cross: FloatArray, ridge: float) -> FloatArray:
    """(gram + ridge·I)⁻¹ cross, batched over leading axes; finite for finite input, never raises.

    A singular system falls back to least squares (the minimum-norm solution).
    """
    matrix = gram + ridge * np.eye(gram.shape[-1])
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            return np.asarray(np.linalg.solve(matrix, cross[..., None])[..., 0], np.float64)
        except np.linalg.LinAlgError:
            flat_m = matrix.reshape(-1, *matrix.shape[-2:])
            flat_c = cross.reshape(-1, cross.shape[-1])
            pairs = zip(flat_m, flat_c, strict=True)
            out = np.array([np.linalg.lstsq(m, c, rcond=None)[0] for m, c in pairs])
            return out.reshape(cross.shape)


def _symmetric(upper: FloatArray, size: int) -> FloatArray:
    out = np.zeros((size, size))
    out[np.triu_indices(size)] = upper
    return out + np.triu(out, 1).T


@dataclass(frozen=True)
class Scaling:
    """The public affine map from data units to [-1, 1] (centred only with an intercept)."""

    x_low: FloatArray
    x_high: FloatArray
    y_low: float
    y_high: float
    fit_intercept: bool

    @classmethod
    def of(
        cls,
        d: int,
        x_bounds: tuple[object, object],
        y_bounds: tuple[object, object],
        fit: bool,
        owner: str = "linear_regression",
    ) -> Scaling:
        """Validate the public bounds of ``d`` columns and of y (errors name ``owner``)."""
        low = np.broadcast_to(np.asarray(x_bounds[0], np.float64), (d,))
        high = np.broadcast_to(np.asarray(x_bounds[1], np.float64), (d,))
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
            raise fail(owner, "x_upper", "finite and > x_lower in every column", x_bounds[1])
        y_low, y_high = check_bounds(owner, *y_bounds)
        return cls(low, high, y_low, y_high, fit)

    def centres(self) -> tuple[FloatArray, FloatArray, float, float]:
        """(x_mid, x_half, y_mid, y_half)."""
        if self.fit_intercept:
            return (
                (self.x_low + self.x_high) / 2, (self.x_high - self.x_low) / 2,
                (self.y_low + self.y_high) / 2, (self.y_high - self.y_low) / 2,
            )  # fmt: skip
        x_half = np.maximum(np.abs(self.x_low), np.abs(self.x_high))
        return np.zeros_like(x_half), x_half, 0.0, max(abs(self.y_low), abs(self.y_high))

    def rows(self, X: FloatArray, y: FloatArray) -> FloatArray:
        """z = (1, u, v): clamped (NaN -> midpoint) and rescaled rows."""
        x_mid, x_half, y_mid, y_half = self.centres()
        x = np.where(
            np.isnan(X), (self.x_low + self.x_high) / 2, np.clip(X, self.x_low, self.x_high)
        )
        t = np.where(
            np.isnan(y), (self.y_low + self.y_high) / 2, np.clip(y, self.y_low, self.y_high)
        )
        return np.column_stack([np.ones(x.shape[0]), (x - x_mid) / x_half, (t - y_mid) / y_half])

    def original(self, coef: FloatArray) -> FloatArray:
        """Scaled coefficients (last axis) -> (intercept, slopes) or slopes in data units."""
        x_mid, x_half, y_mid, y_half = self.centres()
        betas = coef[..., 1:] if self.fit_intercept else coef
        slopes = y_half * betas / x_half
        if not self.fit_intercept:
            return np.asarray(slopes, np.float64)
        intercept = y_mid + y_half * (coef[..., 0] - np.sum(betas * x_mid / x_half, axis=-1))
        return np.concatenate([np.asarray(intercept)[..., None], slopes], axis=-1)


def fit_from_gram(gram: FloatArray, scaling: Scaling, ridge: float) -> FloatArray:
    """Ridge least squares from a (noisy or exact) Gram matrix of z, in scaled coordinates."""
    d = gram.shape[0] - 2
    first = 0 if scaling.fit_intercept else 1
    return _solve(gram[first : d + 1, first : d + 1], gram[first : d + 1, d + 1], ridge)


def _ridge(gram_sigma: float, eigen: FloatArray, eigen_sigma: float, p: int) -> FloatArray:
    """AdaSSP's ridge λ from noisy smallest eigenvalues of the design (vectorised)."""
    eigen_low = np.maximum(eigen - eigen_sigma * float(ndtri(1 - RIDGE_ETA)), 0.0)
    spread = 2 * math.sqrt(p) + math.sqrt(2 * math.log(1 / RIDGE_ETA))
    return np.asarray(np.maximum(0.0, gram_sigma * spread - eigen_low), np.float64)


def _bootstrap(
    gram: FloatArray,
    b: FloatArray,
    mechs: tuple[Gaussian, Gaussian],
    *,
    scaling: Scaling,
    rng: Rng,
) -> tuple[FloatArray, FloatArray]:
    """Replicates of the scaled coefficients under sampling and privacy noise (Ferrando et al.):
    fresh noise on the Gram matrix and on the smallest eigenvalue (so a fresh ridge λ), and the
    ridge's shrinkage matrix M = mean over the replicates of (D + E + λI)⁻¹ D at the released
    design D (a replicate's mean is about M b, not b). ``mechs``: (Gram, eigenvalue) noise."""
    gram_mech, eigen_mech = mechs
    d = gram.shape[0] - 2
    first = 0 if scaling.fit_intercept else 1
    p = b.size
    xx, xy = gram[first : d + 1, first : d + 1], gram[first : d + 1, d + 1]
    values, vectors = np.linalg.eigh(xx)
    design = (vectors * np.maximum(values, 0)) @ vectors.T
    residual = (gram[d + 1, d + 1] - 2 * b @ xy + b @ xx @ b) / max(gram[0, 0] - p, 1.0)
    residual = min(max(residual, 0.0), 4.0)  # |v - fit| <= 2 for v and a fit in [-1, 1]
    root = vectors * np.sqrt(np.maximum(values, 0) * residual)
    reps = BOOTSTRAP_REPLICATES
    # the true design is unknown: each replicate draws one at the released design's noise level
    truth_values, truth_vectors = np.linalg.eigh(design + _noise_matrices(gram_mech, p, reps, rng))
    truths = (truth_vectors * np.maximum(truth_values, 0)[:, None, :]) @ truth_vectors.transpose(
        0, 2, 1
    )
    sampled = truths @ b + standard_normals(rng, reps * p).reshape(reps, p) @ root.T
    noise_xy = noisy(gram_mech, gram_mech.sigma, np.zeros(reps * p), rng).reshape(reps, p)
    eigen = noisy(eigen_mech, eigen_mech.sigma, np.maximum(truth_values[:, 0], 0.0), rng)
    ridges = _ridge(float(gram_mech.sigma), eigen, float(eigen_mech.sigma), p)
    noise = _noise_matrices(gram_mech, p, reps, rng)
    replicates = truths + noise + ridges[:, None, None] * np.eye(p)
    stacked = np.broadcast_to(replicates[:, None], (reps, p, p, p))  # one system per column
    columns = _solve(stacked, truths.transpose(0, 2, 1), 0.0)
    return _solve(replicates, sampled + noise_xy, 0.0), np.mean(columns, axis=0).T


def _noise_matrices(mech: Gaussian, p: int, reps: int, rng: Rng) -> FloatArray:
    """``reps`` symmetric p x p matrices of the Gram release's noise (upper triangle drawn)."""
    width = p * (p + 1) // 2
    upper = noisy(mech, mech.sigma, np.zeros(reps * width), rng).reshape(reps, width)
    out = np.zeros((reps, p, p))
    out[:, *np.triu_indices(p)] = upper
    return np.asarray(out + np.triu(out, 1).transpose(0, 2, 1), np.float64)


def _interval(
    b: FloatArray, boot: FloatArray, shrinkage: FloatArray, scaling: Scaling, alpha: float
) -> tuple[FloatArray, FloatArray]:
    """The bias-corrected basic bootstrap interval in data units.

    The released b has mean about M θ (M the ridge's shrinkage), so b - Mθ is the pivot, with
    the law of the replicates' boot - M b; θ ∈ M⁻¹(b - pivot) coordinate-wise, in data units
    (the map to data units is affine). Without shrinkage (M = I) it is the basic interval.
    """
    inverse = np.linalg.pinv(shrinkage)
    zero = scaling.original(np.zeros_like(b))
    centre = scaling.original(inverse @ b)
    pivots = np.sort(scaling.original((boot - b @ shrinkage.T) @ inverse.T) - zero, axis=0)
    k = max(math.floor((len(pivots) + 1) * alpha / 2), 1)  # order statistics: module doc
    return centre - pivots[len(pivots) - k], centre - pivots[k - 1]


def linear_regression(
    X: object,
    y: object,
    *,
    rho: float,
    x_lower: object,
    x_upper: object,
    y_lower: float,
    y_upper: float,
    fit_intercept: bool = True,
    alpha: float = 0.05,
    eigen_share: float = 0.1,
    clipping_share: float = 0.0,
    rng: Rng | None = None,
) -> Estimate:
    """ρ-zCDP least squares of ``y`` on ``X`` (numpy / pandas / Polars) with public bounds.

    Returns (intercept, coefficients...) when ``fit_intercept``, else the coefficients, with
    noise + sampling intervals (module docstring). ``eigen_share`` of ρ pays for the ridge,
    ``clipping_share`` of ρ (default 0: none) for the clipping report.
    """
    owner = "linear_regression"
    design = as_float_array(owner, "X", X, ndim=2)
    target = as_float_array(owner, "y", y, ndim=1)
    if design.shape[0] != target.shape[0]:
        raise fail(owner, "y", f"one value per row of X ({design.shape[0]})", target.shape[0])
    d = design.shape[1]
    scaling = Scaling.of(d, (x_lower, x_upper), (y_lower, y_upper), fit_intercept)
    total = to_fraction(check_positive(owner, "rho", rho))
    share = to_fraction(check_probability(owner, "eigen_share", eigen_share, open_low=True))
    level = float(check_probability(owner, "alpha", alpha, open_low=True, open_high=True))
    clip = to_fraction(check_probability(owner, "clipping_share", clipping_share, open_high=True))
    source = rng or default_rng()
    report = None
    if clip > 0:
        rows = np.column_stack([design, target])
        below, above = outside(rows, np.append(scaling.x_low, scaling.y_low), np.append(
            scaling.x_high, scaling.y_high))  # fmt: skip
        report = clipping_zcdp(below, above, rho=total * clip, rng=source, alpha=level)
    z = scaling.rows(design, target)
    release = regression_from_gram(
        z.T @ z, scaling, rho=total * (1 - clip), eigen_share=share, alpha=level, rng=source
    )
    return replace(release, cost=ZCDP(total), clipping=report)


def regression_from_gram(
    exact: FloatArray,
    scaling: Scaling,
    *,
    rho: Fraction,
    eigen_share: Fraction,
    alpha: float,
    rng: Rng,
    rows_per_person: int = 1,
) -> Estimate:
    """AdaSSP from the EXACT Gram matrix Σ z zᵀ of the scaled rows z = (1, u, v): ρ-zCDP.

    The sufficient statistics may come from anywhere (numpy here, an engine's SUMs in
    :mod:`dpcurator.query.fit.core`) as long as every entry one row adds lies in [-1, 1]: the upper
    triangle then moves by at most d + 2 in L2 and the design block's smallest eigenvalue by at
    most d + 1 (Weyl), per row. A person owning ``rows_per_person`` rows moves both by that many
    times as much, so both sensitivities are multiplied by it (user-level privacy). Never raises
    on the values (module docstring).
    """
    size = exact.shape[0]
    d = size - 2
    p = d + 1 if scaling.fit_intercept else d
    first = 0 if scaling.fit_intercept else 1
    k = Fraction(rows_per_person)
    width = size * (size + 1) // 2
    gram_mech = gaussian_for_floats(rho * (1 - eigen_share), k * size, width)
    eigen_mech = gaussian_for_floats(rho * eigen_share, k * (d + 1), 1)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        design = np.nan_to_num(exact[first : d + 1, first : d + 1])
        smallest = float(np.linalg.eigvalsh(design)[0])
    gram = _symmetric(release_wide(gram_mech, exact[np.triu_indices(size)], rng), size)
    eigen = float(release_wide(eigen_mech, [smallest], rng)[0])
    method = "DP linear regression (AdaSSP, Wang 2018; zCDP)"
    if gram[0, 0] < p + 1:
        return no_reply(ZCDP(rho), method, alpha)
    ridge = float(_ridge(float(gram_mech.sigma), np.array(eigen), float(eigen_mech.sigma), p))
    b = fit_from_gram(gram, scaling, ridge)
    theta = scaling.original(b)
    mechs = (gram_mech, eigen_mech)
    boot, shrinkage = _bootstrap(gram, b, mechs, scaling=scaling, rng=rng)
    low, high = _interval(b, boot, shrinkage, scaling, alpha)
    # the bias-corrected interval can miss the ridge-shrunk estimate itself where the noise is
    # large (n = 100, ρ = 0.005): widened to hold it (post-processing; coverage only grows)
    low, high = np.minimum(low, theta), np.maximum(high, theta)
    # a design diagonal (n, Σu_j²) indistinguishable from its noise: no Wald test (module doc)
    signal = np.diag(gram)[first : d + 1] >= float(gram_mech.sigma) * float(ndtri(1 - RIDGE_ETA))
    return Estimate(
        theta, low, high, Covers.NOISE_AND_SAMPLING, alpha, ZCDP(rho), method,
        testable=bool(np.all(signal)),
    )  # fmt: skip
