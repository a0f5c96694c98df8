"""Sessions: the analyst's entry point to one private table under one privacy budget.

Example::

    s = Session.from_data("pums.csv", metadata=meta, budget=Budget(1.0, 1e-6))
    s.sql("SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex", epsilon=0.5).to_pandas()

Every release follows one order, so that nothing about the data decides whether a query is
refused, which groups appear (with public keys) or how long a refusal takes:

1. validate and plan from the query and the public metadata only (errors charge nothing);
2. reserve the plan's cost in the budget filter (BudgetExceededError: nothing charged, no data
   touched);
3. commit the charge, then let the engine compute the exact aggregates (an engine failure keeps
   the charge: it may depend on the data);
4. add noise (only :mod:`dpcurator.mechanisms` draws it) and post-process into a Release.

A query is charged as one event (:class:`~dpcurator.accounting.PureEvent` of its ε, or
:class:`~dpcurator.accounting.ApproxEvent` when partition selection spends δ).

Caches (both bounded LRUs, thread-safe, shareable between sessions over the same table):

* **plans** (always on): the parsed query and its private plan per (query, ε, δ, selection
  weight, metadata). Planning is a pure function of these public inputs, so a cached plan is the
  plan that would be computed again; nothing about the data is involved.
* **exact results** (off unless a ``result_cache`` is passed): the engine's exact aggregates per
  exact plan. Every release still reserves and charges its full cost and draws FRESH noise, so
  the distribution of every release is unchanged. What changes is timing: a hit skips the engine,
  and whether a query hits depends only on the history of queries (public to the curator), not on
  the data. A result cache is only valid for ONE backend over data that does not change (one
  dataset version): never share it between backends. Results of more than
  :data:`MAX_CACHED_GROUPS` groups are not kept (the cache must not hold copies of the table).
  The service gives every dataset loaded into a private DuckDB copy one.
"""

from __future__ import annotations

import threading
from types import TracebackType

from dpcurator._cache import LruCache
from dpcurator._validation import check_probability, fail
from dpcurator.accounting import ApproxEvent, Budget, BudgetFilter, PrivacyFilter, PureEvent
from dpcurator.accounting.events import PrivacyEvent
from dpcurator.core.measures import ApproxDP, Measure, PureDP
from dpcurator.estimators.bounds import bounds_from_noisy_counts
from dpcurator.query.backends import Backend, open_backend
from dpcurator.query.builder import Query
from dpcurator.query.ir import AggregatePlan, ExactResult
from dpcurator.query.planner import Plan, plan_bounds, plan_query, precomputed_columns
from dpcurator.query.release import CostEstimate, Release, estimate_plan, release_plan
from dpcurator.query.schema import Metadata
from dpcurator.query.sql import parse_sql
from dpcurator.random import Rng

DEFAULT_PLAN_CACHE_SIZE = 512


PlanKey = tuple[str | Query, object, object, object, Metadata]
PlanCache = LruCache[PlanKey, Plan]
ResultCache = LruCache[AggregatePlan, ExactResult]
#: A result cache keeps exact results of at most this many groups.
MAX_CACHED_GROUPS = 1_024


def _event(cost: PureDP | ApproxDP) -> PrivacyEvent:
    if isinstance(cost, ApproxDP) and cost.delta > 0:
        return ApproxEvent(cost.epsilon, cost.delta)
    return PureEvent(cost.epsilon)


class Session:
    """A private table, its public metadata and a budget filter.

    Args:
        backend: the engine holding the table (see :func:`~dpcurator.query.backends.open_backend`).
        metadata: the public metadata of the table.
        budget: a total budget (a new in-memory :class:`~dpcurator.accounting.PrivacyFilter`).
        budget_filter: any :class:`~dpcurator.accounting.BudgetFilter` instead (e.g. a ledger).
        alpha: default level of the released (1-α) confidence intervals.
        rng: the randomness source (default: the process-wide SecureRng; tests pass SeededRng).
        plan_cache: a plan cache to share between sessions (default: a new one for this session).
        result_cache: an exact-result cache for this backend's data, or None (the default) to
            run the engine for every release (see the module docstring before enabling it).
    """

    def __init__(
        self,
        backend: Backend,
        metadata: Metadata,
        *,
        budget: Budget | None = None,
        budget_filter: BudgetFilter | None = None,
        alpha: float = 0.05,
        rng: Rng | None = None,
        plan_cache: PlanCache | None = None,
        result_cache: ResultCache | None = None,
    ) -> None:
        if not isinstance(metadata, Metadata):
            raise fail("Session", "metadata", "a Metadata", metadata)
        if (budget is None) == (budget_filter is None):
            raise fail("Session", "budget", "given, or budget_filter given (exactly one)", budget)
        check_probability("Session", "alpha", alpha, open_low=True, open_high=True)
        self._backend = backend
        self._metadata = metadata
        if budget_filter is None:
            assert budget is not None  # exactly one of the two, checked above
            budget_filter = PrivacyFilter(budget)
        self._filter: BudgetFilter = budget_filter
        self._alpha = float(alpha)
        self._rng = rng
        self._lock = threading.Lock()
        self._plans: PlanCache = (
            LruCache(DEFAULT_PLAN_CACHE_SIZE) if plan_cache is None else plan_cache
        )
        self._results = result_cache

    @classmethod
    def from_data(
        cls,
        source: object,
        *,
        metadata: Metadata,
        budget: Budget | None = None,
        budget_filter: BudgetFilter | None = None,
        engine: str = "duckdb",
        alpha: float = 0.05,
        rng: Rng | None = None,
        precompute: bool = True,
    ) -> Session:
        """Open ``source`` (CSV/Parquet path, pandas/polars/pyarrow, DuckDB, Spark) as the table.

        The table is exposed with the metadata's declared column types (a CSV column of digits
        declared a string is text), so a conversion the engine cannot make is refused here, with
        DomainError, before any budget is spent.

        With ``precompute`` (the default), the DuckDB engine also computes once the fixed-point
        values of every bounded numeric column and small integer codes of every column with
        public keys (from public metadata: nothing is learnt from the data), so that sums and
        means read an integer column with no per-row work and GROUP BY groups small integers.
        This materialises the table in DuckDB's memory (a Parquet file is loaded; a frame or a
        given DuckDB table is copied): pass ``precompute=False`` for data larger than memory, or
        to keep memory at one copy.
        """
        if not isinstance(metadata, Metadata):
            raise fail("Session.from_data", "metadata", "a Metadata", metadata)
        backend = open_backend(
            source,
            table=metadata.table,
            engine=engine,
            column_types=metadata.column_types(),
            precomputed=precomputed_columns(metadata) if precompute else None,
        )
        return cls(
            backend, metadata, budget=budget, budget_filter=budget_filter, alpha=alpha, rng=rng
        )

    # ------------------------------------------------------------------------------------------

    @property
    def metadata(self) -> Metadata:
        """The public metadata (updated by :meth:`dp_bounds`)."""
        return self._metadata

    def table(self, name: str | None = None) -> Query:
        """Start a fluent query on the session's table."""
        table = self._metadata.table if name is None else name
        if not self._metadata.has_table(tuple(table.split("."))):
            raise fail(
                "Session.table", "name", f"the session's table {self._metadata.table!r}", name
            )
        return Query(self._metadata.table)

    def remaining(self) -> Measure:
        """The budget left."""
        return self._filter.remaining()

    def spent(self) -> Measure:
        """The budget spent so far."""
        return self._filter.spent()

    def plan(
        self,
        query: str | Query,
        *,
        epsilon: float,
        delta: float = 0.0,
        selection_weight: float = 1.0,
    ) -> Plan:
        """The private plan of a query (SQL text or builder Query), computed without data.

        Plans are cached per (query, ε, δ, selection weight, metadata): see the module docstring.
        """
        metadata = self._metadata
        key: PlanKey = (query, epsilon, delta, selection_weight, metadata)
        plan = self._plans.get(key)
        if plan is None:
            parsed = parse_sql(query, metadata) if isinstance(query, str) else query
            plan = plan_query(
                parsed, metadata, epsilon=epsilon, delta=delta, selection_weight=selection_weight
            )
            self._plans.put(key, plan)
        return plan

    def estimate(
        self,
        query: str | Query,
        *,
        epsilon: float,
        delta: float = 0.0,
        alpha: float | None = None,
        selection_weight: float = 1.0,
    ) -> CostEstimate:
        """The cost and expected CI half-widths of a query; touches no data, charges nothing."""
        plan = self.plan(query, epsilon=epsilon, delta=delta, selection_weight=selection_weight)
        return estimate_plan(plan, self._level(alpha))

    def release(
        self,
        query: str | Query,
        *,
        epsilon: float,
        delta: float = 0.0,
        alpha: float | None = None,
        selection_weight: float = 1.0,
    ) -> Release:
        """Release a query at (ε, δ): plan, reserve, compute, noise (see the module docstring)."""
        level = self._level(alpha)
        plan = self.plan(query, epsilon=epsilon, delta=delta, selection_weight=selection_weight)
        reservation = self._filter.reserve(_event(plan.cost), description=_describe(query))
        reservation.commit()
        exact = self._compute(plan.exact)
        return release_plan(plan, exact, alpha=level, rng=self._rng)

    def sql(
        self,
        query: str,
        *,
        epsilon: float,
        delta: float = 0.0,
        alpha: float | None = None,
        selection_weight: float = 1.0,
    ) -> Release:
        """Release a SQL query (see :mod:`dpcurator.query.sql` for the supported subset)."""
        if not isinstance(query, str):
            raise fail("Session.sql", "query", "SQL text", query)
        return self.release(
            query, epsilon=epsilon, delta=delta, alpha=alpha, selection_weight=selection_weight
        )

    def dp_bounds(self, column: str, *, epsilon: float, beta: float = 0.01) -> tuple[float, float]:
        """Estimate a column's bounds with ε-DP and use them in this session's metadata.

        Spends ``epsilon`` (see :mod:`dpcurator.estimators.bounds`). The estimate is public once
        released, so later queries may use it. Raises DomainError (keeping the charge) when no
        bin's noisy count clears the threshold.
        """
        plan = plan_bounds(self._metadata, column, epsilon=epsilon, beta=beta)
        reservation = self._filter.reserve(_event(plan.cost), description=f"dp_bounds({column})")
        reservation.commit()
        exact = self._compute(plan.exact)
        counts = [
            int(exact.groups.get((i,), {}).get("n", 0))  # type: ignore[call-overload]
            for i in range(plan.bins.bins)
        ]
        noisy = plan.laplace.release_integers(counts, self._rng)
        lower, upper = bounds_from_noisy_counts(noisy, plan.bins, plan.threshold)
        with self._lock:
            self._metadata = self._metadata.with_bounds(plan.column, lower, upper)
        return lower, upper

    def close(self) -> None:
        """Close the engine."""
        self._backend.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _compute(self, exact: AggregatePlan) -> ExactResult:
        """The engine's exact aggregates (from the result cache when enabled and present)."""
        if self._results is None:
            return self._backend.compute(exact)
        result = self._results.get(exact)
        if result is None:
            result = self._backend.compute(exact)
            if len(result.groups) <= MAX_CACHED_GROUPS:
                self._results.put(exact, result)
        return result

    def _level(self, alpha: float | None) -> float:
        if alpha is None:
            return self._alpha
        return float(check_probability("Session", "alpha", alpha, open_low=True, open_high=True))


def _describe(query: str | Query) -> str:
    return query if isinstance(query, str) else repr(query)
