"""MIN and MAX spend what they are charged (issue 27 item 3).

Their edge scores are monotone between add/remove neighbours, so each permute-and-flip level is
ε_l-DP with the monotone rule (:mod:`dpcurator.estimators.quantile_refine`); with the general
rule they reached only ε_l / 2. Checked exactly: the output distribution of a level's selection
(permute-and-flip's probabilities, a Poisson-binomial sum) on every small histogram and every
neighbour that adds r values, whose largest log ratio must lie in (3ε/4, ε]. The query layer
plans them so under add/remove only, and the charge is the composed cost of what runs.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

import dpcurator as dpc
from dpcurator.estimators.quantile_refine import RefinedQuantile, edge_scores
from dpcurator.mechanisms import PermuteAndFlip
from dpcurator.query import ir
from dpcurator.query.plan.quantile import plan_step

BINS = 3


def _probabilities(mechanism: PermuteAndFlip, scores: np.ndarray) -> np.ndarray:
    """Exact (in floats) P[candidate] of permute-and-flip: p_r · E[1 / (1 + other heads)]."""
    ratio = float(mechanism.epsilon) / ((1 if mechanism.monotonic else 2) * mechanism.sensitivity)
    heads = np.exp(-ratio * mechanism.gaps(scores).astype(float))
    out = np.zeros(heads.size)
    for r in range(heads.size):
        others = np.delete(heads, r)
        count = np.zeros(others.size + 1)  # P[k other heads]
        count[0] = 1.0
        for p in others:
            count[1:] = count[1:] * (1 - p) + count[:-1] * p
            count[0] *= 1 - p
        out[r] = heads[r] * float(np.sum(count / np.arange(1, others.size + 2)))
    return out


def _largest_loss(p: float, rows: int) -> tuple[float, float]:
    """(ε of the level, the largest log ratio of its outputs over add-r neighbours)."""
    plan = RefinedQuantile.plan(
        p, 1, 0.0, 1.0, rows_per_person=rows, levels=((Fraction(1), 0, BINS),), one_sided=True
    )
    mechanism = plan.levels[0].mechanism
    worst = 0.0
    for counts in itertools.product(range(4), repeat=BINS):
        base = _probabilities(mechanism, edge_scores(counts, plan.p)[0])
        for added in itertools.combinations_with_replacement(range(BINS), rows):
            grown = np.array(counts) + np.bincount(added, minlength=BINS)
            other = _probabilities(mechanism, edge_scores(grown, plan.p)[0])
            worst = max(worst, float(np.max(np.abs(np.log(base) - np.log(other)))))
    return float(mechanism.epsilon), worst


@pytest.mark.parametrize(("p", "rows"), [(0.0, 1), (1.0, 1), (0.0, 2)])
def test_min_and_max_spend_their_whole_epsilon(p: float, rows: int) -> None:
    epsilon, loss = _largest_loss(p, rows)
    assert loss <= epsilon * (1 + 1e-9)  # still ε-DP ...
    assert loss > 0.75 * epsilon  # ... and no longer ε/2-DP (the general rule's reach)


def _step(p: float, relation: str) -> RefinedQuantile:
    document = {
        "table": "t",
        "columns": {"x": {"type": "float", "lower": 0.0, "upper": 10.0}},
        "neighbouring": relation,
    }
    if relation == "replace_one":
        document["public_size"] = 100
    unit = dpc.Metadata.from_dict(document).unit
    step = plan_step(
        "h",
        ir.Col("x"),
        p,
        lower=0.0,
        upper=10.0,
        epsilon_per_group=Fraction(1),
        rows_per_person=unit.rows_changed,
        integer=False,
        one_sided=unit.one_sided,
    )
    return step.refined


@pytest.mark.parametrize("p", [0.0, 1.0, 0.5])
def test_the_monotone_rule_follows_the_relation(p: float) -> None:
    """Add/remove: MIN and MAX use the monotone rule (not the median: its scores are not
    monotone); replace-one: never. The charge (ε = 1 here) is the composed cost of what runs:
    the levels' and the interval's ε, each rounded down by at most 2^-39 of itself."""
    for relation, expected in (("add_remove", p in (0.0, 1.0)), ("replace_one", False)):
        refined = _step(p, relation)
        assert [level.mechanism.monotonic for level in refined.levels] == [expected] * 2
        assert refined.interval is not None
        spent = sum(level.mechanism.epsilon for level in refined.levels)
        rows = 2 if relation == "replace_one" else 1  # rows_changed: one person, one or two sides
        spent += refined.interval.epsilon(refined.p, rows)  # the offset T, n and the shells
        assert 1 - Fraction(1, 2**38) <= spent <= 1
    assert (
        not RefinedQuantile.plan(p, 1, 0, 10, integer=True, one_sided=True)
        .levels[0]
        .mechanism.monotonic
    )  # unit bins: centre scores are not monotone
