"""The conformance matrix covers every release kind the library offers (issue 29), and objective
perturbation, whose noise perturbs an objective rather than a statistic, gets its own brute force:
the rows in which neighbouring tables differ never exceed the k its calibration assumed.
"""

from __future__ import annotations

import importlib
from collections import Counter
from typing import Any, get_args

import numpy as np
import pytest

import dpcurator as dpc
from dpcurator import mining, streams
from dpcurator.estimators import hypothesis
from dpcurator.estimators.logistic import METHODS
from dpcurator.query.fit import core as fit_module
from dpcurator.query.fit.core import FIT_KINDS
from dpcurator.query.frontend.builder import AggregateKind
from dpcurator.query.frontend.sql import TEST_FUNCTIONS
from dpcurator.random import SeededRng
from dpcurator.service.stores.streams import KINDS as STREAM_KINDS
from dpcurator.service.stores.synth_plan import KINDS as SYNTH_KINDS
from tests.privacy_matrix import LEVELS, RELATIONS, _base, frame, metadata, neighbours
from tests.test_privacy_matrix import KINDS, test_hypothesis_test_conforms
from tests.test_privacy_matrix_sql_tests import KINDS as SQL_TEST_KINDS

#: Where each offered kind is checked: a text that names its row(s) in the matrix, or
#: ``test_objective_perturbation_rows`` for objective perturbation.
SQL_ROWS = {
    "count": "COUNT(*)",
    "count_persons": "COUNT(DISTINCT",
    "sum": "SUM(",
    "mean": "AVG(",
    "variance": "VARIANCE(",
    "stddev": "VARIANCE(",  # the square root of the same noisy variance (post-processing)
    "quantile": "MEDIAN(",
    "histogram": "HISTOGRAM(",
}
OP_ROW = "objective perturbation (test_objective_perturbation_rows)"
#: The Session verbs (dpcurator.api) that run a kind with a row of its own; every other verb
#: is a release kind of its own, whose row is named ``session: <verb>``.
VERB_ROWS = {
    "synthesize": "synth: ",
    "kmeans": "kmeans",
    "pca": "pca",
    "naive_bayes": "naive_bayes",
    "decision_tree": "id3",
    "pmw": "pmw",
}


def session_verbs() -> set[str]:
    """The verbs the library's Session adds to the query session."""
    return {name for name in vars(dpc.Session) if not name.startswith("_")}


def offered() -> dict[str, str]:
    """Every release kind the library offers, with the text naming its row."""
    kinds = {f"sql {kind}": SQL_ROWS.get(kind, kind) for kind in get_args(AggregateKind)}
    kinds |= {"sql clipping report": "clipping=", "sql gaussian noise": "rho=", "dp_bounds": ""}
    kinds |= {f"fit {kind}": f"fit: {kind} " for kind in FIT_KINDS}
    kinds |= {f"sql test {name}": f"{name.upper()}(" for name in TEST_FUNCTIONS}
    kinds |= {f"fit logistic {method}": method for method in METHODS}
    kinds["fit logistic objective_perturbation"] = OP_ROW
    kinds |= {f"synth {kind}": f"synth: {kind}" for kind in (*SYNTH_KINDS, "independent")}
    kinds |= {f"mining {name}": name for name in mining.__all__}
    kinds |= {
        f"session {verb}": VERB_ROWS.get(verb, f"session: {verb}") for verb in session_verbs()
    }
    kinds |= {
        "pmw": "pmw",
        "sparse vector": "sparse vector",
        "sparse vector numeric": "numeric=True",
    }
    return kinds


#: Kinds checked on their own relation by a test of their own: streams (an event or a user's
#: events, not a table's rows) and randomized-response surveys (the respondent, local DP).
ELSEWHERE = {
    "stream count": ("tests.test_privacy_matrix", "test_tree_stream_conforms"),
    "stream sum": ("tests.test_privacy_matrix", "test_tree_stream_conforms"),
    "stream density": (
        "tests.test_privacy_matrix_pan_private",
        "test_pan_private_density_state_is_private",
    ),
    "stream incidence": (
        "tests.test_privacy_matrix_pan_private",
        "test_pan_private_incidence_state_is_private",
    ),
    "stream correlated_count": ("tests.test_privacy_matrix", "test_new_stream_conforms"),
    "stream correlated_sum": ("tests.test_privacy_matrix", "test_new_stream_conforms"),
    "stream kary_count": ("tests.test_privacy_matrix", "test_new_stream_conforms"),
    "stream kary_sum": ("tests.test_privacy_matrix", "test_new_stream_conforms"),
    "survey": ("tests.test_privacy_matrix", "test_randomized_response_conforms"),
}


#: Every stream mechanism the library exports (dpcurator.streams), with its conformance test;
#: the service's stream kinds above are wired to some of them.
STREAM_CLASSES = {
    "ContinualSum": ("tests.test_privacy_matrix", "test_tree_stream_conforms"),
    "CorrelatedContinualSum": ("tests.test_privacy_matrix", "test_new_stream_conforms"),
    "KaryContinualSum": ("tests.test_privacy_matrix", "test_new_stream_conforms"),
    "PanPrivateDensity": (
        "tests.test_privacy_matrix_pan_private",
        "test_pan_private_density_state_is_private",
    ),
    "PanPrivateIncidence": (
        "tests.test_privacy_matrix_pan_private",
        "test_pan_private_incidence_state_is_private",
    ),
}


def test_every_library_stream_has_a_row() -> None:
    """A stream mechanism added to dpcurator.streams without a conformance test fails here."""
    exported = {
        name
        for name in streams.__all__
        if isinstance(getattr(streams, name), type)
        and any(hasattr(getattr(streams, name), method) for method in ("update", "observe"))
    }
    assert exported == STREAM_CLASSES.keys()
    for module, test in STREAM_CLASSES.values():
        assert callable(getattr(importlib.import_module(module), test))


def _row_name(text: str) -> str:
    aliases = {"GaussianNB": "naive_bayes", "KMeans": "kmeans", "PCA": "pca", "ID3": "id3"}
    return aliases.get(text, text)


def test_every_release_kind_has_a_row() -> None:
    """A kind added to the library without a row in the matrix fails here."""
    missing = [
        kind
        for kind, text in offered().items()
        if text != OP_ROW and not any(_row_name(text) in name for name in KINDS | SQL_TEST_KINDS)
    ]
    assert missing == []
    assert SQL_ROWS.keys() == set(get_args(AggregateKind))
    streams = {f"stream {kind}" for kind in STREAM_KINDS} | {"survey"}
    assert streams == ELSEWHERE.keys()
    for module, test in ELSEWHERE.values():
        assert callable(getattr(importlib.import_module(module), test))


# ----------------------------------------------------------------------------------------------
# Objective perturbation: k against the rows that differ


def _fitted_rows(
    table: Any, meta: dpc.Metadata, monkeypatch: pytest.MonkeyPatch
) -> tuple[Counter[tuple[float, ...]], int]:
    """The rows objective perturbation receives on ``table`` and the k it is calibrated for."""
    seen: dict[str, Any] = {}
    original = fit_module.logistic_regression

    def recording(features: Any, labels: Any, **options: Any) -> Any:
        rows = np.column_stack([np.asarray(features), np.asarray(labels)])
        seen["rows"] = Counter(tuple(float(v) for v in row) for row in rows)
        seen["k"] = options["rows_per_person"]
        return original(features, labels, **options)

    with monkeypatch.context() as patch:
        patch.setattr(fit_module, "logistic_regression", recording)
        session = dpc.Session.from_data(
            table, metadata=meta, budget=dpc.Budget(4.0, 1e-3), rng=SeededRng(7)
        )
        try:
            session.fit("logistic_regression", y="y", x=["x"], epsilon=1.0, delta=1e-6)
        finally:
            session.close()
    return seen["rows"], seen["k"]


@pytest.mark.slow
@pytest.mark.parametrize("relation", RELATIONS)
@pytest.mark.parametrize("level", LEVELS)
def test_objective_perturbation_rows(
    relation: str, level: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Objective perturbation's calibration assumes neighbours differ in at most k rows of the
    objective (k gradient terms shift it, k rank-one terms its Hessian): checked on every pair of
    worst-case neighbours (the multiset difference of the rows the estimator receives)."""
    meta = metadata(relation, level, len(_base(level)))
    for table, other in neighbours(relation, level):
        rows, k = _fitted_rows(table, meta, monkeypatch)
        other_rows, other_k = _fitted_rows(other, meta, monkeypatch)
        assert k == other_k  # public: from the metadata alone
        changed = sum(((rows - other_rows) + (other_rows - rows)).values())
        assert changed <= k, f"{changed} rows differ, calibrated for {k}"


def test_the_worst_case_neighbours_reach_the_unit_bound() -> None:
    """Power: the neighbours do change as many rows as the unit allows (else the checks above
    could not fail), e.g. 2r rows under replace-one with r = 2."""
    meta = metadata("replace_one", "rows", len(_base("rows")))
    assert meta.unit.rows_changed == 4
    sizes = [abs(len(a) - len(b)) for a, b in neighbours("add_remove", "rows")]
    assert max(sizes) == 2
    table, other = next(iter(neighbours("replace_one", "rows")))
    before = Counter(map(tuple, table.to_numpy().tolist()))
    after = Counter(map(tuple, other.to_numpy().tolist()))
    assert sum(((before - after) + (after - before)).values()) == 4
    assert frame(_base("row"), "row").shape[0] == len(_base("row"))


# ----------------------------------------------------------------------------------------------
# Hypothesis tests (issue 27 item 2): each test on arrays has its rows in
# tests/test_privacy_matrix.py::test_hypothesis_test_conforms (parametrised by hypothesis.TESTS).


def test_every_hypothesis_test_has_a_row() -> None:
    """Every public test of dpcurator.estimators.hypothesis is in TESTS, which the matrix runs."""
    public = {name for name in hypothesis.__all__ if name.endswith(("_test", "_anova"))}
    public.discard("difference_of_means_test")  # the old name of welch_t_test
    assert public == set(hypothesis.TESTS)
    assert callable(test_hypothesis_test_conforms)
