"""Differentially private k-means in the SuLQ style (Blum, Dwork, McSherry & Nissim 2005, §5).

Lloyd's algorithm touching the data only through noisy aggregates: each iteration assigns every
row to its nearest current centre and releases, per cluster, a noisy count and a noisy sum of the
rows (centred on the midpoint of the public bounds); the new centre is noisy sum / noisy count.

Privacy guarantee: rows are clamped to public bounds [lower, upper]. Adding or removing one row
changes one cluster's count by 1 (L1 sensitivity 1) and one cluster's centred sum by at most
Σ_j (upper_j - lower_j) / 2 in L1 norm. Each iteration spends ε / iterations, half on the counts
(discrete Laplace, :class:`~dpcurator.mechanisms.Laplace`) and half on the sums (discrete Laplace on
a public grid, rounding included), so the fit is ε-DP by sequential composition over iterations
(parallel within one: each row is in one cluster). The initial centres are drawn uniformly in the
bounds from the random generator (independent of the data) unless given.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, fail
from dpcurator.mechanisms import Laplace
from dpcurator.mining._data import Array, as_bounds, clamp_rows, epsilon_of
from dpcurator.random import Rng, default_rng

__all__ = ["KMeans"]


class KMeans:
    """ε-DP k-means (SuLQ): ``fit`` spends ``epsilon`` over ``iterations`` noisy Lloyd steps.

    Attributes after ``fit``: ``cluster_centers_``, ``n_iter_`` and ``epsilon_spent_`` (exact).
    """

    def __init__(
        self,
        n_clusters: int,
        epsilon: object,
        bounds: object,
        iterations: int = 5,
        init: npt.ArrayLike | None = None,
    ) -> None:
        owner = "KMeans"
        self.n_clusters = check_int(owner, "n_clusters", n_clusters, minimum=1)
        self.epsilon = epsilon_of(owner, epsilon)
        self.lower, self.upper = as_bounds(owner, bounds)
        self.iterations = check_int(owner, "iterations", iterations, minimum=1)
        self.init = None if init is None else np.asarray(init, dtype=np.float64)
        if self.init is not None and self.init.shape != (self.n_clusters, self.lower.size):
            raise fail(
                owner, "init", f"shape ({self.n_clusters}, {self.lower.size})", self.init.shape
            )
        step = self.epsilon / self.iterations / 2
        self.sum_sensitivity = Fraction(float(np.sum(self.upper - self.lower))) / 2
        self.count_mechanism = Laplace.for_epsilon(step, 1)
        self.sum_mechanism = Laplace.for_epsilon_floats(step, self.sum_sensitivity, self.lower.size)
        self.cluster_centers_: Array | None = None
        self.n_iter_ = 0
        self.epsilon_spent_ = Fraction(0)

    @property
    def epsilon_per_iteration(self) -> Fraction:
        """The exact ε of one iteration (counts plus sums)."""
        dims = self.lower.size
        return self.count_mechanism.epsilon(1) + self.sum_mechanism.epsilon_for_floats(
            self.sum_sensitivity, dims
        )

    def fit(self, X: npt.ArrayLike, rng: Rng | None = None) -> KMeans:
        source = rng or default_rng()
        rows = clamp_rows("KMeans.fit", X, self.lower, self.upper)
        middle = (self.lower + self.upper) / 2
        if self.init is None:
            uniform = source.integers_below(2**53, self.n_clusters * self.lower.size) / 2.0**53
            centers = self.lower + uniform.reshape(self.n_clusters, -1) * (self.upper - self.lower)
        else:
            centers = np.clip(self.init, self.lower, self.upper)
        self.epsilon_spent_ = Fraction(0)
        for _ in range(self.iterations):
            labels = _nearest(rows, centers)
            counts = np.bincount(labels, minlength=self.n_clusters)
            sums = np.zeros_like(centers)
            np.add.at(sums, labels, rows - middle)
            noisy_counts = self.count_mechanism.release_integers(counts, source)
            noisy_sums = self.sum_mechanism.release_floats(sums, source)
            self.epsilon_spent_ += self.epsilon_per_iteration
            updated = middle + noisy_sums / np.maximum(noisy_counts, 1)[:, None]
            # A cluster whose noisy count is not positive keeps its previous centre.
            centers = np.where((noisy_counts > 0)[:, None], updated, centers)
            centers = np.clip(centers, self.lower, self.upper)
        self.cluster_centers_ = centers
        self.n_iter_ = self.iterations
        return self

    def predict(self, X: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The nearest fitted centre of each row (post-processing, no cost)."""
        if self.cluster_centers_ is None:
            raise fail("KMeans.predict", "self", "fitted (call fit first)", "an unfitted model")
        rows = clamp_rows("KMeans.predict", X, self.lower, self.upper)
        return _nearest(rows, self.cluster_centers_)


def _nearest(rows: Array, centers: Array) -> npt.NDArray[np.int64]:
    distances = ((rows[:, None, :] - centers[None, :, :]) ** 2).sum(axis=2)
    nearest: npt.NDArray[np.int64] = np.argmin(distances, axis=1).astype(np.int64)
    return nearest
