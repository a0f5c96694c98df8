"""Tests of the samplers' fast paths (issue 26 item 2): cached parameters, one-value paths that read
their words under one lock, and the discrete Gaussian's tabulated acceptance test.

* The seeded outputs are pinned: SHA-256 digests of draws from :class:`SeededRng` over scales and
  batch sizes, recorded from the samplers as they were before these fast paths. The fast paths
  decide the same events from the same bits, so the outputs are identical (they could only differ
  when a rare exact fallback, probability below 2^-24 per draw, reads its extra bits at another
  point of the stream).
* Seeded goodness-of-fit tests (alpha = ``ALPHA``, each with the power check of
  :func:`tests.test_samplers.assert_fits_and_has_power`) cover the tabulated acceptance test with
  its exact fallback forced, and the one-value discrete Gaussian.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from dpcurator.random import SeededRng, discrete_gaussian, discrete_laplace
from dpcurator.random.samplers import gaussian, inversion
from tests.test_samplers import assert_fits_and_has_power, cells, gaussian_cdf

SCALES = [Fraction(1, 7), 0.5, 1, Fraction(7, 3), 10, 1000, 10**6, 2**21 + 0.5, 10**9]
#: Calls per batch size: batches up to 16 run the one-value paths, larger ones the vectorised.
CALLS = {1: 300, 7: 40, 16: 20, 17: 20, 1000: 4, 70_000: 1}
PINNED = {
    "discrete_laplace": [
        "e6053582b6470f51",
        "c845c48f2c27b009",
        "5ca32aefe6612edc",
        "b800b5a81be40564",
        "8fa0e7ca65c6ccf2",
        "e88e2a02003f6a1e",
        "d30771e89bb66758",
        "9a48679f607d7df9",
        "5215f8450fcba8b1",
    ],
    "discrete_gaussian": [
        "694d5b42be086a17",
        "885b7b1cb18e9d79",
        "17a459174db86fc5",
        "2005b010455e9cd9",
        "5b568def5eed8382",
        "ffe0996f6aa718c9",
        "4ac97434303c8851",
        "cbeffa3e3a54fa88",
        "90d5357c90385dcd",
    ],
}


def _digest(draw: Callable[..., np.ndarray], scale: object) -> str:
    h = hashlib.sha256()
    for batch, calls in CALLS.items():
        rng = SeededRng(batch)
        for _ in range(calls):
            h.update(draw(rng, scale, batch).astype("<i8").tobytes())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("draw", [discrete_laplace, discrete_gaussian])
def test_seeded_outputs_are_pinned(draw: Callable[..., np.ndarray]) -> None:
    got = [_digest(draw, scale) for scale in SCALES]
    assert got == PINNED[draw.__name__]


@pytest.mark.parametrize("sigma", [Fraction(1, 2), Fraction(7, 3), 10, 1000])
def test_threshold_table_brackets_the_exact_acceptance_probabilities(sigma: Fraction) -> None:
    # lo <= 2^64·exp(-x_m) < lo + width for every row, against exact integer bounds of exp.
    target = gaussian._Target(Fraction(sigma))
    assert target.table is not None
    lo, width = target.table
    rows = range(lo.size) if lo.size < 400 else [*range(200), *range(lo.size - 200, lo.size)]
    for m in rows:
        num, den = target.exponent(m)
        exact_lo, exact_hi = inversion.exp_neg_bounds(num, den, 64)  # around 2^64·e^(-x_m)
        low, span = int(lo[m]), int(width[m]) or 2**64
        assert low <= exact_lo
        assert exact_hi <= low + span
        assert span <= 2**25 + 2  # tight: the exact fallback is rare
    assert (int(lo[-1]), int(width[-1])) == (0, 1)  # the row every larger magnitude uses


def test_table_only_for_moderate_sigma() -> None:
    assert gaussian._Target(Fraction(1900)).table is not None
    assert gaussian._Target(Fraction(10**6)).table is None  # the log test instead


@pytest.fixture
def fresh_targets() -> Iterator[None]:
    """Targets built during the test are dropped afterwards (they may use a patched margin)."""
    gaussian._target.cache_clear()
    gaussian._cached_target.cache_clear()
    yield
    gaussian._target.cache_clear()
    gaussian._cached_target.cache_clear()


@pytest.mark.statistical
@pytest.mark.usefixtures("fresh_targets")
def test_tabulated_acceptance_with_forced_exact_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    # Widen the table's brackets so that about a third of the acceptance tests are decided by the
    # exact fallback (lazy_below_exp on the word's 64 bits); the sample must fit the exact pmf.
    calls = [0]
    lazy = inversion.lazy_below_exp

    def counted(*args: int) -> bool:
        calls[0] += 1
        return lazy(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(gaussian, "lazy_below_exp", counted)
    monkeypatch.setattr(gaussian, "_TABLE_MARGIN", 0.25)
    sigma = Fraction(7, 3)
    n = 120_000
    sample = discrete_gaussian(SeededRng(26), sigma, n)
    assert calls[0] > n / 10
    with mpmath.workdps(40):
        assert_fits_and_has_power(
            sample, cells(-15, 15), lambda f: gaussian_cdf(sigma * Fraction(f))
        )


@pytest.mark.statistical
@pytest.mark.parametrize("sigma", [Fraction(1, 2), 10])
def test_tabulated_acceptance_fits_the_exact_pmf(sigma: Fraction) -> None:
    sample = discrete_gaussian(SeededRng(262), sigma, 300_000)
    width = int(12 * sigma) + 2
    with mpmath.workdps(40):
        assert_fits_and_has_power(
            sample, cells(-width, width), lambda f: gaussian_cdf(Fraction(sigma) * Fraction(f))
        )


@pytest.mark.statistical
def test_one_value_gaussian_path_fits_the_exact_pmf() -> None:
    # Batches of at most 16 run Algorithm 3 in Python, reading each trial's two words at once.
    rng = SeededRng(2026)
    sigma = Fraction(7, 3)
    sample = np.concatenate([discrete_gaussian(rng, sigma, 5) for _ in range(8_000)])
    with mpmath.workdps(40):
        assert_fits_and_has_power(
            sample, cells(-15, 15), lambda f: gaussian_cdf(sigma * Fraction(f))
        )


def test_float_exp_assumption_holds_on_this_platform() -> None:
    """The table's margin assumes numpy's float64 exp within 2^-44 (relative) of the truth on
    [-64, 0]; check a sample against mpmath."""
    x = np.random.default_rng(12).uniform(0, 64, size=3000)  # test data only
    x[:3] = [0.0, 64.0, 1e-9]
    values = np.exp(-x)
    with mpmath.workdps(40):
        worst = max(
            abs(mpmath.mpf(float(v)) / mpmath.exp(-mpmath.mpf(float(a))) - 1)
            for v, a in zip(values, x, strict=True)
        )
    assert worst < 2.0**-44, f"exp error {float(worst):.3g}: the table margin is not valid here"


def test_parameter_caches_keep_validation_and_types() -> None:
    # Cached by type and value: True is refused even after 1 was cached, and 1 and 1.0 agree.
    rng = SeededRng(0)
    discrete_laplace(rng, 1, 3)
    discrete_gaussian(rng, 1, 3)
    for draw in (discrete_laplace, discrete_gaussian):
        with pytest.raises(ValueError, match="real number"):
            draw(rng, True, 3)
        with pytest.raises(ValueError, match="size"):
            draw(rng, 1, -1)
        assert draw(SeededRng(5), 1, 20).tolist() == draw(SeededRng(5), 1.0, 20).tolist()
        assert draw(SeededRng(5), 1, 20).tolist() == draw(SeededRng(5), Fraction(1), 20).tolist()
