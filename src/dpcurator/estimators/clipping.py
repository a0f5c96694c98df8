"""Clipping bias: how much clamping to the public bounds could have moved a release.

Estimators clamp values to public bounds so their sensitivity is bounded; when the bounds are too
narrow the statistic is biased and its noise interval does not show it (OpenDP's documentation
notes that no library reports this). Here an estimator spends a share of its budget on a DP count
of the rows clamping changed, so its release can say how much clamping could have moved it.

**Privacy guarantee**: the vector (rows below a lower bound, rows above an upper bound, rows) is
released with exact noise; one row changes each coordinate by at most 1, so its L1 sensitivity is
3 and its L2 sensitivity √3 < 7/4: discrete Laplace of scale 3/ε is ε-DP, discrete Gaussian
for (7/4)² / (2σ²) = ρ is ρ-zCDP (Canonne, Kamath & Steinke 2020). It composes with the
estimator's own release by basic composition; the shares and bounds are post-processing.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator.core.measures import ZCDP, Measure, PureDP
from dpcurator.mechanisms import Gaussian, Laplace
from dpcurator.random import Rng

BoolArray = npt.NDArray[np.bool_]

#: An upper bound of the L2 sensitivity √3 of the three counts.
_L2_SENSITIVITY = Fraction(7, 4)


@dataclass(frozen=True)
class ClippingBias:
    """A DP estimate of the share of rows clamping changed, with (1-α) upper bounds.

    Attributes:
        below, above: estimated shares of rows with a value below a lower / above an upper bound
            (a row clamped in several columns counts once per side).
        below_high, above_high: (1-α) upper confidence bounds of those shares.
        alpha: the bounds' miscoverage (a union bound over the three noisy counts).
        cost: the privacy cost of this release (included in the estimator's cost).
    """

    below: float
    above: float
    below_high: float
    above_high: float
    alpha: float
    cost: Measure

    def mean_shift(self, excess: float) -> tuple[float, float]:
        """How far clamping could have moved a MEAN, (down, up), with confidence 1-α, if no value
        lay more than ``excess`` beyond its bound: clamping values above the upper bound lowers
        the mean by at most above_high·excess; clamping those below raises it by below_high·excess.
        """
        return self.above_high * excess, self.below_high * excess

    def flagged(self, tolerance: float = 0.01) -> bool:
        """True when clamping may have changed more than ``tolerance`` of the rows (either side)."""
        return max(self.below_high, self.above_high) > tolerance


def _release(
    mech: Laplace | Gaussian,
    cost: Measure,
    flags: tuple[BoolArray, BoolArray],
    rng: Rng,
    alpha: float,
) -> ClippingBias:
    below, above = flags
    exact = np.array([np.count_nonzero(below), np.count_nonzero(above), below.size], np.int64)
    below_n, above_n, rows = (float(c) for c in mech.release_integers(exact, rng))
    halfwidth = mech.ci_halfwidth(alpha / 3)
    point, low = max(rows, 1.0), max(rows - halfwidth, 1.0)
    return ClippingBias(
        min(max(below_n / point, 0.0), 1.0), min(max(above_n / point, 0.0), 1.0),
        min(max((below_n + halfwidth) / low, 0.0), 1.0),
        min(max((above_n + halfwidth) / low, 0.0), 1.0), alpha, cost,
    )  # fmt: skip


def clipping_pure(
    below: BoolArray, above: BoolArray, *, epsilon: Fraction, rng: Rng, alpha: float
) -> ClippingBias:
    """ε-DP :class:`ClippingBias` from per-row flags (a value below / above its bounds)."""
    return _release(Laplace.for_epsilon(epsilon, 3), PureDP(epsilon), (below, above), rng, alpha)


def clipping_zcdp(
    below: BoolArray, above: BoolArray, *, rho: Fraction, rng: Rng, alpha: float
) -> ClippingBias:
    """ρ-zCDP :class:`ClippingBias` from per-row flags (a value below / above its bounds)."""
    mech = Gaussian.for_rho(rho, _L2_SENSITIVITY)
    return _release(mech, ZCDP(rho), (below, above), rng, alpha)


def outside(
    values: npt.NDArray[np.float64], lower: object, upper: object
) -> tuple[BoolArray, BoolArray]:
    """Per-row flags (any column below its lower bound, any above its upper bound); NaN is not
    outside (it gets the estimator's fill)."""
    low = np.asarray(values < np.asarray(lower, np.float64), np.bool_)
    high = np.asarray(values > np.asarray(upper, np.float64), np.bool_)
    if values.ndim == 2:
        return np.asarray(low.any(axis=1)), np.asarray(high.any(axis=1))
    return low, high


__all__ = ["ClippingBias", "clipping_pure", "clipping_zcdp", "outside"]
