"""The shells of a quantile interval (:mod:`dpcurator.estimators.quantile_shells`): disjoint,
sized from the noisy counts already drawn and never from the data."""

from __future__ import annotations

from typing import cast

import numpy as np

from dpcurator.estimators.quantile_interval import bin_edges
from dpcurator.estimators.quantile_shells import RunningSums, Side, walk
from dpcurator.estimators.quantiles import QuantileBins

BINS = QuantileBins(0.0, 100.0, 1000)
THRESHOLDS = [8.0, 11.0, 13.0, 15.0, 16.5, 18.0, 19.5, 20.5, 22.0]


def _side(counts: np.ndarray, step: int, k: int = 500) -> Side:
    edges = bin_edges(BINS)
    limit = 1 if step < 0 else BINS.bins - 1
    return Side(edges, RunningSums.of(counts), k, step, limit, np.zeros(0), None, 0)


def _walk(counts: np.ndarray, step: int, scripted: list[int]) -> tuple[float | None, list[int]]:
    """The end and the exact counts the walk asked to release, with the noisy counts scripted
    (whatever the exact ones)."""
    asked: list[int] = []
    replies = iter(scripted)

    def noisy(count: int) -> int:
        asked.append(count)
        return next(replies)

    side = _side(counts, step)
    end = walk(
        side,
        3,
        den=2,
        thresholds=THRESHOLDS,
        prior_density=28.75,  # a first shell of half a unit: need (3/2 + 11)·1.15 over 0.5
        noise_scale=2.0,
        noisy=noisy,
    )
    return end, asked


def test_shells_are_sized_from_the_noisy_counts_only() -> None:
    # Two very different data sets with the same noisy replies walk to the same edges: the
    # sizes are post-processing of released counts. Fails when the density is estimated from
    # the exact counts.
    gen = np.random.default_rng(0)
    flat = np.full(BINS.bins, 3, dtype=np.int64)
    peaked = gen.poisson(np.exp(-((np.arange(BINS.bins) - 500) ** 2) / 2e3) * 40).astype(np.int64)
    for step in (-1, 1):
        scripted = [1, 2, 3, 5, 8, 13, 21, 34]
        end_flat, asked_flat = _walk(flat, step, scripted)
        end_peaked, asked_peaked = _walk(peaked, step, scripted)
        assert end_flat == end_peaked
        assert len(asked_flat) == len(asked_peaked) >= 3
        assert asked_flat != asked_peaked  # the same shells hold other counts


class _Logged:
    """A side that records the positions whose counts the walk reads."""

    def __init__(self, side: Side) -> None:
        self.side, self.read = side, []

    def __getattr__(self, name: str) -> object:
        return getattr(self.side, name)

    def count(self, position: int) -> int:
        self.read.append(position)
        return self.side.count(position)


def _walk_logged(counts: np.ndarray, step: int) -> tuple[_Logged, list[int], float | None]:
    """The side (with the positions read), the exact counts asked for and the end of a walk whose
    noisy counts are all 0 (never enough: it takes all its steps)."""
    side = _Logged(_side(counts, step))
    asked: list[int] = []

    def noisy(count: int) -> int:
        asked.append(count)
        return 0

    end = walk(
        cast(Side, side),
        3,
        den=2,
        thresholds=THRESHOLDS,
        prior_density=28.75,  # a first shell of half a unit: need (3/2 + 11)·1.15 over 0.5
        noise_scale=2.0,
        noisy=noisy,
    )
    return side, asked, end


def test_shells_are_consecutive_ranges_going_out() -> None:
    # Each count asked for is that of the values between the previous shell's far edge and the
    # next one's, further out each time, so a value is in at most one shell (one unit of L1
    # sensitivity for all of them). Fails with nested shells (count(far) instead of
    # count(far) - count(previous)).
    counts = np.random.default_rng(1).integers(0, 9, BINS.bins).astype(np.int64)
    for step in (-1, 1):
        side, asked, end = _walk_logged(counts, step)
        assert end is None
        fars = side.read[::2]  # count(far) is read before count(previous far)
        assert side.read[1::2] == [0, *fars[:-1]]
        assert fars == sorted(set(fars))  # strictly further out
        nears = [0, *fars[:-1]]
        exact = [side.side.count(f) - side.side.count(n) for n, f in zip(nears, fars, strict=True)]
        assert asked == exact
        assert len(asked) == len(THRESHOLDS) - 1 or fars[-1] == side.side.positions


def test_a_test_passes_once_the_running_noisy_count_reaches_the_threshold() -> None:
    # base = 3, den = 2: the first shell's noisy 10 gives 2·10 >= 3 + 2·11 (t_1 = 11), so the
    # end is that shell's far edge, half a unit (the prior density's first distance) from e_k = 50.
    counts = np.full(BINS.bins, 1, dtype=np.int64)
    below, _ = _walk(counts, -1, [13])
    above, _ = _walk(counts, 1, [13])
    assert below == 49.5
    assert above == 50.5
    below, asked = _walk(counts, -1, [12, 30])  # 2·12 < 3 + 22: one more shell
    assert below is not None
    assert below < 49.5
    assert len(asked) == 2
