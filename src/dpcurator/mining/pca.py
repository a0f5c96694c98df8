"""Differentially private PCA from a noisy second-moment matrix (the "Analyze Gauss" template of
Dwork, Talwar, Thakurta & Zhang 2014, with pure-ε discrete Laplace noise; SuLQ, Blum, Dwork,
McSherry & Nissim 2005, §4).

Values are clamped to public bounds and centred on the bounds' midpoint (y = x - mid, |y_j| <= r_j
with r_j = (upper_j - lower_j) / 2). One query of a session is released
(:mod:`dpcurator.mining._session`): the count n, the sums Σ y_j and the upper triangle of Σ y yᵀ
(sums of products, at most 64 aggregates: up to 9 columns). The covariance Σ y yᵀ / n - m mᵀ
(m = Σ y / n) is then symmetrised and eigendecomposed; the rest is post-processing.

Privacy guarantee: the session plans the query like any release (user-level contribution bounds
from the metadata; discrete Laplace noise per aggregate on its grid) and charges it once; the
budget is split :data:`SHARES` (count, sums, second moments; evenly within the sums and within
the moments), so the fit is ε-DP (``epsilon_spent_`` <= ε, exact).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, fail
from dpcurator.mining._data import Array, as_bounds, clamp_rows, epsilon_of
from dpcurator.mining._session import (
    array_table,
    check_affordable,
    release,
    release_epsilon,
    session_table,
)
from dpcurator.query.frontend.builder import count, sum_
from dpcurator.query.session import Session
from dpcurator.random import Rng

__all__ = ["PCA", "SHARES"]

#: Shares of ε for the count, the sum and the second-moment matrix.
SHARES = (Fraction(1, 10), Fraction(2, 10), Fraction(7, 10))


class PCA:
    """ε-DP principal components: ``fit(session, columns=[...])`` or ``fit(X)`` (with
    ``bounds``), then ``transform`` (sklearn-like).

    Attributes after ``fit``: ``components_`` (rows), ``explained_variance_``, ``mean_``,
    ``n_iter_`` (1: one release) and ``epsilon_spent_`` (exact).
    """

    def __init__(self, n_components: int, epsilon: object, bounds: object = None) -> None:
        owner = "PCA"
        self.epsilon = epsilon_of(owner, epsilon)
        self.bounds = None if bounds is None else as_bounds(owner, bounds)
        self.n_components = check_int(owner, "n_components", n_components, minimum=1)
        self.components_: Array | None = None
        self.explained_variance_: Array | None = None
        self.mean_: Array | None = None
        self.n_iter_ = 0
        self.epsilon_spent_ = Fraction(0)

    def fit(
        self,
        data: Session | npt.ArrayLike,
        rng: Rng | None = None,
        *,
        columns: Sequence[str] | None = None,
    ) -> PCA:
        """Fit on a session table's numeric ``columns`` (bounds from the metadata) or on an array
        (bounds given to the constructor; ``rng`` draws its noise)."""
        if isinstance(data, Session):
            table = session_table("PCA", data, columns)
        elif self.bounds is None:
            raise fail("PCA", "bounds", "given to fit an array", None)
        else:
            table = array_table(
                "PCA.fit",
                data,
                lower=self.bounds[0],
                upper=self.bounds[1],
                epsilon=self.epsilon,
                rng=rng,
            )
        dims = table.lower.size
        if self.n_components > dims:
            raise fail("PCA", "n_components", f"<= the number of columns ({dims})", dims)
        check_affordable("PCA", table.session, self.epsilon)
        pairs = [(int(i), int(j)) for i, j in zip(*np.triu_indices(dims), strict=True)]
        count_share, sum_share, moment_share = (float(s) for s in SHARES)
        query = table.query().agg(
            count(name="n", weight=count_share),
            *(sum_(table.centred(j), name=f"s{j}", weight=sum_share / dims) for j in range(dims)),
            *(
                sum_(
                    table.centred(i) * table.centred(j),
                    name=f"p{i}_{j}",
                    weight=moment_share / len(pairs),
                )
                for i, j in pairs
            ),
        )
        released = release(table.session, query, release_epsilon(self.epsilon))
        self.epsilon_spent_, values = released.epsilon, released.values
        count_value, sums, moment = values[0, 0], values[0, 1 : dims + 1], values[0, dims + 1 :]
        n = max(float(count_value), 1.0)
        matrix = np.zeros((dims, dims))
        matrix[np.triu_indices(dims)] = moment
        matrix = matrix + np.triu(matrix, 1).T
        mean = sums / n
        covariance = matrix / n - np.outer(mean, mean)
        eigenvalues, vectors = np.linalg.eigh(covariance)
        order = np.argsort(eigenvalues)[::-1][: self.n_components]
        self.components_ = vectors[:, order].T
        self.explained_variance_ = np.maximum(eigenvalues[order], 0.0)
        self.mean_ = np.clip(table.middle + mean, table.lower, table.upper)
        self.n_iter_ = 1
        return self

    def transform(self, X: npt.ArrayLike) -> Array:
        """Project rows on the fitted components (post-processing, no cost)."""
        if self.components_ is None or self.mean_ is None:
            raise fail("PCA.transform", "self", "fitted (call fit first)", "an unfitted model")
        rows = np.asarray(X, dtype=np.float64)
        if self.bounds is not None:
            rows = clamp_rows("PCA.transform", rows, *self.bounds)
        projected: Array = (rows - self.mean_) @ self.components_.T
        return projected
