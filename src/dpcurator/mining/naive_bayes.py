"""Differentially private Gaussian naive Bayes from noisy per-class counts and sums (SuLQ, Blum,
Dwork, McSherry & Nissim 2005; the sufficient statistics of Vaidya, Shafiq, Basu & Hong 2013).

Per public class c the model needs the class count n_c and, per feature, Σ y and Σ y² over the
class's rows (y = x - mid, the row centred on the midpoint of the public bounds). Means are
Σ y / n_c, variances Σ y² / n_c - mean², floored at :data:`MIN_VARIANCE_SHARE` of r_j² so that
noise cannot produce a degenerate Gaussian; priors are the normalised noisy counts.

Privacy guarantee: each row belongs to one class, so adding or removing a row changes one class's
count by 1, its sums by at most Σ r_j and its sums of squares by at most Σ r_j² (L1). ε is split in
thirds over the three releases (discrete Laplace, grid rounding included): ε-DP by sequential
composition, parallel across classes.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import fail
from dpcurator.mechanisms import Laplace
from dpcurator.mining._data import Array, as_bounds, clamp_rows, epsilon_of
from dpcurator.random import Rng, default_rng

__all__ = ["MIN_VARIANCE_SHARE", "GaussianNB"]

#: Variances are floored at this share of the squared half-range of each feature.
MIN_VARIANCE_SHARE = 1e-4


class GaussianNB:
    """ε-DP Gaussian naive Bayes over public ``classes`` (labels outside them are ignored)."""

    def __init__(self, epsilon: object, bounds: object, classes: npt.ArrayLike) -> None:
        owner = "GaussianNB"
        self.epsilon = epsilon_of(owner, epsilon)
        self.lower, self.upper = as_bounds(owner, bounds)
        self.classes_ = np.asarray(classes)
        if self.classes_.ndim != 1 or self.classes_.size < 2:
            raise fail(owner, "classes", "a 1-D sequence of at least two labels", classes)
        radius = (self.upper - self.lower) / 2
        self.radius = radius
        self.sensitivities = (
            Fraction(1),
            Fraction(float(radius.sum())),
            Fraction(float((radius**2).sum())),
        )
        third = self.epsilon / 3
        dims = self.lower.size
        self.count_mechanism = Laplace.for_epsilon(third, 1)
        self.sum_mechanism = Laplace.for_epsilon_floats(third, self.sensitivities[1], dims)
        self.square_mechanism = Laplace.for_epsilon_floats(third, self.sensitivities[2], dims)
        self.theta_: Array | None = None
        self.var_: Array | None = None
        self.class_prior_: Array | None = None
        self.n_iter_ = 0
        self.epsilon_spent_ = Fraction(0)

    def fit(self, X: npt.ArrayLike, y: npt.ArrayLike, rng: Rng | None = None) -> GaussianNB:
        source = rng or default_rng()
        rows = clamp_rows("GaussianNB.fit", X, self.lower, self.upper)
        labels = np.asarray(y).reshape(-1)
        if labels.size != rows.shape[0]:
            raise fail("GaussianNB.fit", "y", f"{rows.shape[0]} labels (one per row)", labels.size)
        middle = (self.lower + self.upper) / 2
        centred = rows - middle
        dims = self.lower.size
        member = labels[None, :] == self.classes_[:, None]  # k x n
        counts = member.sum(axis=1)
        sums = member.astype(np.float64) @ centred
        squares = member.astype(np.float64) @ centred**2
        noisy_counts = self.count_mechanism.release_integers(counts, source)
        noisy_sums = self.sum_mechanism.release_floats(sums, source)
        noisy_squares = self.square_mechanism.release_floats(squares, source)
        self.epsilon_spent_ = (
            self.count_mechanism.epsilon(1)
            + self.sum_mechanism.epsilon_for_floats(self.sensitivities[1], dims)
            + self.square_mechanism.epsilon_for_floats(self.sensitivities[2], dims)
        )
        n = np.maximum(noisy_counts, 1).astype(np.float64)[:, None]
        mean = np.clip(noisy_sums / n, -self.radius, self.radius)
        floor = MIN_VARIANCE_SHARE * self.radius**2
        self.var_ = np.maximum(noisy_squares / n - mean**2, floor)
        self.theta_ = middle + mean
        positive = np.maximum(noisy_counts, 1).astype(np.float64)
        self.class_prior_ = positive / positive.sum()
        self.n_iter_ = 1
        return self

    def predict(self, X: npt.ArrayLike) -> npt.NDArray[np.generic]:
        """The most probable class of each row (post-processing, no cost)."""
        if self.theta_ is None or self.var_ is None or self.class_prior_ is None:
            raise fail("GaussianNB.predict", "self", "fitted (call fit first)", "an unfitted model")
        rows = clamp_rows("GaussianNB.predict", X, self.lower, self.upper)
        diff = rows[:, None, :] - self.theta_[None, :, :]
        log_likelihood = -0.5 * (np.log(2 * np.pi * self.var_)[None] + diff**2 / self.var_[None])
        scores = np.log(self.class_prior_)[None, :] + log_likelihood.sum(axis=2)
        result: npt.NDArray[np.generic] = self.classes_[np.argmax(scores, axis=1)]
        return result
