"""Tests of the exact samplers (dpcurator.random.samplers).

Distributional tests (marker ``statistical``) compare ~10^6 draws from a seeded ChaCha20 stream
(SeededRng: the production generator's construction with a fixed key, so every run draws the same
sample) with the exact pmf, computed independently in mpmath at 40 digits, by a chi-square test
over cells with merged tails (every merged cell expects >= 5 counts) at alpha = 1e-6 per test; the
same sample must then be REJECTED against the pmf with the scale (or σ) multiplied by 0.9 and by
1.1 (power check).
Bernoulli samplers use an exact binomial test.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from fractions import Fraction

import mpmath
import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from dpcurator.errors import ParameterError
from dpcurator.random import (
    Rng,
    SeededRng,
    bernoulli_exp,
    bernoulli_rational,
    discrete_gaussian,
    discrete_laplace,
    geometric,
    samplers,
)
from dpcurator.random.samplers import bernoulli, chunks, gaussian, laplace
from tests.stat_tools import ALPHA, chi_square_pvalue

N = 1_000_000
DIGITS = 40  # mpmath precision of the reference distributions
MPF = mpmath.mpf

# -- exact reference distributions (mpmath) --------------------------------------------------------


def laplace_cdf(scale: Fraction | float) -> Callable[[int], mpmath.mpf]:
    """P[X <= x] for P[x] ∝ exp(-|x|/scale): q^-x/(1+q) for x < 0, 1 - q^(x+1)/(1+q) else."""
    q = mpmath.exp(-1 / MPF(Fraction(scale).numerator) * Fraction(scale).denominator)

    def cdf(x: int) -> mpmath.mpf:
        return q ** (-x) / (1 + q) if x < 0 else 1 - q ** (x + 1) / (1 + q)

    return cdf


def geometric_cdf(gamma: Fraction) -> Callable[[int], mpmath.mpf]:
    """P[Y <= y] = 1 - exp(-γ (y + 1)) for P[y] = (1 - e^-γ) e^(-γ y)."""
    g = MPF(gamma.numerator) / gamma.denominator
    return lambda y: MPF(0) if y < 0 else 1 - mpmath.exp(-g * (y + 1))


def gaussian_cdf(sigma: Fraction | float) -> Callable[[int], mpmath.mpf]:
    """P[X <= x] for P[x] ∝ exp(-x²/(2σ²)), by exact summation (terms below 10^-31 dropped)."""
    s2 = MPF(Fraction(sigma) ** 2)
    half = math.ceil(float(Fraction(sigma)) * 12) + 2  # exp(-12²/2) < 1e-31
    weights = [mpmath.exp(-(MPF(x) ** 2) / (2 * s2)) for x in range(-half, half + 1)]
    total = mpmath.fsum(weights)
    cumulative: list[mpmath.mpf] = []
    acc = MPF(0)
    for w in weights:
        acc += w
        cumulative.append(acc / total)

    def cdf(x: int) -> mpmath.mpf:
        if x < -half:
            return MPF(0)
        if x >= half:
            return MPF(1)
        return cumulative[x + half]

    return cdf


def cells(lo: int, hi: int, max_cells: int = 400) -> list[int]:
    """Left edges of cells covering [lo, hi]: every integer, or about max_cells equal ranges."""
    if hi - lo + 1 <= max_cells:
        return list(range(lo, hi + 2))
    return sorted({round(v) for v in np.linspace(lo, hi + 1, max_cells + 1)})


def observed_and_expected(
    sample: npt.NDArray[np.int64], edges: list[int], cdf: Callable[[int], mpmath.mpf]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Counts and exact probabilities of (-inf, e0), [e0, e1), ..., [e_last, inf)."""
    ordered = np.sort(sample)
    positions = np.searchsorted(ordered, np.array(edges, dtype=np.int64), side="left")
    observed = np.diff(np.concatenate(([0], positions, [sample.size])))
    cumulative = [MPF(0)] + [cdf(e - 1) for e in edges] + [MPF(1)]
    expected = np.array([float(b - a) for a, b in itertools.pairwise(cumulative)])
    return observed, expected


def assert_fits_and_has_power(
    sample: npt.NDArray[np.int64],
    edges: list[int],
    cdf_of: Callable[[float], Callable[[int], mpmath.mpf]],
) -> None:
    """Chi-square fit to cdf_of(1) at ALPHA; the same sample rejects cdf_of(0.9) and cdf_of(1.1)."""
    with mpmath.workdps(DIGITS):
        observed, expected = observed_and_expected(sample, edges, cdf_of(1.0))
        assert chi_square_pvalue(observed, expected) > ALPHA
        for factor in (0.9, 1.1):
            _, wrong = observed_and_expected(sample, edges, cdf_of(factor))
            assert chi_square_pvalue(observed, wrong) < ALPHA, f"no power against x{factor}"


def binomial_pvalue(successes: int, trials: int, p: mpmath.mpf) -> float:
    return float(stats.binomtest(successes, trials, float(p)).pvalue)


# -- discrete Laplace ------------------------------------------------------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize(
    "scale",
    [
        Fraction(1, 7),
        0.3,
        1,
        Fraction(7, 3),
        10,
        1000,
        10**6,
        Fraction(10**6 + 1, 3),  # rational, the one-word inversion path (scale < 2^20)
        2**21 + 0.5,  # rational, the CKS20 Algorithm 2 path (scale > 2^20)
        10**9,
    ],
)
def test_discrete_laplace_matches_exact_pmf(scale: float | Fraction) -> None:
    sample = discrete_laplace(SeededRng(301), scale, N)
    width = math.ceil(float(scale) * (math.log(N) + 2))
    exact = Fraction(scale)
    assert_fits_and_has_power(
        sample, cells(-width, width), lambda f: laplace_cdf(exact * Fraction(f))
    )


def test_tiny_laplace_scale_gives_zeros() -> None:
    # P[X != 0] = 2q/(1+q), q = e^-1000: exactly zero in any feasible sample.
    assert not discrete_laplace(SeededRng(302), 1e-3, 10_000).any()
    assert not discrete_laplace(SeededRng(303), Fraction(1, 2**70), 10_000).any()


def test_laplace_scale_rounding_is_upward_and_tiny() -> None:
    exact = Fraction(2**60 + 1, 2**10 + 1)
    t, s = laplace._laplace_parameters(exact)
    assert t <= 2**56
    assert Fraction(t, s) >= exact
    assert Fraction(t, s) - exact <= exact * Fraction(1, 2**55)
    # ints, floats and small Fractions are exact
    assert laplace._laplace_parameters(0.3) == Fraction(0.3).as_integer_ratio()
    assert laplace._laplace_parameters(Fraction(7, 3)) == (7, 3)
    assert laplace._laplace_parameters(10**9) == (10**9, 1)


# -- discrete Gaussian -----------------------------------------------------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize("sigma", [Fraction(1, 3), 0.3, 1, Fraction(7, 3), 3.7, 10, 1000])
def test_discrete_gaussian_matches_exact_pmf(sigma: float | Fraction) -> None:
    sample = discrete_gaussian(SeededRng(304), sigma, N)
    width = math.ceil(float(sigma) * math.sqrt(2 * math.log(N)) + 2)
    exact = Fraction(sigma)
    assert_fits_and_has_power(
        sample, cells(-width, width), lambda f: gaussian_cdf(exact * Fraction(f))
    )


@pytest.mark.statistical
@pytest.mark.parametrize("sigma", [10**6, 2**30 + 0.5])
def test_discrete_gaussian_large_sigma(sigma: float) -> None:
    # For σ >= 10^6 the exact CDF is replaced by the rounded continuous normal,
    # P[X <= x] ≈ Φ((x + 1/2)/σ), whose pmf differs from the discrete Gaussian's by a relative
    # O(1/σ²) <= 1e-12: far below what 10^6 draws can detect.
    sample = discrete_gaussian(SeededRng(305), sigma, N)
    width = math.ceil(sigma * 5.2)

    def cdf_of(factor: float) -> Callable[[int], mpmath.mpf]:
        s = MPF(sigma) * MPF(factor)
        return lambda x: mpmath.ncdf((MPF(x) + MPF(0.5)) / s)

    assert_fits_and_has_power(sample, cells(-width, width), cdf_of)


def test_tiny_sigma_runs_the_exact_path() -> None:
    # 2σ² underflows float64: every draw is decided in Python integers (and is 0: P[x != 0] is
    # about exp(-2^1199)).
    sample = discrete_gaussian(SeededRng(306), Fraction(1, 2**600), 100)
    assert sample.tolist() == [0] * 100


@pytest.mark.statistical
def test_scalar_python_paths_are_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    # Batches of at most _SCALAR_MAX values run the same algorithms in Python integers; force that
    # path for whole samples and check it against the exact pmfs too.
    monkeypatch.setattr(laplace, "_SCALAR_MAX", 10**9)
    monkeypatch.setattr(gaussian, "_SCALAR_MAX", 10**9)
    rng = SeededRng(307)
    n = 60_000
    sample = discrete_laplace(rng, 10, n)
    assert_fits_and_has_power(sample, cells(-150, 150), lambda f: laplace_cdf(10 * Fraction(f)))
    sample = discrete_gaussian(rng, Fraction(7, 3), n)
    exact = Fraction(7, 3)
    assert_fits_and_has_power(sample, cells(-15, 15), lambda f: gaussian_cdf(exact * Fraction(f)))
    for gamma in (Fraction(1, 10), Fraction(3)):
        sample = geometric(rng, gamma.numerator, gamma.denominator, 50_000)
        top = math.ceil(13 / gamma)
        assert_fits_and_has_power(
            sample, cells(0, top), lambda f, g=gamma: geometric_cdf(g / Fraction(f))
        )
    assert discrete_laplace(rng, Fraction(1, 2**70), 1000).tolist() == [0] * 1000


def test_small_batches_are_seeded_and_typed() -> None:
    for size in range(1, 6):
        a = discrete_laplace(SeededRng(size), 3, size)
        assert a.dtype == np.int64
        assert a.shape == (size,)
        assert a.tolist() == discrete_laplace(SeededRng(size), 3, size).tolist()
        assert discrete_gaussian(SeededRng(size), 3, size).shape == (size,)
        assert geometric(SeededRng(size), 1, 3, size).shape == (size,)


# -- geometric -------------------------------------------------------------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("numerator", "denominator", "n"),
    [(1, 10, N), (3, 1, N), (7, 3, N), (1, 1000, N), (2**11, 2**62 - 1, 200_000)],
)
def test_geometric_matches_exact_pmf(numerator: int, denominator: int, n: int) -> None:
    # The last case has t = 2^62 - 1, so U + t·V leaves int64 whenever V >= 2 (exact Python path).
    sample = geometric(SeededRng(308), numerator, denominator, n)
    gamma = Fraction(numerator, denominator)
    top = math.ceil((math.log(n) + 2) / gamma)
    assert_fits_and_has_power(sample, cells(0, top), lambda f: geometric_cdf(gamma / Fraction(f)))


# -- Bernoulli -------------------------------------------------------------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize(
    "gamma", [Fraction(0), Fraction(1, 10), Fraction(1), Fraction(5, 2), Fraction(40)]
)
def test_bernoulli_exp_exact_probability(gamma: Fraction) -> None:
    trials = bernoulli_exp(SeededRng(309), gamma.numerator, gamma.denominator, N)
    assert trials.dtype == np.bool_
    assert trials.shape == (N,)
    successes = int(trials.sum())
    p = mpmath.exp(-MPF(gamma.numerator) / gamma.denominator)
    assert binomial_pvalue(successes, N, p) > ALPHA
    if gamma == 0:
        assert successes == N
    elif gamma == 40:
        assert successes == 0  # p = 4e-18
    else:
        for factor in (Fraction(9, 10), Fraction(11, 10)):
            wrong = mpmath.exp(-MPF((gamma * factor).numerator) / (gamma * factor).denominator)
            assert binomial_pvalue(successes, N, wrong) < ALPHA


@pytest.mark.statistical
def test_bernoulli_exp_arrays_and_large_denominators() -> None:
    rng = SeededRng(310)
    # per-element numerators and denominators (broadcast), including denominators near 2^63 for
    # which den·k leaves 64 bits in the chain (split into Bernoulli(r/den)·Bernoulli(1/k))
    cases = [(1, 3), (7, 2), (3 * 2**60 + 1, 2**62 - 1), (2**62, 2**63 - 1), (10**18, 10**17 + 3)]
    per_case = 200_000
    numerators = np.repeat(np.array([c[0] for c in cases], dtype=np.int64), per_case)
    denominators = np.repeat(np.array([c[1] for c in cases], dtype=np.int64), per_case)
    trials = bernoulli_exp(rng, numerators, denominators)
    assert trials.shape == numerators.shape
    for i, (num, den) in enumerate(cases):
        successes = int(trials[i * per_case : (i + 1) * per_case].sum())
        p = mpmath.exp(-MPF(num) / den)
        assert binomial_pvalue(successes, per_case, p) > ALPHA
        if p > 0.01:
            assert binomial_pvalue(successes, per_case, mpmath.exp(-MPF(num) * 1.1 / den)) < ALPHA
    # one scalar denominator near 2^63 with an array of numerators
    big = 2**63 - 25
    trials = bernoulli_exp(rng, np.full(N, big // 2, dtype=np.int64), big)
    p = mpmath.exp(-MPF(big // 2) / big)
    assert binomial_pvalue(int(trials.sum()), N, p) > ALPHA
    assert binomial_pvalue(int(trials.sum()), N, p * MPF(1.02)) < ALPHA


def test_bernoulli_exp_huge_gamma_is_fast_and_false() -> None:
    trials = bernoulli_exp(SeededRng(311), 2**63 - 1, 1, 100_000)
    assert not trials.any()


def test_bernoulli_exp_shapes() -> None:
    rng = SeededRng(1)
    assert bernoulli_exp(rng, 1, 2).shape == ()
    assert bernoulli_exp(rng, np.array([[1, 2], [3, 4]]), 3).shape == (2, 2)
    assert bernoulli_exp(rng, np.array([1, 2, 3]), np.array([[1], [2]])).shape == (2, 3)
    assert bernoulli_exp(rng, 1, 2, size=5).shape == (5,)
    assert bernoulli_exp(rng, np.array([1, 2, 3]), 4, size=3).shape == (3,)
    assert bernoulli_exp(rng, [1, 2], 3).shape == (2,)
    assert bernoulli_exp(rng, np.array([], dtype=np.int64), 3).shape == (0,)
    assert bernoulli_exp(rng, 1, 2, size=0).shape == (0,)
    assert bool(bernoulli_exp(rng, 0, 1)) is True


@pytest.mark.statistical
@pytest.mark.parametrize(("numerator", "denominator"), [(1, 3), (10**30, 3 * 10**30 + 7)])
def test_bernoulli_rational_exact_probability(numerator: int, denominator: int) -> None:
    trials = bernoulli_rational(SeededRng(312), numerator, denominator, N)
    successes = int(trials.sum())
    p = MPF(numerator) / denominator
    assert binomial_pvalue(successes, N, p) > ALPHA
    assert binomial_pvalue(successes, N, p * MPF(1.02)) < ALPHA
    assert binomial_pvalue(successes, N, p * MPF(0.98)) < ALPHA


class ScriptedRng(Rng):
    """Serves given 64-bit words first (little-endian), then a seeded stream."""

    def __init__(self, words: list[int]) -> None:
        self._script = b"".join(w.to_bytes(8, "little") for w in words)
        self._rest = SeededRng(0)

    def random_bytes(self, n: int) -> bytes:
        head, self._script = self._script[:n], self._script[n:]
        return head + self._rest.random_bytes(n - len(head))


def test_bernoulli_rational_resolves_ties_with_more_bits() -> None:
    n, d = 1, 3  # 1/3 = 0.010101...b: every 64-bit chunk of it is 0x5555...5
    chunk = 0x5555_5555_5555_5555
    assert bernoulli_rational(ScriptedRng([chunk, chunk - 1]), n, d, 1).tolist() == [True]
    assert bernoulli_rational(ScriptedRng([chunk, chunk + 1]), n, d, 1).tolist() == [False]
    assert bernoulli_rational(ScriptedRng([chunk, chunk, chunk - 1]), n, d, 1).tolist() == [True]
    assert bernoulli_rational(ScriptedRng([chunk - 1]), n, d, 1).tolist() == [True]
    assert bernoulli_rational(ScriptedRng([chunk + 1]), n, d, 1).tolist() == [False]


def test_rational_trials_redraw_rejected_words() -> None:
    # Bernoulli(1/3) from 64-bit words: words >= 3·floor((2^64-1)/3) are rejected and redrawn.
    c = (2**64 - 1) // (3 * 2**24)
    limit = 3 * 2**24 * c
    rng = ScriptedRng([limit, limit + 1, 0])  # two rejected words, then 0 (< threshold): True
    out = bernoulli._ratio_scalar(rng, np.array([2**24], dtype=np.uint64), 3 * 2**24)
    assert out.tolist() == [True]


# -- plumbing: determinism, shapes, size 0, parameter errors ---------------------------------------


def test_seeded_samplers_are_deterministic() -> None:
    def draw(seed: int) -> list[list[int]]:
        rng = SeededRng(seed)
        return [
            discrete_laplace(rng, 10, 100).tolist(),
            discrete_gaussian(rng, 3.5, 100).tolist(),
            geometric(rng, 1, 4, 100).tolist(),
            bernoulli_exp(rng, 1, 3, 100).astype(int).tolist(),
            bernoulli_rational(rng, 2, 7, 100).astype(int).tolist(),
        ]

    assert draw(8) == draw(8)
    assert draw(8) != draw(9)


@pytest.mark.parametrize(
    "call",
    [
        lambda r: discrete_laplace(r, 2, 0),
        lambda r: discrete_gaussian(r, 2, 0),
        lambda r: geometric(r, 1, 2, 0),
        lambda r: bernoulli_exp(r, 1, 2, 0),
        lambda r: bernoulli_rational(r, 1, 2, 0),
    ],
)
def test_size_zero(call: Callable[[Rng], np.ndarray]) -> None:
    out = call(SeededRng(0))
    assert out.shape == (0,)


def test_output_dtypes() -> None:
    rng = SeededRng(0)
    assert discrete_laplace(rng, 2, 3).dtype == np.int64
    assert discrete_gaussian(rng, 2, 3).dtype == np.int64
    assert geometric(rng, 1, 2, 3).dtype == np.int64
    assert bernoulli_rational(rng, 1, 2, 3).dtype == np.bool_


BAD_SCALES = [0, -1, -0.5, math.nan, math.inf, -math.inf, "1", True, None, Fraction(-1, 2)]


@pytest.mark.parametrize("scale", BAD_SCALES)
def test_discrete_laplace_rejects_bad_scale(scale: object) -> None:
    with pytest.raises(ParameterError, match="'scale'"):
        discrete_laplace(SeededRng(0), scale, 3)  # type: ignore[arg-type]


@pytest.mark.parametrize("sigma", BAD_SCALES)
def test_discrete_gaussian_rejects_bad_sigma(sigma: object) -> None:
    with pytest.raises(ParameterError, match="'sigma'"):
        discrete_gaussian(SeededRng(0), sigma, 3)  # type: ignore[arg-type]


def test_too_large_noise_is_refused() -> None:
    with pytest.raises(ParameterError, match="'scale'"):
        discrete_laplace(SeededRng(0), 2**53, 3)
    with pytest.raises(ParameterError, match="'sigma'"):
        discrete_gaussian(SeededRng(0), 2**32, 3)
    with pytest.raises(ParameterError, match="'denominator'"):
        geometric(SeededRng(0), 1, 2**53, 3)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda r: discrete_laplace(r, 1, -1), "size"),
        (lambda r: discrete_gaussian(r, 1, 2.0), "size"),
        (lambda r: geometric(r, 0, 1, 3), "numerator"),
        (lambda r: geometric(r, 1, 0, 3), "denominator"),
        (lambda r: geometric(r, 1.5, 1, 3), "numerator"),
        (lambda r: geometric(r, 2**63, 1, 3), "numerator"),
        (lambda r: bernoulli_exp(r, -1, 2), "numerator"),
        (lambda r: bernoulli_exp(r, 1, 0), "denominator"),
        (lambda r: bernoulli_exp(r, 1.5, 2), "numerator"),
        (lambda r: bernoulli_exp(r, np.array([1.0, 2.0]), 2), "numerator"),
        (lambda r: bernoulli_exp(r, np.array([1, -2]), 2), "numerator"),
        (lambda r: bernoulli_exp(r, 1, np.array([1, 0])), "denominator"),
        (lambda r: bernoulli_exp(r, 2**63, 1), "numerator"),
        (lambda r: bernoulli_exp(r, np.array([1, 2, 3]), 2, size=2), "numerator"),
        (lambda r: bernoulli_exp(r, 1, 2, size=-1), "size"),
        (lambda r: bernoulli_rational(r, 3, 2, 1), "numerator"),
        (lambda r: bernoulli_rational(r, -1, 2, 1), "numerator"),
        (lambda r: bernoulli_rational(r, 1, 0, 1), "denominator"),
        (lambda r: bernoulli_rational(r, 1, 2, -1), "size"),
    ],
)
def test_sampler_parameter_errors(call: Callable[[Rng], object], name: str) -> None:
    with pytest.raises(ParameterError, match=f"'{name}'"):
        call(SeededRng(0))


def test_docstrings_cite_cks_and_timing() -> None:
    for function in (bernoulli_exp, geometric, discrete_laplace, discrete_gaussian):
        doc = function.__doc__ or ""
        assert "Canonne, Kamath & Steinke 2020" in doc
        assert "constant-time" in doc
    assert "Jin" in (samplers.__doc__ or "")


@pytest.mark.parametrize(
    "call",
    [
        lambda rng, n: discrete_laplace(rng, 10, n),
        lambda rng, n: discrete_gaussian(rng, 10, n),
        lambda rng, n: geometric(rng, 1, 10, n),
    ],
)
def test_large_calls_work_in_bounded_memory(call: Callable[[Rng, int], np.ndarray]) -> None:
    """A call for 3·10^6 samples holds its output (24 MB) plus bounded temporaries (blocks of
    ``CHUNK`` samples: under 16 MB here), not several arrays of the whole length (issue 17:
    960 MB for 10^7 Gaussian samples). The chi-square tests above draw 10^6 samples, so they
    check the distribution of chunked calls."""
    import tracemalloc  # noqa: PLC0415 (only this test traces allocations)

    n = 3_000_000
    assert n > 10 * chunks.CHUNK
    tracemalloc.start()
    try:
        values = call(SeededRng(5), n)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert values.shape == (n,)
    assert peak < values.nbytes + 16 * 2**20, peak
