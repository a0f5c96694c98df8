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

from dpcurator._validation import check_positive, check_real
from dpcurator.core.numbers import to_fraction
from dpcurator.mechanisms._grid import grid_exponent, grid_sensitivity, to_grid
from dpcurator.random import Rng, default_rng
from dpcurator.random.samplers import discrete_laplace


@dataclass(frozen=True)
class AboveThreshold:
    """Find the first query above a threshold, paying ε once for the whole stream.

    >>> from dpcurator.random import SeededRng
    >>> AboveThreshold(epsilon=1, sensitivity=1, threshold=50).first_above(
    ...     [1, 2, 3, 1000, 5], rng=SeededRng(0))
    3
    """

    epsilon: Fraction
    sensitivity: Fraction
    threshold: float

    def __init__(self, epsilon: object, sensitivity: object, threshold: object) -> None:
        owner = "AboveThreshold"
        object.__setattr__(self, "epsilon", to_fraction(check_positive(owner, "epsilon", epsilon)))
        object.__setattr__(
            self, "sensitivity", to_fraction(check_positive(owner, "sensitivity", sensitivity))
        )
        object.__setattr__(self, "threshold", float(check_real(owner, "threshold", threshold)))

    def _start(self, rng: Rng | None) -> tuple[Rng, int, int, Fraction]:
        """The randomness source, grid exponent, noisy threshold (grid units) and query scale."""
        source = rng or default_rng()
        k = grid_exponent(4 * self.sensitivity / self.epsilon)
        units = grid_sensitivity(self.sensitivity, k, 1)
        threshold_noise = int(discrete_laplace(source, 2 * units / self.epsilon, 1)[0])
        return (
            source,
            k,
            int(to_grid([self.threshold], k)[0]) + threshold_noise,
            4 * units / self.epsilon,
        )

    def first_above(self, answers: Iterable[float], rng: Rng | None = None) -> int | None:
        """Index of the first answer whose noisy value reaches the noisy threshold, or None.

        ``answers`` may be a lazy iterable: each answer is read only when needed, so an interactive
        analyst can stop early. Nothing is revealed about answers after the returned index.
        """
        source, k, noisy_threshold, query_scale = self._start(rng)
        for index, answer in enumerate(answers):
            noisy = int(to_grid([answer], k)[0]) + int(discrete_laplace(source, query_scale, 1)[0])
            if noisy >= noisy_threshold:
                return index
        return None

    def first_above_batch(self, answers: np.ndarray, rng: Rng | None = None) -> int | None:
        """Vectorised :meth:`first_above` for answers already computed (same distribution)."""
        source, k, noisy_threshold, query_scale = self._start(rng)
        units = to_grid(answers, k)
        noisy = units + discrete_laplace(source, query_scale, units.size)
        hits = np.flatnonzero(noisy >= noisy_threshold)
        return int(hits[0]) if hits.size else None
