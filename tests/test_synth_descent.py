"""AIM's model fit in numpy (dpcurator.synth._descent) against mbi's own mirror descent, its
junction-tree sizes (dpcurator.synth._jtree.model_cells) against mbi's, and AIM's charge."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.accounting import PrivacyFilter, ZCDPAccountant
from dpcurator.core.measures import ZCDP
from dpcurator.random import SeededRng
from dpcurator.synth import _descent, _mbi
from dpcurator.synth._jtree import model_cells
from dpcurator.synth.aim import aim
from dpcurator.synth.domain import SynthDomain

pytest.importorskip("mbi")

SIZES = {"a": 2, "b": 3, "c": 4, "d": 2, "e": 3, "f": 2}
META = dpc.Metadata.from_dict(
    {
        "table": "t",
        "columns": {c: {"type": "int", "keys": list(range(n))} for c, n in SIZES.items()},
    }
)
#: the first fit's cliques (a chain, a clique given out of the domain's order, a lone column,
#: one clique measured twice); the second adds a clique that closes a cycle
FIRST = (("a", "b"), ("c", "b"), ("c", "d"), ("d", "e"), ("f",), ("a",), ("a",))
SECOND = (("a", "c"),)


def _measurements(cliques: tuple[tuple[str, ...], ...], seed: int) -> list[_mbi.Measurement]:
    """Noisy-looking marginals (gamma counts, some negative after a shift; declared seed) with
    σ between 2 and 5; the last one is weighted."""
    gen = np.random.default_rng(seed)
    domain = SynthDomain.from_metadata(META)
    out = []
    for c in cliques:
        noisy = gen.gamma(1.0, 60.0, domain.shape(c)) - 5.0
        out.append(_mbi.Measurement(c, noisy, float(gen.uniform(2.0, 5.0))))
    weights = gen.uniform(0.5, 1.5, domain.cells(cliques[-1]))
    last = out[-1]
    out[-1] = _mbi.Measurement(last.clique, np.ravel(last.noisy) * weights, last.sigma, weights)
    return out


def _mbi_fit(domain: SynthDomain, measured: list[_mbi.Measurement], warm: object) -> object:
    """mbi's MirrorDescent on the same measurements (its own total estimate, warm start)."""
    library = _mbi.mbi()
    linear = [
        library.LinearMeasurement(
            np.ravel(m.noisy),
            m.clique,
            m.sigma,
            **({} if m.weights is None else {"query": library.WeightedQuery(m.weights)}),
        )
        for m in measured
    ]
    estimator = library.estimation.MirrorDescent()
    return estimator.estimate(_mbi.mbi_domain(domain), linear, iters=100, warm_start=warm)


@pytest.mark.slow
def test_numpy_fit_equals_mbi_mirror_descent() -> None:
    """Two chained fits (the second warm-started over a new structure) give mbi's model: every
    measured marginal, and one across the tree, to float rounding; the same total."""
    domain = SynthDomain.from_metadata(META)
    first = _measurements(FIRST, seed=3)
    second = [*first, *_measurements(SECOND, seed=4)]
    ours = _descent.fit(domain, first, iters=100)
    theirs = _mbi_fit(domain, first, None)
    ours = _descent.fit(domain, second, iters=100, warm_start=ours)
    theirs = _mbi_fit(domain, second, theirs)
    assert ours.total == pytest.approx(float(theirs.total), rel=1e-12)  # type: ignore[attr-defined]
    expected = _mbi.Beliefs.of(theirs)
    for clique in [*(m.clique for m in second), ("a", "e"), ("f", "d", "b")]:
        got = ours.beliefs.marginal(clique)
        np.testing.assert_allclose(got, expected.marginal(clique), rtol=1e-7, atol=1e-7)


def _random_cliques(gen: np.random.Generator, names: list[str]) -> list[tuple[str, ...]]:
    """A few random cliques of one to three columns, sometimes with every 1-way clique."""
    k = int(gen.integers(1, 8))
    widths = gen.integers(1, min(len(names), 3) + 1, size=k)
    cliques = [tuple(str(c) for c in gen.choice(names, int(w), replace=False)) for w in widths]
    return cliques + ([(n,) for n in names] if gen.random() < 0.5 else [])


def test_model_cells_equal_mbi_junction_tree_size() -> None:
    """The junction tree's cells equal mbi's hypothetical_model_size (8 bytes a cell) on a
    chain, a star, a cycle and 150 random structures (declared seed 1): same triangulation,
    same greedy elimination order (ties included), same rule for trees."""
    tree_module = _mbi.mbi().junction_tree
    gen = np.random.default_rng(1)
    cases = [
        # a chain that mbi keeps as a tree, though greedy elimination would start at c
        (
            {"a": 9, "b": 3, "c": 2, "d": 2, "e": 9},
            [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")],
        ),
        ({"a": 5, "b": 3, "c": 4, "d": 2}, [("a", "b"), ("a", "c"), ("a", "d")]),
        # a cycle whose size depends on which of the tied columns a and c goes first
        ({"a": 2, "b": 4, "c": 6, "d": 6}, [("c", "d"), ("a", "d"), ("a", "b"), ("b", "c")]),
    ]
    for _ in range(150):
        names = [f"c{i}" for i in range(int(gen.integers(2, 9)))]
        cases.append(({n: int(gen.integers(2, 6)) for n in names}, _random_cliques(gen, names)))
    for sizes, cliques in cases:
        mbi_domain = _mbi.mbi().Domain.fromdict(sizes)
        expected = tree_module.hypothetical_model_size(mbi_domain, cliques) * 2**20 / 8
        assert model_cells(sizes, cliques) == pytest.approx(expected, abs=1e-6), (sizes, cliques)


def test_aim_charge_is_rho_whatever_the_data() -> None:
    """AIM's one charge is ρ, fixed before the data is read: the event and the session's spent
    budget are exactly ρ on two unrelated tables (declared seeds 8 and 9), whose rounds differ."""
    charges, rounds = [], []
    for seed in (8, 9):
        gen = np.random.default_rng(seed)
        frame = pd.DataFrame({c: gen.integers(0, n, 300) for c, n in SIZES.items()})
        frame["a"] = frame["b"] % 2 if seed == 8 else frame["a"]
        session = dpc.Session.from_data(
            frame, metadata=META, budget_filter=PrivacyFilter(ZCDP(2), ZCDPAccountant())
        )
        result = aim(session, rho=0.5, rng=SeededRng(seed), iters=50, round_iters=20)
        charges.append((result.event.rho, session.spent().rho))  # type: ignore[attr-defined]
        rounds.append([(st.kind, st.clique) for st in result.steps])
    assert charges == [(0.5, 0.5), (0.5, 0.5)]
    assert rounds[0] != rounds[1]
