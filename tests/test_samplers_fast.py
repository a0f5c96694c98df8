"""Tests of the one-word exact decisions (dpcurator.random.samplers.inversion) and of the samplers
built on them at every batch size.

Statistical tests follow tests/test_samplers.py: ~10^5-10^6 draws from a seeded ChaCha20 stream, a
chi-square test against the exact pmf (mpmath, 40 digits) at alpha = 1e-6 per test, and a power
check (the same sample must be rejected against the scale or σ multiplied by 0.9 and by 1.1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from dpcurator.random import Rng, SeededRng, discrete_gaussian, discrete_laplace
from dpcurator.random.samplers import gaussian, inversion
from tests.test_samplers import (
    MPF,
    assert_fits_and_has_power,
    cells,
    gaussian_cdf,
    geometric_cdf,
    laplace_cdf,
)

# -- exact arithmetic ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("num", "den"),
    [(0, 1), (1, 1), (1, 3), (2, 3), (10, 7), (45, 1), (2**40 + 1, 2**40), (10**6, 3), (7, 10**9)],
)
@pytest.mark.parametrize("prec", [1, 64, 200])
def test_exp_neg_bounds_bracket_the_true_value_tightly(num: int, den: int, prec: int) -> None:
    lo, hi = inversion.exp_neg_bounds(num, den, prec)
    with mpmath.workdps(120):
        true = mpmath.exp(-MPF(num) / den) * MPF(2) ** prec
        assert lo <= true <= hi
    assert hi - lo <= 4  # a few units of 2^-prec
    if num == 0:
        assert lo == hi == 2**prec


class ScriptedRng(Rng):
    """Serves a fixed byte string (then fails): for deterministic tests of the exact paths."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def random_bytes(self, n: int) -> bytes:
        if n > len(self.data):
            raise AssertionError("the exact path asked for more bits than scripted")
        out, self.data = self.data[:n], self.data[n:]
        return out


def _words(values: list[int]) -> bytes:
    return b"".join(v.to_bytes(8, "little") for v in values)


@pytest.mark.parametrize(("num", "den"), [(1, 2), (3, 1), (7, 10**9), (40, 1)])
def test_lazy_comparison_reads_more_bits_exactly_where_the_prefix_is_a_tie(
    num: int, den: int
) -> None:
    # The 63-bit prefix equal to floor(2^63 e^-x) cannot decide U < e^-x; the next 64 bits must.
    with mpmath.workdps(80):
        threshold = mpmath.exp(-MPF(num) / den)
        prefix = int(mpmath.floor(threshold * 2**63))
        nxt = int(mpmath.floor((threshold * 2**63 - prefix) * 2**64))  # the threshold's next bits
    for word, expected in [(nxt - 1, True), (nxt + 1, False)]:
        rng = ScriptedRng(_words([word]))
        assert inversion.lazy_below_exp(rng, prefix, 63, num, den) is expected
        assert rng.data == b""  # exactly one more word was read
    # A decided prefix reads nothing.
    assert inversion.lazy_below_exp(ScriptedRng(b""), prefix - 1, 63, num, den) is True
    assert inversion.lazy_below_exp(ScriptedRng(b""), prefix + 1, 63, num, den) is False


def test_exact_magnitude_matches_the_definition_on_scripted_uniforms() -> None:
    # K = max{k : U < c·q^k} computed in mpmath for U = (prefix + next word / 2^64) / 2^63.
    generator = np.random.default_rng(7)  # test data only
    for s, t, two_sided in [
        (1, 1, True),
        (1, 10, True),
        (3, 7, False),
        (7, 1, True),
        (1, 2**20, True),
    ]:
        for _ in range(20):
            prefix = int(generator.integers(1, 2**63))
            word = int(generator.integers(0, 2**63)) * 2 + 1
            with mpmath.workdps(80):
                u = (MPF(prefix) + MPF(word) / 2**64) / 2**63
                q = mpmath.exp(-MPF(s) / t)
                c = 2 / (1 + q) if two_sided else MPF(1)
                expected = max(0, int(mpmath.floor(mpmath.log(c / u) / mpmath.log(1 / q))))
            rng = ScriptedRng(_words([word] * 8))
            got = inversion._magnitude_exact(rng, prefix, 63, s, t, two_sided=two_sided)
            assert got == expected


def test_float_error_assumptions_hold_on_this_platform() -> None:
    """The certified margins assume float64 log (numpy's and math's) within 2^-44 of the truth
    for arguments in [2^39, 2^63); check a sample against mpmath, with a clear failure if this
    platform's libm is worse (the float paths would then not be certified)."""
    generator = np.random.default_rng(11)  # test data only
    v = generator.integers(2**39, 2**63, size=3000, dtype=np.int64)
    v[:3] = [2**39, 2**63 - 1, 2**62]
    logs = np.log(v.astype(np.float64))
    with mpmath.workdps(40):
        worst = max(
            max(
                abs(MPF(float(a)) - mpmath.log(int(b))),
                abs(MPF(math.log(int(b))) - mpmath.log(int(b))),
            )
            for a, b in zip(logs, v, strict=True)
        )
    assert worst < 2.0**-44, f"log error {float(worst):.3g}: the float margins are not valid here"


# -- the exact paths, forced -----------------------------------------------------------------------


@pytest.mark.statistical
def test_forced_exact_paths_give_the_exact_distributions(monkeypatch: pytest.MonkeyPatch) -> None:
    # Widen the float margins so that ~40% of the draws are decided by the exact integer path
    # (_magnitude_exact / lazy_below_exp); the samples must still fit the exact pmfs.
    calls = {"magnitude": 0, "bexp": 0}
    magnitude_exact, lazy_below_exp = inversion._magnitude_exact, inversion.lazy_below_exp

    def counted_magnitude(*args: object, **kwargs: bool) -> int:
        calls["magnitude"] += 1
        return magnitude_exact(*args, **kwargs)  # type: ignore[arg-type]

    def counted_bexp(*args: int) -> bool:
        calls["bexp"] += 1
        return lazy_below_exp(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(inversion, "_magnitude_exact", counted_magnitude)
    monkeypatch.setattr(inversion, "lazy_below_exp", counted_bexp)
    monkeypatch.setattr(inversion, "_BEXP_DELTA", 0.2)
    rng = SeededRng(401)
    n = 60_000
    scale = Fraction(7, 3)
    monkeypatch.setattr(inversion, "_LOG_MARGIN", 0.2 / float(scale))
    sample = discrete_laplace(rng, scale, n)
    assert_fits_and_has_power(sample, cells(-30, 30), lambda f: laplace_cdf(scale * Fraction(f)))
    assert calls["magnitude"] > n / 4
    sigma = Fraction(3)
    monkeypatch.setattr(inversion, "_LOG_MARGIN", 0.2 / 4)  # the proposals' scale is 4
    monkeypatch.setattr(gaussian, "_TABLE_MAX", 0)  # the float test, not the table
    gaussian._target.cache_clear()
    gaussian._cached_target.cache_clear()
    sample = discrete_gaussian(rng, sigma, n)
    gaussian._target.cache_clear()  # drop the table-less target
    gaussian._cached_target.cache_clear()
    assert_fits_and_has_power(sample, cells(-15, 15), lambda f: gaussian_cdf(sigma * Fraction(f)))
    assert calls["bexp"] > n / 10
    gamma = Fraction(1, 5)
    monkeypatch.setattr(inversion, "_LOG_MARGIN", 0.2 * float(gamma))
    sample = inversion.inversion_magnitudes(rng, 1, 5, n, two_sided=False)
    top = math.ceil(13 / gamma)
    assert_fits_and_has_power(sample, cells(0, top), lambda f: geometric_cdf(gamma / Fraction(f)))


# -- every batch size ------------------------------------------------------------------------------


def _batches(draw: Callable[[int], np.ndarray], batch: int, total: int) -> np.ndarray:
    return np.concatenate([draw(batch) for _ in range(total // batch)])


@pytest.mark.statistical
@pytest.mark.parametrize("batch", [1, 7, 1000])
@pytest.mark.parametrize("scale", [Fraction(1, 7), 1, Fraction(7, 3), 10**6])
def test_discrete_laplace_exact_at_every_batch_size(batch: int, scale: Fraction | int) -> None:
    # Batches up to 16 run the Python scalar path, larger ones the vectorised path (10^6 in
    # tests/test_samplers.py); both must give the exact distribution.
    rng = SeededRng(402)
    total = 70_000 if batch > 1 else 40_000
    if scale == Fraction(1, 7):
        total *= 5  # P[X != 0] = 0.0018: enough non-zero draws for the power check
    sample = _batches(lambda m: discrete_laplace(rng, scale, m), batch, total)
    exact = Fraction(scale)
    width = math.ceil(float(scale) * (math.log(total) + 2))
    assert_fits_and_has_power(
        sample, cells(-width, width), lambda f: laplace_cdf(exact * Fraction(f))
    )


@pytest.mark.statistical
@pytest.mark.parametrize("batch", [1, 7, 1000])
@pytest.mark.parametrize("sigma", [Fraction(1, 3), 1, Fraction(7, 3), 1000])
def test_discrete_gaussian_exact_at_every_batch_size(batch: int, sigma: Fraction | int) -> None:
    rng = SeededRng(403)
    total = 70_000 if batch > 1 else 40_000
    sample = _batches(lambda m: discrete_gaussian(rng, sigma, m), batch, total)
    exact = Fraction(sigma)
    width = math.ceil(float(sigma) * math.sqrt(2 * math.log(total)) + 2)
    assert_fits_and_has_power(
        sample, cells(-width, width), lambda f: gaussian_cdf(exact * Fraction(f))
    )


def test_seeded_draws_repeat_at_every_batch_size() -> None:
    for batch in (1, 7, 1000, 70_000):
        for draw in (discrete_laplace, discrete_gaussian):
            first = draw(SeededRng(3), 2.5, batch)
            assert first.tolist() == draw(SeededRng(3), 2.5, batch).tolist()
            assert first.dtype == np.int64
            assert first.shape == (batch,)
