"""Issue 28 item 1: every PMW answer has an honest (1 - α) interval and says its source.

Seeded simulation: several curators on the demo table answer random 2-way counting queries; the
share of answers whose interval misses the exact count is tested against α (binomial, test level
1e-3), and the test's power is checked by shrinking the intervals (the same check must then fail).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom

from dpcurator import demo_path
from dpcurator.accounting import Budget
from dpcurator.errors import BudgetExceededError, ParameterError
from dpcurator.interactive import PrivateMultiplicativeWeights
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from dpcurator.random import SeededRng
from tests.service_kit import people_kit
from tests.test_interactive_pmw import COLUMNS, _truth, _workload

if TYPE_CHECKING:
    from dpcurator.interactive.pmw import PmwAnswer

ALPHA = 0.2  # the intervals' declared miscoverage
TEST_LEVEL = 1e-3  # the binomial test's false-alarm rate


def _answers(
    seeds: range, queries: int, max_marginal_cells: int
) -> Iterator[tuple[PmwAnswer, int]]:
    frame = pd.read_csv(demo_path("people.csv"))
    metadata = Metadata.from_yaml(demo_path("people.yaml"))
    for seed in seeds:
        session = Session.from_data(
            frame, metadata=metadata, budget=Budget(10), rng=SeededRng(seed)
        )
        curator = PrivateMultiplicativeWeights(
            session,
            COLUMNS,
            epsilon=4,
            max_updates=40,
            threshold=30,
            max_marginal_cells=max_marginal_cells,
        )
        for query in _workload(queries, seed=100 + seed):
            try:
                answer = curator.ask(query, alpha=ALPHA)
            except BudgetExceededError:
                break
            yield answer, _truth(frame, query)


def _misses(results: list[tuple[PmwAnswer, int]], shrink: float = 1.0) -> int:
    missed = 0
    for answer, truth in results:
        half = (answer.ci_high - answer.ci_low) / 2 * shrink
        missed += abs(truth - answer.value) > half
    return missed


@pytest.mark.parametrize("max_marginal_cells", [1024, 0], ids=["marginal", "alone"])
def test_pmw_intervals_cover_at_the_declared_level(max_marginal_cells: int) -> None:
    """Updates that measure the cell's marginal (its noisy cell is the answer) and updates that
    measure the query alone: both covered, both with power."""
    results = list(_answers(range(4), 120, max_marginal_cells))
    sources = {answer.source for answer, _ in results}
    assert sources == {"update", "synthetic"}  # both routes are exercised
    for answer, _ in results:
        assert answer.ci_low <= answer.value <= answer.ci_high
        assert answer.alpha == ALPHA
    assert _misses(results) <= binom.ppf(1 - TEST_LEVEL, len(results), ALPHA)
    # the update answers alone also cover (their CI is at α/2), and the test has power there:
    # update intervals a third as wide (P[miss] about (α/2)^(1/3) = 0.46) are caught
    updates = [r for r in results if r[0].source == "update"]
    limit = binom.ppf(1 - TEST_LEVEL, len(updates), ALPHA)
    assert _misses(updates) <= limit
    assert _misses(updates, shrink=1 / 3) > limit
    # the synthetic answers' guarantee is conservative but not vacuous (the table has 5000 rows)
    widths = [a.ci_high - a.ci_low for a, _ in results if a.source == "synthetic"]
    assert max(widths) < 5000 / 2


def test_the_interval_is_public_and_checked() -> None:
    frame = pd.read_csv(demo_path("people.csv"))
    metadata = Metadata.from_yaml(demo_path("people.yaml"))
    session = Session.from_data(frame, metadata=metadata, budget=Budget(10), rng=SeededRng(1))
    curator = PrivateMultiplicativeWeights(session, COLUMNS, epsilon=4, max_updates=5, threshold=30)
    a = curator.interval(100.0, "synthetic", 0.05)
    b = curator.interval(7.0, "synthetic", 0.05)
    assert a.ci_high - a.ci_low == pytest.approx(b.ci_high - b.ci_low)  # value-independent
    assert a.ci_high - 100.0 > curator.threshold  # the threshold is part of the bound
    with pytest.raises(ParameterError, match="source"):
        curator.interval(1.0, "exact")
    with pytest.raises(ParameterError, match="alpha"):
        curator.ask({}, alpha=0)


def test_the_service_answer_carries_the_interval(pmw_answer: dict[str, Any]) -> None:
    assert pmw_answer["source"] in {"update", "synthetic"}
    assert pmw_answer["ci_low"] <= pmw_answer["value"] <= pmw_answer["ci_high"]
    assert np.isfinite(pmw_answer["ci_high"] - pmw_answer["ci_low"])


@pytest.fixture
def pmw_answer(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with people_kit(tmp_path, rows=2000) as kit:
        body = {"epsilon": 10, "threshold": 40, "max_updates": 5, "columns": ["sex", "region"]}
        opened = kit.owner.post("/v1/datasets/people/pmw", json=body)
        assert opened.status_code == 201, opened.text
        sql = "SELECT COUNT(*) FROM people WHERE sex = 'F' AND region = 'north'"
        reply = kit.alice.post(f"/v1/pmw/{opened.json()['id']}/queries", json={"sql": sql})
        assert reply.status_code == 200, reply.text
        yield reply.json()
