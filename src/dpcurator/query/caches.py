"""The two caches of a session (bounded LRUs, thread-safe, shareable between sessions over the
same table).

* **plans** (always on): the parsed query and its private plan per (query, ε, δ, selection
  weight, metadata). Planning is a pure function of these public inputs, so a cached plan is the
  plan that would be computed again; nothing about the data is involved.
* **exact results** (off unless a ``result_cache`` is passed): the engine's exact aggregates per
  exact plan. Every release still reserves and charges its full cost and draws FRESH noise, so
  the distribution of every release is unchanged. What changes is timing: a hit skips the engine,
  and whether a query hits depends only on the history of queries (public to the curator), not on
  the data. A result cache is only valid for ONE backend over data that does not change (one
  dataset version): never share it between backends. Whether a result is kept is decided from
  its PLAN alone (:func:`result_is_cacheable`): an ungrouped plan, or one grouped by public keys
  of at most :data:`MAX_CACHED_GROUPS` groups. A plan whose groups are chosen by private
  partition selection is never kept, whatever its result: how many groups the data has must not
  decide whether the next release hits (a data-dependent size test made a 1,025-group answer
  measurably slower than a 1,024-group one). The service gives every dataset loaded into a
  private DuckDB copy one (:func:`new_result_cache`).

Both caches are bounded by weight as well as by count, with weights computed from the public plan
(:func:`plan_weight`, :func:`result_weight`): a histogram plan of a million bins is one entry
but weighs a million, so a few such plans cannot make a cache hold gigabytes.
"""

from __future__ import annotations

from dpcurator._cache import LruCache
from dpcurator.query.frontend.builder import Query
from dpcurator.query.ir import AggregatePlan, ExactResult
from dpcurator.query.plan.planner import Plan
from dpcurator.query.schema import Metadata

DEFAULT_PLAN_CACHE_SIZE = 512
#: The most weight (:func:`plan_weight`: roughly how many values the plans hold) a plan cache
#: made by :func:`new_plan_cache` keeps, about 100 MB of Python objects at most.
DEFAULT_PLAN_CACHE_WEIGHT = 2_000_000
DEFAULT_RESULT_CACHE_SIZE = 1_024
#: The most weight (:func:`result_weight`: exact values) a result cache made by
#: :func:`new_result_cache` keeps.
DEFAULT_RESULT_CACHE_WEIGHT = 2_000_000

PlanKey = tuple[str | Query, object, object, object, Metadata]
PlanCache = LruCache[PlanKey, Plan]
ResultCache = LruCache[AggregatePlan, ExactResult]
#: A result cache keeps the exact results of plans of at most this many groups (decided from
#: the plan: see :func:`result_is_cacheable`).
MAX_CACHED_GROUPS = 1_024


def plan_weight(key: PlanKey, plan: Plan) -> int:
    """The weight of a cached plan: about how many values it holds (query text in 8-character
    words, public keys, histogram edges), from the plan alone."""
    query = key[0]
    text = len(query) // 8 if isinstance(query, str) else 0
    keys = len(plan.keys or ()) * max(len(plan.group_columns), 1)
    exact_keys = len(plan.exact.group_keys or ()) * max(len(plan.exact.group_by), 1)
    edges = sum(len(output.edges) for output in plan.outputs)
    return 1 + text + keys + exact_keys + edges


def _planned_groups(exact: AggregatePlan) -> int | None:
    """How many groups a plan can have at most, from the plan alone; None when private
    partition selection decides (the data does, then)."""
    if not exact.group_by:
        return 1
    if exact.group_keys is None:
        return None
    return len(exact.group_keys)


def result_is_cacheable(exact: AggregatePlan) -> bool:
    """Whether a result cache may keep this plan's exact result: the plan is ungrouped or
    grouped by public keys of at most :data:`MAX_CACHED_GROUPS` groups. Decided from the plan,
    which is public, never from the result (see the module docstring)."""
    groups = _planned_groups(exact)
    return groups is not None and groups <= MAX_CACHED_GROUPS


def result_weight(exact: AggregatePlan, _result: ExactResult) -> int:
    """The weight of a cached result: the most exact values its plan can produce (groups times
    the values per group, a histogram counting its bins), from the plan alone."""
    per_group = sum(max(aggregate.bins, 1) for aggregate in exact.aggregates)
    return (_planned_groups(exact) or 1) * max(per_group, 1)


def new_plan_cache(maxsize: int = DEFAULT_PLAN_CACHE_SIZE) -> PlanCache:
    """A plan cache bounded by count and by :func:`plan_weight`."""
    return LruCache(maxsize, maxweight=DEFAULT_PLAN_CACHE_WEIGHT, weigh=plan_weight)


def new_result_cache(maxsize: int = DEFAULT_RESULT_CACHE_SIZE) -> ResultCache:
    """A result cache bounded by count and by :func:`result_weight`."""
    return LruCache(maxsize, maxweight=DEFAULT_RESULT_CACHE_WEIGHT, weigh=result_weight)
