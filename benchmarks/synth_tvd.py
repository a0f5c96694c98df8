"""The synthetic-data benchmark's error measure, shared by ``synth.py`` and ``peer_synth.py``.

It needs only numpy, so it imports in the synthesizer peers' virtualenv too (which has no
dpcurator): every row of the benchmark table, ours and the peers', is scored by this one function.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

MAX_CELLS = 10_000

Codes = Mapping[str, npt.NDArray[np.integer]]


def _distribution(
    codes: Codes, clique: tuple[str, str], shape: tuple[int, int]
) -> npt.NDArray[np.float64]:
    """The normalised count vector of ``clique`` (all zeros when there are no records)."""
    flat = np.ravel_multi_index(tuple(np.asarray(codes[name]) for name in clique), shape)
    counts = np.bincount(flat, minlength=math.prod(shape)).astype(np.float64)
    return counts / max(float(counts.sum()), 1.0)


def mean_tvd2(real: Codes, synthetic: Codes, sizes: Mapping[str, int]) -> float:
    """Mean total variation distance between real and synthetic 2-way marginals.

    ``sizes`` gives each column's number of codes, in column order; codes are integers in
    ``[0, size)``. Pairs of more than ``MAX_CELLS`` cells are skipped, as in the AIM paper's
    workload (McKenna et al., VLDB 2022, §6). TVD(p, q) = ½·Σ|p - q|.
    """
    errors = []
    for clique in itertools.combinations(sizes, 2):
        shape = (sizes[clique[0]], sizes[clique[1]])
        if math.prod(shape) > MAX_CELLS:
            continue
        p = _distribution(real, clique, shape)
        q = _distribution(synthetic, clique, shape)
        errors.append(0.5 * float(np.abs(p - q).sum()))
    return float(np.mean(errors))
