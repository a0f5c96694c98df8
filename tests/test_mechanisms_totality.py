"""Mechanisms never raise on data values, and decide everything from public inputs.

Regression tests of the findings: permute-and-flip chose its precision (and whether it raised)
from the score gaps; float mechanisms raised on NaN and on values beyond 2^52 grid steps; noise
scales beyond the samplers' range were refused only when sampling (after the charge); randomized
response at tiny ε rounded p across 1/k; CI half-widths looped or failed at extreme scales.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from fractions import Fraction

import mpmath
import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.errors import ParameterError
from dpcurator.mechanisms import (
    AboveThreshold,
    Gaussian,
    KaryRandomizedResponse,
    Laplace,
    exponential_mechanism,
    permute_and_flip,
)
from dpcurator.random import Rng, SeededRng
from dpcurator.random.samplers.inversion import bexp_words
from tests.test_mechanisms import discrete_laplace_tail

VICTIM = 4322
INT64_MAX = 2**63 - 1


def _release_outcome(frame: pd.DataFrame, sql: str, epsilon: float) -> str:
    meta = dpc.Metadata.from_yaml(dpc.demo_path("people.yaml"))
    session = dpc.Session.from_data(
        frame, metadata=meta, budget=dpc.Budget(epsilon=1.0), rng=SeededRng(1)
    )
    try:
        session.sql(sql, epsilon=epsilon)
    except Exception as exc:  # the outcome an analyst observes
        return f"{type(exc).__name__}: {exc}"
    return "release"


def test_tiny_epsilon_median_answers_on_d_and_its_neighbour() -> None:
    # Before: permute-and-flip raised after the charge with the filtered row count in the text.
    frame = pd.read_csv(dpc.demo_path("people.csv"))
    sql = "SELECT MEDIAN(age) AS m FROM people WHERE region = 'South'"
    assert _release_outcome(frame, sql, 1e-6) == "release"
    assert _release_outcome(frame[frame.pid != VICTIM], sql, 1e-6) == "release"


def _captured_exponents(
    monkeypatch: pytest.MonkeyPatch, run: Callable[[], object]
) -> list[Fraction]:
    """The exact γ = numerator/denominator of every Bernoulli(exp(-γ)) the selection draws."""
    seen: list[Fraction] = []
    original = bexp_words

    def spy(rng: Rng, x: np.ndarray, exact: Callable[[int], tuple[int, int]]) -> np.ndarray:
        seen.extend(Fraction(*exact(i)) for i in range(x.size))
        return original(rng, x, exact)

    monkeypatch.setattr("dpcurator.mechanisms.exponential.bexp_words", spy)
    run()
    return seen


@pytest.mark.parametrize("top", [10, 300, 900])
def test_permute_and_flip_uses_exactly_the_requested_epsilon(
    monkeypatch: pytest.MonkeyPatch, top: int
) -> None:
    # Before: ε was rounded to a precision chosen from the largest score gap, so neighbours
    # (different gaps) ran at different ε. Now γ_r = ε·gap_r/(2Δ) exactly, whatever the scores.
    epsilon = 0.1  # an exact binary fraction with a 53-bit numerator; gaps stay below the cap
    scores = np.array([0, 3, top, 7], dtype=np.int64)
    exponents = _captured_exponents(
        monkeypatch, lambda: permute_and_flip(scores, epsilon, 1, SeededRng(0))
    )
    gaps = top - scores
    assert exponents == [Fraction(epsilon) * int(g) / 2 for g in gaps]


@pytest.mark.parametrize(
    "scores",
    [
        np.array([-(2**63), INT64_MAX, 0, 2**62], dtype=np.int64),
        np.array([0, 2**64 - 1, 5], dtype=np.uint64),
        np.array([-(2**63), -(2**63) + 1], dtype=np.int64),
    ],
)
@pytest.mark.parametrize("epsilon", [1e-9, 1e-6, 1.0, 1e6])
def test_selection_never_raises_on_score_values(scores: np.ndarray, epsilon: float) -> None:
    winner = int(np.argmax(scores))
    chosen = permute_and_flip(scores, epsilon, rng=SeededRng(2))
    assert 0 <= chosen < scores.size
    drawn = exponential_mechanism(scores, epsilon, rng=SeededRng(2), size=3)
    assert drawn.shape == (3,)
    if epsilon == 1e6:  # a gap of 2^62 or more: the winner is certain
        assert chosen == winner
        assert drawn.tolist() == [winner] * 3


@pytest.mark.parametrize(
    "values",
    [[np.nan], [np.inf, -np.inf], [16_777_215.0, 16_777_216.0], [1e300, -1e308]],
)
def test_float_noise_is_total(values: list[float]) -> None:
    # Before: NaN raised, and so did any value beyond 2^52 grid steps (2^24 at ε = 1 here).
    out = Laplace(1).release_floats(values, rng=SeededRng(3))
    assert out.shape == (len(values),)
    assert Gaussian(1).release_floats(values, rng=SeededRng(3)).shape == (len(values),)
    above = AboveThreshold(epsilon=1, sensitivity=1, threshold=2.0**24)
    assert above.first_above(values, rng=SeededRng(3)) in (None, *range(len(values)))
    assert above.first_above_batch(np.array(values), rng=SeededRng(3)) in (
        None,
        *range(len(values)),
    )


def test_float_noise_fills_nan_and_clamps_to_the_public_range() -> None:
    mech = Laplace(1)
    nan, huge, tiny = mech.release_floats([np.nan, np.inf, -1e308], rng=SeededRng(4))
    assert abs(nan) < 100  # NaN is released as 0 plus noise
    assert huge == pytest.approx(2.0**62 * 2.0**-30, rel=1e-6)  # clamped to +2^62 grid steps
    assert tiny == pytest.approx(-(2.0**32), rel=1e-6)


def test_integer_noise_saturates_instead_of_wrapping() -> None:
    values = np.array([INT64_MAX, -INT64_MAX], dtype=np.int64)
    out = Laplace(2**40).release_integers(values, rng=SeededRng(5))
    assert out[0] > 2**62  # no wrap-around to the other sign
    assert out[1] < -(2**62)


@pytest.mark.parametrize(
    ("factory", "parameter"),
    [
        (lambda: Laplace(2**52 + 1), "scale"),
        (lambda: Laplace.for_epsilon(1e-300, 1), "scale"),
        (lambda: Laplace.for_epsilon(5e-324, 1), "scale"),
        (lambda: Gaussian(2**31 + 1), "sigma"),
        (lambda: Gaussian.for_rho(1e-30, 1), "sigma"),
    ],
)
def test_noise_beyond_the_samplers_range_is_refused_at_construction(
    factory: Callable[[], object], parameter: str
) -> None:
    with pytest.raises(ParameterError, match=f"'{parameter}'"):
        factory()


@pytest.mark.parametrize("scale", [Fraction(2**52), Fraction(2**52 - 1, 3), Fraction(10**9)])
@pytest.mark.parametrize("alpha", [0.05, 1e-9])
def test_laplace_halfwidth_is_exact_and_fast_at_the_largest_scales(
    scale: Fraction, alpha: float
) -> None:
    # Before: a float loop that never ends once exp(-1/scale) rounds to 1. Now a closed form,
    # rounded up to the smallest float whose integer part is a valid half-width.
    start = time.perf_counter()
    width = Laplace(scale).ci_halfwidth(alpha)
    assert time.perf_counter() - start < 1.0
    below = int(math.nextafter(width, 0.0))
    assert (
        discrete_laplace_tail(scale, int(width) + 1)
        <= alpha
        < discrete_laplace_tail(scale, below + 1)
    )


@pytest.mark.parametrize("sigma", [Fraction(1, 10**400), Fraction(1, 100), 2.0**-1074])
def test_gaussian_halfwidth_of_a_tiny_sigma_is_zero(sigma: object) -> None:
    # Before: σ² underflowed to 0, the weights became NaN and the half-width raised IndexError.
    assert Gaussian(sigma).ci_halfwidth(1e-300) == 0.0


@pytest.mark.parametrize("k", [2, 3, 7])
@pytest.mark.parametrize("epsilon", [1e-9, 1e-6, 1e-3, 1.0, 30.0, 1e9])
def test_randomized_response_p_is_exact_and_above_one_over_k(k: int, epsilon: float) -> None:
    p = KaryRandomizedResponse(epsilon, k).truth_probability
    assert p > Fraction(1, k)
    with mpmath.workdps(80):
        exact = mpmath.exp(epsilon) / (mpmath.exp(epsilon) + k - 1)
        mp_p = mpmath.mpf(p.numerator) / p.denominator
        assert mp_p <= exact
        assert exact - mp_p <= mpmath.mpf(2) ** -63
        assert mpmath.log(mp_p * (k - 1) / (1 - mp_p)) <= epsilon


@pytest.mark.parametrize("epsilon", [9.99e-10, 1e-15, 1e-16, 5e-324])
def test_randomized_response_refuses_epsilon_below_the_minimum(epsilon: float) -> None:
    # Before: ε ≈ 1e-16 was accepted and p was rounded below 1/k (privacy loss above ε).
    with pytest.raises(ParameterError, match="'epsilon'"):
        KaryRandomizedResponse(epsilon, 3)


@pytest.mark.parametrize("epsilon", [1e-4, 1e-6])
def test_gaussian_for_approx_takes_the_zcdp_route_beyond_the_exact_range(epsilon: float) -> None:
    # Before: the exact discrete curve was tried first and refused σ > 10^4 (ParameterError).
    mech = Gaussian.for_approx(epsilon, 1e-6, 1)
    assert mech.epsilon(1, 1e-6) <= epsilon
