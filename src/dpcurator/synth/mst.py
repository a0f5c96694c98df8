"""MST (McKenna, Miklau & Sheldon 2021, "Winning the NIST contest: a scalable and general
approach to differentially private synthetic data"), on mbi's inference with our noise and
accounting; and the independent-marginals baseline.

MST under ρ-zCDP, d columns, r rows per cell and g cells per person (:mod:`.measure`):

1. ρ/3: every 1-way marginal, discrete Gaussian with ρ/(3d) each (L2 sensitivity r·sqrt(g));
2. ρ/3: d-1 exponential-mechanism rounds (ε = sqrt(8ρ/(3(d-1))) each, rounded down; ε²/8-zCDP
   each) choose a maximum spanning tree of the column pairs, an edge scored by the L1 distance
   between its exact marginal and the 1-way model's (sensitivity r·g), among the edges that
   join two components (Kruskal);
3. ρ/3: the d-1 chosen 2-way marginals, ρ/(3(d-1)) each;
4. mbi fits a graphical model to all measurements; records are drawn from it.

As in the paper, steps 2-4 run on a compressed domain (:mod:`.compress`): after step 1, each
column's codes whose noisy count is below 3σ are merged into one (a function of the released
counts and the public σ: post-processing), the pair marginals are summed into the merged cells
before noise, and sampled records are decoded back into the public domain.

Low budgets (our rule; the paper spends steps 2-3 on all d columns whatever the noise): a pair
with an *uninformative* column (every noisy count of it below 3σ) measures nothing over the
compressed codes but the other column's 1-way marginal again. So steps 2-3 run on the k
informative columns only (k-1 rounds of selection and measurement), and each of the d-k other
columns gets one round's budget, ε²/8 + ρ₂, for a second measurement of its 1-way marginal
(inverse-variance combined with the first). When fewer than two, or fewer than half, of the
columns are informative (:func:`.compress.enough_informative`), there are no rounds: their
budget is spread over all d 1-way marginals, which then hold the independent baseline's ρ/d
each. Which columns are informative is a function of released counts and public σ, and the rest
of the mechanism costs at most (d-1)·(ε²/8 + ρ₂) whichever way it goes, so the guarantee is
adaptive composition's (Bun & Steinke 2016, Lemma 2.3). On titanic at ε = 0.1 MST lost to the
independent baseline without the rule and beats it with it (docs/synthetic.md).

The charge is the exact sum d·ρ₁ + (d-1)·ε²/8 + (d-1)·ρ₂ (ρ₁, ρ₂ the Gaussians' own costs after
rounding σ up), fixed before any data is read; every exact marginal (all 1- and 2-way) is
computed by the engine after that one charge.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from dpcurator._validation import check_int, fail
from dpcurator.accounting import ZCDPEvent
from dpcurator.core.numbers import to_fraction
from dpcurator.mechanisms import Gaussian
from dpcurator.query.privacy_unit import PrivacyUnit
from dpcurator.query.session import Session
from dpcurator.random import Rng
from dpcurator.synth import _mbi
from dpcurator.synth.common import (
    Progress,
    Step,
    SyntheticData,
    independent_column,
    report,
    sample_rows,
    select,
    selection_epsilon,
    synthetic,
)
from dpcurator.synth.compress import (
    Compression,
    enough_informative,
    is_informative,
    second_one_ways,
)
from dpcurator.synth.domain import DEFAULT_MAX_BINS, Clique, SynthDomain
from dpcurator.synth.measure import exact_marginals


def positive_rho(owner: str, rho: object) -> Fraction:
    """``rho`` as an exact Fraction, refused unless > 0."""
    value = to_fraction(rho, owner=owner, name="rho")
    if value <= 0:
        raise fail(owner, "rho", "> 0", rho)
    return value


def mst_cost(
    d: int, rho: Fraction, unit: PrivacyUnit
) -> tuple[Gaussian, Gaussian, Fraction, Fraction]:
    """The public parameters of MST: the 1-way and 2-way Gaussians (the 2-way at the
    uncompressed sensitivity, which fixes each edge's ρ), the selection ε, the charge."""
    l2 = unit.count_l2()
    one = Gaussian.for_rho(rho / (3 * d), l2)
    two = Gaussian.for_rho(rho / (3 * (d - 1)), l2)
    epsilon = selection_epsilon(rho / (3 * (d - 1)))
    total = d * one.rho(l2) + (d - 1) * (epsilon**2 / 8 + two.rho(l2))
    return one, two, epsilon, total


def mst(
    session: Session,
    *,
    rho: object,
    columns: Sequence[str] | None = None,
    max_bins: int = DEFAULT_MAX_BINS,
    rng: Rng | None = None,
    iters: int = _mbi.DEFAULT_ITERS,
    rows: int | None = None,
    progress: Progress | None = None,
) -> SyntheticData:
    """MST synthetic data under ``rho``-zCDP (see the module docstring): ``rows`` records (the
    model's noisy total when None); ``progress`` hears of each stage.

    Free refusals: a column without a public domain, fewer than 2 columns, a 2-way marginal over
    the cell limit (its size and the limit).
    """
    rho_ = positive_rho("mst", rho)
    if rows is not None:
        check_int("mst", "rows", rows, minimum=1)
    domain = SynthDomain.from_metadata(session.metadata, columns, max_bins=max_bins)
    d = len(domain.names)
    if d < 2:
        raise fail("mst", "columns", "at least 2 columns", domain.names)
    pairs: tuple[Clique, ...] = tuple(itertools.combinations(domain.names, 2))
    ones: tuple[Clique, ...] = tuple((n,) for n in domain.names)
    for clique in pairs:
        domain.check_marginal(clique)
    unit = session.metadata.unit
    one, two, epsilon, total = mst_cost(d, rho_, unit)
    event = ZCDPEvent(total)
    source = rng if rng is not None else session.rng
    exact = exact_marginals(session, domain, ones + pairs, event, description=f"MST rho={rho_}")
    l2 = unit.count_l2()
    steps = [Step("measure", c, one.rho(l2)) for c in ones]
    sigma = float(one.sigma)
    noisy = {c[0]: one.release_integers(exact[c], source) for c in ones}
    compression = Compression.of(domain, noisy, sigma)
    small = compression.domain
    measured = [compression.one_way(name, noisy[name], sigma) for name in domain.names]
    informative = [name for name in domain.names if is_informative(noisy[name], sigma)]
    round_rho = epsilon**2 / 8 + two.rho(l2)
    for name, budget in second_one_ways(
        domain.names, informative, each=round_rho, spread=(d - 1) * round_rho
    ):
        again = Gaussian.for_rho(budget, l2)
        counts = again.release_integers(exact[(name,)], source)
        measured.append(compression.one_way(name, counts, float(again.sigma)))
        compression = compression.remeasured(name, counts, float(again.sigma))
        steps.append(Step("measure", (name,), again.rho(l2)))
    model = _mbi.estimate(small, measured, total=compression.total(), iters=iters)
    report(progress, "MST: one-way marginals measured and fitted", 0.3)
    tree = (
        _spanning_tree(
            informative,
            exact={
                c: compression.marginal(c, exact[c]) for c in itertools.combinations(informative, 2)
            },
            model=model,
            epsilon=epsilon,
            unit=unit,
            rng=source,
        )
        if enough_informative(domain.names, informative)
        else []
    )
    steps += [Step("select", c, epsilon**2 / 8) for c in tree]
    for edge in tree:
        # the compressed pair marginal merges cells: one person's g cells may fall in one, so
        # its σ is calibrated to the merged sensitivity at the edge's planned ρ
        merged = unit.merged_count_l2(domain.cells(edge), compression.largest_merge(edge))
        noise = Gaussian.for_rho(two.rho(l2), merged)
        released = noise.release_integers(compression.marginal(edge, exact[edge]), source)
        measured.append(_mbi.Measurement(edge, released.astype(float), float(noise.sigma)))
        steps.append(Step("measure", edge, noise.rho(merged)))
    del exact
    report(progress, "MST: spanning tree chosen and measured", 0.5)
    model = _mbi.estimate(small, measured, total=None if tree else compression.total(), iters=iters)
    report(progress, "MST: final model fitted", 0.9)
    count = sample_rows(rows, float(model.total))
    records = _mbi.sample(_mbi.Beliefs.of(model), small, count, source)
    records = compression.decode(records, source)
    report(progress, "MST: records sampled", 1.0)
    return synthetic(records, domain, "mst", event, steps, rng=source)


def _spanning_tree(
    names: Sequence[str],
    *,
    exact: dict[Clique, np.ndarray],
    model: object,
    epsilon: Fraction,
    unit: PrivacyUnit,
    rng: Rng | None,
) -> list[Clique]:
    """len(names)-1 private Kruskal steps over the pairs of ``names``: each chooses, among pairs
    joining two components, one by the exponential mechanism on its L1 error under the 1-way
    model."""
    pairs = list(itertools.combinations(names, 2))
    ones = {n: _mbi.model_marginal(model, (n,)) for n in names}
    total = max(float(sum(ones[names[0]])), 1.0)
    errors = {  # the 1-way model's pair marginal is the outer product of its 1-way marginals
        c: float(np.abs(exact[c] - np.multiply.outer(ones[c[0]], ones[c[1]]) / total).sum())
        for c in pairs
    }
    component = {name: name for name in names}

    def root(name: str) -> str:
        while component[name] != name:
            name = component[name]
        return name

    tree: list[Clique] = []
    chosen: Clique
    for _ in range(len(names) - 1):
        candidates = [c for c in pairs if root(c[0]) != root(c[1])]
        chosen = candidates[select([errors[c] for c in candidates], unit.count_l1(), epsilon, rng)]
        component[root(chosen[0])] = root(chosen[1])
        tree.append(chosen)
    return tree


def independent(
    session: Session,
    *,
    rho: object,
    columns: Sequence[str] | None = None,
    max_bins: int = DEFAULT_MAX_BINS,
    rng: Rng | None = None,
) -> SyntheticData:
    """The baseline: every 1-way marginal with ρ/d (discrete Gaussian), columns drawn
    independently (each column's noisy counts, clipped at 0, rounded to the total, shuffled)."""
    rho_ = positive_rho("independent", rho)
    domain = SynthDomain.from_metadata(session.metadata, columns, max_bins=max_bins)
    ones = tuple((n,) for n in domain.names)
    l2 = session.metadata.unit.count_l2()
    gaussian = Gaussian.for_rho(rho_ / len(ones), l2)
    event = ZCDPEvent(len(ones) * gaussian.rho(l2))
    source = rng if rng is not None else session.rng
    exact = exact_marginals(session, domain, ones, event, description=f"independent rho={rho_}")
    noisy = {c: gaussian.release_integers(exact[c], source) for c in ones}
    del exact
    total = max(round(float(np.median([max(int(v.sum()), 1) for v in noisy.values()]))), 1)
    codes = {c[0]: independent_column(v.astype(float), total, source) for c, v in noisy.items()}
    steps = [Step("measure", c, gaussian.rho(l2)) for c in ones]
    return synthetic(codes, domain, "independent", event, steps, rng=source)
