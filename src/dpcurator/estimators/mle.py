"""Efficient DP maximum likelihood (Smith 2008; Dwork & Smith 2009, Section 3.1, Theorem 9).

Two routes:

* :func:`dp_mle` — Algorithm 1 of the seed: split the data into k = round(ñ^0.6) blocks
  (ω(√n), o(n^{2/3})), compute the bias-corrected MLE on each block and release the average of
  the block estimates, clamped to a public parameter box of diameter Λ, with Laplace noise
  (:mod:`dpcurator.estimators.sample_aggregate`). **ε-DP** (user-level with person ids): one
  person changes one block estimate, so the average moves by at most Λ₁/k (Lemma 10). Bias
  correction is the half-sample jackknife 2·θ̂(B) - (θ̂(B₁) + θ̂(B₂))/2, which removes the O(1/t)
  bias term of a block of t rows (the role of Lemma 8). A block whose fit fails or does not
  converge gets the public fill. Any model given by a log-likelihood works (numeric fit); the
  built-in models also have closed-form fits and Fisher information. The built-in
  ``"gaussian_mixture"`` (two components, parameters (p, μ₁, μ₂, σ₁, σ₂)) is fitted by a fixed
  number of EM steps from a data-free-rule start (quartiles), its labels fixed by the public
  rule μ₁ <= μ₂ (so block estimates average without label switching), its Fisher information by
  quadrature, and its blocks hold at least :data:`MIXTURE_BLOCK_ROWS` rows (smaller blocks bias
  the average).
* :func:`dp_mle_sufficient` — the simpler route the seed mentions for exponential families: the
  sufficient statistics (n, Σx[, Σx²]) of values clamped to public [lower, upper] get Laplace
  noise (L1 sensitivity 1 + B [+ B²], B = max(|lower|, |upper|): ε-DP), and the MLE is computed
  from them (post-processing). NR when the noisy count is below 2 (decided on the noisy value).
  With ``clipping_share`` > 0 that share of ε releases the share of values clamping changed
  (:mod:`dpcurator.estimators.clipping`, composed) as the release's ``clipping``.

Intervals cover the population parameter (noise + sampling): for :func:`dp_mle` the noise
interval at α/2 widened by z_{1-α/4}·sqrt(I(θ̂)⁻¹/ñ) at the released θ̂ and count (a union
bound; both are functions of the release), cut to the public parameter box (which holds θ, so
coverage is unchanged, and the interval stays finite when ñ < 1 leaves the sampling part
unbounded); for :func:`dp_mle_sufficient` a parametric bootstrap
over both the sampling of the statistics (normal approximation at θ̂) and the privacy noise
(Ferrando, Wang & Sheldon 2022).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from scipy import optimize
from scipy.special import expit, ndtri

from dpcurator._validation import check_positive, check_probability, fail
from dpcurator.core.measures import PureDP
from dpcurator.core.numbers import to_fraction
from dpcurator.estimators.clipping import clipping_pure, outside
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
from dpcurator.estimators.sample_aggregate import sample_and_aggregate_with_count
from dpcurator.mechanisms import Laplace
from dpcurator.random import Rng, default_rng

#: Replicates of the parametric bootstrap.
BOOTSTRAP_REPLICATES = 400


@dataclass(frozen=True)
class Model:
    """A parametric model: a log-likelihood, and optionally a closed-form fit and Fisher info.

    ``loglik(theta, x)`` returns the total log-likelihood of the 1-D sample x; ``fit`` the MLE of
    a sample; ``fisher(theta)`` the per-observation Fisher information matrix.
    """

    name: str
    parameters: tuple[str, ...]
    loglik: Callable[[FloatArray, FloatArray], float]
    start: FloatArray
    fit: Callable[[FloatArray], FloatArray] | None = None
    fisher: Callable[[FloatArray], FloatArray] | None = None
    #: The least rows per block for which the bias-corrected fit is nearly unbiased (public):
    #: caps the number of blocks :func:`dp_mle` chooses from its noisy count.
    min_block_rows: int = 1

    def estimate(self, x: FloatArray) -> FloatArray:
        """The MLE of a sample (closed form, else numeric; NaN if it does not converge)."""
        if self.fit is not None:
            return self.fit(x)
        result = optimize.minimize(lambda th: -self.loglik(th, x), self.start, method="Nelder-Mead")
        return (
            np.asarray(result.x, np.float64) if result.success else np.full_like(self.start, np.nan)
        )

    def bias_corrected(self, block: FloatArray) -> FloatArray:
        """Half-sample jackknife: 2·θ̂(B) - (θ̂(B₁) + θ̂(B₂))/2."""
        x = block.reshape(-1)
        half = x.size // 2
        return 2 * self.estimate(x) - (self.estimate(x[:half]) + self.estimate(x[half:])) / 2


def _gauss_fit(x: FloatArray) -> FloatArray:
    return np.array([x.mean(), x.std()])


def _gauss_loglik(th: FloatArray, x: FloatArray) -> float:
    mu, sigma = float(th[0]), abs(float(th[1])) + 1e-300
    return float(-x.size * math.log(sigma) - np.sum((x - mu) ** 2) / (2 * sigma**2))


#: EM steps of the 2-component Gaussian mixture fit (fixed: the fit is a function of the block).
MIXTURE_EM_STEPS = 100
#: Rows per block of the mixture: the jackknife's halves of 40-row blocks (k = n^0.6 at
#: n = 10^4) give EM fits so unstable that the averaged estimate is biased (μ₁ by -0.11 = 3
#: sd, σ₁ by -0.05, over 12 data sets with known parameters); at 200 rows the bias is gone.
MIXTURE_BLOCK_ROWS = 200
#: Signs turning the first component's log-odds into both components' (the E-step).
_FIRST_SECOND = np.array([1.0, -1.0])


def _mixture_log_parts(th: FloatArray, x: FloatArray) -> FloatArray:
    """log(w_c N(x; μ_c, σ_c)) for each row and component c (w = (p, 1 - p)), shape (n, 2)."""
    weights, mu, sigma = np.array([th[0], 1 - th[0]]), th[1:3], th[3:5]
    z = (x[:, None] - mu) / sigma
    return np.log(weights) - np.log(sigma) - z**2 / 2 - math.log(2 * math.pi) / 2  # type: ignore[no-any-return]


def _mixture_loglik(th: FloatArray, x: FloatArray) -> float:
    if not (0 < th[0] < 1 and th[3] > 0 and th[4] > 0):
        return -math.inf
    parts = _mixture_log_parts(th, x)
    return float(np.logaddexp(parts[:, 0], parts[:, 1]).sum())


def _mixture_fit(x: FloatArray) -> FloatArray:
    """EM (Dempster, Laird & Rubin 1977) for MIXTURE_EM_STEPS steps from p = 1/2, μ = the
    quartiles, σ = sd/2; σ floored at sd·10⁻³; labels ordered so μ₁ <= μ₂. NaN (the block gets
    the public fill) for fewer than 4 rows, constant data or a non-finite result.

    The E-step takes the responsibilities as the logistic function of the components' log-odds
    (the normalising constants cancel), a few array operations per step: the fit runs once per
    block and half block, hundreds of times per release."""
    spread = float(np.std(x)) if x.size >= 4 else 0.0
    if not (math.isfinite(spread) and spread > 0):
        return np.full(5, np.nan)
    q1, q3 = np.quantile(x, [0.25, 0.75])
    p, mu, sigma = 0.5, np.array([q1, q3]), np.full(2, spread / 2)
    column, floor = x[:, None], spread * 1e-3
    with np.errstate(all="ignore"):
        for _ in range(MIXTURE_EM_STEPS):
            z = (column - mu) / sigma
            z *= z
            log_odds = np.log(p / (1 - p) * sigma[1] / sigma[0]) + (z[:, 1] - z[:, 0]) / 2
            resp = expit(log_odds[:, None] * _FIRST_SECOND)
            mass = np.maximum(resp.sum(axis=0), 1e-300)
            mu = x @ resp / mass
            scatter = column - mu
            scatter *= scatter
            scatter *= resp
            sigma = np.maximum(np.sqrt(scatter.sum(axis=0) / mass), floor)
            p = min(max(float(mass[0]) / x.size, 1e-12), 1 - 1e-12)
    theta = np.array([p, mu[0], mu[1], sigma[0], sigma[1]])
    if theta[1] > theta[2]:
        theta = np.array([1 - theta[0], theta[2], theta[1], theta[4], theta[3]])
    return theta if np.all(np.isfinite(theta)) else np.full(5, np.nan)


def _mixture_fisher(th: FloatArray) -> FloatArray:
    """The per-observation Fisher information E[score scoreᵀ], by the trapezoid rule on a grid
    covering every component to ±12σ."""
    mu, sigma = th[1:3], th[3:5]
    grid = np.linspace(mu.min() - 12 * sigma.max(), mu.max() + 12 * sigma.max(), 20_001)
    parts = _mixture_log_parts(th, grid)
    total = np.logaddexp(parts[:, 0], parts[:, 1])
    resp = np.exp(parts - total[:, None])
    z = (grid[:, None] - mu) / sigma
    score = np.column_stack(
        [resp[:, 0] / th[0] - resp[:, 1] / (1 - th[0]), resp * z / sigma, resp * (z**2 - 1) / sigma]
    )
    weighted = score * np.exp(total)[:, None]
    return np.trapezoid(weighted[:, :, None] * score[:, None, :], grid, axis=0)  # type: ignore[no-any-return]


MODELS: dict[str, Model] = {
    "gaussian": Model(
        "gaussian", ("mu", "sigma"), _gauss_loglik, np.array([0.0, 1.0]), _gauss_fit,
        lambda th: np.diag([1 / th[1] ** 2, 2 / th[1] ** 2]),
    ),
    "exponential": Model(
        "exponential", ("rate",),
        lambda th, x: float(x.size * math.log(max(th[0], 1e-300)) - th[0] * x.sum()),
        np.array([1.0]), lambda x: np.array([1 / x.mean()]),
        lambda th: np.array([[1 / th[0] ** 2]]),
    ),
    "poisson": Model(
        "poisson", ("rate",),
        lambda th, x: float(x.sum() * math.log(max(th[0], 1e-300)) - x.size * th[0]),
        np.array([1.0]), lambda x: np.array([x.mean()]), lambda th: np.array([[1 / th[0]]]),
    ),
    "bernoulli": Model(
        "bernoulli", ("p",),
        lambda th, x: float(np.sum(x * np.log(th[0]) + (1 - x) * np.log1p(-th[0]))),
        np.array([0.5]), lambda x: np.array([x.mean()]),
        lambda th: np.array([[1 / (th[0] * (1 - th[0]))]]),
    ),
    "gaussian_mixture": Model(
        "gaussian_mixture", ("p", "mu1", "mu2", "sigma1", "sigma2"), _mixture_loglik,
        np.array([0.5, -1.0, 1.0, 1.0, 1.0]), _mixture_fit, _mixture_fisher,
        MIXTURE_BLOCK_ROWS,
    ),
}  # fmt: skip


#: The built-in models with fixed-dimension sufficient statistics (:func:`dp_mle_sufficient`).
EXPONENTIAL_FAMILIES = ("bernoulli", "exponential", "gaussian", "poisson")


def _model(owner: str, model: str | Model) -> Model:
    if isinstance(model, Model):
        return model
    if model not in MODELS:
        raise fail(owner, "model", f"a Model or one of {sorted(MODELS)}", model)
    return MODELS[model]


def _sampling_halfwidth(model: Model, theta: FloatArray, count: int, alpha: float) -> FloatArray:
    """z_{1-α/2}·sqrt(diag(I(θ)⁻¹)/count); infinite where it is undefined."""
    if model.fisher is None or count < 1:
        return np.full(theta.size, np.inf)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            variance = np.diag(np.linalg.inv(model.fisher(theta))) / count
        except (np.linalg.LinAlgError, ZeroDivisionError, FloatingPointError):
            return np.full(theta.size, np.inf)
    half = float(ndtri(1 - alpha / 2)) * np.sqrt(np.maximum(variance, 0))
    return np.where(np.isfinite(half), half, np.inf)


def dp_mle(
    model: str | Model,
    data: object,
    *,
    epsilon: float,
    lower: object,
    upper: object,
    blocks: int | None = None,
    person: object = None,
    alpha: float = 0.05,
    rng: Rng | None = None,
) -> Estimate:
    """ε-DP bias-corrected MLE by sample-and-aggregate (see the module docstring).

    ``lower``/``upper`` bound the PARAMETERS (the box Θ, public). ``blocks`` defaults to
    round(ñ^0.6) from a Laplace count (10% of ε), at most ñ / the model's ``min_block_rows``;
    the sampling part of the interval needs that count, so with explicit ``blocks`` the
    interval covers the noise only.
    """
    owner = "dp_mle"
    chosen = _model(owner, model)
    level = float(check_probability(owner, "alpha", alpha, open_low=True, open_high=True))
    release, count = sample_and_aggregate_with_count(
        chosen.bias_corrected, as_float_array(owner, "data", data, ndim=1)[:, None],
        epsilon=epsilon, lower=lower, upper=upper, blocks=blocks, person=person,
        alpha=level / 2, rng=rng, method=f"DP MLE, {chosen.name} (Smith 2008)",
        min_block_rows=chosen.min_block_rows,
    )  # fmt: skip
    assert release.value is not None  # sample-and-aggregate always replies
    assert release.ci_high is not None
    box_low = np.atleast_1d(np.asarray(lower, np.float64))
    box_high = np.atleast_1d(np.asarray(upper, np.float64))
    theta = np.clip(release.value, box_low, box_high)
    noise_half = release.ci_high - release.value
    if blocks is not None:
        covers, half = Covers.NOISE, noise_half  # the noise interval at α/2 is valid at α
    else:
        covers = Covers.NOISE_AND_SAMPLING
        half = noise_half + _sampling_halfwidth(chosen, theta, count, level / 2)
    # θ lies in the public box, so the interval may be cut to it (finite, coverage unchanged)
    low = np.clip(release.value - half, box_low, box_high)
    high = np.clip(release.value + half, box_low, box_high)
    return Estimate(
        release.value, low, high, covers, level, release.cost, release.method
    )  # fmt: skip


def _from_stats(name: str, stats: FloatArray, lower: float, upper: float) -> FloatArray:
    """The MLE from (n, Σx[, Σx²]) (any shape (..., m)), kept in the model's public range."""
    n = np.maximum(stats[..., 0], 1.0)
    mean = np.clip(stats[..., 1] / n, lower, upper)
    if name == "gaussian":
        spread = np.sqrt(np.clip(stats[..., 2] / n - mean**2, 0, (upper - lower) ** 2))
        return np.stack([mean, spread], axis=-1)
    if name == "exponential":
        return (1 / np.maximum(mean, upper * 2.0**-30))[..., None]
    return np.clip(mean, 0, 1 if name == "bernoulli" else upper)[..., None]


def _moments(name: str, theta: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Mean and covariance of the per-row sufficient statistic (x[, x²]) at θ."""
    if name == "gaussian":
        mu, s2 = theta[0], theta[1] ** 2
        mean = np.array([mu, mu**2 + s2])
        cov = np.array([[s2, 2 * mu * s2], [2 * mu * s2, 2 * s2**2 + 4 * mu**2 * s2]])
        return mean, cov
    value = float(theta[0])
    variance = {"exponential": 1 / value**2, "poisson": value, "bernoulli": value * (1 - value)}
    return np.array([1 / value if name == "exponential" else value]), np.array([[variance[name]]])


def dp_mle_sufficient(
    model: str,
    data: object,
    *,
    epsilon: float,
    lower: float,
    upper: float,
    alpha: float = 0.05,
    clipping_share: float = 0.0,
    rng: Rng | None = None,
) -> Estimate:
    """ε-DP MLE of an exponential family from noisy sufficient statistics (module docstring).

    ``lower``/``upper`` bound the DATA values (public); NaN counts as ``lower``.
    ``clipping_share`` of ε (default 0: none) pays for the clipping report.
    """
    owner = "dp_mle_sufficient"
    if model not in EXPONENTIAL_FAMILIES:
        raise fail(owner, "model", f"one of {list(EXPONENTIAL_FAMILIES)}", model)
    low, high = check_bounds(owner, lower, upper)
    eps = to_fraction(check_positive(owner, "epsilon", epsilon))
    level = float(check_probability(owner, "alpha", alpha, open_low=True, open_high=True))
    clip = to_fraction(check_probability(owner, "clipping_share", clipping_share, open_high=True))
    raw = as_float_array(owner, "data", data, ndim=1)
    x = np.where(np.isnan(raw), low, np.clip(raw, low, high))
    bound = max(abs(low), abs(high))
    columns = [np.ones_like(x), x] + ([x**2] if model == "gaussian" else [])
    sensitivity = to_fraction(1 + bound + (bound**2 if model == "gaussian" else 0))
    laplace = Laplace.for_epsilon_floats(eps * (1 - clip), sensitivity, len(columns))
    source = rng or default_rng()
    stats = noisy(laplace, laplace.scale, [float(np.sum(c)) for c in columns], source)
    method = f"DP MLE from noisy sufficient statistics, {model}"
    report = None
    if clip > 0:
        below, above = outside(raw, low, high)
        report = clipping_pure(below, above, epsilon=eps * clip, rng=source, alpha=level)
    if stats[0] < 2:
        return replace(no_reply(PureDP(eps), method, level), clipping=report)
    theta = _from_stats(model, stats, low, high)
    mean, cov = _moments(model, theta)
    count = int(stats[0])
    values, vectors = np.linalg.eigh(cov * count)
    root = vectors * np.sqrt(np.maximum(values, 0))
    reps = BOOTSTRAP_REPLICATES
    draws = standard_normals(source, reps * mean.size).reshape(reps, mean.size)
    sampled = count * mean + draws @ root.T
    noise = noisy(laplace, laplace.scale, np.zeros(reps * len(columns)), source)
    simulated = np.column_stack([np.full(reps, float(count)), sampled]) + noise.reshape(reps, -1)
    boot = _from_stats(model, simulated, low, high)
    q_low, q_high = np.quantile(boot - theta, [level / 2, 1 - level / 2], axis=0)
    return Estimate(
        theta, theta - q_high, theta - q_low, Covers.NOISE_AND_SAMPLING, level, PureDP(eps), method,
        report,
    )  # fmt: skip
