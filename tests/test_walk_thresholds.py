"""The walk thresholds of quantile intervals (:mod:`dpcurator.estimators.walk_thresholds`),
against the exact crossing probability of the walk computed here on its own integer lattice."""

from __future__ import annotations

import math
import threading
from fractions import Fraction

import numpy as np
import pytest

from dpcurator.estimators.quantile_interval import step_weights
from dpcurator.estimators.quantile_refine import refined_quantile
from dpcurator.estimators.walk_thresholds import crossing_thresholds
from dpcurator.random import SeededRng


def _discrete_laplace_pmf(scale: float, support: np.ndarray) -> np.ndarray:
    q = np.exp(-1 / scale)
    return (1 - q) / (1 + q) * q ** np.abs(support)


def _exact_walk(den: int, offset_scale: int, shell_scale: int, steps: int):
    """(support in ranks, pmf) of den·N_0 and the step kernel of den·Z_i on the lattice."""
    support = np.arange(-300, 301)
    first = _discrete_laplace_pmf(offset_scale, support)  # Z_T, in den·ranks
    kernel = np.zeros(den * (support.size - 1) + 1)
    kernel[::den] = _discrete_laplace_pmf(shell_scale, support)  # den·Z_i
    return support, first, kernel


def _crossing(den: int, offset_scale: int, shell_scale: int, thresholds: list[float]) -> float:
    """P[∃m: N_m > t_m], by killing the lattice walk's mass above each boundary."""
    support, alive, kernel = _exact_walk(den, offset_scale, shell_scale, len(thresholds) - 1)
    low, crossed = int(support[0]), 0.0
    for m, t in enumerate(thresholds):
        if m:
            alive, low = np.convolve(alive, kernel), low + den * int(support[0])
        values = (low + np.arange(alive.size)) / den
        above = values > t
        crossed += float(alive[above].sum())
        alive = np.where(above, 0.0, alive)
    return crossed


def _union_thresholds(
    den: int, offset_scale: int, shell_scale: int, weights: tuple[float, ...], level: float
):
    """The marginal (1 - level·w_m/Σw)-quantiles of the N_m: the weighted union bound's
    thresholds."""
    support, pmf, kernel = _exact_walk(den, offset_scale, shell_scale, len(weights) - 1)
    low, out = int(support[0]), []
    for m, weight in enumerate(weights):
        if m:
            pmf, low = np.convolve(pmf, kernel), low + den * int(support[0])
        values = (low + np.arange(pmf.size)) / den
        tail = pmf[::-1].cumsum()[::-1]  # P[N_m >= value]
        out.append(float(values[np.argmax(tail <= level * weight / sum(weights))]))
    return out


@pytest.mark.parametrize(
    ("den", "weights"),
    [
        (1, (1.0,) * 5),
        (2, (1.0,) * 7),
        (3, (1.0,) * 4),
        (2, step_weights(8)),
        (1, (0.125, 1.0, 0.5)),
    ],
)
def test_thresholds_are_crossed_with_at_most_the_level(
    den: int, weights: tuple[float, ...]
) -> None:
    # Each threshold set is valid for the exact walk (computed on the lattice, no rounding) and
    # uses most of the level (the calibration is not the weighted union bound's β·w_m/Σw in
    # disguise), and no threshold is above that union bound's. Fails with the crossing check
    # dropped from the search (γ = β / max(w) is returned), or with the γ search skipped (the
    # union bound's γ).
    level = 0.05
    offset_scale, shell_scale = 3 * den, 2
    thresholds = list(
        crossing_thresholds(Fraction(offset_scale), den, Fraction(shell_scale), weights, level)
    )
    crossing = _crossing(den, offset_scale, shell_scale, thresholds)
    assert 0.6 * level <= crossing <= level
    union = _union_thresholds(den, offset_scale, shell_scale, weights, level)
    assert all(t <= u + 1 / 16 for t, u in zip(thresholds, union, strict=True))
    assert thresholds[0] < union[0]


def test_the_weights_move_the_level_between_tests() -> None:
    # The level goes where the weights put it: with the first test weighted an eighth of the
    # others, its threshold rises (6 to 9.5 ranks here) and the next test's falls (8 to 7), the
    # last's no higher. Fails with the weights ignored in the boundary.
    equal = crossing_thresholds(Fraction(4), 2, Fraction(2), (1.0, 1.0, 1.0), 0.05)
    weighted = crossing_thresholds(Fraction(4), 2, Fraction(2), (0.125, 1.0, 1.0), 0.05)
    assert weighted[0] > equal[0]
    assert weighted[1] < equal[1]
    assert weighted[2] <= equal[2]


def test_a_level_below_the_computations_precision_certifies_nothing_in_bounded_time() -> None:
    # α = 10^-11 asks for a crossing probability below the FFT slack the thresholds add: no
    # boundary can hold it, so every threshold is infinite and the interval is the bounds,
    # returned at once. Before, the search halved γ forever (a request that never ended).
    found: list[object] = []

    def release() -> None:
        found.append(crossing_thresholds(Fraction(6), 2, Fraction(3), step_weights(12), 5e-12))
        x = np.random.default_rng(0).normal(50, 10, 1_000)
        found.append(
            refined_quantile(x, 0.5, 1.0, lower=0, upper=100, alpha=1e-11, rng=SeededRng(1))
        )

    worker = threading.Thread(target=release, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive()
    thresholds, (value, low, high) = found
    assert all(math.isinf(t) for t in thresholds)
    assert (low, high) == (0.0, 100.0)
    assert low <= value <= high
