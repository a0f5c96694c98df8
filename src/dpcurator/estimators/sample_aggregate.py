"""Sample-and-aggregate (Nissim, Raskhodnikova & Smith 2007; Smith 2011) around ANY estimator.

The rows are split into k disjoint blocks, the user's estimator f runs on each block, each block
estimate is clamped into a public box Θ = Π_j [lower_j, upper_j] (NaN, a wrong shape or an
exception give the public ``fill``: never an error once the computation has started), and the
mean of the k block estimates is released with Laplace noise.

**Aggregation.** Clamped to Θ, the mean's noise has scale Λ₁/(kε) (Λ₁ = Σ_j (upper_j - lower_j)),
so its variance over the non-private σ²/n is 2Λ₁²n/(k²ε'²σ²) (ε' the mean's share): with
k = n^0.6, a Gaussian (mean, sd) box [-10, 10] x [0.01, 10] and σ = 2, 555·n^-0.2/ε², i.e. 35/ε²
at n = 10^6, and a ratio of 2 only at n ≈ 5·10^13 (ε = 1). When k is large enough, the
**widened winsorised mean** (Smith 2011) is used instead: per coordinate, the exponential
mechanism (permute-and-flip over :data:`QUARTILE_BINS` bins of the box) picks the quartiles a, b
of the k block estimates, the estimates are clamped to [a - w, b + w] ∩ Θ (w = b - a, widened by
:data:`WIDEN`) and their mean gets Laplace noise of scale (range width)/(kε'). The range then
scales with the block estimates' spread σ·sqrt(k/n), and the excess variance falls like
1/(k ε'²). It is used when the quartile selections' rank error at level
:data:`QUARTILE_ALPHA` is at most k/8 (:func:`winsorising_ready`: a public rule of k and ε), so
the range holds the middle quarter of the estimates with high probability; otherwise Θ.

**Privacy guarantee**: ε-DP, at the user level when ``person`` ids are given. One person's rows
all fall in one block (the block is a keyed hash of the person id, with a fresh random key, so it
depends on nothing else), so adding or removing a person changes one block estimate, inside Θ:
the mean moves by at most Σ_j (upper_j - lower_j)/k in L1, the sensitivity of the Laplace
release (ε·(1 - count_share)). With the widened winsorised mean, k is fixed by the released
count and a person SUBSTITUTES one of the k block estimates: each quartile score (the distance
of the target rank to a bin's ranks, times the level's denominator, from
:func:`~dpcurator.estimators.quantiles.quantile_scores`) moves by at most that denominator, so
each of the 2d permute-and-flip selections is ε_q-DP (:data:`QUARTILE_SHARE` of the
remaining ε split over them), and the winsorised mean, given the released range, moves by at
most its L1 width / k (the rest of ε). Without ids each row is a person and draws its block
uniformly at random, independently of the other rows. When k is not given it is chosen from a
Laplace count ñ of persons (ε·count_share) as k = round(ñ^0.6), inside the range ω(√n),
o(n^{2/3}) where the aggregate of bias-corrected estimates is efficient (Smith 2008; Dwork &
Smith 2009, Lemma 11).
Basic composition gives ε in total.

The interval covers the mean of the clamped (or winsorised) block estimates against the noise
(:attr:`Covers.NOISE`); :mod:`dpcurator.estimators.mle` adds the sampling part.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, check_positive, check_probability, fail
from dpcurator.core import progress
from dpcurator.core.measures import PureDP
from dpcurator.core.numbers import float_down, to_fraction
from dpcurator.estimators.quantiles import QuantileBins, quantile_scores
from dpcurator.estimators.release import Covers, Estimate, FloatArray, as_float_array, noisy
from dpcurator.mechanisms import Laplace, PermuteAndFlip
from dpcurator.random import Rng, default_rng

BlockEstimator = Callable[[FloatArray], object]

#: Exponent of n in the default number of blocks (between 1/2 and 2/3, Smith 2008).
BLOCK_EXPONENT = 0.6

#: Share of the aggregation's ε spent on the 2d quartile selections of the winsorised mean.
QUARTILE_SHARE = Fraction(3, 10)
#: Candidate bins of each quartile selection (equal-width over the coordinate's box).
QUARTILE_BINS = 1024
#: Failure probability of each quartile's rank-error bound in :func:`winsorising_ready`.
QUARTILE_ALPHA = 0.01
#: The winsorising range [a - WIDEN·w, b + WIDEN·w] around the quartiles a, b (w = b - a).
WIDEN = 1.0


@dataclass(frozen=True)
class Box:
    """A public parameter box Θ = Π_j [lower_j, upper_j] and the fill for failed blocks."""

    lower: FloatArray
    upper: FloatArray
    fill: FloatArray

    @classmethod
    def of(cls, owner: str, lower: object, upper: object, fill: object = None) -> Box:
        """Validate public bounds (scalars or vectors of one length; finite, lower < upper)."""
        low = as_float_array(owner, "lower", np.atleast_1d(np.asarray(lower)), ndim=1)
        high = as_float_array(owner, "upper", np.atleast_1d(np.asarray(upper)), ndim=1)
        if low.shape != high.shape or not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise fail(owner, "upper", f"finite, of the shape of lower {low.shape}", upper)
        if not np.all(low < high):
            raise fail(owner, "upper", "> lower in every coordinate", upper)
        middle = (low + high) / 2
        chosen = middle if fill is None else np.atleast_1d(np.asarray(fill, dtype=np.float64))
        if chosen.shape != low.shape or not np.all((low <= chosen) & (chosen <= high)):
            raise fail(owner, "fill", f"inside the box, of shape {low.shape}", fill)
        return cls(low, high, chosen)

    @property
    def dimension(self) -> int:
        """The number of parameters."""
        return int(self.lower.size)

    def clamp(self, estimate: object) -> FloatArray:
        """The block estimate clamped into the box, or the fill if it is not a finite vector."""
        try:
            vector = np.asarray(estimate, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            return self.fill
        if vector.shape != self.lower.shape or not np.all(np.isfinite(vector)):
            return self.fill
        return np.clip(vector, self.lower, self.upper)


@dataclass(frozen=True)
class EngineBlocks:
    """Person ids (one per row) whose blocks an engine has already formed: ``blocks[i]`` in
    [0, ``count``) is row i's block by the engine's keyed hash of its person (the query layer's
    :class:`~dpcurator.query.ir.BlockSample`, issue 14). Given as ``person``, it replaces the
    keyed hash of :func:`block_ids` (one implementation of the blocks, the engine's):
    the k blocks are the engine blocks merged as floor(b·k/count), so a person's rows still
    fall in one block, and the blocks differ in size by at most one engine block."""

    persons: tuple[object, ...]
    blocks: npt.NDArray[np.int64]
    count: int

    def __len__(self) -> int:
        return len(self.persons)

    def __iter__(self) -> Iterator[object]:
        return iter(self.persons)

    def merged(self, blocks: int) -> npt.NDArray[np.int64]:
        """Each row's block among ``blocks`` merged blocks (k > count leaves some empty)."""
        return (self.blocks * blocks) // self.count


def block_ids(rows: int, blocks: int, person: object, rng: Rng) -> npt.NDArray[np.int64]:
    """The block of each row: a keyed BLAKE2b hash of its person id, else a uniform draw (or
    the engine's blocks, merged, for :class:`EngineBlocks`)."""
    if person is None:
        return rng.integers_below(blocks, rows)
    if isinstance(person, EngineBlocks):
        return person.merged(blocks)
    key = rng.random_bytes(32)
    ids = person.to_numpy() if hasattr(person, "to_numpy") else np.asarray(person)
    out = np.empty(rows, dtype=np.int64)
    for i, pid in enumerate(ids.tolist()):
        digest = hashlib.blake2b(repr(pid).encode(), key=key, digest_size=8).digest()
        out[i] = int.from_bytes(digest, "big") % blocks
    return out


def block_estimates(
    estimator: BlockEstimator, data: FloatArray, ids: npt.NDArray[np.int64], blocks: int, box: Box
) -> FloatArray:
    """The k × d matrix of clamped (or filled) block estimates; never raises."""
    order = np.argsort(ids, kind="stable")
    bounds = np.searchsorted(ids[order], np.arange(blocks + 1))
    out = np.empty((blocks, box.dimension))
    step = max(1, blocks // 100)  # the progress of a job: block b of k, every 1% (public k)
    for b in range(blocks):
        if b % step == 0:
            progress.report(b, blocks)
        try:
            with warnings.catch_warnings():  # a warning would tell the analyst about a block
                warnings.simplefilter("ignore")
                out[b] = box.clamp(estimator(data[order[bounds[b] : bounds[b + 1]]]))
        except Exception:  # the user's estimator may fail on any block: fill
            out[b] = box.fill
    return out


def default_blocks(noisy_count: int) -> int:
    """k = round(ñ^0.6), at least 1."""
    blocks: float = float(max(noisy_count, 1)) ** BLOCK_EXPONENT
    return max(1, round(blocks))


def noisy_people(rows: int, person: object, epsilon: Fraction, rng: Rng) -> int:
    """The ε-DP (Laplace, sensitivity 1) number of persons (of rows when ``person`` is None)."""
    ids = person.persons if isinstance(person, EngineBlocks) else person
    people = rows if ids is None else len(set(np.asarray(ids).tolist()))
    return int(Laplace.for_epsilon(epsilon, 1).release_integers([people], rng)[0])


def winsorising_ready(blocks: int, epsilon: Fraction, dimension: int) -> bool:
    """True when, with :data:`QUARTILE_SHARE` of the aggregation's ε split over the 2d quartile
    selections, each lands within k/8 ranks of its target with probability >= 1 - QUARTILE_ALPHA
    (the exponential mechanism's bound 2(ln m + ln 1/α)/ε_q ranks; public inputs only)."""
    each = float(epsilon * QUARTILE_SHARE) / (2 * dimension)
    ranks = 2 * (math.log(QUARTILE_BINS) + math.log(1 / QUARTILE_ALPHA)) / each
    return ranks <= blocks / 8


def winsorising_box(estimates: FloatArray, box: Box, epsilon: Fraction, rng: Rng) -> Box:
    """The box [a - w, b + w] ∩ Θ per coordinate from the quartiles a, b of the k estimates,
    chosen by 2d permute-and-flip selections of ε/(2d) each: ε-DP when one estimate is
    substituted (a score moves by at most the level's denominator 4; module docstring)."""
    lows, highs = [], []
    mechanism = PermuteAndFlip(epsilon / (2 * box.dimension), 4, QUARTILE_BINS)
    for j in range(box.dimension):
        bins = QuantileBins(float(box.lower[j]), float(box.upper[j]), QUARTILE_BINS)
        counts = bins.counts(estimates[:, j])
        edges = np.linspace(bins.lower, bins.upper, QUARTILE_BINS + 1)
        picks = [mechanism.select(quantile_scores(counts, Fraction(q, 4))[0], rng) for q in (1, 3)]
        low, high = edges[min(picks)], edges[max(picks) + 1]
        spread = WIDEN * (high - low)
        lows.append(max(low - spread, float(box.lower[j])))
        highs.append(min(high + spread, float(box.upper[j])))
    low_arr, high_arr = np.array(lows), np.array(highs)
    return Box(low_arr, high_arr, np.clip(box.fill, low_arr, high_arr))


def sample_and_aggregate_with_count(
    estimator: BlockEstimator,
    data: object,
    *,
    epsilon: float,
    lower: object,
    upper: object,
    blocks: int | None = None,
    person: object = None,
    fill: object = None,
    alpha: float = 0.05,
    count_share: float = 0.1,
    rng: Rng | None = None,
    method: str = "sample-and-aggregate (NRS07)",
    min_block_rows: int = 1,
) -> tuple[Estimate, int]:
    """:func:`sample_and_aggregate`, also returning the released person count (or -1 if none).
    ``min_block_rows`` (public) caps the k chosen from the noisy count ñ at ñ/min_block_rows,
    for estimators that need that many rows per block (post-processing of ñ)."""
    owner = "sample_and_aggregate"
    box = Box.of(owner, lower, upper, fill)
    table = as_float_array(owner, "data", data, ndim=2)
    eps = to_fraction(check_positive(owner, "epsilon", epsilon))
    level = float(check_probability(owner, "alpha", alpha, open_low=True, open_high=True))
    share = to_fraction(check_probability(owner, "count_share", count_share, open_high=True))
    if person is not None and len(person) != table.shape[0]:  # type: ignore[arg-type]
        raise fail(owner, "person", f"one id per row ({table.shape[0]})", "another length")
    if blocks is not None:
        check_int(owner, "blocks", blocks, minimum=1)
    elif share == 0:
        raise fail(owner, "count_share", "> 0 when blocks is not given", count_share)
    source = rng or default_rng()
    count = -1
    eps_mean = eps
    if blocks is None:
        eps_count = Fraction(float_down(eps * share))
        eps_mean = eps - eps_count
        count = noisy_people(table.shape[0], person, eps_count, source)
        blocks = min(default_blocks(count), max(1, count // min_block_rows))
    ids = block_ids(table.shape[0], blocks, person, source)
    estimates = block_estimates(estimator, table, ids, blocks, box)
    target = box
    if winsorising_ready(blocks, eps_mean, box.dimension):
        eps_quartiles = eps_mean * QUARTILE_SHARE
        target = winsorising_box(estimates, box, eps_quartiles, source)
        eps_mean -= eps_quartiles
        estimates = np.clip(estimates, target.lower, target.upper)
    pairs = zip(target.lower.tolist(), target.upper.tolist(), strict=True)
    sensitivity = sum((Fraction(h) - Fraction(lo) for lo, h in pairs), Fraction(0)) / blocks
    laplace = Laplace.for_epsilon_floats(eps_mean, sensitivity, box.dimension)
    middle = (target.lower + target.upper) / 2
    value = noisy(laplace, laplace.scale, estimates.mean(axis=0), source, middle)
    half = laplace.ci_halfwidth_floats(level)
    release = Estimate(value, value - half, value + half, Covers.NOISE, level, PureDP(eps), method)
    return release, count


def sample_and_aggregate(
    estimator: BlockEstimator,
    data: object,
    *,
    epsilon: float,
    lower: object,
    upper: object,
    blocks: int | None = None,
    person: object = None,
    fill: object = None,
    alpha: float = 0.05,
    count_share: float = 0.1,
    rng: Rng | None = None,
) -> Estimate:
    """ε-DP mean of ``estimator`` over disjoint blocks of ``data`` (see the module docstring).

    ``data`` is numpy, pandas or Polars (rows are passed to the estimator as a 2-D float array);
    ``lower``/``upper`` bound the estimator's output coordinates (public); ``person`` holds one
    id per row for user-level privacy.

    >>> from dpcurator.random import SeededRng
    >>> rows = [[float(i % 10)] for i in range(1000)]
    >>> out = sample_and_aggregate(lambda b: b.mean(), rows, epsilon=1e6, lower=0, upper=9,
    ...                            blocks=10, rng=SeededRng(1))
    >>> round(float(out.value[0]), 1)  # the mean of 10 block means
    4.5
    """
    release, _ = sample_and_aggregate_with_count(
        estimator, data, epsilon=epsilon, lower=lower, upper=upper, blocks=blocks,
        person=person, fill=fill, alpha=alpha, count_share=count_share, rng=rng,
    )  # fmt: skip
    return release


def blocks_for(n: int) -> int:
    """The default number of blocks for a public n: round(n^0.6) (ω(√n) and o(n^{2/3}))."""
    return default_blocks(check_int("blocks_for", "n", n, minimum=0))


__all__ = ["BLOCK_EXPONENT", "Box", "EngineBlocks", "blocks_for", "sample_and_aggregate"]
