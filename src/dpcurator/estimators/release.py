"""The release object of the statistical estimators, and the input and noise helpers they share.

A release is either a reply (a value, its (1-α) confidence interval and what that interval
covers) or "NR", the *no reply* of Dwork & Lei (2009) used by propose-test-release: the decision
to answer is itself a differentially private test, so an NR leaks nothing beyond the cost. Either
way the release states its privacy cost as a :mod:`dpcurator.core.measures` value.

The helpers here make evaluation *total* after the point where the cost is incurred: inputs are
converted once (numpy, pandas or Polars), values are clamped to public bounds, and a noisy release
clamps its statistic to the range its public noise grid can represent instead of raising.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from typing import Protocol

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcurator._validation import check_bounds, fail
from dpcurator.core.measures import Measure
from dpcurator.estimators.clipping import ClippingBias
from dpcurator.mechanisms import Gaussian
from dpcurator.mechanisms._grid import MAX_UNITS, grid_exponent
from dpcurator.random import Rng

FloatArray = npt.NDArray[np.float64]
#: The privacy cost of a release (the estimators' name for a :mod:`~dpcurator.core.measures`
#: measure).
Cost = Measure


class Covers(Enum):
    """What a confidence interval accounts for."""

    #: Only the privacy noise: the interval covers the (clamped) statistic of THIS data set.
    NOISE = "noise"
    #: Privacy noise and sampling: the interval covers the population parameter.
    NOISE_AND_SAMPLING = "noise+sampling"


@dataclass(frozen=True)
class Estimate:
    """A DP release: a value with its confidence interval, or NR ("no reply").

    Attributes:
        value: the released estimate (a float array; shape () for a scalar), or None for NR.
        ci_low, ci_high: the (1-α) interval, coordinate-wise; None for NR or when none is given.
        covers: what the interval accounts for (:class:`Covers`).
        alpha: the interval's nominal miscoverage.
        cost: the privacy cost of the whole release (NR included: the test was paid for).
        method: a short name of the algorithm and paper.
        clipping: when the estimator was asked for it, a DP estimate of the share of rows
            clamping to the public bounds changed (:class:`~dpcurator.estimators.clipping.
            ClippingBias`, its cost included in ``cost``); None otherwise.
    """

    value: FloatArray | None
    ci_low: FloatArray | None
    ci_high: FloatArray | None
    covers: Covers | None
    alpha: float
    cost: Cost
    method: str
    clipping: ClippingBias | None = None
    #: Per coordinate, whether a public box clamped the released value or an interval end
    #: (post-processing of the noisy release; None when no box applies).
    at_bound: npt.NDArray[np.bool_] | None = None
    #: Whether the interval may carry a Wald test (:mod:`dpcurator.estimators.wald`): False where
    #: the estimator's released inputs were too noisy for its interval's approximation (decided
    #: on the noisy release: post-processing).
    testable: bool = True

    @property
    def replied(self) -> bool:
        """False for NR ("no reply")."""
        return self.value is not None

    @property
    def values(self) -> dict[str, FloatArray | None]:
        """``{"value": value}`` (None for NR): the shape every release kind shares."""
        return {"value": self.value}

    @property
    def intervals(self) -> dict[str, tuple[FloatArray | None, FloatArray | None]]:
        """``{"value": (ci_low, ci_high)}`` (None ends for NR or when no interval is given)."""
        return {"value": (self.ci_low, self.ci_high)}

    def summary(self) -> str:
        """The release in one line: value, interval and what it covers, method, cost."""
        return str(self)

    def to_pandas(self) -> pd.DataFrame:
        """One row per coordinate: ``value``, ``ci_low``, ``ci_high`` (no rows for NR);
        ``attrs`` holds the cost, method and CI level."""
        if self.value is None:
            frame = pd.DataFrame(columns=["value", "ci_low", "ci_high"])
        else:
            value = np.atleast_1d(self.value)
            ends = [np.atleast_1d(e) if e is not None else [None] * value.size
                    for e in (self.ci_low, self.ci_high)]  # fmt: skip
            frame = pd.DataFrame({"value": value, "ci_low": ends[0], "ci_high": ends[1]})
        frame.attrs.update(cost=str(self.cost), method=self.method, ci_level=1 - self.alpha)
        return frame

    def __str__(self) -> str:
        if self.value is None:
            return f"NR (no reply) by {self.method}, cost {self.cost}"
        interval = ""
        if self.ci_low is not None and self.ci_high is not None and self.covers is not None:
            level = round(100 * (1 - self.alpha), 6)
            interval = f", {level}% CI [{self.ci_low}, {self.ci_high}] ({self.covers.value})"
        return f"{self.value}{interval} by {self.method}, cost {self.cost}"


def no_reply(cost: Cost, method: str, alpha: float) -> Estimate:
    """The NR release (decided by a DP test; the cost stands)."""
    return Estimate(None, None, None, None, alpha, cost, method)


def as_float_array(owner: str, name: str, data: object, *, ndim: int) -> FloatArray:
    """numpy / pandas / Polars data (or nested sequences) as a float64 array of ``ndim`` dims.

    A 1-dimensional input is accepted where 2 dimensions are expected (one column). The shape is
    public (checked before any cost); NaN values are allowed and handled by each estimator.
    """
    raw = data.to_numpy() if hasattr(data, "to_numpy") else data
    try:
        array = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise fail(owner, name, "numeric data (numpy, pandas or Polars)", type(data)) from exc
    if ndim == 2 and array.ndim == 1:
        array = array[:, None]
    if array.ndim != ndim:
        raise fail(owner, name, f"{ndim}-dimensional", array.shape)
    return array


def clamp_fill(values: FloatArray, lower: float, upper: float, fill: float) -> FloatArray:
    """The shared value semantics: NaN -> fill, else clamp to [lower, upper] (±inf -> a bound)."""
    return np.where(np.isnan(values), fill, np.clip(values, lower, upper))


class FloatMechanism(Protocol):
    """The public API of :class:`~dpcurator.mechanisms.Laplace` and ``Gaussian`` used here."""

    def release_floats(self, values: npt.ArrayLike, rng: Rng | None = None) -> FloatArray: ...

    def ci_halfwidth_floats(self, alpha: object = 0.05) -> float: ...


def representable(values: FloatArray, scale: Fraction) -> FloatArray:
    """Clamp values into the range the public noise grid of ``scale`` represents exactly.

    Clamping is 1-Lipschitz per coordinate, so it never increases a sensitivity; it turns the
    grid's overflow refusal (which would depend on the data) into saturation.
    """
    limit = math.ldexp(float(MAX_UNITS), grid_exponent(scale))  # the grid's own range
    return np.clip(np.nan_to_num(values, nan=0.0), -limit, limit)


def noisy(
    mechanism: FloatMechanism,
    scale: Fraction,
    values: npt.ArrayLike,
    rng: Rng,
    centre: npt.ArrayLike = 0.0,
) -> FloatArray:
    """``mechanism.release_floats`` of the values made representable (total: never raises).

    The grid of a noise scale spans 2^(62 - GRID_BITS) = 2^32 scales around 0, so a public
    ``centre`` (e.g. the middle of the values' range) is subtracted first and added back after.
    """
    offset = np.asarray(centre, np.float64)
    shifted = np.asarray(values, np.float64) - offset
    return mechanism.release_floats(representable(shifted, scale), rng) + offset


def standard_normals(rng: Rng, size: int) -> FloatArray:
    """Approximately N(0, 1) draws (a discrete Gaussian of σ = 2^20, scaled), for simulations
    that post-process a release (parametric bootstraps), never for privacy noise."""
    sigma = 2**20
    return Gaussian(sigma).release_integers(np.zeros(size, np.int64), rng) / sigma


__all__ = [
    "Cost",
    "Covers",
    "Estimate",
    "FloatArray",
    "as_float_array",
    "check_bounds",
    "clamp_fill",
    "no_reply",
    "noisy",
    "representable",
    "standard_normals",
]
