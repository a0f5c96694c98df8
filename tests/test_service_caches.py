"""The caches of the service's hot path: plans (always), exact results (switchable), tokens, and
the SQLite ledger's durability settings."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import text

from dpcurator._cache import LruCache
from dpcurator.accounting import Budget
from dpcurator.core.measures import ZCDP, PureDP
from dpcurator.errors import ParameterError
from dpcurator.query.backends import Backend, open_backend
from dpcurator.query.ir import AggregatePlan, ExactResult
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from dpcurator.service.ledger import Ledger
from tests.proxy_backend import ProxyBackend
from tests.service_fixtures import PEOPLE_METADATA

GROUPED_SUM = "SELECT sex, SUM(income) AS s FROM people GROUP BY sex"
GROUPED = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"


class CountingBackend(ProxyBackend):
    """A backend that counts how often the engine runs."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.computed = 0

    def compute(self, plan: AggregatePlan) -> ExactResult:
        self.computed += 1
        return self.inner.compute(plan)


@pytest.fixture
def backend() -> CountingBackend:
    frame = pd.DataFrame(
        {
            "age": [30, 40, 50, 60] * 50,
            "sex": ["F", "M"] * 100,
            "region": ["north", "south", "east", "west"] * 50,
            "income": [1000.0, 2000.0] * 100,
        }
    )
    return CountingBackend(open_backend(frame, table="people", engine="duckdb"))


def test_lru_cache_drops_the_least_recently_used() -> None:
    cache: LruCache[str, int] = LruCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "b" is now the least recently used
    cache.put("c", 3)
    assert cache.get("b") is None
    assert (cache.get("a"), cache.get("c"), len(cache)) == (1, 3, 2)
    assert (cache.hits, cache.misses) == (3, 1)
    with pytest.raises(ParameterError, match="maxsize"):
        LruCache(0)


def test_plans_are_cached_per_query_budget_and_metadata(backend: CountingBackend) -> None:
    metadata = Metadata.from_dict(PEOPLE_METADATA)
    session = Session(backend, metadata, budget=Budget(10))
    first = session.plan(GROUPED, epsilon=0.5)
    assert session.plan(GROUPED, epsilon=0.5) is first
    assert session.plan(GROUPED, epsilon=0.25) is not first
    cost = session.plan(GROUPED, epsilon=0.25).cost
    assert not isinstance(cost, ZCDP)  # an (ε, δ) plan
    assert cost.epsilon == Fraction(1, 4)
    assert backend.computed == 0  # planning never touches data


def test_result_cache_skips_the_engine_but_charges_and_noises_every_release(
    backend: CountingBackend,
) -> None:
    metadata = Metadata.from_dict(PEOPLE_METADATA)
    cached = Session(backend, metadata, budget=Budget(10), result_cache=LruCache(8))
    releases = [cached.sql(GROUPED_SUM, epsilon=0.001) for _ in range(3)]
    assert backend.computed == 1
    assert cached.spent() == PureDP(3 * Fraction(0.001))  # floats are read exactly
    values = [tuple(e.value for _, row in r.rows for e in row) for r in releases]
    # Fresh noise each time: sums are not floored (counts are, at 0, so equal noisy counts are
    # likely) and their noise has scale 1.6e9 grid steps, so a tie has probability < 1e-6.
    assert len(set(values)) == 3
    plain = Session(backend, metadata, budget=Budget(10))
    plain.sql(GROUPED, epsilon=0.001)
    plain.sql(GROUPED, epsilon=0.001)
    assert backend.computed == 3  # off by default: the engine runs for every release


def test_sqlite_ledger_uses_wal_normal_sync_and_a_busy_timeout(tmp_path: Path) -> None:
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite3'}")
    try:
        with ledger._engine.connect() as conn:  # the engine's settings
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert conn.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL
            assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 60_000
    finally:
        ledger.close()
