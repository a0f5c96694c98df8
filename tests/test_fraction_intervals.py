"""Estimates of a fraction and their intervals lie in [0, 1], the estimate inside its interval
(issue 24, item 9): randomized-response surveys (:func:`dpcurator.service.stores.surveys.
unit_rows`) and pan-private streams (:func:`dpcurator.streams.pan_private.release_fraction`).

Seeded: every run is deterministic. The cases are chosen at the edges (true shares 0 and 1, a
stream whose every tracked bit is set), where the unclipped estimates leave [0, 1]; each test
also checks that they did (power: the clipping was exercised), so a test that passes for lack
of a hard case fails instead.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dpcurator.mechanisms.randomized_response import KaryRandomizedResponse
from dpcurator.random import SeededRng
from dpcurator.service.stores.surveys import unit_rows
from dpcurator.streams.pan_private import DensityEstimate, release_fraction

SEEDS = range(40)


def _inside(low: float, point: float, high: float) -> bool:
    return 0.0 <= low <= point <= high <= 1.0


def test_survey_estimates_and_intervals_lie_in_the_unit_interval() -> None:
    mechanism = KaryRandomizedResponse(Fraction(1), 3)
    answers = np.zeros(200, dtype=np.int64)  # true shares 1, 0, 0
    outside = 0
    for seed in SEEDS:
        out = mechanism.estimate_frequencies(mechanism.randomize(answers, SeededRng(seed)))
        outside += int(np.sum((out.estimate < 0) | (out.estimate > 1)))
        rows = unit_rows(["a", "b", "c"], out)
        for j, (row, truth) in enumerate(zip(rows, (1.0, 0.0, 0.0), strict=True)):
            assert _inside(row["ci_low"], row["estimate"], row["ci_high"]), (seed, row)
            # Clipping keeps coverage: a truth covered before is covered after.
            if out.ci_low[j] <= truth <= out.ci_high[j]:
                assert row["ci_low"] <= truth <= row["ci_high"], (seed, row)
    assert outside >= 20  # unclipped, about half of the 120 estimates leave [0, 1]


def _release(hits: int, seed: int) -> DensityEstimate:
    """Every bit set (hits = size) with bias 3/4: the unclipped fraction is near 2, far above
    1 + the half-width; no bit set: near -2."""
    return release_fraction(
        "test",
        hits,
        null_hits=5000.0,
        gap=Fraction(1, 4),
        size=10_000,
        sampled=False,
        epsilon=1,
        alpha=0.05,
        rng=SeededRng(seed),
    )


def test_pan_private_fraction_is_never_an_inverted_interval() -> None:
    above = 0
    for seed in SEEDS:
        high, low = _release(10_000, seed), _release(0, seed)
        assert _inside(high.ci_low, high.fraction, high.ci_high), (seed, high)
        assert _inside(low.ci_low, low.fraction, low.ci_high), (seed, low)
        above += int(high.ci_low == 1.0)
    assert above == len(SEEDS)  # the unclipped interval lay wholly above 1 every time
