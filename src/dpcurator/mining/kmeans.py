"""Differentially private k-means in the SuLQ style (Blum, Dwork, McSherry & Nissim 2005, §5).

Lloyd's algorithm touching the data only through noisy aggregates of a query session
(:mod:`dpcurator.mining._session`): each iteration releases ONE grouped query,
``GROUP BY CASE <nearest current centre> ... END`` with a noisy count and, per column, a noisy sum
of the value centred on the midpoint of its public bounds; the new centre is the noisy sum over
the noisy count (a cluster whose noisy count is not positive keeps its centre).

Privacy guarantee: the CASE has literal results 0..k-1, so its keys are public and every cluster
is released (even empty ones). Each release is planned and charged by the session like any query
(user-level: one person's rows bounded by the metadata), so by sequential composition the fit
costs the sum of its releases' ε (``epsilon_spent_``), at most ``epsilon``, split evenly over
the iterations. The iteration count is public, fixed before the first release: ``iterations`` if
given, else (the default) :func:`noise_target_iterations` for a PUBLIC number of rows: ``rows`` (a
public bound given by the caller) or the metadata's ``public_size`` (replace-one tables); with
neither the fit is refused, free. ``iterations="noisy_count"`` opts in to the same rule on a
noisy count instead: :data:`COUNT_SHARE` of ε buys a noisy total count n̂ and the rest is split
over the iterations, so the total is ε but the per-release ε (and the iteration count) depend on
that noisy count. The count's share within an iteration minimises the squared error of the
centres in units of the half-ranges: error ∝ Σ_j 1/ε_j² + (d/3)/ε_N² (a centred cluster mean
uniform over its range has m_j² = r_j²/3), so ε_N : ε_j = (d/3)^(1/3) : 1. Initial centres
are spread out in the middle half of the bounds (farthest-point choice among uniform candidates)
from the random generator only, never from the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, fail
from dpcurator.mining._data import Array, as_bounds, clamp_rows, epsilon_of
from dpcurator.mining._session import (
    Table,
    array_table,
    check_affordable,
    release,
    release_epsilon,
    session_table,
)
from dpcurator.query.frontend.builder import count, sum_
from dpcurator.query.frontend.row_expressions import Expression, col, lit, when
from dpcurator.query.session import Session
from dpcurator.random import Rng, default_rng

__all__ = ["COUNT_SHARE", "NOISE_TARGET", "NOISY_COUNT", "KMeans", "noise_target_iterations"]

#: The share of ε spent on the noisy total count that chooses the iteration count.
COUNT_SHARE = Fraction(1, 20)

#: ``iterations=NOISY_COUNT``: choose the iteration count from a noisy total count (opt-in).
NOISY_COUNT = "noisy_count"

#: The default rule's target: the noise standard deviation of a centre coordinate of an average
#: cluster (rows / clusters rows), as a fraction of the column's half-range, in every iteration.
NOISE_TARGET = Fraction(1, 40)

#: Su et al.'s bounds on the number of iterations (2016, §5).
_MIN_ITERATIONS, _MAX_ITERATIONS = 2, 7


class KMeans:
    """ε-DP k-means (SuLQ). ``fit(session, columns=[...])`` or ``fit(X)`` (with ``bounds``).

    ``iterations``: a count, None (:func:`noise_target_iterations` for the public ``rows`` or the
    metadata's ``public_size``) or :data:`NOISY_COUNT` (the rule on a noisy count; see the module
    docstring).
    Attributes after ``fit``: ``cluster_centers_``, ``n_iter_`` and ``epsilon_spent_`` (exact).
    """

    def __init__(
        self,
        n_clusters: int,
        epsilon: object,
        bounds: object = None,
        iterations: int | str | None = None,
        *,
        init: npt.ArrayLike | None = None,
        rows: int | None = None,
    ) -> None:
        owner = "KMeans"
        self.n_clusters = check_int(owner, "n_clusters", n_clusters, minimum=1)
        self.epsilon = epsilon_of(owner, epsilon)
        self.bounds = None if bounds is None else as_bounds(owner, bounds)
        self.iterations: int | str | None = (
            iterations
            if iterations is None or iterations == NOISY_COUNT
            else check_int(owner, "iterations", iterations, minimum=1)
        )
        self.rows = None if rows is None else check_int(owner, "rows", rows, minimum=1)
        self.init = None if init is None else np.asarray(init, dtype=np.float64)
        if self.init is not None and (self.init.ndim != 2 or self.init.shape[0] != n_clusters):
            raise fail(owner, "init", f"shape ({n_clusters}, columns)", self.init.shape)
        self.cluster_centers_: Array | None = None
        self.n_iter_ = 0
        self.epsilon_spent_ = Fraction(0)

    def fit(
        self,
        data: Session | npt.ArrayLike,
        rng: Rng | None = None,
        *,
        columns: Sequence[str] | None = None,
    ) -> KMeans:
        """Fit on a session table's numeric ``columns`` (bounds from the metadata) or on an array
        (bounds given to the constructor); ``rng`` draws the initial centres and, for an array,
        the noise (a session uses its own generator for the noise)."""
        table = self._table(data, rng, columns)
        dims = table.lower.size
        if self.init is not None and self.init.shape[1] != dims:
            raise fail("KMeans", "init", f"shape ({self.n_clusters}, {dims})", self.init.shape)
        public_rows = self._public_rows(table.session)
        check_affordable("KMeans", table.session, self.epsilon)
        source = rng or table.session.rng or default_rng()
        centers = self._initial(table, source)
        self.epsilon_spent_ = Fraction(0)
        budget = self.epsilon
        if isinstance(self.iterations, int):
            iterations = self.iterations
        elif public_rows is not None:
            iterations = noise_target_iterations(budget, public_rows, self.n_clusters, dims)
        else:  # NOISY_COUNT, opted in
            share = self.epsilon * COUNT_SHARE
            total = release(table.session, table.query().agg(count()), release_epsilon(share))
            self.epsilon_spent_ += total.epsilon
            budget -= share
            iterations = noise_target_iterations(
                budget, float(total.values[0, 0]), self.n_clusters, dims
            )
        step = release_epsilon(budget / iterations)
        keys = list(range(self.n_clusters))
        for _ in range(iterations):
            query = table.query()
            if self.n_clusters > 1:
                query = query.group_by(_nearest_case(table, centers))
            count_weight = float(np.cbrt(dims / 3))
            query = query.agg(
                count(name="n", weight=count_weight),
                *(sum_(table.centred(j), name=f"s{j}") for j in range(dims)),
            )
            released = release(table.session, query, step, keys if self.n_clusters > 1 else None)
            self.epsilon_spent_ += released.epsilon
            noisy_counts, noisy_sums = released.values[:, 0], released.values[:, 1:]
            updated = table.middle + noisy_sums / np.maximum(noisy_counts, 1)[:, None]
            centers = np.where((noisy_counts > 0)[:, None], updated, centers)
            centers = np.clip(centers, table.lower, table.upper)
        self.cluster_centers_ = centers
        self.n_iter_ = iterations
        return self

    def predict(self, X: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The nearest fitted centre of each row (post-processing, no cost)."""
        if self.cluster_centers_ is None:
            raise fail("KMeans.predict", "self", "fitted (call fit first)", "an unfitted model")
        rows = np.asarray(X, dtype=np.float64)
        if self.bounds is not None:
            rows = clamp_rows("KMeans.predict", rows, *self.bounds)
        return _nearest(rows, self.cluster_centers_)

    def _public_rows(self, session: Session) -> int | None:
        """The public number of rows of the default rule (None: a fixed or noisy-count rule);
        without one the default rule is refused, free."""
        if self.iterations is not None:
            return None
        rows = self.rows if self.rows is not None else session.metadata.unit.public_size
        if rows is None:
            raise fail(
                "KMeans",
                "iterations",
                "a count, or rows= (a public bound on the number of rows) for the default "
                f"rule, or {NOISY_COUNT!r} (the rule on a noisy count); the metadata declares "
                "no public_size",
                None,
            )
        return rows

    def _table(
        self, data: Session | npt.ArrayLike, rng: Rng | None, columns: Sequence[str] | None
    ) -> Table:
        if isinstance(data, Session):
            return session_table("KMeans", data, columns)
        if self.bounds is None:
            raise fail("KMeans", "bounds", "given to fit an array", None)
        return array_table(
            "KMeans.fit",
            data,
            lower=self.bounds[0],
            upper=self.bounds[1],
            epsilon=self.epsilon,
            rng=rng,
        )

    def _initial(self, table: Table, source: Rng) -> Array:
        if self.init is not None:
            return np.clip(self.init, table.lower, table.upper)
        dims, k = table.lower.size, self.n_clusters
        uniform = source.integers_below(2**53, 32 * k * dims) / 2.0**53
        width = table.upper - table.lower
        candidates = table.lower + width / 4 + uniform.reshape(-1, dims) * width / 2
        chosen = [0]
        scaled = candidates / width
        for _ in range(k - 1):
            gaps = ((scaled[:, None, :] - scaled[None, chosen, :]) ** 2).sum(axis=2).min(axis=1)
            chosen.append(int(np.argmax(gaps)))
        centers: Array = candidates[chosen]
        return centers


def noise_target_iterations(epsilon: Fraction, rows: float, clusters: int, dims: int) -> int:
    """The most iterations, in Su et al.'s range [2, 7], that keep every iteration's centre noise
    within :data:`NOISE_TARGET`: a function of public inputs only (ε, ``rows``, k, d).

    An iteration at ε_t gives each of the d centred sums ε_t / W, W = d + (d/3)^(1/3) (the sums'
    weights 1 and the count's weight, module docstring), so a sum of values within ±r has Laplace
    noise of standard deviation √2·r·W/ε_t and the centre of a cluster of rows/k rows is off by
    √2·r·W·k/(ε_t·rows) per coordinate. Requiring at most NOISE_TARGET·r gives
    ε_t ≥ √2·W·k/(NOISE_TARGET·rows) and T = ⌊ε/ε_t⌋. Su, Cao, Li, Bertino & Jha's rule (2016,
    "Differentially private k-means clustering", §5) bounds the mean squared error of all k·d
    coordinates instead, which on five well-separated clusters in 6 dimensions and 20,000 rows
    allows 2 iterations at ε = 0.5 where Lloyd's algorithm needs 4 or more
    (benchmarks/mining.py)."""
    n = max(rows, 1.0)
    weight = dims + float(np.cbrt(dims / 3))
    epsilon_t = float(np.sqrt(2)) * weight * clusters / (float(NOISE_TARGET) * n)
    return int(max(min(float(epsilon) / epsilon_t, _MAX_ITERATIONS), _MIN_ITERATIONS))


def _nearest_case(table: Table, centers: Array) -> Expression:
    """CASE WHEN row is nearest centre 0 THEN 0 ... ELSE k-1 END (ties to the lower index)."""
    distances = []
    for center in centers:
        terms = [
            (col(name) - float(c)) * (col(name) - float(c))
            for name, c in zip(table.columns, center, strict=True)
        ]
        total = terms[0]
        for term in terms[1:]:
            total = total + term
        distances.append(total)
    k = len(distances)
    case = None
    for i in range(k - 1):
        nearest = distances[i] <= distances[i + 1]
        for j in range(i + 2, k):
            nearest = nearest & (distances[i] <= distances[j])
        case = when(nearest, lit(i)) if case is None else case.when(nearest, lit(i))
    assert case is not None  # k >= 2
    return case.otherwise(lit(k - 1))


def _nearest(rows: Array, centers: Array) -> npt.NDArray[np.int64]:
    distances = ((rows[:, None, :] - centers[None, :, :]) ** 2).sum(axis=2)
    nearest: npt.NDArray[np.int64] = np.argmin(distances, axis=1).astype(np.int64)
    return nearest
