"""Differentially private Gaussian naive Bayes from noisy per-class counts and sums (SuLQ, Blum,
Dwork, McSherry & Nissim 2005; the sufficient statistics of Vaidya, Shafiq, Basu & Hong 2013).

Per public class c the model needs the class count n_c and, per feature, Σ y and Σ y² over the
class's rows (y = x - mid, the value centred on the midpoint of its public bounds, |y_j| <= r_j).
They are released by ONE query of a session grouped by the label column (public keys;
:mod:`dpcurator.mining._session`). Means are Σ y / n_c; variances Σ y² / n_c - mean², floored
per class and feature at the larger of :data:`MIN_VARIANCE_SHARE` · r_j² and the noise level of
that estimate, scale_j / n_c (the public Laplace scale of the released Σ y_j², over the noisy
count): a variance the noise cannot resolve is widened, never shrunk to a spike that would make
its feature dominate every prediction. Priors are the normalised noisy counts.

Privacy guarantee: the session plans the grouped query like any release (user-level contribution
bounds from the metadata, discrete Laplace noise per aggregate, every class released) and charges
it once; ε is split :data:`SHARES` (counts, sums, sums of squares; evenly over the features), so
the fit is ε-DP (``epsilon_spent_`` <= ε, exact). The split was chosen on the benchmark
(``benchmarks/mining.py``): the means carry most of the classification signal, the counts (priors)
the least.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import fail
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
from dpcurator.query.session import Session
from dpcurator.random import Rng

__all__ = ["MIN_VARIANCE_SHARE", "SHARES", "GaussianNB"]

#: Variances are floored at least at this share of the squared half-range of each feature.
MIN_VARIANCE_SHARE = 1e-4

#: Shares of ε for the class counts, the sums and the sums of squares.
SHARES = (Fraction(1, 3), Fraction(1, 3), Fraction(1, 3))


class GaussianNB:
    """ε-DP Gaussian naive Bayes. ``fit(session, columns=[...], label=...)`` (classes: the label
    column's public keys) or ``fit(X, y)`` (``bounds`` and ``classes`` given to the constructor;
    labels outside the classes are ignored).

    Attributes after ``fit``: ``classes_``, ``theta_``, ``var_``, ``class_prior_``, ``n_iter_``
    (1: one release) and ``epsilon_spent_`` (exact).
    """

    def __init__(
        self, epsilon: object, bounds: object = None, classes: npt.ArrayLike | None = None
    ) -> None:
        owner = "GaussianNB"
        self.epsilon = epsilon_of(owner, epsilon)
        self.bounds = None if bounds is None else as_bounds(owner, bounds)
        self.classes_ = None if classes is None else np.asarray(classes)
        if self.classes_ is not None and (self.classes_.ndim != 1 or self.classes_.size < 2):
            raise fail(owner, "classes", "a 1-D sequence of at least two labels", classes)
        self.theta_: Array | None = None
        self.var_: Array | None = None
        self.class_prior_: Array | None = None
        self.n_iter_ = 0
        self.epsilon_spent_ = Fraction(0)

    def fit(
        self,
        data: Session | npt.ArrayLike,
        y: npt.ArrayLike | None = None,
        rng: Rng | None = None,
        *,
        columns: Sequence[str] | None = None,
        label: str | None = None,
    ) -> GaussianNB:
        """Fit on a session table (numeric ``columns``, ``label`` with public keys) or on an
        array ``data`` with labels ``y`` (``rng`` draws its noise)."""
        table = self._table(data, y, rng, columns, label)
        check_affordable("GaussianNB", table.session, self.epsilon)
        dims = table.lower.size
        shares = [float(s) for s in SHARES]
        query = (
            table.query()
            .group_by(table.label or "")
            .agg(
                count(name="n", weight=shares[0]),
                *(
                    sum_(table.centred(j), name=f"s{j}", weight=shares[1] / dims)
                    for j in range(dims)
                ),
                *(
                    sum_(table.centred(j) * table.centred(j), name=f"q{j}", weight=shares[2] / dims)
                    for j in range(dims)
                ),
            )
        )
        keys = table.label_keys()
        released = release(table.session, query, release_epsilon(self.epsilon), keys)
        self.epsilon_spent_ = released.epsilon
        scales = np.array([released.scales[f"q{j}"] for j in range(dims)])
        values = released.values
        counts, sums, squares = values[:, 0], values[:, 1 : dims + 1], values[:, dims + 1 :]
        n = np.maximum(counts, 1.0)[:, None]
        radius = table.radius
        mean = np.clip(sums / n, -radius, radius)
        floor = np.maximum(MIN_VARIANCE_SHARE * radius**2, scales / n)
        self.var_ = np.maximum(squares / n - mean**2, floor)
        self.theta_ = table.middle + mean
        self.class_prior_ = n[:, 0] / n.sum()
        self.n_iter_ = 1
        return self

    def predict(self, X: npt.ArrayLike) -> npt.NDArray[np.generic]:
        """The most probable class of each row (post-processing, no cost)."""
        if self.theta_ is None or self.var_ is None or self.class_prior_ is None:
            raise fail("GaussianNB.predict", "self", "fitted (call fit first)", "an unfitted model")
        assert self.classes_ is not None  # set by fit
        rows = np.asarray(X, dtype=np.float64)
        if self.bounds is not None:
            rows = clamp_rows("GaussianNB.predict", rows, *self.bounds)
        diff = rows[:, None, :] - self.theta_[None, :, :]
        log_likelihood = -0.5 * (np.log(2 * np.pi * self.var_)[None] + diff**2 / self.var_[None])
        scores = np.log(self.class_prior_)[None, :] + log_likelihood.sum(axis=2)
        result: npt.NDArray[np.generic] = self.classes_[np.argmax(scores, axis=1)]
        return result

    def _table(
        self,
        data: Session | npt.ArrayLike,
        y: npt.ArrayLike | None,
        rng: Rng | None,
        columns: Sequence[str] | None,
        label: str | None,
    ) -> Table:
        if isinstance(data, Session):
            if label is None:
                raise fail("GaussianNB", "label", "the label column's name", None)
            table = session_table("GaussianNB", data, columns, label)
            self.classes_ = np.asarray(table.label_keys())
            return table
        if self.bounds is None or self.classes_ is None or y is None:
            raise fail("GaussianNB", "bounds", "bounds and classes (and y) to fit an array", None)
        classes = list(self.classes_.tolist())
        lower, upper = self.bounds
        return array_table(
            "GaussianNB.fit",
            data,
            lower=lower,
            upper=upper,
            epsilon=self.epsilon,
            rng=rng,
            labels=(y, classes),
        )
