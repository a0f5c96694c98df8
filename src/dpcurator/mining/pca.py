"""Differentially private PCA from a noisy second-moment matrix (the "Analyze Gauss" template of
Dwork, Talwar, Thakurta & Zhang 2014, with pure-ε discrete Laplace noise; SuLQ, Blum, Dwork,
McSherry & Nissim 2005, §4).

Rows are clamped to public bounds and centred on the bounds' midpoint (y = x - mid, |y_j| <= r_j
with r_j = (upper_j - lower_j) / 2). Three noisy aggregates are released: the count n, the sum
Σ y and the upper triangle of Σ y yᵀ. The covariance Σ y yᵀ / n - m mᵀ (m = Σ y / n) is then
symmetrised and eigendecomposed; everything after the release is post-processing.

Privacy guarantee: adding or removing one row changes the count by 1, the sum by at most Σ r_j and
the upper triangle of y yᵀ by at most Σ_{i<=j} r_i r_j (all in L1 norm). The budget is split
:data:`SHARES` (count, sum, second moment), each released with discrete Laplace noise calibrated
to its share (grid rounding included), so the fit is ε-DP by sequential composition.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, fail
from dpcurator.mechanisms import Laplace
from dpcurator.mining._data import Array, as_bounds, clamp_rows, epsilon_of
from dpcurator.random import Rng, default_rng

__all__ = ["PCA", "SHARES"]

#: Shares of ε for the count, the sum and the second-moment matrix.
SHARES = (Fraction(1, 10), Fraction(2, 10), Fraction(7, 10))


class PCA:
    """ε-DP principal components: ``fit`` then ``transform`` (sklearn-like).

    Attributes after ``fit``: ``components_`` (rows), ``explained_variance_``, ``mean_``,
    ``n_iter_`` (1: one release) and ``epsilon_spent_`` (exact).
    """

    def __init__(self, n_components: int, epsilon: object, bounds: object) -> None:
        owner = "PCA"
        self.epsilon = epsilon_of(owner, epsilon)
        self.lower, self.upper = as_bounds(owner, bounds)
        dims = self.lower.size
        self.n_components = check_int(owner, "n_components", n_components, minimum=1)
        if self.n_components > dims:
            raise fail(owner, "n_components", f"<= the number of columns ({dims})", n_components)
        radius = (self.upper - self.lower) / 2
        self._upper_index = np.triu_indices(dims)
        outer = np.outer(radius, radius)[self._upper_index]
        self.sensitivities = (
            Fraction(1),
            Fraction(float(radius.sum())),
            Fraction(float(outer.sum())),
        )
        self._dimensions = (1, dims, outer.size)
        count_share, sum_share, moment_share = (self.epsilon * s for s in SHARES)
        self.count_mechanism = Laplace.for_epsilon(count_share, 1)
        self.sum_mechanism = Laplace.for_epsilon_floats(sum_share, self.sensitivities[1], dims)
        self.moment_mechanism = Laplace.for_epsilon_floats(
            moment_share, self.sensitivities[2], outer.size
        )
        self.components_: Array | None = None
        self.explained_variance_: Array | None = None
        self.mean_: Array | None = None
        self.n_iter_ = 0
        self.epsilon_spent_ = Fraction(0)

    def fit(self, X: npt.ArrayLike, rng: Rng | None = None) -> PCA:
        source = rng or default_rng()
        rows = clamp_rows("PCA.fit", X, self.lower, self.upper)
        middle = (self.lower + self.upper) / 2
        centred = rows - middle
        dims = self.lower.size
        count = self.count_mechanism.release_integers(np.array([rows.shape[0]]), source)[0]
        sums = self.sum_mechanism.release_floats(centred.sum(axis=0), source)
        moment = (centred.T @ centred)[self._upper_index]
        noisy_moment = self.moment_mechanism.release_floats(moment, source)
        self.epsilon_spent_ = (
            self.count_mechanism.epsilon(1)
            + self.sum_mechanism.epsilon_for_floats(self.sensitivities[1], dims)
            + self.moment_mechanism.epsilon_for_floats(self.sensitivities[2], self._dimensions[2])
        )
        n = max(int(count), 1)
        matrix = np.zeros((dims, dims))
        matrix[self._upper_index] = noisy_moment
        matrix = matrix + np.triu(matrix, 1).T
        mean = sums / n
        covariance = matrix / n - np.outer(mean, mean)
        values, vectors = np.linalg.eigh(covariance)
        order = np.argsort(values)[::-1][: self.n_components]
        self.components_ = vectors[:, order].T
        self.explained_variance_ = np.maximum(values[order], 0.0)
        self.mean_ = np.clip(middle + mean, self.lower, self.upper)
        self.n_iter_ = 1
        return self

    def transform(self, X: npt.ArrayLike) -> Array:
        """Project rows on the fitted components (post-processing, no cost)."""
        if self.components_ is None or self.mean_ is None:
            raise fail("PCA.transform", "self", "fitted (call fit first)", "an unfitted model")
        rows = clamp_rows("PCA.transform", X, self.lower, self.upper)
        projected: Array = (rows - self.mean_) @ self.components_.T
        return projected
