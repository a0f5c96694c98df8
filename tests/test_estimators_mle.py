"""DP MLE (Smith 2008): block bias-corrected MLE and noisy sufficient statistics; CI coverage."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpcurator.estimators.mle import MODELS, Model, dp_mle, dp_mle_sufficient
from dpcurator.random import SeededRng
from tests.stat_tools import ALPHA

CASES = {
    "gaussian": (lambda g, n: g.normal(2.0, 1.5, n), [2.0, 1.5], [-10, 0.01], [10, 10], -6, 10),
    "exponential": (lambda g, n: g.exponential(0.5, n), [2.0], [0.01], [10], 0, 20),
    "poisson": (lambda g, n: g.poisson(3.0, n).astype(float), [3.0], [0], [10], 0, 30),
    "bernoulli": (lambda g, n: g.binomial(1, 0.3, n).astype(float), [0.3], [0], [1], 0, 1),
}


def scipy_mle(name: str, x: np.ndarray) -> list[float]:
    if name == "gaussian":
        return list(stats.norm.fit(x))
    if name == "exponential":
        return [1 / stats.expon.fit(x, floc=0)[1]]
    return [float(x.mean())]  # Poisson and Bernoulli MLEs are the sample mean


@pytest.mark.parametrize("name", sorted(CASES))
def test_large_epsilon_matches_the_scipy_mle(name: str) -> None:
    draw, _, low, high, data_low, data_high = CASES[name]
    x = draw(np.random.default_rng(1), 20_000)
    reference = scipy_mle(name, x)
    blocks = dp_mle(name, x, epsilon=1e4, lower=low, upper=high, rng=SeededRng(1))
    assert blocks.value == pytest.approx(reference, rel=0.02, abs=0.01)
    route = dp_mle_sufficient(
        name, x, epsilon=100, lower=data_low, upper=data_high, rng=SeededRng(2)
    )  # (an ε so large that the sums leave the noise grid's 2^22 scales would saturate them)
    assert route.value == pytest.approx(reference, rel=1e-3, abs=1e-3)


def test_bias_correction_removes_the_first_order_bias() -> None:
    """Exponential rate on blocks of 40: the plain MLE is biased by rate/(t-1) = 2.6%."""
    x = np.random.default_rng(2).exponential(1.0, 400_000)
    model = MODELS["exponential"]
    blocks = x.reshape(-1, 40)
    plain = np.mean([model.estimate(b)[0] for b in blocks])
    corrected = np.mean([model.bias_corrected(b)[0] for b in blocks])
    assert plain == pytest.approx(40 / 39, abs=0.005)
    assert corrected == pytest.approx(1.0, abs=0.005)


def test_numeric_model_and_non_convergence_fill() -> None:
    laplace = Model(
        "laplace location", ("m",),
        lambda th, x: float(-np.abs(x - th[0]).sum()), np.array([0.0]),
    )  # fmt: skip
    x = np.random.default_rng(3).laplace(1.0, 1.0, 4000)
    out = dp_mle(laplace, x, epsilon=1e4, lower=-5, upper=5, blocks=20, rng=SeededRng(3))
    assert float(out.value[0]) == pytest.approx(np.median(x), abs=0.1)
    nan_model = Model("never", ("m",), lambda th, x: float("nan"), np.array([0.0]))
    filled = dp_mle(nan_model, x, epsilon=1e4, lower=-5, upper=5, blocks=20, rng=SeededRng(4))
    assert float(filled.value[0]) == pytest.approx(0.0, abs=1e-3)  # the box midpoint


def test_degenerate_data_is_decided_privately() -> None:
    out = dp_mle_sufficient("poisson", [1.0], epsilon=1.0, lower=0, upper=10, rng=SeededRng(5))
    assert out.cost.epsilon == 1  # NR or a reply, with the public cost, never an exception
    dp_mle("gaussian", np.ones(3), epsilon=1.0, lower=[-1, 0], upper=[1, 1], rng=SeededRng(6))


def coverage(name: str, route: str, n: int, epsilon: float, reps: int) -> tuple[int, int]:
    """Hits of the interval and of the same interval narrowed 5x, over ``reps`` data sets."""
    draw, truth, low, high, data_low, data_high = CASES[name]
    gen, rng = np.random.default_rng(7), SeededRng(8)
    hits = narrow = 0
    for _ in range(reps):
        x = draw(gen, n)
        if route == "blocks":
            out = dp_mle(name, x, epsilon=epsilon, lower=low, upper=high, rng=rng)
        else:
            out = dp_mle_sufficient(
                name, x, epsilon=epsilon, lower=data_low, upper=data_high, rng=rng
            )
        if not out.replied:
            continue  # NR (decided on a noisy count) counts as a miss
        centre, low_end, high_end = float(out.value[0]), float(out.ci_low[0]), float(out.ci_high[0])
        hits += low_end <= truth[0] <= high_end
        narrow += centre - (centre - low_end) / 5 <= truth[0] <= centre + (high_end - centre) / 5
    return hits, narrow


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("name", "route", "n", "epsilon"),
    [
        ("gaussian", "blocks", 2000, 1.0),  # privacy noise dominates
        ("poisson", "blocks", 2000, 1.0),
        ("gaussian", "sufficient", 2000, 1.0),
        ("poisson", "sufficient", 2000, 1.0),
        ("gaussian", "blocks", 50_000, 200.0),  # sampling dominates
        ("gaussian", "sufficient", 50_000, 20.0),
    ],
)
def test_ci_covers_the_parameter(name: str, route: str, n: int, epsilon: float) -> None:
    """Noise + sampling coverage of the first parameter >= 0.95 - 0.05 (binomial test at ALPHA);
    the same intervals narrowed 5x are caught."""
    reps = 120
    ok, narrow = coverage(name, route, n, epsilon, reps)
    assert stats.binomtest(ok, reps, 0.90, alternative="less").pvalue > ALPHA
    assert stats.binomtest(narrow, reps, 0.90, alternative="less").pvalue < ALPHA


MIXTURE_BOX = ([0, -10, -10, 0.05, 0.05], [1, 10, 10, 10, 10])


def test_gaussian_mixture_recovers_well_separated_components() -> None:
    """0.3·N(-3, 1) + 0.7·N(4, 1.5), n = 10⁴, ε = 10⁴ (noise negligible). Declared tolerance:
    0.02 on p and 0.15 on each mean and sd (blocks of ~40 rows keep a small O(1/t²) bias)."""
    gen = np.random.default_rng(21)
    n = 10_000
    x = np.where(gen.random(n) < 0.3, gen.normal(-3, 1, n), gen.normal(4, 1.5, n))
    out = dp_mle(
        "gaussian_mixture",
        x,
        epsilon=1e4,
        lower=MIXTURE_BOX[0],
        upper=MIXTURE_BOX[1],
        rng=SeededRng(21),
    )
    assert out.value is not None
    assert float(out.value[0]) == pytest.approx(0.3, abs=0.02)
    assert out.value[1:] == pytest.approx([-3, 4, 1, 1.5], abs=0.15)


def test_gaussian_mixture_fit_orders_the_means_and_fails_to_nan() -> None:
    fit = MODELS["gaussian_mixture"].estimate
    gen = np.random.default_rng(22)
    x = np.concatenate([gen.normal(5, 1, 300), gen.normal(-5, 1, 100)])
    theta = fit(x)
    assert theta == pytest.approx([0.25, -5, 5, 1, 1], abs=0.2)  # p belongs to the lower mean
    assert np.all(np.isnan(fit(np.ones(50))))
    assert np.all(np.isnan(fit(np.array([1.0, 2.0]))))


@pytest.mark.parametrize("data", [np.ones(50), np.array([1.0, 2.0]), np.full(30, np.nan), []])
def test_gaussian_mixture_degenerate_data_gives_a_finite_release(data: object) -> None:
    """Constant, tiny, all-NaN or empty data: a finite release at the public cost, never an
    exception (failed blocks take the public fill)."""
    out = dp_mle(
        "gaussian_mixture",
        data,
        epsilon=1.0,
        lower=MIXTURE_BOX[0],
        upper=MIXTURE_BOX[1],
        rng=SeededRng(23),
    )
    assert out.value is not None
    assert np.all(np.isfinite(out.value))
    assert out.cost.epsilon == 1


def test_the_mixture_has_no_sufficient_statistics_route() -> None:
    with pytest.raises(ValueError, match="model"):
        dp_mle_sufficient("gaussian_mixture", [1.0, 2.0], epsilon=1.0, lower=0, upper=10)


def test_intervals_stay_finite_inside_the_box_when_the_noisy_count_is_below_one() -> None:
    """An empty sample: the noisy person count is often < 1, the sampling part unbounded; the
    interval is cut to the public parameter box (which holds θ), so it stays finite."""
    for seed in range(20):
        fit = dp_mle("poisson", np.zeros(0), epsilon=1.0, lower=[0], upper=[10],
                     rng=SeededRng(seed))  # fmt: skip
        assert fit.ci_low is not None
        assert fit.ci_high is not None
        assert 0 <= fit.ci_low[0] <= fit.ci_high[0] <= 10, seed


MIXTURE = np.array([0.3, -2.0, 3.0, 1.0, 1.5])  # p, mu1, mu2, sigma1, sigma2
MIXTURE_BOX = ([0, -5, 0, 0.2, 0.2], [1, 0, 6, 3, 3])


def mixture_sample(n: int, seed: int) -> np.ndarray:
    gen = np.random.default_rng(seed)
    first = gen.random(n) < MIXTURE[0]
    return np.where(first, gen.normal(MIXTURE[1], MIXTURE[3], n), gen.normal(MIXTURE[2], 1.5, n))


def test_mixture_blocks_are_large_enough_to_be_unbiased() -> None:
    """At n = 10^4 and a large ε the average of 6 fits is within 0.05 of every true parameter
    (k = n^0.6 = 251 blocks of 40 rows gave μ₁ -0.11 and σ₁ -0.05: 3 sd of bias)."""
    fits = []
    for seed in range(6):
        fit = dp_mle("gaussian_mixture", mixture_sample(10_000, seed), epsilon=50.0,
                     lower=MIXTURE_BOX[0], upper=MIXTURE_BOX[1], rng=SeededRng(seed))  # fmt: skip
        assert fit.value is not None
        fits.append(fit.value)
    np.testing.assert_allclose(np.mean(fits, axis=0), MIXTURE, atol=0.05)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize(("epsilon", "reps"), [(20.0, 40), (1e4, 25)])
def test_mixture_interval_covers_the_true_parameters(epsilon: float, reps: int) -> None:
    """Noise + sampling interval at n = 10^4: per coordinate, coverage >= 0.95 - 0.07 by a
    binomial test at ALPHA over ``reps`` data sets; the same intervals narrowed 20x are caught.
    At ε = 20 the noise half of the interval alone covers; at ε = 10^4 the sampling half must
    (with the interval cut to its noise half, every coordinate fails there)."""
    hits = np.zeros(5, dtype=int)
    narrow = np.zeros(5, dtype=int)
    for seed in range(reps):
        fit = dp_mle("gaussian_mixture", mixture_sample(10_000, 100 + seed), epsilon=epsilon,
                     lower=MIXTURE_BOX[0], upper=MIXTURE_BOX[1], rng=SeededRng(seed))  # fmt: skip
        assert fit.value is not None
        assert fit.ci_low is not None
        assert fit.ci_high is not None
        hits += (fit.ci_low <= MIXTURE) & (fit.ci_high >= MIXTURE)
        low = fit.value - (fit.value - fit.ci_low) / 20
        high = fit.value + (fit.ci_high - fit.value) / 20
        narrow += (low <= MIXTURE) & (high >= MIXTURE)
    for j in range(5):
        assert stats.binomtest(int(hits[j]), reps, 0.88, alternative="less").pvalue > ALPHA, j
        assert stats.binomtest(int(narrow[j]), reps, 0.88, alternative="less").pvalue < ALPHA, j
