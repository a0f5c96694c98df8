"""Noise vectors of density ∝ exp(-rate·‖b‖₂): the noise of pure-ε objective perturbation.

Objective perturbation (Chaudhuri, Monteleoni & Sarwate 2011, Algorithm 2; Kifer, Smith &
Thakurta 2012, Theorem 4) adds bᵀθ to a convex objective, with b drawn from the density
ν(b) ∝ exp(-rate·‖b‖) on R^p. In polar form ‖b‖ ~ Gamma(shape p, rate) and b/‖b‖ is uniform on
the sphere, independently; this module samples both parts from exact integer samplers:

* **the norm** is a sum of p exponentials of the given rate. Each is h·(G + U): G is exactly
  geometric, P[G = g] = (1 - e^(-γ)) e^(-γg) with γ = rate·h rounded DOWN to a multiple of
  2^-62 (:func:`~dpcurator.random.samplers.laplace.geometric`, CKS20), h = 2^-30 of the scale
  1/rate (a public power of two), and U is uniform on [0, 1) from 53 random bits. The exact
  exponential's fractional part has density ∝ e^(-γu) on [0, 1) instead of 1, so the sampled
  density of each exponential is within a factor e^(±γ) = e^(±2^-30) of the exact one, and that
  of the norm within e^(±p·2^-30); the rate is only ever rounded down (heavier noise).
* **the direction** is a vector of p exact discrete Gaussians of σ = 2^30, each jittered by a
  uniform U - 1/2, normalised: an isotropic vector up to the lattice (a relative deviation of
  order 2^-30 in the density of its direction).

**Floating-point caveat.** The privacy proof of objective perturbation is a change of variables
on a continuous density and an exact minimiser; neither exists on a computer. These samplers
make the noise density equal the ideal one within a factor e^(±(p + 1)·2^-30) (not a formal
guarantee for the float output), with exact integer randomness and no float logarithm of a
uniform (the attack of Mironov 2012 exploits the latter). The release is ε-DP for the ideal
continuous algorithm; the implementation carries this caveat, as every implementation of
objective perturbation does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, check_positive
from dpcurator.core.numbers import to_fraction
from dpcurator.mechanisms._grid import grid_exponent
from dpcurator.random import Rng, default_rng
from dpcurator.random.samplers.gaussian import discrete_gaussian
from dpcurator.random.samplers.laplace import geometric

FloatArray = npt.NDArray[np.float64]

#: σ of the discrete Gaussians whose jittered, normalised vector gives the direction.
DIRECTION_SIGMA = 2**30

#: γ = rate·h is rounded down to a multiple of 2^-GAMMA_BITS.
GAMMA_BITS = 62


def _uniforms(rng: Rng, size: int) -> FloatArray:
    """``size`` floats uniform on the multiples of 2^-53 in [0, 1) (53 random bits each)."""
    return np.ldexp((rng.uint64(size) >> np.uint64(11)).astype(np.float64), -53)


@dataclass(frozen=True)
class GammaNormVector:
    """Vectors in R^p with density ∝ exp(-rate·‖b‖₂) (module docstring: sampler and caveat).

    Releasing the minimiser of a convex objective perturbed by bᵀθ whose gradient moves by at
    most ζ in L2 between neighbours costs rate·ζ of ε for the noise (plus the Jacobian term of
    objective perturbation, which the caller accounts for).

    >>> from dpcurator.random import SeededRng
    >>> GammaNormVector(rate=1, dimension=3).draw(SeededRng(1), 2).shape
    (2, 3)
    """

    rate: Fraction
    dimension: int

    def __init__(self, rate: object, dimension: int) -> None:
        check_positive("GammaNormVector", "rate", rate)
        check_int("GammaNormVector", "dimension", dimension, minimum=1)
        object.__setattr__(self, "rate", to_fraction(rate, owner="GammaNormVector", name="rate"))
        object.__setattr__(self, "dimension", dimension)

    def _step(self) -> tuple[int, int, int]:
        """(exponent k of h = 2^k, numerator and denominator of γ = rate·h rounded down)."""
        k = grid_exponent(1 / self.rate)
        gamma = self.rate * Fraction(2) ** k
        units = math.floor(gamma * 2**GAMMA_BITS)
        reduced = Fraction(units, 2**GAMMA_BITS)
        return k, reduced.numerator, reduced.denominator

    def norms(self, rng: Rng, size: int) -> FloatArray:
        """``size`` draws of ‖b‖ ~ Gamma(shape p, rate): sums of p exponentials."""
        k, numerator, denominator = self._step()
        count = size * self.dimension
        whole = geometric(rng, numerator, denominator, count).astype(np.float64)
        exponentials = np.ldexp(whole + _uniforms(rng, count), k)
        return np.asarray(exponentials.reshape(size, self.dimension).sum(axis=1), np.float64)

    def directions(self, rng: Rng, size: int) -> FloatArray:
        """``size`` unit vectors, isotropic up to the lattice of the discrete Gaussian."""
        count = size * self.dimension
        lattice = discrete_gaussian(rng, DIRECTION_SIGMA, count).astype(np.float64)
        vectors = (lattice + _uniforms(rng, count) - 0.5).reshape(size, self.dimension)
        lengths = np.linalg.norm(vectors, axis=1)
        return np.asarray(vectors / np.maximum(lengths, 1.0)[:, None], np.float64)

    def draw(self, rng: Rng | None = None, size: int = 1) -> FloatArray:
        """``size`` noise vectors, shape (size, p)."""
        source = rng or default_rng()
        check_int("GammaNormVector.draw", "size", size, minimum=0)
        return self.directions(source, size) * self.norms(source, size)[:, None]

    def __str__(self) -> str:
        return f"Gamma-norm vector(rate={float(self.rate):.6g}, dimension={self.dimension})"


__all__ = ["DIRECTION_SIGMA", "GammaNormVector"]
