"""MWEM (Hardt, Ligett & McSherry 2012, "A simple and practical algorithm for differentially
private data release"), our implementation, under pure ε-DP.

MWEM keeps a distribution A over the FULL public domain (every combination of codes) and
answers a workload of marginals (default: every 2-way marginal). For T rounds, each with
ε/(2T) for selection and ε/(2T) for measurement:

1. the exponential mechanism (:func:`~dpcurator.synth.common.select`) picks the workload
   marginal r with the largest L1 error ‖M_r(D) - n·M_r(A)‖₁ (sensitivity r·g);
2. its count vector is measured with discrete Laplace noise (L1 sensitivity r·g);
3. multiplicative weights: for every measurement so far (``updates`` passes), each cell x of A is
   multiplied by exp(q(x)·(m_q - n·q(A)) / (2n)) for every measured cell query q, then A is
   renormalised (the paper's update, applied to a marginal's cells at once).

n is the noisy total of the first measurement (post-processing). The charge is the exact sum of
the mechanisms' ε (Laplace rounded up in scale, so at most ε). The output is n records whose
contingency table rounds n·A (largest remainders), in random order. The full domain must fit in
:data:`MAX_MWEM_CELLS` cells: a larger one is refused before any charge, with both sizes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from dpcurator._validation import check_int, fail
from dpcurator.accounting import PureEvent
from dpcurator.core.numbers import to_fraction
from dpcurator.errors import UnsupportedQueryError
from dpcurator.mechanisms import Laplace
from dpcurator.query.session import Session
from dpcurator.random import Rng
from dpcurator.synth.common import (
    Progress,
    Step,
    SyntheticData,
    records_from_table,
    report,
    sample_rows,
    select,
    synthetic,
)
from dpcurator.synth.domain import DEFAULT_MAX_BINS, SynthDomain
from dpcurator.synth.measure import exact_marginals

#: The largest full domain MWEM keeps in memory (cells of float64: 80 MB).
MAX_MWEM_CELLS = 10_000_000


#: MWEM's default number of rounds.
DEFAULT_ROUNDS = 30


def mwem_round_epsilon(epsilon: Fraction, rounds: int = DEFAULT_ROUNDS) -> Fraction:
    """The ε of each round's selection and of its measurement: ε/(2·rounds)."""
    return epsilon / (2 * rounds)


def mwem(
    session: Session,
    *,
    epsilon: object,
    rounds: int = DEFAULT_ROUNDS,
    columns: Sequence[str] | None = None,
    workload: Sequence[Sequence[str]] | None = None,
    max_bins: int = DEFAULT_MAX_BINS,
    updates: int = 5,
    rng: Rng | None = None,
    rows: int | None = None,
    progress: Progress | None = None,
) -> SyntheticData:
    """MWEM synthetic data under pure ``epsilon``-DP (see the module docstring): ``rows``
    records (the noisy total when None); ``progress`` hears of every round.

    Free refusals: a column without a public domain, a full domain over
    :data:`MAX_MWEM_CELLS` cells, bad parameters.
    """
    eps = to_fraction(epsilon, owner="mwem", name="epsilon")
    if eps <= 0:
        raise fail("mwem", "epsilon", "> 0", epsilon)
    check_int("mwem", "rounds", rounds, minimum=1)
    check_int("mwem", "updates", updates, minimum=1)
    if rows is not None:
        check_int("mwem", "rows", rows, minimum=1)
    domain = SynthDomain.from_metadata(session.metadata, columns, max_bins=max_bins)
    cells = domain.cells(domain.names)
    if cells > MAX_MWEM_CELLS:
        raise UnsupportedQueryError(
            f"MWEM needs the full domain of {list(domain.names)} in memory: {cells:,} cells, "
            f"over the limit MAX_MWEM_CELLS = {MAX_MWEM_CELLS:,}. Use MST or AIM, fewer columns "
            "or fewer bins."
        )
    names = domain.names
    chosen = (
        tuple(itertools.combinations(names, 2))
        if workload is None
        else tuple(tuple(domain.column(n).name for n in c) for c in workload)
    )
    if not chosen:
        raise fail("mwem", "workload", "at least one marginal", workload)
    l1 = session.metadata.unit.count_l1()
    share = mwem_round_epsilon(eps, rounds)
    laplace = Laplace.for_epsilon(share, l1)
    cost = laplace.epsilon(l1)
    event = PureEvent(rounds * (share + cost))
    source = rng if rng is not None else session.rng
    exact = exact_marginals(session, domain, chosen, event, description=f"MWEM epsilon={eps}")
    table = np.full(domain.shape(names), 1.0 / cells)
    steps: list[Step] = []
    measured: list[tuple[tuple[int, ...], np.ndarray]] = []
    total = 1.0
    for done in range(1, rounds + 1):
        errors = [float(np.abs(exact[c] - total * _project(table, names, c)).sum()) for c in chosen]
        clique = chosen[select(errors, l1, share, source)]
        steps.append(Step("select", clique, share))
        noisy = laplace.release_integers(exact[clique], source).astype(np.float64)
        steps.append(Step("measure", clique, cost))
        if not measured:
            total = max(float(noisy.sum()), 1.0)
        axes = tuple(names.index(n) for n in clique)
        measured.append((axes, noisy))
        for _pass in range(updates):
            for measured_axes, values in measured:
                table = _multiply(table, measured_axes, values, total)
        report(progress, f"MWEM round {done} of {rounds}", 0.95 * done / rounds)
    del exact
    records = records_from_table(table, domain, sample_rows(rows, total), source)
    return synthetic(records, domain, "mwem", event, steps, rng=source)


def _project(table: np.ndarray, names: tuple[str, ...], clique: tuple[str, ...]) -> np.ndarray:
    """The marginal of distribution ``table`` over ``clique`` (in clique order)."""
    keep = [names.index(n) for n in clique]
    other = tuple(i for i in range(table.ndim) if i not in keep)
    summed = table.sum(axis=other)
    order = sorted(keep)
    return np.transpose(summed, [order.index(i) for i in keep])


def _multiply(
    table: np.ndarray, axes: tuple[int, ...], noisy: np.ndarray, total: float
) -> np.ndarray:
    """One multiplicative-weights update of ``table`` by a measured marginal over ``axes``."""
    other = tuple(i for i in range(table.ndim) if i not in axes)
    order = sorted(axes)
    current = np.transpose(table.sum(axis=other), [order.index(i) for i in axes])
    exponent = (noisy - total * current) / (2 * total)
    # A common factor cancels in the normalisation below: shift by the largest exponent so that
    # a small noisy total (large exponents at small ε) cannot overflow to inf and NaN.
    factor = np.exp(exponent - exponent.max())
    shape = [1] * table.ndim
    aligned = np.transpose(factor, np.argsort(axes))
    for axis in axes:
        shape[axis] = table.shape[axis]
    updated = table * aligned.reshape(shape)
    return np.asarray(updated / updated.sum(), dtype=np.float64)
