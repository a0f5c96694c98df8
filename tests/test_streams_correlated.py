"""The correlated-noise continual sum (issue 27, item 1): the BLT factorization's exact
sensitivity, the integer encoder's error bound, the released noise's variance and the CI's
coverage (seeded, alpha declared, power checked), the unknown horizon and user level."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import binom, chi2

from dpcurator.errors import ParameterError
from dpcurator.random import SeededRng
from dpcurator.streams import CorrelatedContinualSum
from dpcurator.streams.correlated import ANYTIME_LIMIT, blt_parameters
from dpcurator.streams.toeplitz import (
    coefficients,
    column_norm_squared,
    column_norm_squared_bound,
    power_floor,
    row_norm_squared,
    sqrt_factor_norm_squared,
)


def _exact_columns(horizon: int) -> list[Fraction]:
    """Every column's squared norm of the T × T BLT matrix C, in exact Fractions."""
    thetas, omegas = blt_parameters(horizon)
    exact_t = [Fraction(t) for t in thetas]
    exact_w = [Fraction(w) for w in omegas]
    c = [Fraction(1)] + [
        sum((w * t ** (k - 1) for t, w in zip(exact_t, exact_w, strict=True)), Fraction(0))
        for k in range(1, horizon)
    ]
    return [sum(v * v for v in c[: horizon - j]) for j in range(horizon)]


@pytest.mark.parametrize("horizon", [1, 2, 7, 64, 200])
def test_column_norm_bound_is_an_exact_upper_bound(horizon: int) -> None:
    """The privacy-critical norm: the bound is never below any column's exact squared norm and
    within 10^-30 of the largest (the first column)."""
    columns = _exact_columns(horizon)
    thetas, omegas = blt_parameters(horizon)
    bound = column_norm_squared_bound([Fraction(t) for t in thetas],
                                      [Fraction(w) for w in omegas], horizon)  # fmt: skip
    assert max(columns) == columns[0]
    assert bound >= columns[0]
    assert bound - columns[0] < Fraction(1, 10**30)
    lam = -np.log(np.array(thetas))
    assert math.isclose(column_norm_squared(lam, np.array(omegas), horizon), float(columns[0]),
                        rel_tol=1e-9)  # fmt: skip


def test_power_floor_is_a_lower_bound() -> None:
    base = Fraction(math.exp(-1e-6))
    for exponent in (0, 1, 5, 1000, 2**20 + 3):
        low = power_floor(base, exponent)
        assert low <= base**exponent if exponent <= 1000 else True
        assert math.isclose(float(low), float(base) ** exponent, rel_tol=1e-12)
    assert power_floor(Fraction(1, 3), 7) <= Fraction(1, 3) ** 7


@pytest.mark.parametrize("horizon", [16, 64, 1000])
def test_b_times_c_is_the_prefix_sum_matrix(horizon: int) -> None:
    """A = B C with B = A C^(-1) from the decoder's coefficients, and the doubling row norm is
    the explicit one."""
    thetas, omegas = (np.array(v) for v in blt_parameters(horizon))
    c, b = coefficients(thetas, omegas, horizon)
    n = min(horizon, 64)
    toeplitz_c = np.array([[c[i - j] if i >= j else 0.0 for j in range(n)] for i in range(n)])
    toeplitz_b = np.array([[b[i - j] if i >= j else 0.0 for j in range(n)] for i in range(n)])
    assert np.allclose(toeplitz_b @ toeplitz_c, np.tril(np.ones((n, n))), atol=1e-12)
    for t in (1, 2, horizon // 3, horizon):
        assert math.isclose(row_norm_squared(thetas, omegas, t), float((b[:t] ** 2).sum()),
                            rel_tol=1e-9)  # fmt: skip


def test_the_factorization_is_near_the_square_root_one() -> None:
    """The fitted BLT's worst-step variance factor is within 0.3% of the square-root
    factorization's up to T = 2^24 (30.04 at 2^20, the issue's goal being 30), and the anytime
    BLT within 1.91 times the square-root factorization's at every power of two t from 2^4 to
    2^36."""
    for exponent in (4, 8, 10, 12, 16, 20, 24):
        horizon = 2**exponent
        thetas, omegas = (np.array(v) for v in blt_parameters(horizon))
        lam = -np.log(thetas)
        factor = column_norm_squared(lam, omegas, horizon) * row_norm_squared(
            thetas, omegas, horizon
        )
        assert factor <= 1.003 * sqrt_factor_norm_squared(horizon) ** 2
    assert factor < 40.6
    thetas, omegas = (np.array(v) for v in blt_parameters(None))
    column = column_norm_squared(-np.log(thetas), omegas, ANYTIME_LIMIT)
    for exponent in range(4, 37):
        t = 2**exponent
        ratio = column * row_norm_squared(thetas, omegas, t) / sqrt_factor_norm_squared(t) ** 2
        assert ratio < 1.91, exponent


def _exact_encoding(stream: CorrelatedContinualSum, units: list[int]) -> list[Fraction]:
    """2^P (C x)_t in exact Fractions."""
    thetas = [Fraction(t) for t in stream.thetas.tolist()]
    omegas = [Fraction(w) for w in stream.omegas.tolist()]
    scale = Fraction(2) ** stream.lattice_bits
    out = []
    for t in range(len(units)):
        value = Fraction(units[t])
        for j in range(t):
            value += units[j] * sum(
                w * th ** (t - j - 1) for th, w in zip(thetas, omegas, strict=False)
            )
        out.append(scale * value)
    return out


@pytest.mark.parametrize("rho", [Fraction(1, 2), Fraction(1, 1000)])
def test_integer_encoder_is_within_its_error_bound(rho: Fraction) -> None:
    """|F_t(x) - 2^P (C x)_t| <= 1/2 + η at every step (the bound the sensitivity rests on);
    and on neighbouring streams F moves by at most the declared sensitivity."""
    rng = np.random.default_rng(5)
    units = rng.integers(0, 2**16 + 1, 40).tolist()
    stream = CorrelatedContinualSum(rho, 64, 0.0, 1.0)
    encoded = stream._encode(np.array(units, dtype=np.int64))
    exact = _exact_encoding(stream, units)
    worst = max(abs(Fraction(int(f)) - e) for f, e in zip(encoded, exact, strict=True))
    assert worst <= Fraction(1, 2) + stream._eta
    for slot in (0, 17, 39):
        other = list(units)
        other[slot] = 0 if units[slot] > 2**15 else 2**16
        fresh = CorrelatedContinualSum(rho, 64, 0.0, 1.0)
        moved = encoded - fresh._encode(np.array(other, dtype=np.int64))
        assert float(np.sqrt((moved.astype(np.float64) ** 2).sum())) <= stream.sensitivity


def test_rho_spent_and_the_lattice_slack() -> None:
    """ρ is spent exactly up to the float σ; with a horizon the charged rounding slack is
    below 10^-3 of the sensitivity; σ stays in the exact sampler's range."""
    for rho in (Fraction(1, 2), Fraction(1, 10**4), 5):
        stream = CorrelatedContinualSum.counter(rho, 2**12)
        assert stream.rho_spent <= rho
        assert float(stream.rho_spent) > float(rho) * (1 - 1e-9)
        ideal = 2**stream.lattice_bits * math.sqrt(float(stream.column_norm_squared))
        assert float(stream.sensitivity) <= ideal * (1 + 1e-3)
        assert stream.mechanism.sigma <= 2**30


def _errors(make, runs: int, horizon: int, seed: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Released minus true running sums, one row per run (three batches)."""
    rows = []
    events = (np.arange(horizon) % 3 == 0).astype(np.int64)
    truth = np.cumsum(events)
    cuts = (0, horizon // 5, horizon // 2, horizon)
    for run in range(runs):
        stream = make()
        rng = SeededRng(seed + run)
        out = [stream.update(events[a:b], rng) for a, b in itertools.pairwise(cuts)]
        rows.append(np.concatenate(out) - truth)
    return np.array(rows)


#: The statistical tests' level (two-sided, Bonferroni over the checked times).
ALPHA = 0.01
RUNS = 400
TIMES = (1, 7, 40, 64)


def test_released_noise_has_the_stated_variance() -> None:
    """Seeded: at several steps the sample variance of the released error over 400 runs is
    consistent with :meth:`variance` (χ² test at ALPHA; the output rounding adds at most 1/4).
    Power: a noise 1.25 times wider in standard deviation is rejected with probability > 0.99."""
    horizon = 64
    rho = Fraction(1, 200)
    errors = _errors(lambda: CorrelatedContinualSum.counter(rho, horizon), RUNS, horizon, 100)
    stream = CorrelatedContinualSum.counter(rho, horizon)
    level = ALPHA / len(TIMES)
    low, high = chi2.ppf(level / 2, RUNS - 1), chi2.ppf(1 - level / 2, RUNS - 1)
    for t in TIMES:
        stated = stream.variance(t)
        statistic = errors[:, t - 1].var(ddof=1) * (RUNS - 1)
        assert low * stated <= statistic <= high * (stated + 0.25), t
        assert abs(errors[:, t - 1].mean()) < 4 * math.sqrt(stated / RUNS)
    power = chi2.sf(high / 1.5625, RUNS - 1)
    assert power > 0.99


def test_ci_covers_at_every_step() -> None:
    """Seeded: the (1 - α) CI at α = 0.1 covers the true running sum at every step in at least
    the share a Binomial(400, 0.9) reaches with probability 1 - ALPHA; power: intervals half as
    wide fall below that share."""
    horizon, alpha = 64, 0.1
    rho = Fraction(1, 50)
    errors = _errors(lambda: CorrelatedContinualSum.counter(rho, horizon), RUNS, horizon, 900)
    stream = CorrelatedContinualSum.counter(rho, horizon)
    widths = np.array([stream.ci_halfwidth(t, alpha) for t in range(1, horizon + 1)])
    floor = binom.ppf(ALPHA / horizon, RUNS, 1 - alpha) / RUNS
    coverage = (np.abs(errors) <= widths).mean(axis=0)
    assert coverage.min() >= floor
    assert (np.abs(errors) <= widths / 2).mean(axis=0).min() < floor


def test_unknown_horizon_and_refusals() -> None:
    stream = CorrelatedContinualSum(1, None, -5.0, 10.0)
    assert stream.limit == ANYTIME_LIMIT
    out = stream.update([1.0, 100.0, float("nan"), -7.0], SeededRng(1))
    assert out.shape == (4,)
    assert stream.ci_halfwidth(4) > stream.ci_halfwidth(1) > 0
    bounded = CorrelatedContinualSum.counter(1, 3)
    with pytest.raises(ParameterError, match="at most 3 more events"):
        bounded.update([1, 1, 1, 1], SeededRng(1))
    assert bounded.time == 0
    with pytest.raises(ParameterError, match="rho"):
        CorrelatedContinualSum.counter(1e-12, None)
    with pytest.raises(ParameterError, match="persons"):
        CorrelatedContinualSum.counter(1, 8, max_events_per_person=2).update([1], SeededRng(1))


def test_huge_rho_releases_the_running_sums() -> None:
    """With almost no noise the decoder returns the running sums (any batch split): the
    encoder, the lattice and the decoder compose to A x."""
    values = np.random.default_rng(3).uniform(-2, 3, 300)
    stream = CorrelatedContinualSum(10**8, 300, -2.0, 3.0)
    rng = SeededRng(4)
    out = np.concatenate(
        [stream.update(values[a:b], rng) for a, b in ((0, 1), (1, 120), (120, 300))]
    )
    assert np.abs(out - np.cumsum(values)).max() <= stream.ci_halfwidth(300, 1e-6)
    assert stream.ci_halfwidth(300, 1e-6) < 0.1


def test_user_level_cap_and_state_round_trip() -> None:
    """Events past a person's k-th count as 0; a restored stream continues identically."""
    make = lambda: CorrelatedContinualSum.counter(10**8, 10, max_events_per_person=2)  # noqa: E731
    stream = make()
    out = stream.update([1, 1, 1, 1, 1], SeededRng(1), persons=[0, 0, 0, 1, 2])
    assert out.tolist() == [1, 2, 2, 3, 4]
    copy = make()
    copy.restore(stream.to_state())
    a = stream.update([1, 1], SeededRng(9), persons=[0, 3])
    b = copy.update([1, 1], SeededRng(9), persons=[0, 3])
    assert a.tolist() == b.tolist() == [4, 5]
    assert stream.state_bytes() < 1024
