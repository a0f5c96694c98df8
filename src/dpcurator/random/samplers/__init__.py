"""Exact, vectorised samplers of discrete noise (Canonne, Kamath & Steinke 2020).

Every sampler here returns values from EXACTLY the stated distribution, given uniformly random bits
from an :class:`~dpcurator.random.rng.Rng`: no decision depends on floating-point arithmetic (a
float appears only as a guess that exact integer arithmetic then checks and corrects, e.g. the
quotient in the discrete Gaussian's acceptance test). The constructions are those of

    C. Canonne, G. Kamath, T. Steinke. "The Discrete Gaussian for Differential Privacy."
    NeurIPS 2020, arXiv:2004.00010 ("CKS20"),

vectorised over numpy arrays. The discrete Laplace, the geometric and the discrete Gaussian's
acceptance test decide events of the form "a uniform real U lies below a threshold" from one
64-bit word each (:mod:`~dpcurator.random.samplers.inversion`): a float64 evaluation is accepted
only when a proven error margin makes it certain (for batches, in one C pass per block:
``_kernel.c``), and the rare rest (about 2^-35 of the draws) is decided in exact integer
arithmetic on more random bits. Other random integers are drawn by
rejection thresholds (never by a biased ``% bound`` or float scaling).

Timing side channels (Jin, McMurtry, Rubinstein & Ohrimenko, "Are We There Yet? Timing and
Floating-Point Attacks on Differential Privacy Systems", IEEE S&P 2022): the samplers are NOT
constant-time. The number of rejection rounds and chain iterations, hence the running time,
depends on the values drawn (for example a large |noise| takes a few more iterations). Drawing a
whole batch at once blurs this to an aggregate over the batch, which still depends on the noise:
do not expose per-call or per-value timings to an adversary.

One module per distribution family, each building on the one before:

* :mod:`~dpcurator.random.samplers.inversion` — the one-word exact decisions (inversion of a
  uniform, Bernoulli(exp(-x))) with their exact integer fallback;
* :mod:`~dpcurator.random.samplers.bernoulli` — Bernoulli trials with P[True] a rational, or
  exp(-γ) for a rational γ (CKS20 Algorithm 1): the primitives of the others;
* :mod:`~dpcurator.random.samplers.laplace` — the geometric and discrete Laplace distributions
  (CKS20 Algorithm 2);
* :mod:`~dpcurator.random.samplers.gaussian` — the discrete Gaussian (CKS20 Algorithm 3).

The public samplers are exported by :mod:`dpcurator.random`.
"""
