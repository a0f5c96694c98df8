"""The only place in dpcurator that touches entropy (ARCHITECTURE rule 1).

* :mod:`dpcurator.random.rng` — :class:`SecureRng` (ChaCha20 keyed from the OS CSPRNG, the
  default via :func:`default_rng`) and :class:`SeededRng` (deterministic, INSECURE, tests only).
* :mod:`dpcurator.random.samplers` — exact, vectorised samplers of discrete noise (Canonne, Kamath
  & Steinke 2020): :func:`bernoulli_rational`, :func:`bernoulli_exp`, :func:`geometric`,
  :func:`discrete_laplace`, :func:`discrete_gaussian`.
"""

from __future__ import annotations

from dpcurator.random.rng import Rng, SecureRng, SeededRng, default_rng
from dpcurator.random.samplers.bernoulli import bernoulli_exp, bernoulli_rational
from dpcurator.random.samplers.gaussian import discrete_gaussian
from dpcurator.random.samplers.laplace import discrete_laplace, geometric

__all__ = [
    "Rng",
    "SecureRng",
    "SeededRng",
    "bernoulli_exp",
    "bernoulli_rational",
    "default_rng",
    "discrete_gaussian",
    "discrete_laplace",
    "geometric",
]
