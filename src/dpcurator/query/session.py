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

A query is charged as one event (:class:`~dpcurator.accounting.PureEvent` of its ε,
:class:`~dpcurator.accounting.ApproxEvent` when partition selection spends δ, or for discrete
Gaussian noise a :class:`~dpcurator.accounting.ConcentratedEvent` or
:class:`~dpcurator.accounting.ZCDPEvent`: see :mod:`dpcurator.query.plan.noise`), kept on the
release (``Release.events``). A budget with δ > 0 charges events to a
:class:`~dpcurator.accounting.ConcentratedFilter` by default (a basic route for a few large pure
queries, a Rényi route for Gaussian and many small ones); ``accounting="basic"`` asks for basic
composition, which a pure ε budget always uses.

Caches of plans and of exact results: :mod:`dpcurator.query.caches`.

After the charge, nothing an analyst sees may depend on how the engine failed: any exception
while computing and releasing becomes ``BackendError(ENGINE_FAILURE_MESSAGE)`` (the one constant
text of :mod:`dpcurator.errors`) and the original is logged on the ``dpcurator.engine`` logger,
for the data owner only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from dpcurator._validation import check_probability, fail
from dpcurator.accounting import (
    Budget,
    BudgetFilter,
    ConcentratedFilter,
    GaussianDPFilter,
    PrivacyFilter,
    PureEvent,
)
from dpcurator.accounting.events import PrivacyEvent
from dpcurator.core.measures import ZCDP, Measure
from dpcurator.estimators.bounds import bounds_from_noisy_counts
from dpcurator.estimators.release import Estimate
from dpcurator.query.backends import Backend, open_backend
from dpcurator.query.backends.plan_checks import check_plan
from dpcurator.query.caches import PlanCache, ResultCache, new_plan_cache, result_is_cacheable
from dpcurator.query.fit.core import plan_fit, run_fit
from dpcurator.query.frontend.builder import Query
from dpcurator.query.ir import AggregatePlan, ExactResult
from dpcurator.query.lone_calls import estimate_lone_call, plan_lone_call, release_lone_call
from dpcurator.query.plan.bounds import plan_bounds
from dpcurator.query.plan.planner import Plan, plan_event
from dpcurator.query.plan.request import check_accounting, plan_request, request_alpha
from dpcurator.query.precomputed import precomputed_columns
from dpcurator.query.release.after_charge import after_charge
from dpcurator.query.release.core import Release, release_plan
from dpcurator.query.release.estimate import CostEstimate, estimate_plan
from dpcurator.query.schema import Metadata
from dpcurator.random import Rng

#: The session accountings: basic composition, ConcentratedFilter or GaussianDPFilter.
ACCOUNTINGS = ("basic", "concentrated", "gaussian")

_ENGINE_LOG = logging.getLogger("dpcurator.engine")
_T = TypeVar("_T")


class Session:
    """A private table, its public metadata and a budget filter.

    Args:
        backend: the engine holding the table (see :func:`~dpcurator.query.backends.open_backend`).
        metadata: the public metadata of the table.
        budget: a total budget (a new in-memory filter: see ``accounting``): ε, (ε, δ), or a
            :class:`~dpcurator.core.measures.ZCDP` ρ (composed in zCDP).
        budget_filter: any :class:`~dpcurator.accounting.BudgetFilter` instead (e.g. a ledger).
        accounting: ``"basic"`` (:class:`~dpcurator.accounting.PrivacyFilter`), ``"concentrated"``
            (:class:`~dpcurator.accounting.ConcentratedFilter`, δ > 0 or a ρ: many and Gaussian
            queries cost far less; it admits all basic composition admits) or ``"gaussian"``
            (:class:`~dpcurator.accounting.GaussianDPFilter`, δ > 0: exact Gaussian DP for
            Gaussian-only ``rho`` queries). Default (None): concentrated for δ > 0, else basic
            (a ρ budget composes in zCDP).
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
        budget: Budget | ZCDP | None = None,
        budget_filter: BudgetFilter | None = None,
        accounting: str | None = None,
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
        if accounting is not None and accounting not in ACCOUNTINGS:
            raise fail("Session", "accounting", f"one of {ACCOUNTINGS}", accounting)
        if budget_filter is None:
            assert budget is not None  # exactly one of the two, checked above
            budget_filter = _new_filter(budget, accounting)
        elif accounting not in (None, "basic"):
            raise fail("Session", "accounting", "'basic' with a budget_filter", accounting)
        self._filter: BudgetFilter = budget_filter
        self._alpha = float(alpha)
        self._rng = rng
        self._lock = threading.Lock()
        self._plans: PlanCache = new_plan_cache() if plan_cache is None else plan_cache
        self._results = result_cache

    @classmethod
    def from_data(
        cls,
        source: object,
        *,
        metadata: Metadata,
        budget: Budget | ZCDP | None = None,
        budget_filter: BudgetFilter | None = None,
        accounting: str | None = None,
        engine: str = "duckdb",
        alpha: float = 0.05,
        rng: Rng | None = None,
        precompute: bool = True,
        progress: bool | None = None,
        public_tables: Mapping[str, object] | None = None,
    ) -> Session:
        """Open ``source`` (CSV/Parquet path, pandas/polars/pyarrow, DuckDB, Spark) as the table.

        ``public_tables``: public lookup tables that SQL may JOIN, by name (a frame or a
        CSV/Parquet path each; :mod:`dpcurator.query.public_tables`), added to the metadata.

        The table is exposed with the metadata's declared column types (a CSV column of digits
        declared a string is text), so a conversion the engine cannot make is refused here, with
        DomainError, before any budget is spent.

        With ``precompute`` (the default), the DuckDB engine also computes once the fixed-point
        values of every bounded numeric column and small integer codes of every column with
        public keys (from public metadata: nothing is learnt from the data), so that sums and
        means read an integer column with no per-row work and GROUP BY groups small integers.
        This materialises the table in DuckDB's memory (a Parquet file is loaded; a frame or a
        given DuckDB table is copied): pass ``precompute=False`` for data larger than memory, or
        to keep memory at one copy. Opening so costs about 1.5x a plain DuckDB load (time and
        peak memory); it pays from a few queries on, and most for unfiltered user-level ones,
        whose bounding is then computed once (see :meth:`.DuckDBBackend.from_source`; the
        numbers are in docs/deployment.md).

        ``progress`` draws a line per step of the open on stderr, with DuckDB's progress
        (default: when stderr is a terminal); the steps are logged on ``dpcurator.engine``.
        """
        if not isinstance(metadata, Metadata):
            raise fail("Session.from_data", "metadata", "a Metadata", metadata)
        metadata = metadata.with_public_tables(public_tables or {})
        backend = open_backend(
            source,
            table=metadata.table,
            engine=engine,
            column_types=metadata.column_types(),
            precomputed=precomputed_columns(metadata) if precompute else None,
            progress=progress,
        )
        try:
            return cls(
                backend,
                metadata,
                budget=budget,
                budget_filter=budget_filter,
                accounting=accounting,
                alpha=alpha,
                rng=rng,
            )
        except BaseException:
            backend.close()  # opened here for a session that did not start
            raise

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
        """The budget left (prints as ``remaining: ε = 0.5``; ``repr(session)`` also shows a
        concentrated filter's native parts)."""
        return self._filter.remaining().labelled("remaining")

    def spent(self) -> Measure:
        """The budget spent so far (prints as ``spent: ε = 0.5``)."""
        return self._filter.spent().labelled("spent")

    def plan(
        self,
        query: str | Query,
        *,
        epsilon: float | None = None,
        delta: float = 0.0,
        selection_weight: float = 1.0,
        accuracy: Mapping[str, float | str] | None = None,
        alpha: float | None = None,
        noise: str | None = None,
        rho: float | None = None,
        clipping: float | None = None,
    ) -> Plan:
        """The private plan of a query (SQL text or builder Query), computed without data.

        Give ``epsilon`` (with ``delta``), ``rho`` (a zCDP cost: discrete Gaussian noise), or
        ``accuracy`` (``{output name: (1-α) CI half-width}``) for the cheapest plan meeting those
        targets at level 1-``alpha`` (see :mod:`dpcurator.query.plan.accuracy`). ``noise``:
        ``"laplace"``, ``"gaussian"``, or None (automatic: the narrower at the same cost when
        δ > 0; :mod:`dpcurator.query.plan.noise`). ``clipping``: the share of ``epsilon`` spent on a
        report of the rows outside the bounds of clamped outputs
        (:mod:`dpcurator.query.plan.clipping`). Plans are cached per (query, budget, noise,
        clipping, δ, selection weight, metadata): see the module docstring.
        """
        return plan_request(
            self._plans,
            query,
            self._metadata,
            epsilon=epsilon,
            delta=delta,
            selection_weight=selection_weight,
            accuracy=accuracy,
            alpha=alpha,
            default_alpha=self._alpha,
            noise=noise,
            rho=rho,
            clipping=clipping,
        )

    def estimate(
        self,
        query: str | Query,
        *,
        epsilon: float | None = None,
        delta: float = 0.0,
        alpha: float | None = None,
        selection_weight: float = 1.0,
        accuracy: Mapping[str, float | str] | None = None,
        noise: str | None = None,
        rho: float | None = None,
        clipping: float | None = None,
    ) -> CostEstimate:
        """The cost and expected CI half-widths of a query; touches no data, charges nothing.

        With ``accuracy`` instead of ``epsilon``: the smallest cost meeting those half-widths.
        ``noise``/``rho``: as in :meth:`plan`; ``CostEstimate.noise`` says which family and why.
        ``clipping``: as in :meth:`plan`; the cost is still ``epsilon``, the report's share
        included, and its mechanisms are listed.
        """
        options = {"accuracy": accuracy, "noise": noise, "rho": rho, "clipping": clipping}
        lone = plan_lone_call(query, self._metadata, epsilon=epsilon, delta=delta, options=options)
        if lone is not None:  # REGRESS, TTEST, ...: cost and terms (lone_calls.py)
            return estimate_lone_call(lone, self._level(alpha))
        plan = self.plan(
            query,
            epsilon=epsilon,
            delta=delta,
            selection_weight=selection_weight,
            accuracy=accuracy,
            alpha=alpha,
            noise=noise,
            rho=rho,
            clipping=clipping,
        )
        return estimate_plan(plan, self._level(alpha))

    def release(
        self,
        query: str | Query,
        *,
        epsilon: float | None = None,
        delta: float = 0.0,
        alpha: float | None = None,
        selection_weight: float = 1.0,
        accuracy: Mapping[str, float | str] | None = None,
        noise: str | None = None,
        rho: float | None = None,
        clipping: float | None = None,
    ) -> Release:
        """Release a query at (ε, δ), at a zCDP cost ``rho``, or at the smallest cost meeting
        ``accuracy`` (1-α CI half-widths per output): plan, reserve, compute, noise (see the
        module docstring). A cost above the remaining budget is refused before any charge,
        naming the cost; so is a ``rho`` under basic accounting of an (ε, δ) budget."""
        level = self._level(alpha)
        plan = self.plan(
            query,
            epsilon=epsilon,
            delta=delta,
            selection_weight=selection_weight,
            accuracy=accuracy,
            alpha=level,
            noise=noise,
            rho=rho,
            clipping=clipping,
        )
        plan = check_accounting(self._filter, plan, accuracy is not None)
        reservation = self._filter.reserve(plan_event(plan), description=_describe(query))
        reservation.commit()
        return after_charge(
            lambda: release_plan(
                plan,
                self._compute(plan.exact),
                alpha=level,
                rng=self._rng,
                compute=self._backend.compute,  # refined quantiles' later levels, uncached
                metadata=self._metadata,
            )
        )

    def sql(
        self,
        query: str,
        *,
        epsilon: float | None = None,
        delta: float = 0.0,
        alpha: float | None = None,
        selection_weight: float = 1.0,
        accuracy: Mapping[str, float | str] | None = None,
        noise: str | None = None,
        rho: float | None = None,
        clipping: float | None = None,
    ) -> Release:
        """Release a SQL query (see :mod:`dpcurator.query.frontend.sql` for the supported subset),
        at ``epsilon`` (and ``delta``), at a zCDP cost ``rho``, or at the smallest cost meeting
        ``accuracy``, e.g. ``s.sql(q, accuracy={"n": 50}, alpha=0.05)``; ``noise="gaussian"``
        or ``"laplace"`` names the noise family (default: automatic, :meth:`plan`).
        ``SELECT REGRESS(y, x1, ...) FROM t`` (or ``LOGISTIC``) releases a model fit's
        coefficients (:mod:`dpcurator.query.frontend.fit`), ``SELECT TTEST(x, g) FROM t`` a test
        (:mod:`dpcurator.query.frontend.hypothesis`). ``clipping=0.1`` spends a tenth of
        ``epsilon`` on a report of the rows outside the bounds of clamped outputs
        (``Release.clipping``, :mod:`dpcurator.query.plan.clipping`)."""
        if not isinstance(query, str):
            raise fail("Session.sql", "query", "SQL text", query)
        options = {"accuracy": accuracy, "noise": noise, "rho": rho, "clipping": clipping}
        lone = plan_lone_call(query, self._metadata, epsilon=epsilon, delta=delta, options=options)
        if lone is not None:
            return release_lone_call(self, lone, self._level(alpha))
        return self.release(
            query,
            epsilon=epsilon,
            delta=delta,
            alpha=alpha,
            selection_weight=selection_weight,
            accuracy=accuracy,
            noise=noise,
            rho=rho,
            clipping=clipping,
        )

    def dp_bounds(self, column: str, *, epsilon: float, beta: float = 0.01) -> tuple[float, float]:
        """Estimate a column's bounds with ε-DP and use them in this session's metadata.

        Spends ``epsilon`` (see :mod:`dpcurator.estimators.bounds`). The estimate is public once
        released, so later queries may use it. Raises DomainError (keeping the charge) when no
        bin's noisy count clears the threshold.
        """
        plan = plan_bounds(self._metadata, column, epsilon=epsilon, beta=beta)
        reservation = self._filter.reserve(
            PureEvent(plan.cost.epsilon), description=f"dp_bounds({column})"
        )
        reservation.commit()
        exact = after_charge(lambda: self._compute(plan.exact))
        counts = [
            int(exact.groups.get((i,), {}).get("n", 0))  # type: ignore[call-overload]
            for i in range(plan.bins.bins)
        ]
        noisy = plan.laplace.release_integers(counts, self._rng)
        lower, upper = bounds_from_noisy_counts(noisy, plan.bins, plan.threshold)
        with self._lock:
            self._metadata = self._metadata.with_bounds(plan.column, lower, upper)
        return lower, upper

    def fit(
        self,
        kind: str,
        *,
        epsilon: float,
        delta: float = 0.0,
        alpha: float | None = None,
        **options: Any,
    ) -> Estimate:
        """Fit an estimator on the table (:mod:`dpcurator.query.fit.core`): planned from the
        metadata (refusals free), charged (ε, δ), computed by the engine; ``options`` are those of
        :func:`~dpcurator.query.fit.core.plan_fit` (``y``, ``x``, ``model``, ``lower``, ...)."""
        plan = plan_fit(self._metadata, kind, epsilon=epsilon, delta=delta, **options)
        return run_fit(self, plan, self._level(alpha))

    def compute_exact(
        self, plans: Sequence[AggregatePlan], event: PrivacyEvent, *, description: str
    ) -> list[ExactResult]:
        """Charge ``event`` once, then compute the EXACT aggregates of ``plans``.

        For non-interactive releases that add their own noise (:mod:`dpcurator.synth`): the
        caller derives ``event`` from public inputs and must not release the results without
        noise. Each plan is checked against the table first (free); after the charge any failure
        is ``BackendError(ENGINE_FAILURE_MESSAGE)``, as in :meth:`release`.
        """
        for exact in plans:
            check_plan(exact, self._metadata.column_types())
        reservation = self._filter.reserve(event, description=description)
        reservation.commit()
        return after_charge(lambda: [self._compute(exact) for exact in plans])

    @property
    def rng(self) -> Rng | None:
        """The session's randomness source (None: the process-wide SecureRng)."""
        return self._rng

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
        if not result_is_cacheable(exact):
            return self._backend.compute(exact)
        result = self._results.get(exact)
        if result is None:
            result = self._backend.compute(exact)
            self._results.put(exact, result)
        return result

    def __repr__(self) -> str:
        """The table, the accounting and the budget spent and left, natively and as (ε, δ)."""
        native = ""
        if isinstance(self._filter, ConcentratedFilter):
            spent, left = self._filter.spent_native(), self._filter.remaining_native()
            native = f" [spent {spent}; remaining {left}]"
        return (
            f"Session(table {self._metadata.table!r}, {type(self._filter).__name__}; "
            f"{self.spent()}; {self.remaining()}{native})"
        )

    def _level(self, alpha: float | None) -> float:
        return request_alpha(alpha, self._alpha)


def _new_filter(budget: Budget | ZCDP, accounting: str | None) -> BudgetFilter:
    """The session's own filter: a PrivacyFilter (basic composition of an (ε, δ) budget, zCDP
    composition of a ρ budget) or the ConcentratedFilter (by default for δ > 0)."""
    if accounting is None:
        approx = isinstance(budget, Budget) and budget.delta > 0
        accounting = "concentrated" if approx else "basic"
    if accounting == "concentrated":
        return ConcentratedFilter(budget)
    if accounting == "gaussian":
        return GaussianDPFilter(budget)
    return PrivacyFilter(budget)


def _describe(query: str | Query) -> str:
    return query if isinstance(query, str) else repr(query)
