"""Scores shared by benchmarks/mining.py and its peer script (plain numpy, no dpcurator)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]


def inertia(X: Array, centres: Array) -> float:
    """Mean squared distance of each row to its nearest centre (lower is better)."""
    distances = ((X[:, None, :] - np.asarray(centres)[None, :, :]) ** 2).sum(axis=2)
    return float(distances.min(axis=1).mean())


def captured_variance(X: Array, components: Array) -> float:
    """Share of the total variance captured by the (orthonormalised) components (higher: better)."""
    basis, _ = np.linalg.qr(np.asarray(components, dtype=np.float64).T)
    centred = X - X.mean(axis=0)
    return float(((centred @ basis) ** 2).sum() / (centred**2).sum())


def matched_accuracy(predicted: npt.ArrayLike, truth: npt.ArrayLike) -> float:
    """Share of correct labels."""
    return float(np.mean(np.asarray(predicted) == np.asarray(truth)))
