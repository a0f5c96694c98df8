"""SuLQ mining on a session table (dpcurator.mining on the query layer): fits touch the data only
through Session releases, are charged to the session's filter, refuse bad columns before any
charge (naming the column), and on neighbouring tables (D and D minus one person) differ only in
noisy values: same releases, same cost, same iteration count."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import dpcurator as dpc
from dpcurator.accounting import Budget
from dpcurator.errors import DomainError, ParameterError, UnsupportedQueryError
from dpcurator.mining import ID3, PCA, GaussianNB, KMeans
from dpcurator.query.frontend.builder import Query
from dpcurator.query.release.core import Release
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


def _tree(session: Session, releases: list[tuple[float, int]]) -> ID3:
    """ID3 on the demo table, recording each release's (ε, released groups)."""
    original = session.release

    def spy(query: Query, *, epsilon: float) -> Release:
        answer = original(query, epsilon=epsilon)
        releases.append((epsilon, len(answer.rows)))
        return answer

    session.release = spy  # type: ignore[method-assign,assignment]
    return ID3(1, max_depth=2).fit(
        session, columns=["region", "education", "employed"], label="sex"
    )


def test_id3_on_a_session_charges_a_fixed_plan_and_neighbours_differ_only_in_values() -> None:
    full, neighbour = _session(), _session(drop_victim=True)
    seen: tuple[list[tuple[float, int]], list[tuple[float, int]]] = ([], [])
    trees = [_tree(full, seen[0]), _tree(neighbour, seen[1])]
    # 3 levels of eps/3: 1 + 3 releases, 1 + 2, then 1 (a histogram of the leaves)
    expected = [1 / 12] * 4 + [1 / 9] * 3 + [1 / 3]
    for releases in seen:
        assert [e for e, _ in releases] == pytest.approx(expected, rel=1e-12)
    assert full.spent() == neighbour.spent()
    assert 1 - 1e-9 < float(full.spent().epsilon) <= 1  # type: ignore[union-attr]
    assert [(t.epsilon_spent_, t.n_iter_) for t in trees] == [(full.spent().epsilon, 3)] * 2  # type: ignore[union-attr]
    for tree in trees:
        assert tree.classes_ is not None
        assert list(tree.classes_) == ["F", "M"]
        rows = np.array([["North", "master", True], ["West", "nope", None]], dtype=object)
        assert set(tree.predict(rows)) <= {"F", "M"}


def test_id3_refusals_name_the_column_and_charge_nothing() -> None:
    session = _session(budget=1.0)
    with pytest.raises(UnsupportedQueryError, match="column 'income' has no public keys"):
        ID3(0.5).fit(session, columns=["region", "income"], label="sex")
    with pytest.raises(UnsupportedQueryError, match="label column 'hours' has no public keys"):
        ID3(0.5).fit(session, columns=["region"], label="hours")
    with pytest.raises(DomainError, match="'nope'"):
        ID3(0.5).fit(session, columns=["nope"], label="sex")
    with pytest.raises(DomainError, match="'nope'"):
        ID3(0.5).fit(session, columns=["region"], label="nope")
    with pytest.raises(ParameterError, match="'label'"):
        ID3(0.5).fit(session, columns=["region"])
    # depth 2 of 3: 73 x 4 nodes x 73 ages x 5 classes groups in one release
    columns = ["age", "region", "sex", "employed"]
    with pytest.raises(UnsupportedQueryError, match="MAX_PUBLIC_GROUPS"):
        ID3(0.5, max_depth=3).fit(session, columns=columns, label="education")
    with pytest.raises(dpc.BudgetExceededError):
        ID3(2).fit(session, columns=["region"], label="sex")
    assert session.spent().epsilon == 0  # type: ignore[union-attr]


def _coded(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes of 4 attributes (3, 4, 2, 3 values); the label is a depth-2 rule, 10% flipped."""
    generator = np.random.default_rng(seed)
    codes = np.stack([generator.integers(0, v, size=n) for v in (3, 4, 2, 3)], axis=1)
    rule = (codes[:, 1] == 3) | ((codes[:, 1] == 0) & (codes[:, 3] == 2))
    flips = generator.random(n) < 0.1
    return codes, (rule ^ flips).astype(np.int64)


def test_id3_on_a_session_is_as_accurate_as_on_the_array() -> None:
    # The same rows as a table of strings (a NULL is key 0, like code 0 of the array), against the
    # array fit; medians over 5 seeds at eps = 1 (deterministic: seeded noise, no alpha needed).
    codes, labels = _coded(0, 6000)
    test_codes, test_labels = _coded(1, 2000)
    frame = pd.DataFrame({f"c{j}": [f"v{c}" for c in codes[:, j]] for j in range(4)})
    frame.loc[codes[:, 0] == 0, "c0"] = None
    frame["y"] = labels
    columns: dict[str, object] = {
        f"c{j}": {"type": "string", "keys": [f"v{c}" for c in range(v)], "nullable": True}
        for j, v in enumerate((3, 4, 2, 3))
    }
    columns["y"] = {"type": "int", "keys": [0, 1]}
    metadata = Metadata.from_dict({"table": "t", "columns": columns})
    names = [f"c{j}" for j in range(4)]
    test_values = np.array([[f"v{c}" for c in row] for row in test_codes], dtype=object)
    on_session, on_array = [], []
    for seed in range(5):
        session = Session.from_data(frame, metadata=metadata, budget=Budget(1), rng=SeededRng(seed))
        tree = ID3(1, max_depth=2).fit(session, columns=names, label="y")
        on_session.append(float(np.mean(tree.predict(test_values) == test_labels)))
        model = ID3(1, values=[3, 4, 2, 3], classes=2, max_depth=2)
        model.fit(codes, labels, SeededRng(seed + 10))
        on_array.append(float(np.mean(model.predict(test_codes) == test_labels)))
    assert np.median(on_session) > 0.85
    assert abs(np.median(on_session) - np.median(on_array)) < 0.03


def test_kmeans_default_iterations_use_the_metadata_public_size() -> None:
    """A replace-one table declares its public n: Su et al.'s rule reads it (2 iterations at
    n = 1000), the same on D and on D with one person's row replaced, and nothing else is
    released (the cost is the iterations' ε only)."""
    frame = pd.read_csv(dpc.demo_path("people.csv")).head(1000)
    metadata = Metadata.from_yaml(dpc.demo_path("people.yaml"))
    metadata = replace(metadata, neighbouring="replace_one", public_size=1000)
    replaced = frame.copy()
    replaced.loc[0, ["age", "income"]] = [90, 0]
    fits = []
    for table in (frame, replaced):
        session = Session.from_data(table, metadata=metadata, budget=Budget(1), rng=SeededRng(3))
        fits.append(KMeans(3, 1).fit(session, SeededRng(4), columns=["age", "income"]))
        assert 1 - 1e-9 < float(session.spent().epsilon) <= 1  # type: ignore[union-attr]
    assert [m.n_iter_ for m in fits] == [2, 2]
    assert fits[0].epsilon_spent_ == fits[1].epsilon_spent_
