"""The one door to ``mbi`` (McKenna, Sheldon & Miklau 2019, "Graphical-model based estimation
and inference for differential privacy"), pinned in the ``synth`` extra.

mbi's inference is post-processing of our noisy measurements: it never sees the data. JAX runs in
float64 (mbi warns that float32 can stall on large totals) without the persistent compilation
cache, set before mbi is first imported; this applies to the whole process.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcurator.random import Rng, default_rng
from dpcurator.synth.domain import Clique, SynthDomain

#: Mirror-descent iterations of each mbi estimation (mbi's default is 1000).
DEFAULT_ITERS = 1000


def mbi() -> ModuleType:
    """The configured mbi module (imports JAX on first use)."""
    jax = importlib.import_module("jax")
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_compilation_cache", False)
    return importlib.import_module("mbi")


@dataclass(frozen=True)
class Measurement:
    """A noisy marginal (shape: the clique's codes) and its noise's standard deviation."""

    clique: Clique
    noisy: npt.NDArray[np.float64]
    sigma: float


def mbi_domain(domain: SynthDomain) -> Any:
    """The mbi Domain of ``domain``."""
    return mbi().Domain.fromdict(domain.config())


def estimate(
    domain: SynthDomain,
    measurements: Sequence[Measurement],
    *,
    total: float | None = None,
    iters: int = DEFAULT_ITERS,
    warm_start: Any = None,
) -> Any:
    """A graphical model fitted to the measurements by mbi's mirror descent (L2 loss weighted
    by 1/σ); the total is mbi's minimum-variance estimate from the measurements when None."""
    library = mbi()
    linear = [
        library.LinearMeasurement(np.ravel(m.noisy).astype(np.float64), m.clique, m.sigma)
        for m in measurements
    ]
    estimator = library.estimation.MirrorDescent()
    return estimator.estimate(
        mbi_domain(domain), linear, known_total=total, iters=iters, warm_start=warm_start
    )


def model_marginal(model: Any, clique: Clique) -> npt.NDArray[np.float64]:
    """The model's (consistent, non-negative) marginal over ``clique``, in clique order."""
    return np.asarray(model.project(tuple(clique)).datavector(flatten=False), dtype=np.float64)


def model_size_mb(domain: SynthDomain, cliques: Sequence[Clique]) -> float:
    """mbi's size of the junction tree of a model over ``cliques`` (megabytes): public."""
    junction_tree = importlib.import_module("mbi.junction_tree")
    return float(junction_tree.hypothetical_model_size(mbi_domain(domain), list(cliques)))


def sample(
    model: Any, domain: SynthDomain, rows: int, rng: Rng | None = None
) -> dict[str, npt.NDArray[np.int64]]:
    """``rows`` records drawn from the model by mbi's Gumbel rounding (marginals within about
    ±2 of the model's), seeded from ``rng`` (the only entropy: dpcurator.random)."""
    generator = importlib.import_module("mbi.extensions.synthetic_data")
    seed = int((rng or default_rng()).integers_below(2**31, 1)[0])
    data = generator.synthetic_data(model, max(int(rows), 1), seed=seed)
    return {name: np.asarray(data.to_dict()[name], dtype=np.int64) for name in domain.names}
