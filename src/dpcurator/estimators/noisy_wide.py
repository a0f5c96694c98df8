"""Discrete Gaussian releases of floats on the mechanism's grid, without the int64 range limit.

:meth:`Gaussian.release_floats <dpcurator.mechanisms.Gaussian.release_floats>` rounds a value to
the public grid 2^k (k = floor(log2 σ) - GRID_BITS, from the noise scale only) and adds exact
integer noise in int64, so a value must lie within ±2^62 grid units, i.e. about 2^32 σ. A
statistic that grows with n (the entries of a Gram matrix reach n) leaves that range once σ is
small (ρ large): on Longley's 16 rows the Gram entries stop fitting above ρ ≈ 2·10^18.

Here the same grid and the same exact noise are used, but the sum ``units + noise`` is formed in
Python integers, so no value is clamped to a grid range; the exact noisy integer is then rounded
to the nearest float (post-processing). The privacy analysis is the mechanism's own
(:meth:`~dpcurator.mechanisms.Gaussian.rho_for_floats`: rounding moves each coordinate by at most
half a grid step). Total: NaN -> 0 and values are clamped to ±2^(1000 + min(k, 0)) so the units
stay finite (clamping is 1-Lipschitz, so no sensitivity grows); nothing raises on a value.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator.estimators.release import FloatArray
from dpcurator.mechanisms import Gaussian
from dpcurator.mechanisms._grid import grid_exponent
from dpcurator.random import Rng


def release_wide(mechanism: Gaussian, values: npt.ArrayLike, rng: Rng) -> FloatArray:
    """``mechanism.release_floats(values)`` with exact unbounded integer arithmetic (same law
    where the values fit the int64 grid, no saturation where they do not)."""
    k = grid_exponent(mechanism.sigma)
    limit = math.ldexp(1.0, 1000 + min(k, 0))
    array = np.asarray(values, np.float64)
    finite = np.clip(np.nan_to_num(array, nan=0.0), -limit, limit)
    units = np.rint(np.ldexp(finite, -k)).ravel()
    in_units = Gaussian(mechanism.sigma / Fraction(2) ** k)  # the same noise, in grid units
    noise = in_units.release_integers(np.zeros(units.size, np.int64), rng)
    released = [math.ldexp(float(int(u) + int(e)), k) for u, e in zip(units, noise, strict=True)]
    return np.asarray(released, np.float64).reshape(array.shape)


__all__ = ["release_wide"]
