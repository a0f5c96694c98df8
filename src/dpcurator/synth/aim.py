"""AIM (McKenna, Mullins, Sheldon & Miklau 2022, "AIM: an adaptive and iterative mechanism for
differentially private synthetic data"), with our noise and accounting; its models are
Private-PGM's, fitted in numpy (:mod:`._descent`: no program compiled per round).

Under ρ-zCDP with d columns, a workload W of marginals (default: every 2-way marginal) and its
downward closure as candidates, each candidate r weighted w_r = Σ_{s∈W} |r ∩ s|:

* T = 16d, α = 0.9: a measurement spends ρ_m = αρ/T (discrete Gaussian, L2 sensitivity r·sqrt(g))
  and a selection ε = sqrt(8(1-α)ρ/T) (exponential mechanism, ε²/8-zCDP);
* first every 1-way marginal is measured; then each round keeps the candidates whose model
  stays within ``max_model_size`` MB (mbi's size: 8 bytes a junction-tree cell) scaled by the
  share of ρ spent (Algorithm 1's filter: public sizes and the ρ spent so far, itself a
  function of earlier releases, so free), selects one by the exponential mechanism on
  w_r·(‖M_r(D) - M_r(model)‖₁ - sqrt(2/π)·σ·n_r) (sensitivity
  max w·r·g), measures it and refits the model (warm start); when the refit moves that marginal
  by at most sqrt(2/π)·σ·n_r in L1, ρ_m is multiplied by 4 and ε by 2 (annealing);
* when what is left is below twice one round's cost, the last round spends it all (ρ_m = α·rest,
  ε = sqrt(8(1-α)·rest)).

Low budgets (our rule, as in :mod:`.mst`; the paper has none): after the first 1-way round, a
column none of whose noisy counts reaches 3σ (:func:`.compress.is_informative`) leaves the
candidates, and its 1-way marginal is measured again with ρ/d minus its first measurement's ρ,
so that it holds the independent baseline's share; the rounds then run on the cliques of the
informative columns. When fewer than two, or fewer than half, of the columns are informative
(:func:`.compress.enough_informative`), or no workload marginal lies among them, the rest of ρ
is spread over all d 1-way marginals and there are no rounds. A column measured twice is
independent of the others in the model; its records are drawn from its combined 1-way counts
denoised as MST's compression does (:func:`.compress.denoised`). Which way it goes is a
function of released counts and public σ, and ρ is never exceeded (adaptive composition, Bun &
Steinke 2016, Lemma 2.3). On titanic at ε = 0.1 AIM lost to the independent baseline without
the rule and beats it with it (docs/synthetic.md).

The charge is ρ, fixed in advance (each σ is rounded up and ε down, so the rounds' exact costs,
``SyntheticData.steps``, sum to at most ρ). Every candidate's exact marginal is computed by the
engine after that one charge.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from dpcurator._validation import check_int, check_positive, fail
from dpcurator.accounting import ZCDPEvent
from dpcurator.mechanisms import Gaussian
from dpcurator.query.session import Session
from dpcurator.random import Rng
from dpcurator.synth import _descent, _mbi
from dpcurator.synth.common import (
    Progress,
    Step,
    SyntheticData,
    combined,
    independent_column,
    report,
    sample_rows,
    select,
    selection_epsilon,
    synthetic,
)
from dpcurator.synth.compress import (
    denoised,
    enough_informative,
    is_informative,
    second_one_ways,
)
from dpcurator.synth.domain import DEFAULT_MAX_BINS, Clique, SynthDomain
from dpcurator.synth.measure import exact_marginals
from dpcurator.synth.mst import positive_rho

#: AIM's share of each round spent on measurement.
ALPHA = Fraction(9, 10)
#: The model size limit (MB of float64 junction-tree cells, mbi's measure; 10 MB is 1,310,720
#: cells), set from the fit's time per cell: a numpy mirror-descent iteration costs about
#: 30-37 ns of CPU per junction-tree cell (salary, 0.5 to 8.3 million cells, 2026-11-28), so a
#: model at the limit takes about 40-50 s for the final 1000 iterations and 4-5 s for a round's
#: 100. mbi's reference limit of 80 MB let salary at ε = 10 reach an 8.3-million-cell model
#: whose final 1000-iteration fit alone needs about 5 min (docs/synthetic.md). Public.
DEFAULT_MAX_MODEL_SIZE = 10.0


def aim_round_rho(rho: Fraction, columns: int) -> Fraction:
    """ρ_m of AIM's first rounds: αρ/T with T = 16d rounds."""
    return ALPHA * rho / (16 * columns)


def candidates_of(workload: Sequence[Clique]) -> dict[Clique, int]:
    """The downward closure of ``workload`` with AIM's weights w_r = Σ_s |r ∩ s|."""
    closure = {
        sub
        for clique in workload
        for k in range(1, len(clique) + 1)
        for sub in itertools.combinations(clique, k)
    }
    return {r: sum(len(set(r) & set(s)) for s in workload) for r in sorted(closure)}


def _workload(domain: SynthDomain, workload: Sequence[Sequence[str]] | None) -> tuple[Clique, ...]:
    """The workload's marginals by column name (default: every 2-way marginal)."""
    if workload is None:
        return tuple(itertools.combinations(domain.names, 2))
    return tuple(tuple(domain.column(n).name for n in c) for c in workload)


def _candidates(
    domain: SynthDomain, workload: tuple[Clique, ...], max_model_size: float
) -> dict[Clique, int]:
    """The weighted candidates (every 1-way clique among them); free refusals of sizes over
    limits."""
    for clique in workload:
        domain.check_marginal(clique)
    weights = candidates_of(workload)
    ones = tuple((n,) for n in domain.names)
    weights.update({c: weights.get(c, 0) for c in ones})
    one_way_size = _mbi.model_size_mb(domain, ones)
    if one_way_size > max_model_size:
        raise fail(
            "aim", "max_model_size", f">= the 1-way model's {one_way_size:.3g} MB", max_model_size
        )
    return weights


def _scored(
    domain: SynthDomain,
    weights: dict[Clique, int],
    exact: dict[Clique, np.ndarray],
    beliefs: _mbi.Beliefs,
    cliques: list[Clique],
    *,
    limit: float,
    bias: float,
) -> tuple[list[Clique], list[float]]:
    """The candidates whose model fits within ``limit`` MB (the 1-way ones when none does) and
    their AIM scores w_r·(‖M_r(D) - M_r(model)‖₁ - bias·n_r)."""
    # a candidate inside a measured clique leaves the junction tree (and its size) unchanged
    current = _mbi.model_size_mb(domain, cliques)
    allowed = [
        r
        for r in weights
        if (
            current
            if any(set(r) <= set(c) for c in cliques)
            else _mbi.model_size_mb(domain, [*cliques, r])
        )
        <= limit
    ]
    allowed = allowed or [r for r in weights if len(r) == 1]
    scores = [
        weights[r] * (float(np.abs(exact[r] - beliefs.marginal(r)).sum()) - bias * domain.cells(r))
        for r in allowed
    ]
    return allowed, scores


def _measure(
    gaussian: Gaussian, exact: dict[Clique, np.ndarray], clique: Clique, rng: Rng | None
) -> _mbi.Measurement:
    """The marginal over ``clique`` with the discrete Gaussian's noise, for mbi."""
    noisy = gaussian.release_integers(exact[clique], rng).astype(float)
    return _mbi.Measurement(clique, noisy, float(gaussian.sigma))


def _one_ways(
    domain: SynthDomain,
    weights: dict[Clique, int],
    *,
    exact: dict[Clique, np.ndarray],
    gaussian: Gaussian,
    total: Fraction,
    l2: Fraction,
    rng: Rng | None,
) -> tuple[list[_mbi.Measurement], list[Step], dict[Clique, int], dict[str, np.ndarray]]:
    """The first round (every 1-way marginal with ``gaussian``) and the low-budget rule (module
    docstring): the measurements, their steps, the candidates left for the rounds (none when
    too few columns are informative or no workload marginal lies among them) and
    the denoised combined 1-way counts of each column measured twice."""
    names = domain.names
    measured = [_measure(gaussian, exact, (n,), rng) for n in names]
    steps = [Step("measure", (n,), gaussian.rho(l2)) for n in names]
    informative = [
        n for n, m in zip(names, measured, strict=True) if is_informative(m.noisy, m.sigma)
    ]
    weights = {r: w for r, w in weights.items() if set(r) <= set(informative)}
    if not enough_informative(names, informative) or max(weights.values(), default=0) == 0:
        informative, weights = [], {}
    cost = gaussian.rho(l2)
    alone: dict[str, np.ndarray] = {}
    for name, budget in second_one_ways(
        names, informative, each=total / len(names) - cost, spread=total - len(names) * cost
    ):
        again = Gaussian.for_rho(budget, l2)
        measured.append(_measure(again, exact, (name,), rng))
        steps.append(Step("measure", (name,), again.rho(l2)))
        first, second = measured[names.index(name)], measured[-1]
        alone[name] = denoised(*combined(first.noisy, first.sigma, second.noisy, second.sigma))
    return measured, steps, weights, alone


def aim(
    session: Session,
    *,
    rho: object,
    columns: Sequence[str] | None = None,
    workload: Sequence[Sequence[str]] | None = None,
    max_bins: int = DEFAULT_MAX_BINS,
    max_model_size: float = DEFAULT_MAX_MODEL_SIZE,
    rng: Rng | None = None,
    iters: int = _mbi.DEFAULT_ITERS,
    round_iters: int = 100,
    rows: int | None = None,
    progress: Progress | None = None,
) -> SyntheticData:
    """AIM synthetic data under ``rho``-zCDP (see the module docstring): ``rows`` records (the
    model's noisy total when None); ``progress`` hears of every round.

    Free refusals: a column without a public domain, a workload marginal over the cell limit,
    or a 1-way model already over ``max_model_size`` (sizes and limits named).
    """
    total = positive_rho("aim", rho)
    check_positive("aim", "max_model_size", max_model_size)
    if rows is not None:
        check_int("aim", "rows", rows, minimum=1)
    domain = SynthDomain.from_metadata(session.metadata, columns, max_bins=max_bins)
    names = domain.names
    weights = _candidates(domain, _workload(domain, workload), max_model_size)
    unit = session.metadata.unit
    l2, l1 = unit.count_l2(), unit.count_l1()
    rounds = 16 * len(names)
    rho_m = aim_round_rho(total, len(names))
    gaussian = Gaussian.for_rho(rho_m, l2)
    epsilon = selection_epsilon((1 - ALPHA) * total / rounds)
    event = ZCDPEvent(total)
    source = rng if rng is not None else session.rng
    exact = exact_marginals(session, domain, tuple(weights), event, description=f"AIM rho={total}")
    measured, steps, weights, alone = _one_ways(
        domain, weights, exact=exact, gaussian=gaussian, total=total, l2=l2, rng=source
    )
    spent = sum((s.cost for s in steps), Fraction(0))
    model = _descent.fit(domain, measured, iters=round_iters)
    beliefs = model.beliefs
    report(progress, f"AIM: {len(measured)} one-way measurements", 0.9 * float(spent / total))
    sensitivity = max(weights.values(), default=0) * l1
    final = not weights
    while not final:
        rest = total - spent
        if rest < 2 * (gaussian.rho(l2) + epsilon**2 / 8):
            gaussian = Gaussian.for_rho(ALPHA * rest, l2)
            epsilon = selection_epsilon((1 - ALPHA) * rest)
            final = True
        bias = math.sqrt(2 / math.pi) * float(gaussian.sigma)
        allowed, scores = _scored(
            domain,
            weights,
            exact,
            beliefs,
            [m.clique for m in measured],
            limit=float(spent / total) * max_model_size,
            bias=bias,
        )
        r = allowed[select(scores, sensitivity, epsilon, source)]
        steps.append(Step("select", r, epsilon**2 / 8))
        before = beliefs.marginal(r)
        measured.append(_measure(gaussian, exact, r, source))
        steps.append(Step("measure", r, gaussian.rho(l2)))
        spent += gaussian.rho(l2) + epsilon**2 / 8
        model = _descent.fit(domain, measured, iters=round_iters, warm_start=model)
        beliefs = model.beliefs
        moved = float(np.abs(beliefs.marginal(r) - before).sum())
        if not final and moved <= bias * domain.cells(r):
            rho_m *= 4
            gaussian = Gaussian.for_rho(rho_m, l2)
            epsilon *= 2
        share = float(spent / total)
        done = sum(st.kind == "select" for st in steps)
        report(progress, f"AIM round {done}: {share:.0%} of rho", 0.9 * share)
    del exact
    return _final(
        domain,
        measured,
        model,
        iters=iters,
        rows=rows,
        rng=source,
        progress=progress,
        event=event,
        steps=steps,
        alone=alone,
    )


def _final(
    domain: SynthDomain,
    measured: list[_mbi.Measurement],
    model: _descent.Fit,
    *,
    iters: int,
    rows: int | None,
    rng: Rng | None,
    progress: Progress | None,
    event: ZCDPEvent,
    steps: list[Step],
    alone: dict[str, np.ndarray],
) -> SyntheticData:
    """The final fit (``iters`` iterations, warm-started) and ``rows`` records drawn from it;
    the columns in ``alone`` (independent of the rest in the model) are drawn from their
    combined noisy 1-way counts instead, denoised as MST's compression does (at low signal,
    mbi's projection puts a sparse column's mass on a few noisy cells)."""
    model = _descent.fit(domain, measured, iters=iters, warm_start=model)
    report(progress, "AIM: final model fitted", 0.95)
    count = sample_rows(rows, model.total)
    records = _mbi.sample(model.beliefs, domain, count, rng)
    records.update({name: independent_column(v, count, rng) for name, v in alone.items()})
    report(progress, "AIM: records sampled", 1.0)
    return synthetic(records, domain, "aim", event, steps, rng=rng)
