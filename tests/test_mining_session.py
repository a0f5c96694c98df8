"""SuLQ mining on a session table (dpcurator.mining on the query layer): fits touch the data only
through Session releases, are charged to the session's filter, refuse bad columns before any
charge (naming the column), and on neighbouring tables (D and D minus one person) differ only in
noisy values: same releases, same cost, same iteration count."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

import dpcurator as dpc
from dpcurator.accounting import Budget
from dpcurator.errors import DomainError, UnsupportedQueryError
from dpcurator.mining import PCA, GaussianNB, KMeans
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from dpcurator.random import SeededRng

VICTIM = 4322


def _session(drop_victim: bool = False, budget: float = 10.0) -> Session:
    metadata = Metadata.from_dict(yaml.safe_load(Path(dpc.demo_path("people.yaml")).read_text()))
    frame = pd.read_csv(dpc.demo_path("people.csv"))
    if drop_victim:
        frame = frame[frame["pid"] != VICTIM]
    return Session.from_data(frame, metadata=metadata, budget=Budget(budget), rng=SeededRng(3))


def _fits(session: Session) -> tuple[KMeans, PCA, GaussianNB]:
    kmeans = KMeans(3, 1, iterations=3).fit(session, SeededRng(4), columns=["age", "income"])
    pca = PCA(1, 1).fit(session, columns=["age", "income", "hours"])
    nb = GaussianNB(1).fit(session, columns=["age", "hours"], label="sex")
    return kmeans, pca, nb


def test_fits_on_a_session_are_charged_to_it_and_neighbours_differ_only_in_values() -> None:
    full, neighbour = _session(), _session(drop_victim=True)
    models = [_fits(full), _fits(neighbour)]
    assert full.spent() == neighbour.spent()
    assert 3 - 1e-9 < float(full.spent().epsilon) <= 3  # type: ignore[union-attr]
    for a, b in zip(*models, strict=True):
        assert (a.epsilon_spent_, a.n_iter_) == (b.epsilon_spent_, b.n_iter_)
    kmeans, pca, nb = models[0]
    assert kmeans.cluster_centers_ is not None
    assert kmeans.cluster_centers_.shape == (3, 2)
    assert kmeans.n_iter_ == 3
    assert pca.components_ is not None
    assert pca.components_.shape == (1, 3)
    assert nb.classes_ is not None
    assert list(nb.classes_) == ["F", "M"]


def test_refusals_name_the_column_and_charge_nothing() -> None:
    session = _session(budget=1.0)
    with pytest.raises(UnsupportedQueryError, match=r"'sex'.*numeric"):
        KMeans(2, 0.5).fit(session, columns=["age", "sex"])
    with pytest.raises(UnsupportedQueryError, match="'pid' has no public bounds"):
        PCA(1, 0.5).fit(session, columns=["pid", "age"])
    with pytest.raises(UnsupportedQueryError, match="label column 'hours' has no public keys"):
        GaussianNB(0.5).fit(session, columns=["age"], label="hours")
    with pytest.raises(DomainError, match="'nope'"):
        KMeans(2, 0.5).fit(session, columns=["nope"])
    with pytest.raises(dpc.BudgetExceededError):
        KMeans(2, 2, iterations=4).fit(session, columns=["age"])
    assert session.spent().epsilon == 0  # type: ignore[union-attr]
