"""Confidence intervals of means, variances and standard deviations: ratios of noisy sums.

A mean is released as f(N̂, Ŝ) = c + Ŝ/N̂ (clamped to [L, U]) and a sample variance as
f(N̂, Ŝ, Q̂) = (Q̂ - Ŝ²/N̂)/(N̂ - 1) (clamped to [0, its largest possible value]) from a noisy
count N̂, a noisy centred sum Ŝ and a noisy centred sum of squares Q̂, each the exact value x_i
plus independent public noise e_i (:mod:`dpcurator.query.release.core`). The interval inverts the
distribution of the error f(x + e) - f(x), which depends on the unknown x mainly through the
count N (it shrinks as N grows) and is otherwise close to that of its linearisation:

1. the count's lower confidence bound N⁻ = N̂ - t_γ, with P[e_N > t_γ] <= γ = α/10, stands in
   for N (the error spreads more at a smaller count: the conservative end), and the released
   centred mean m̂ (and variance v̂) for the others: x̃ = (N⁻, N⁻·m̂[, v̂·(N⁻-1) + N⁻·m̂²]);
2. the (α'/2, 1 - α'/2) quantiles (q⁻, q⁺) of g(x̃ + e) - g(x̃), α' = α - γ, where g is f
   without the clamping to the statistic's range, are taken over POINTS draws of the noise
   alone: a fixed Kronecker (R_d) low-discrepancy sequence mapped through each noise's exact
   inverse distribution function (discrete Laplace; the discrete Gaussian's is approximated
   by the rounded normal one). The noise distributions are public, so this is post-processing:
   deterministic, no privacy cost, the same points for every release;
3. the interval [ĝ - q⁺, ĝ - q⁻] of the unclamped ĝ = g(N̂, Ŝ[, Q̂]), then clamped to the
   statistic's range (clamping is monotone, and the truth lies in the range, so coverage is
   kept); a standard deviation is the square root of the variance's interval.

When N⁻ < 1 (mean) or < 2 (variance) the interval is the whole range, as before. For a linear
statistic this is the exact basic (pivotal) interval; the count's bound (Berger & Boos 1994:
a nuisance parameter replaced by the worst case over its (1-γ) interval, at level α - γ) keeps
the ratio's heavier tails at small counts covered. It replaces the union bound over the parts'
(1-α/k) intervals, which reported the sum of worst cases of independent noises: about 3x the
needed width for variances (measured; see tests/test_ratio_intervals.py, which checks coverage
at n ∈ {10², 10⁴}, ε ∈ {0.1, 1}). The work is O(POINTS) per group and never raises on a value.

Speed: the draws depend on the public noise only, so they are computed once per noise and
cached; the groups are processed in blocks of _CHUNK rows (numpy over (groups x POINTS)
arrays of 1 MB, which stay in cache), and each tail quantile's two order statistics are
selected among the draws at or beyond a threshold read off every _STRIDE-th draw instead of
partitioning all POINTS (:func:`_tail_quantiles`: np.quantile's linear method, exactly). The
row's path depends on the released noisy values only (post-processing, no private input)
and only for speed: the numbers are the same either way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np
import numpy.typing as npt
from scipy.special import ndtri

from dpcurator.mechanisms import Gaussian, Laplace

#: Noise draws per interval (the quantiles' tails hold ~100 points at α = 0.05).
POINTS = 4096
#: The count's lower bound spends this fraction of α (step 1 of the module docstring).
NUISANCE_FRACTION = 0.1
#: Groups per vectorised block (a block holds _CHUNK x POINTS floats: 1 MB).
_CHUNK = 32
#: The tail order statistics are looked for below a threshold read off every _STRIDE-th draw.
_STRIDE = 32

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class MomentNoise:
    """The public noise of one moment output's parts, in the units of the values: a mechanism
    and a grid unit per part (None for a count that is the public n, exact)."""

    mechanisms: tuple[Laplace | Gaussian | None, ...]
    units: tuple[float, ...]

    def draws(self) -> FloatArray:
        """POINTS joint draws of the parts' noises, shape (POINTS, parts), read-only: computed
        once per noise (public parameters only) and cached."""
        return _draws(self)


@lru_cache(maxsize=64)
def _draws(noise: MomentNoise) -> FloatArray:
    u = _kronecker(len(noise.mechanisms))
    columns = [
        np.zeros(POINTS) if m is None else _inverse_cdf(m, u[:, i]) * unit
        for i, (m, unit) in enumerate(zip(noise.mechanisms, noise.units, strict=True))
    ]
    draws = np.stack(columns, axis=1)
    draws.setflags(write=False)
    return draws


@cache
def _kronecker(dims: int) -> FloatArray:
    """The R_d sequence (Roberts 2018): u_j = frac(0.5 + j·(φ⁻¹, φ⁻², ...)), φ the root > 1 of
    φ^(d+1) = φ + 1; evenly spread over (0, 1)^d."""
    phi = 2.0
    for _ in range(60):
        phi = (1 + phi) ** (1 / (dims + 1))
    steps = phi ** -np.arange(1, dims + 1)
    j = np.arange(1, POINTS + 1)[:, None]
    u: FloatArray = np.mod(0.5 + j * steps[None, :], 1.0)
    u.setflags(write=False)
    return u


def _inverse_cdf(mechanism: Laplace | Gaussian, u: FloatArray) -> FloatArray:
    """The noise at probabilities ``u`` (grid units): discrete Laplace exactly, with p = e^(-1/b),
    P[Z <= k] = 1 - p^(k+1)/(1+p) (k >= 0) and P[Z <= -k] = p^k/(1+p) (k >= 1); the discrete
    Gaussian as the rounded normal quantile."""
    if isinstance(mechanism, Gaussian):
        rounded: FloatArray = np.round(float(mechanism.sigma) * ndtri(u))
        return rounded
    log_p = -1.0 / float(mechanism.scale)
    log_1p = math.log1p(math.exp(log_p))
    low = u < 0.5
    # below the median: -j for the largest j >= 0 with P[Z <= -j] >= u (j = 0 always holds);
    # above it: the smallest k >= 0 with P[Z > k] = p^(k+1)/(1+p) <= 1 - u
    below = np.floor((np.log(np.where(low, u, 0.5)) + log_1p) / log_p)
    above = np.ceil((np.log(np.where(low, 0.5, 1.0 - u)) + log_1p) / log_p) - 1.0
    return np.where(low, -np.maximum(below, 0.0), np.maximum(above, 0.0))


def _mean_raw(centre: float, count: FloatArray, total: FloatArray) -> FloatArray:
    """c + S / max(N, 1), in place: overwrites ``count`` and ``total`` (float arrays)."""
    np.maximum(count, 1.0, out=count)
    np.divide(total, count, out=total)
    return np.add(total, centre, out=total)


def _variance_raw(count: FloatArray, total: FloatArray, squares: FloatArray) -> FloatArray:
    """(Q - S² / n) / (n - 1) with n = max(N, 2), in place: overwrites the three (float
    arrays)."""
    np.maximum(count, 2.0, out=count)
    np.multiply(total, total, out=total)
    np.divide(total, count, out=total)
    np.subtract(squares, total, out=squares)
    np.subtract(count, 1.0, out=count)
    return np.divide(squares, count, out=squares)


def moment_intervals(
    kind: str,
    observed: Sequence[FloatArray],
    noise: MomentNoise,
    bounds: tuple[float, float],
    centre: float,
    *,
    alpha: float,
) -> list[tuple[float, float, float]]:
    """(value, ci_low, ci_high) per group of a ``kind`` (mean, variance, stddev) output from
    its noisy parts ``observed`` (one array per part, one value per group: count, centred
    sum[, sum of squares]), by the module docstring's method. Total: every value gives an
    answer."""
    lower, upper = bounds
    span_squared = (upper - lower) * (upper - lower)
    gamma = alpha * NUISANCE_FRACTION
    count_noise = noise.mechanisms[0]
    slack = 0.0 if count_noise is None else count_noise.ci_halfwidth(2 * gamma)
    draws = noise.draws()
    levels = [(alpha - gamma) / 2, 1 - (alpha - gamma) / 2]
    with np.errstate(all="ignore"):
        count, total = observed[0], observed[1]
        copies = [np.array(part, dtype=np.float64) for part in observed]  # the raw overwrite
        counts_low = count - slack
        if kind == "mean":
            raw = _mean_raw(centre, *copies[:2])
            value = np.clip(raw, lower, upper)
            m = value - centre
            plug = np.stack([counts_low, counts_low * m], axis=1)
            fallback, smallest = (lower, upper), 1.0
        else:
            n = np.maximum(count, 2.0)
            raw = _variance_raw(*copies)
            value = np.clip(raw, 0.0, span_squared / 4 * n / (n - 1))
            m = np.clip(total / n, lower - centre, upper - centre)
            plug_squares = value * (counts_low - 1) + counts_low * m * m
            plug = np.stack([counts_low, counts_low * m, plug_squares], axis=1)
            fallback, smallest = (0.0, span_squared / 2), 2.0
        results = np.empty((len(count), 3))
        for start in range(0, len(count), _CHUNK):
            rows = slice(start, start + _CHUNK)
            errors = _errors(kind, centre, plug[rows], draws)
            low_q, high_q = _tail_quantiles(errors, levels)
            results[rows] = np.stack([value[rows], raw[rows] - high_q, raw[rows] - low_q], axis=1)
        high_cap = span_squared / 4 * counts_low / (counts_low - 1)
        range_low, range_high = (
            (lower, upper) if kind == "mean" else (0.0, np.where(counts_low > 2, high_cap, np.inf))
        )
        results[:, 1] = np.clip(np.nan_to_num(results[:, 1], nan=-np.inf), range_low, range_high)
        results[:, 2] = np.clip(np.nan_to_num(results[:, 2], nan=np.inf), range_low, range_high)
        wide = ~(counts_low >= smallest)
        results[wide, 1], results[wide, 2] = fallback
    if kind == "stddev":
        results = np.sqrt(np.maximum(results, 0.0))
    return [(float(v), float(low), float(high)) for v, low, high in results]


def _errors(kind: str, centre: float, plug: FloatArray, draws: FloatArray) -> FloatArray:
    """g(x̃ + e) - g(x̃) for each group (rows of ``plug``) and noise draw (rows of ``draws``),
    shape (groups, POINTS), non-finite values as ±inf."""
    parts = [plug[:, [i]] + draws[None, :, i] for i in range(plug.shape[1])]
    if kind == "mean":
        moved = _mean_raw(centre, *parts)
        base = _mean_raw(centre, plug[:, [0]], plug[:, [1]])
    else:
        moved = _variance_raw(*parts)
        base = _variance_raw(plug[:, [0]], plug[:, [1]], plug[:, [2]])
    errors: FloatArray = np.subtract(moved, base, out=moved)
    np.copyto(errors, 0.0, where=np.isnan(errors))
    return errors


def _tail_quantiles(errors: FloatArray, levels: Sequence[float]) -> FloatArray:
    """``np.quantile(errors, levels, axis=1)`` (linear method, no NaN in ``errors``), shape
    (levels, rows), from the two order statistics around each level (:func:`_tail_pair`; the
    upper tail's as the lower tail's of ``-errors``)."""
    size = errors.shape[1]
    sample = np.sort(errors[:, ::_STRIDE], axis=1)
    quantiles = np.empty((len(levels), len(errors)))
    for j, level in enumerate(levels):
        index = (size - 1) * level
        rank = min(math.floor(index), size - 2)
        gamma = index - rank
        if rank < size // 2:
            below, above = _tail_pair(errors, sample, rank, 1.0)
        else:
            high, low = _tail_pair(errors, sample, size - 2 - rank, -1.0)
            below, above = -low, -high
        # numpy's _lerp, for the same rounding
        step = above - below
        quantiles[j] = above - step * (1 - gamma) if gamma >= 0.5 else below + step * gamma
    return quantiles


def _tail_pair(
    values: FloatArray, sample: FloatArray, rank: int, sign: float
) -> tuple[FloatArray, FloatArray]:
    """The order statistics ``rank`` and ``rank + 1`` (from 0) of each row of ``sign * values``
    (``sign`` ±1; ``sample``: every _STRIDE-th value of each row, sorted).

    Every row's values at or beyond a threshold (the sample's value of expected rank about twice
    ``rank`` in the row) are gathered into a row padded with +inf, and only those are
    partitioned; rows where that set holds fewer than ``rank + 2`` values or too many (ties) are
    partitioned whole. Exact either way."""
    need = rank + 2
    position = min(2 * -(-need // _STRIDE), sample.shape[1] - 1)
    threshold = sample[:, [position if sign > 0 else -1 - position]]
    mask = values <= threshold if sign > 0 else values >= threshold
    counts = np.count_nonzero(mask, axis=1)
    slow = (counts < need) | (counts > 4 * (position + 1) * _STRIDE)
    mask[slow] = False
    counts[slow] = 0
    flat = np.flatnonzero(mask)
    starts = np.cumsum(counts) - counts
    gathered = np.full((len(values), max(int(counts.max()), need)), np.inf)
    row = flat // values.shape[1]
    gathered[row, np.arange(flat.size) - starts[row]] = sign * values.ravel()[flat]
    rest = np.flatnonzero(slow)
    pair: FloatArray = np.partition(gathered, (rank, rank + 1), axis=1)[:, rank : rank + 2]
    if rest.size:
        whole = np.partition(sign * values[rest], (rank, rank + 1), axis=1)
        pair[rest] = whole[:, rank : rank + 2]
    return pair[:, 0], pair[:, 1]
