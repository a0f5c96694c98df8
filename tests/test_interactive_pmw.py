"""Private multiplicative weights (dpcurator.interactive.pmw): charge, exactness, error bound."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from dpcurator import demo_path
from dpcurator.accounting import Budget
from dpcurator.core.measures import PureDP
from dpcurator.errors import BudgetExceededError, DomainError, ParameterError, UnsupportedQueryError
from dpcurator.interactive import PrivateMultiplicativeWeights
from dpcurator.mechanisms import AboveThreshold
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from dpcurator.random import SeededRng

COLUMNS = ["sex", "region", "education", "employed"]  # 2 * 4 * 5 * 2 = 80 cells


def _session(budget: float = 100.0, seed: int = 0, frame: pd.DataFrame | None = None) -> Session:
    metadata = Metadata.from_yaml(demo_path("people.yaml"))
    source = frame if frame is not None else pd.read_csv(demo_path("people.csv"))
    return Session.from_data(source, metadata=metadata, budget=Budget(budget), rng=SeededRng(seed))


def _workload(count: int, seed: int) -> list[dict[str, object]]:
    """Random 2-way counting queries over the demo's public keys."""
    metadata = Metadata.from_yaml(demo_path("people.yaml"))
    generator = np.random.default_rng(seed)
    queries = []
    for _ in range(count):
        first, second = generator.choice(len(COLUMNS), size=2, replace=False)
        query: dict[str, object] = {}
        for index in (first, second):
            keys = metadata.column(COLUMNS[index]).public_keys or (False, True)
            query[COLUMNS[index]] = keys[int(generator.integers(len(keys)))]
        queries.append(query)
    return queries


def _truth(frame: pd.DataFrame, query: dict[str, object]) -> int:
    mask = np.ones(len(frame), dtype=bool)
    for column, value in query.items():
        mask &= (frame[column] == value).to_numpy()
    return int(mask.sum())


def _ask_until_refused(
    curator: PrivateMultiplicativeWeights, queries: list[dict[str, object]]
) -> tuple[list[float], BudgetExceededError | None]:
    """Ask the queries in order; the answers, and the refusal that stopped them (or None)."""
    answers: list[float] = []
    for query in queries:
        try:
            answers.append(curator.count(query))
        except BudgetExceededError as refusal:
            return answers, refusal
    return answers, None


def test_total_charge_equals_the_hand_computation() -> None:
    session = _session(budget=1.0)
    curator = PrivateMultiplicativeWeights(
        session, COLUMNS, epsilon=Fraction(3, 4), max_updates=5, threshold=100
    )
    # by hand: eps_n = 3/4 * 1/10 = 3/40 for the 4 one-way marginals (sensitivity 4); each of
    # 5 rounds (3/4 - 3/40) / 5 = 27/200, 3/4 to the sparse vector, 1/4 to the update (one
    # query, or a whole marginal of integer counts, sensitivity 1):
    # 3/40 + 5 * (81/800 + 27/800) = 3/4
    assert curator.prior_epsilon == Fraction(3, 40)
    assert curator._prior.epsilon(4) == Fraction(3, 40)
    assert curator.svt_epsilon == Fraction(81, 800)
    assert curator.update_epsilon == Fraction(27, 800)
    assert curator._svt.epsilon == Fraction(81, 800)
    assert curator._update.epsilon_for_floats(1) <= Fraction(27, 800)
    assert curator._marginal.epsilon(1) == Fraction(27, 800)
    assert session.spent() == PureDP(Fraction(3, 4))
    _ask_until_refused(curator, _workload(200, seed=1))  # queries and updates spend nothing
    assert session.spent() == PureDP(Fraction(3, 4))


def test_huge_epsilon_answers_exactly() -> None:
    frame = pd.read_csv(demo_path("people.csv"))
    curator = PrivateMultiplicativeWeights(
        _session(budget=1e7), COLUMNS, epsilon=1e7, max_updates=300, threshold=0.25
    )
    assert curator.noisy_size == len(frame)
    for query in _workload(150, seed=2):
        assert round(curator.count(query)) == _truth(frame, query), query
    assert round(curator.count()) == len(frame)


def _correlated() -> pd.DataFrame:
    """The demo table with strong 2-way dependence (employment follows education, women live in
    the North), so that the product of one-way marginals PMW starts from is far off and the
    updates must do the work."""
    frame = pd.read_csv(demo_path("people.csv"))
    frame["employed"] = frame["education"].isin(["bachelor", "master", "doctorate"])
    frame.loc[frame["sex"] == "F", "region"] = "North"
    return frame


def _answers_within_bound(queries: int, beta: float) -> tuple[bool, int]:
    """Whether a PMW curator answers all ``queries`` random 2-way counts on :func:`_correlated`
    within its ``error_bound`` (and the updates it used)."""
    frame = _correlated()
    curator = PrivateMultiplicativeWeights(
        _session(frame=frame), COLUMNS, epsilon=20, max_updates=100, threshold=60
    )
    bound = curator.error_bound(queries, beta)
    asked = _workload(queries, seed=3)
    answers, refusal = _ask_until_refused(curator, asked)
    if refusal is not None:
        return False, curator.updates_used
    errors = [abs(a - _truth(frame, q)) for a, q in zip(answers, asked, strict=True)]
    return max(errors) <= bound, curator.updates_used


# alpha = 0.01: the stated bound fails with probability at most beta = 0.01 for a given seed
ALPHA = 0.01


def test_error_bound_holds() -> None:
    holds, updates = _answers_within_bound(300, ALPHA)
    assert holds
    assert updates < 100


def test_error_bound_check_fails_without_updates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Power check: a mutant whose synthetic distribution never moves runs out of updates."""
    monkeypatch.setattr("dpcurator.interactive.pmw.step", lambda *args: None)
    holds, updates = _answers_within_bound(300, ALPHA)
    assert not holds
    assert updates == 100


def test_refuses_after_its_updates_free_and_public() -> None:
    session = _session(budget=1.0)
    curator = PrivateMultiplicativeWeights(session, COLUMNS, epsilon=1, max_updates=2, threshold=1)
    _, refusal = _ask_until_refused(curator, _workload(500, seed=4))
    assert refusal is not None
    assert "update budget (2 updates)" in str(refusal)
    assert curator.updates_left == 0
    assert session.spent() == PureDP(1)


def test_refusals_before_any_charge() -> None:
    session = _session(budget=1.0)
    with pytest.raises(UnsupportedQueryError, match="80 cells, over the limit 79"):
        PrivateMultiplicativeWeights(
            session, COLUMNS, epsilon=1, max_updates=2, threshold=1, max_cells=79
        )
    with pytest.raises(DomainError, match="nope"):
        PrivateMultiplicativeWeights(session, ["nope"], epsilon=1, max_updates=2, threshold=1)
    with pytest.raises(ParameterError, match="threshold"):
        PrivateMultiplicativeWeights(session, COLUMNS, epsilon=1, max_updates=2, threshold=0)
    assert session.spent() == PureDP(0)
    curator = PrivateMultiplicativeWeights(session, COLUMNS, epsilon=1, max_updates=2, threshold=1)
    with pytest.raises(ParameterError, match="sex"):
        curator.count({"sex": "X"})
    with pytest.raises(ParameterError, match="weights"):
        curator.answer_linear(np.full(80, 2.0))


def test_neighbouring_tables_differ_only_in_noisy_values() -> None:
    """D and D minus pid 4322, same seed: same charge, same refusals, same public shape."""
    frame = pd.read_csv(demo_path("people.csv"))
    outcomes = []
    for table in (frame, frame[frame["pid"] != 4322]):
        session = _session(budget=1.0, seed=5, frame=table)
        curator = PrivateMultiplicativeWeights(
            session, COLUMNS, epsilon=1, max_updates=3, threshold=50
        )
        answers, refusal = _ask_until_refused(curator, _workload(1000, seed=6))
        assert refusal is not None
        assert np.all(np.isfinite(answers))
        outcomes.append((session.spent(), curator.updates_used, curator.synthetic.shape))
    assert outcomes[0][0] == outcomes[1][0] == PureDP(1)
    assert outcomes[0][1:] == outcomes[1][1:]


def test_online_above_threshold_run_halts_at_the_first_answer_above() -> None:
    run = AboveThreshold(epsilon=1, sensitivity=1, threshold=5).start(SeededRng(0))
    assert [run.test(-1e6) for _ in range(50)] == [False] * 50
    assert run.test(1e6)
    with pytest.raises(ParameterError, match="halted"):
        run.test(-1e6)
