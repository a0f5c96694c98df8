"""Sparse vector: AboveThreshold (Dwork, Naor, Reingold, Rothblum & Vadhan 2009; Dwork & Roth 2014,
Algorithm 1; the corrected analysis of Lyu, Su & Li 2017).

Privacy guarantee: for a stream of queries each of sensitivity Δ, AboveThreshold with threshold
noise Lap(2Δ/ε) and query noise Lap(4Δ/ε) is ε-DP however many queries are asked, and it halts at
the first query whose noisy answer reaches the noisy threshold. Noise here is exact discrete
Laplace on a public grid (Mironov 2012 defence): answers and threshold are rounded to multiples of
2^k and the sensitivity is taken as floor(Δ / 2^k) + 1 grid steps to cover rounding.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpcurator._validation import check_positive, check_real, fail
from dpcurator.core.numbers import to_fraction
from dpcurator.mechanisms._grid import grid_exponent, grid_sensitivity, to_grid
from dpcurator.random import Rng, default_rng
from dpcurator.random.samplers.laplace import discrete_laplace


@dataclass(frozen=True)
class AboveThreshold:
    """Find the first query above a threshold, paying ε once for the whole stream.

    Answers are total: a NaN answer is read as 0 and answers are clamped to ±2^62 grid steps
    (:func:`~dpcurator.mechanisms._grid.to_grid`; clamping keeps the sensitivity), so no answer
    value raises. The grid and both noise scales depend on ε and Δ only and are fixed here.

    >>> from dpcurator.random import SeededRng
    >>> AboveThreshold(epsilon=1, sensitivity=1, threshold=50).first_above(
    ...     [1, 2, 3, 1000, 5], rng=SeededRng(0))
    3
    """

    epsilon: Fraction
    sensitivity: Fraction
    threshold: float
    grid: int
    threshold_scale: Fraction
    query_scale: Fraction

    def __init__(self, epsilon: object, sensitivity: object, threshold: object) -> None:
        owner = "AboveThreshold"
        eps = to_fraction(check_positive(owner, "epsilon", epsilon))
        sens = to_fraction(check_positive(owner, "sensitivity", sensitivity))
        k = grid_exponent(4 * sens / eps)
        units = grid_sensitivity(sens, k, 1)
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "sensitivity", sens)
        object.__setattr__(self, "threshold", float(check_real(owner, "threshold", threshold)))
        object.__setattr__(self, "grid", k)
        object.__setattr__(self, "threshold_scale", 2 * units / eps)
        object.__setattr__(self, "query_scale", 4 * units / eps)

    def _start(self, rng: Rng | None) -> tuple[Rng, int]:
        """The randomness source and the noisy threshold (grid units)."""
        source = rng or default_rng()
        threshold_noise = int(discrete_laplace(source, self.threshold_scale, 1)[0])
        return source, int(to_grid([self.threshold], self.grid)[0]) + threshold_noise

    def first_above(self, answers: Iterable[float], rng: Rng | None = None) -> int | None:
        """Index of the first answer whose noisy value reaches the noisy threshold, or None.

        ``answers`` may be a lazy iterable: each answer is read only when needed, so an interactive
        analyst can stop early. Nothing is revealed about answers after the returned index.
        """
        run = self.start(rng)
        for index, answer in enumerate(answers):
            if run.test(answer):
                return index
        return None

    def start(self, rng: Rng | None = None) -> AboveThresholdRun:
        """A run for queries asked one at a time (an interactive curator): draws the noisy
        threshold now; :meth:`AboveThresholdRun.test` each answer until one is above."""
        return AboveThresholdRun(self, *self._start(rng))

    def first_above_batch(self, answers: np.ndarray, rng: Rng | None = None) -> int | None:
        """Vectorised :meth:`first_above` for answers already computed (same distribution)."""
        source, noisy_threshold = self._start(rng)
        units = to_grid(answers, self.grid)
        noise = discrete_laplace(source, self.query_scale, units.size)
        hits = np.flatnonzero(units.astype(object) + noise.astype(object) >= noisy_threshold)
        return int(hits[0]) if hits.size else None


class AboveThresholdRun:
    """One run of :class:`AboveThreshold` over answers that arrive one at a time (same
    distribution as :meth:`AboveThreshold.first_above`); it ends at the first answer above."""

    def __init__(self, mechanism: AboveThreshold, source: Rng, noisy_threshold: int) -> None:
        self._mechanism = mechanism
        self._source = source
        self._threshold = noisy_threshold
        self.halted = False

    def test(self, answer: float) -> bool:
        """Whether ``answer``'s noisy value reaches the noisy threshold (then the run halts).

        Raises ParameterError after the run halted: a new run needs a fresh threshold."""
        if self.halted:
            raise fail("AboveThresholdRun.test", "run", "not halted (start a new run)", "halted")
        mechanism = self._mechanism
        noise = int(discrete_laplace(self._source, mechanism.query_scale, 1)[0])
        self.halted = int(to_grid([answer], mechanism.grid)[0]) + noise >= self._threshold
        return self.halted
