"""AIM's candidate marginals in numpy (dpcurator.synth._mbi.Beliefs) against mbi's own
inference (variable elimination through JAX) on a fitted model. AIM's charge is checked in
tests/test_synth_synthesizers.py."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.accounting import PrivacyFilter, ZCDPAccountant
from dpcurator.core.measures import ZCDP
from dpcurator.random import SeededRng
from dpcurator.synth import _mbi
from dpcurator.synth.aim import _scored, aim, candidates_of
from dpcurator.synth.domain import SynthDomain

pytest.importorskip("mbi")

SIZES = {"a": 2, "b": 3, "c": 4, "d": 2, "e": 3, "f": 2}
META = dpc.Metadata.from_dict(
    {
        "table": "t",
        "columns": {c: {"type": "int", "keys": list(range(n))} for c, n in SIZES.items()},
    }
)
#: A chain a-b-c-d-e and f alone: a junction forest of several cliques and two components.
CLIQUES = (("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("f",))
QUERIES = (
    ("a",),
    ("c", "b"),
    ("a", "c"),
    ("d", "a"),
    ("a", "e"),
    ("e", "b", "a"),
    ("a", "f"),
    ("f", "e", "c"),
)


@pytest.fixture(scope="module")
def fitted() -> object:
    """A model fitted to noisy marginals of random skewed data (declared seed 5)."""
    gen = np.random.default_rng(5)
    domain = SynthDomain.from_metadata(META)
    measured = [_mbi.Measurement(c, gen.gamma(1.0, 50.0, domain.shape(c)), 3.0) for c in CLIQUES]
    return _mbi.estimate(domain, measured, iters=200)


@pytest.mark.parametrize("clique", QUERIES)
def test_numpy_marginal_equals_mbi_inference(fitted: object, clique: tuple[str, ...]) -> None:
    """Every marginal, inside one clique or across the tree and the forest's components,
    equals mbi's variable elimination (to float rounding), axes in the clique's order."""
    expected = _mbi.model_marginal(fitted, clique)
    got = _mbi.Beliefs.of(fitted).marginal(clique)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)


def test_aim_size_check_shortcut_allows_what_the_full_check_allows(fitted: object) -> None:
    """AIM skips mbi's model-size computation for a candidate inside a measured clique (the
    junction tree is unchanged); the candidates it allows are exactly those whose model, by
    the full computation, fits the limit (one chosen between the sizes, so both kinds occur)."""
    domain = SynthDomain.from_metadata(META)
    weights = candidates_of(list(itertools.combinations(SIZES, 2)))
    sizes = {r: _mbi.model_size_mb(domain, [*CLIQUES, r]) for r in weights}
    limit = sorted(set(sizes.values()))[1]
    exact = {r: np.zeros(domain.shape(r)) for r in weights}
    beliefs = _mbi.Beliefs.of(fitted)
    allowed, _ = _scored(domain, weights, exact, beliefs, list(CLIQUES), limit=limit, bias=0.0)
    assert set(allowed) == {r for r, size in sizes.items() if size <= limit}
    assert 0 < len(allowed) < len(weights)


def test_aim_never_selects_a_candidate_over_its_model_size_limit() -> None:
    """AIM's Algorithm 1 size rule, end to end: every 2-way candidate selected keeps the
    model's junction tree within (ρ spent before the round / ρ)·max_model_size (only 1-way
    candidates, which leave the tree unchanged, may be taken when none fits). The columns are
    noisy copies of one latent code (declared seed 11), so the 2-way marginals are what the
    model fits worst and the limit binds in some rounds (checked)."""
    sizes = dict.fromkeys("abcdef", 8)
    meta = dpc.Metadata.from_dict(
        {
            "table": "t",
            "columns": {c: {"type": "int", "keys": list(range(n))} for c, n in sizes.items()},
        }
    )
    gen = np.random.default_rng(11)
    latent = gen.integers(0, 8, 2000)
    frame = pd.DataFrame({c: (latent + gen.integers(0, 2, 2000)) % 8 for c in sizes})
    session = dpc.Session.from_data(
        frame, metadata=meta, budget_filter=PrivacyFilter(ZCDP(1), ZCDPAccountant())
    )
    rho, limit_mb = Fraction(1), 400 * 8 / 2**20  # 400 cells: a few 2-way cliques at most
    result = aim(
        session, rho=rho, max_model_size=limit_mb, rng=SeededRng(3), iters=20, round_iters=20
    )
    domain = SynthDomain.from_metadata(meta)
    spent, measured, binding = Fraction(0), [], 0
    for step in result.steps:
        if step.kind == "select":
            limit = float(spent / rho) * limit_mb
            size = _mbi.model_size_mb(domain, [*measured, step.clique])
            assert size <= limit or len(step.clique) == 1, (step.clique, size, limit)
            binding += any(
                _mbi.model_size_mb(domain, [*measured, pair]) > limit
                for pair in itertools.combinations(sizes, 2)
            )
        else:
            measured.append(step.clique)
        spent += step.cost
    assert binding > 0
    assert sum(step.kind == "select" and len(step.clique) == 2 for step in result.steps) > 0
