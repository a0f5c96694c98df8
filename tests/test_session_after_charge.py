"""What an analyst sees of a release once it is charged, and which releases the caches keep:
both must depend on public inputs (query, metadata, cache history) only, never on the data or on
how an engine failed."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from dpcurator._cache import LruCache
from dpcurator.accounting import Budget
from dpcurator.core.measures import PureDP
from dpcurator.errors import ENGINE_FAILURE_MESSAGE, BackendError, ParameterError
from dpcurator.query.backends import open_backend
from dpcurator.query.caches import MAX_CACHED_GROUPS, new_plan_cache, new_result_cache
from dpcurator.query.ir import AggregatePlan, ExactResult
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from tests.test_service_caches import CountingBackend

SECRET = "salary of pid 4322 is 123456"


class FailingBackend(CountingBackend):
    """A backend whose engine fails with a message quoting a private value."""

    def compute(self, plan: AggregatePlan) -> ExactResult:
        self.computed += 1
        raise RuntimeError(f"Conversion Error: could not convert '{SECRET}' to INT64")


def _people(rows: int) -> pd.DataFrame:
    return pd.DataFrame({"k": [f"key{i}" for i in range(rows)], "x": [1.0] * rows})


_X = {"type": "float", "lower": 0, "upper": 1}
_KEYED_METADATA = {"table": "t", "columns": {"k": {"type": "string"}, "x": _X}}


def test_an_engine_failure_after_the_charge_shows_only_the_constant_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metadata = Metadata.from_dict(_KEYED_METADATA)
    backend = FailingBackend(open_backend(_people(3), table="t", engine="duckdb"))
    session = Session(backend, metadata, budget=Budget(10))
    with (
        caplog.at_level(logging.ERROR, logger="dpcurator.engine"),
        pytest.raises(BackendError) as raised,
    ):
        session.sql("SELECT COUNT(*) AS n FROM t", epsilon=1.0)
    assert str(raised.value) == ENGINE_FAILURE_MESSAGE
    assert raised.value.__cause__ is None
    assert raised.value.__suppress_context__
    assert session.spent() == PureDP(1)  # the charge stands
    # The owner finds the details in the server log, on the engine's logger.
    assert [r.name for r in caplog.records if SECRET in (r.exc_text or "")] == ["dpcurator.engine"]


def _calls_for_two_releases(rows: int) -> int:
    """How often the engine runs for the same partition-selection query released twice over a
    table of ``rows`` distinct keys, with a result cache."""
    metadata = Metadata.from_dict(_KEYED_METADATA)
    backend = CountingBackend(open_backend(_people(rows), table="t", engine="duckdb"))
    session = Session(backend, metadata, budget=Budget(10, 1e-3), result_cache=new_result_cache())
    for _ in range(2):
        session.sql("SELECT k, COUNT(*) AS n FROM t GROUP BY k", epsilon=1.0, delta=1e-6)
    return backend.computed


def test_result_caching_does_not_depend_on_how_many_groups_the_data_has() -> None:
    """Neighbouring tables of MAX_CACHED_GROUPS and MAX_CACHED_GROUPS + 1 distinct keys: the
    same partition-selection query must hit (or miss) the result cache alike (a size test on
    the result made the larger table's answers measurably slower)."""
    assert _calls_for_two_releases(MAX_CACHED_GROUPS) == _calls_for_two_releases(
        MAX_CACHED_GROUPS + 1
    )


def test_public_key_and_ungrouped_plans_are_cached() -> None:
    keys = {"type": "string", "keys": ["key0", "key1"]}
    metadata = Metadata.from_dict({"table": "t", "columns": {"k": keys, "x": _X}})
    backend = CountingBackend(open_backend(_people(3), table="t", engine="duckdb"))
    session = Session(backend, metadata, budget=Budget(10), result_cache=new_result_cache())
    for sql in ("SELECT k, COUNT(*) AS n FROM t GROUP BY k", "SELECT COUNT(*) AS n FROM t"):
        session.sql(sql, epsilon=1.0)
        session.sql(sql, epsilon=1.0)
    assert backend.computed == 2


def test_lru_cache_bounds_the_total_weight() -> None:
    cache: LruCache[str, int] = LruCache(10, maxweight=10, weigh=lambda _k, v: v)
    cache.put("a", 4)
    cache.put("b", 4)
    cache.put("c", 4)  # 12 > 10: "a" goes
    assert (cache.get("a"), cache.get("b"), cache.get("c"), cache.weight) == (None, 4, 4, 8)
    cache.put("huge", 11)  # heavier than the whole cache: not kept, nothing dropped
    assert (cache.get("huge"), len(cache), cache.weight) == (None, 2, 8)
    cache.put("b", 1)  # replacing an entry replaces its weight
    assert cache.weight == 5
    with pytest.raises(ParameterError, match="weigh"):
        LruCache(2, maxweight=3)


def test_histogram_plans_with_many_bins_do_not_fill_the_plan_cache() -> None:
    """Each plan of a 10,000-bin histogram holds 10,000 edges: 300 of them (fewer than the
    cache's count bound) would hold 3 million; the weight bound keeps the cache below it."""
    metadata = Metadata.from_dict(_KEYED_METADATA)
    plans = new_plan_cache()
    backend = CountingBackend(open_backend(_people(3), table="t", engine="duckdb"))
    session = Session(backend, metadata, budget=Budget(10), plan_cache=plans)
    count = 300
    assert count < plans.maxsize
    for i in range(count):
        session.plan(f"SELECT HISTOGRAM(x, 0, 1, {10_000 - i}) AS h FROM t", epsilon=1.0)
    assert plans.maxweight is not None
    assert plans.weight <= plans.maxweight < count * 9_000
    assert len(plans) < count
