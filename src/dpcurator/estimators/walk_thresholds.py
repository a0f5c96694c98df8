"""Boundaries that a random walk of independent discrete Laplace steps crosses with probability at
most β: the certification thresholds of quantile intervals
(:mod:`dpcurator.estimators.quantile_interval`).

The walk is N_m = Z_T / den + Z_1 + ... + Z_m (m = 0..M, in ranks), Z_T of scale ``offset_scale``
and the Z_i of scale ``shell_scale`` (discrete Laplace, Canonne, Kamath & Steinke 2020). An
interval's end is wrong only if some test m certifies it while its exact statistic is on the wrong
side, which needs N_m > t_m for that m; so P[the end is wrong] <= P[∃m: N_m > t_m], the walk's
boundary-crossing probability, and :func:`crossing_thresholds` makes that at most β.

Before, each test got β / (M + 1) by the union bound. The tests share Z_T and their earlier
shells, so they are strongly correlated and the union bound counted nearly the same event M + 1
times: the thresholds here are the marginal (1 - γ·w_m)-quantiles of the N_m, for public weights
w_m and the largest γ whose crossing probability, computed exactly, is at most β (γ·w_m >=
β·w_m / Σw, the weighted union bound's, so never above its thresholds). For a median's interval
at ε_ci = 1/2 with 20 equally weighted tests per side, the first thresholds drop from 16.0, 20.5
and 23.5 ranks to 11.5, 15.5 and 18.5. Unequal weights move level to the tests that certify most
ends (:data:`~dpcurator.estimators.quantile_interval.STEP_WEIGHTS`).

Computation (an upper bound, so the guarantee holds exactly): every step V is rounded UP to a grid
of u ranks (a power of two, about a 32nd of the widest noise scale; integer steps stay exact when
u divides 1), its mass below -J·u moved up to -J·u and its mass above J·u counted as crossing
(at most 10^-6 of β per step). The walk of rounded steps is above the true walk at every m, so
crosses whenever the true walk does. The crossing probability is the mass killed by a dynamic
programme over the walk's grid distribution (each step one FFT convolution, :func:`_convolve`;
mass far below the thresholds is moved up to a floor, which again only raises the walk), plus
the overflow, plus :data:`_ROUNDING_SLACK` per step for the FFT's floating-point error. Public
inputs only (scales, den, M, β); cached, since every group of a release asks for the same
thresholds.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt
from scipy.fft import irfft, next_fast_len, rfft

#: Grid points per unit of the widest noise scale.
_POINTS_PER_SCALE = 32

#: Added per step to the computed crossing probability for the FFT's floating-point error.
_ROUNDING_SLACK = 1e-9

#: Bisection steps on log γ between β / Σw and β / max(w).
_SEARCH_STEPS = 12

#: Most halvings of γ below β / Σw before giving up (the thresholds are then infinite: a
#: level below about (M + 1)·10^-9, the slack's, is asked for; every request does bounded work).
_MAX_HALVINGS = 64


@functools.lru_cache(maxsize=1024)
def crossing_thresholds(
    offset_scale: Fraction,
    den: int,
    shell_scale: Fraction,
    weights: tuple[float, ...],
    level: float,
) -> tuple[float, ...]:
    """t_0..t_M (in ranks, M = len(``weights``) - 1) with P[∃m <= M: N_m > t_m] <= ``level``
    for the walk of the module docstring, t_m the marginal (1 - γ·w_m)-quantile of N_m (all
    infinite, so that no test certifies, when no boundary on the grid can hold ``level``)."""
    steps = len(weights) - 1
    widest = max(float(offset_scale) / den, float(shell_scale))
    unit = 2.0 ** math.floor(math.log2(widest / _POINTS_PER_SCALE))
    reach = widest * (math.log(1 / level) + math.log(1e6 * sum(weights) / min(weights)) + 2)
    span = math.ceil(reach / unit)
    first, first_over = _rounded_up(offset_scale, Fraction(1, den), unit, span)
    step, step_over = _rounded_up(shell_scale, Fraction(1), unit, span)
    overflow = first_over + steps * step_over + (steps + 1) * _ROUNDING_SLACK
    tails = _marginal_tails(first, step, steps, span)

    def boundary(gamma: float) -> list[int]:
        # the first grid index whose tail is at most γ·w_m (each tail ends with a 0)
        return [int(np.argmax(tail <= gamma * w)) for tail, w in zip(tails, weights, strict=True)]

    def crosses(candidate: list[int]) -> bool:
        return _crossing(first, step, candidate, span) + overflow > level

    # the weighted union bound's γ, lowered in the unlikely case the overflow tips it over
    low, high = level / sum(weights), level / max(weights)
    for _ in range(_MAX_HALVINGS):
        if not crosses(best := boundary(low)):
            break
        low, high = low / 2, low
    else:  # a level at the overflow's and the slack's size: no boundary holds, none certifies
        return (math.inf,) * (steps + 1)
    for _ in range(_SEARCH_STEPS):
        gamma = math.sqrt(low * high)
        if crosses(candidate := boundary(gamma)):
            high = gamma
        else:
            low, best = gamma, candidate
    return tuple((index - span) * unit for index in best)


def _marginal_tails(
    first: npt.NDArray[np.float64], step: npt.NDArray[np.float64], steps: int, span: int
) -> list[npt.NDArray[np.float64]]:
    """P[Ñ_m > (i - span)·u] for each m, Ñ the walk of rounded steps with its mass below
    -span·u moved up to there after each step (array index 0)."""
    tails, pmf = [], first
    for m in range(steps + 1):
        if m:
            pmf = _floored(np.clip(_convolve(pmf, step), 0.0, None), span)
        tails.append(np.concatenate([np.cumsum(pmf[::-1])[::-1][1:], [0.0]]))
    return tails


def _crossing(
    first: npt.NDArray[np.float64],
    step: npt.NDArray[np.float64],
    boundary: list[int],
    span: int,
) -> float:
    """The probability that the rounded walk goes above its boundary at some m (array index i
    stands for (i - span)·u at every m, as in :func:`_marginal_tails`)."""
    alive, crossed = first.copy(), 0.0
    for m, index in enumerate(boundary):
        if m:
            alive = _floored(np.clip(_convolve(alive, step), 0.0, None), span)
        if index + 1 < alive.size:
            crossed += float(alive[index + 1 :].sum())
            alive = alive[: index + 1]
    return crossed


def _convolve(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """The full linear convolution of two 1-D arrays by real FFTs of a fast length, as
    ``scipy.signal.fftconvolve`` computes it (importing scipy.signal loads scipy.stats: a fifth
    of a server's start)."""
    if a.size == 1 or b.size == 1:
        return a * b
    size = a.size + b.size - 1
    fast = next_fast_len(size, real=True)
    return irfft(rfft(a, fast) * rfft(b, fast), fast)[:size]  # type: ignore[no-any-return]


def _floored(pmf: npt.NDArray[np.float64], span: int) -> npt.NDArray[np.float64]:
    """A convolution's ``pmf`` (index 0 = -2·span·u) on the first step's origin (index 0 =
    -span·u), its mass below moved up to index 0."""
    floored = pmf[span:].copy()
    floored[0] += pmf[:span].sum()
    return floored


def _rounded_up(
    scale: Fraction, per_unit: Fraction, unit: float, span: int
) -> tuple[npt.NDArray[np.float64], float]:
    """The probabilities of ceil(c·Z / u) on -J..J (c = ``per_unit`` ranks per unit of Z, Z
    discrete Laplace of ``scale``, J = ``span``), the mass below -J moved to -J, and the mass
    above J."""
    q = math.exp(-1 / float(scale))
    steps = np.arange(-span - 1, span + 1, dtype=np.float64)
    # Z <= floor(j·u / c) iff ceil(c·Z / u) <= j
    bounds = np.floor(steps * unit / float(per_unit))
    below = np.where(
        bounds >= 0,
        1 - np.power(q, np.maximum(bounds, 0) + 1) / (1 + q),
        np.power(q, -np.minimum(bounds, 0)) / (1 + q),
    )
    pmf = np.diff(below)
    pmf[0] += below[0]  # P[ceil(c·Z / u) <= -J]
    return np.clip(pmf, 0.0, None), q ** (float(bounds[-1]) + 1) / (1 + q)
