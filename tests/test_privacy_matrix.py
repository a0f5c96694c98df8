"""The conformance matrix (issue 29): every release kind × {add/remove, replace-one} × {one row a
person, r = 2 rows a person without an id, a person column with r = 2 and g = 2}, by brute force
on tiny neighbouring tables (:mod:`tests.privacy_matrix`: the losses of the recorded mechanism
inputs against the charge). A kind the library offers without a row here fails
:func:`test_every_release_kind_has_a_row`.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import dpcurator as dpc
from dpcurator.errors import DomainError
from dpcurator.mining import ID3, PCA, GaussianNB, KMeans
from dpcurator.random import SeededRng
from dpcurator.synth.aim import aim
from dpcurator.synth.fourier import plan_fourier, release_fourier
from dpcurator.synth.marginals import plan_marginals, release_marginals
from dpcurator.synth.mst import independent, mst
from dpcurator.synth.mwem import mwem
from tests.privacy_matrix import LEVELS, RELATIONS, Kind, audit


def _sql(text: str, **options: object) -> Kind:
    def release(session: dpc.Session, rng: SeededRng) -> object:
        return session.sql(text, **options)  # type: ignore[arg-type]

    budget = ", ".join(f"{k}={v}" for k, v in options.items())
    return Kind(f"sql: {text} [{budget}]", release)


def _persons(session: dpc.Session, rng: SeededRng) -> object:
    return session.sql("SELECT g, COUNT(DISTINCT pid) AS n FROM t GROUP BY g", epsilon=1.0)


def _bounds(session: dpc.Session, rng: SeededRng) -> object:
    with contextlib.suppress(DomainError):  # no bin cleared the threshold: charged, no answer
        return session.dp_bounds("x", epsilon=1.0)
    return None


def _fit(kind: str, **options: object) -> Kind:
    def release(session: dpc.Session, rng: SeededRng) -> object:
        return session.fit(kind, epsilon=1.0, **options)  # type: ignore[arg-type]

    return Kind(f"fit: {kind} {sorted(options)}", release)


def _mining(name: str) -> Kind:
    def release(session: dpc.Session, rng: SeededRng) -> object:
        if name == "kmeans":
            return KMeans(2, epsilon=1.0, iterations=2).fit(session, rng, columns=["x", "y"])
        if name == "pca":
            return PCA(1, epsilon=1.0).fit(session, columns=["x", "y"])
        if name == "id3":
            return ID3(epsilon=1.0, max_depth=1).fit(session, columns=["g", "h"], label="y")
        return GaussianNB(epsilon=1.0).fit(session, columns=["x"], label="y")

    return Kind(f"mining: {name}", release)


def _block_mean(block: object) -> object:
    """A user estimator of sample-and-aggregate: the block's column means."""
    return np.asarray(block, dtype=np.float64).mean(axis=0)


def _synth(name: str) -> Kind:
    columns = ["g", "h"]

    def release(session: dpc.Session, rng: SeededRng) -> object:
        if name == "marginals":
            plan = plan_marginals(session, [columns], rho=0.5, columns=columns)
            return release_marginals(session, plan, rng=rng, iters=50)
        if name == "marginals_pure":
            plan = plan_marginals(session, [columns], epsilon=0.5, columns=columns)
            return release_marginals(session, plan, rng=rng, iters=50)
        if name == "fourier":
            return release_fourier(session, plan_fourier(session, [columns], rho=0.5), rng=rng)
        if name == "mst":
            return mst(session, rho=2.0, columns=columns, rng=rng, iters=50)
        if name == "aim":
            return aim(session, rho=0.5, columns=columns, rng=rng, iters=50, round_iters=20)
        if name == "independent":
            return independent(session, rho=0.5, columns=columns, rng=rng)
        return mwem(session, epsilon=0.5, columns=columns, rounds=2, rng=rng)

    budget = "epsilon" if name in ("mwem", "marginals_pure") else "rho"
    return Kind(f"synth: {name}", release, budget=budget, amount=2.0)


#: Every release kind of the library, with the relations and units it supports.
KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in [
        _sql("SELECT COUNT(*) AS n FROM t WHERE y = 1", epsilon=1.0),
        _sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g", epsilon=1.0),
        _sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g", rho=0.5),
        _sql("SELECT SUM(x) AS s FROM t", epsilon=1.0),
        _sql("SELECT g, SUM(x) AS s FROM t GROUP BY g", epsilon=1.0),
        _sql("SELECT AVG(x) AS m FROM t", epsilon=1.0),
        _sql("SELECT g, AVG(x) AS m, VARIANCE(x) AS v FROM t GROUP BY g", epsilon=1.0),
        _sql("SELECT MEDIAN(x) AS q FROM t", epsilon=1.0),
        _sql("SELECT g, MEDIAN(x) AS q FROM t GROUP BY g", epsilon=1.0),
        _sql("SELECT HISTOGRAM(x, 0, 10, 4) AS hist FROM t", epsilon=1.0),
        Kind("sql: COUNT(DISTINCT pid)", _persons, levels=("person",)),
        _sql("SELECT g, SUM(x) AS s FROM t GROUP BY g", epsilon=1.0, clipping=0.2),
        Kind("dp_bounds", _bounds),
        _fit("linear_regression", y="x", x=["y"], delta=1e-6),
        _fit("logistic_regression", y="y", x=["x"], method="sample_and_aggregate", blocks=2,
             lower=-5, upper=5),
        _fit("mle", y="x", model="gaussian", lower=[0, 0.1], upper=[10, 10], blocks=2),
        _fit("sample_and_aggregate", x=["x"], estimator=_block_mean, lower=[0], upper=[10],
             blocks=2),
        _fit("ptr_regression", y="x", x=["y"], lower=-20, upper=20, blocks=2, delta=1e-6),
        _mining("kmeans"),
        _mining("pca"),
        _mining("id3"),
        _mining("naive_bayes"),
        _synth("marginals"),
        _synth("marginals_pure"),
        _synth("fourier"),
        _synth("mst"),
        _synth("aim"),
        _synth("independent"),
        _synth("mwem"),
    ]
}  # fmt: skip

CASES = [
    pytest.param(name, relation, level, id=f"{name}|{relation}|{level}")
    for name in KINDS
    for relation in RELATIONS
    for level in LEVELS
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "relation", "level"), CASES)
def test_release_kind_conforms(
    name: str, relation: str, level: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On every pair of worst-case neighbours, the release loses at most what it charges."""
    assert audit(KINDS[name], relation, level, monkeypatch) == []
