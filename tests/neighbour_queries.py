"""The neighbour adversary: generated queries, neighbouring tables, and what an analyst observes.

The privacy rule (``docs/PRIVACY.md``; Dwork & Roth 2014, Def. 2.4 applied to the whole output,
not only the noisy numbers): everything an analyst can observe except the noisy numbers is a
function of public inputs only (query, ε/δ, metadata). So for any table D and any neighbour D'
(D minus one person, or D with one person's row changed), the :class:`Observation` of a query
(exception class and text or HTTP status and problem body, the charge, released group columns
and public keys, CI widths, which cache kept the result) must be equal on D and D'. A difference
is a side channel that does not go through the noise: it can reveal one person exactly, however
small ε is.

This module holds the parts shared by ``tests/test_neighbours.py`` (bounded CI run) and
``scripts/neighbour_search.py`` (long search) besides the SQL generator
(``tests/neighbour_sql.py``): the neighbours (:class:`Neighbour`), the engines (:data:`ENGINES`),
the observation of a :class:`~dpcurator.Session` release (:func:`observe_session`; the HTTP one is
in ``tests/neighbour_service.py``), and the comparison (:func:`differences`).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from unittest import mock

import pandas as pd
from hypothesis import strategies as st

import dpcurator as dpc
from dpcurator._cache import LruCache
from dpcurator.errors import ENGINE_FAILURE_MESSAGE, BackendError, DPError
from dpcurator.query import session as session_module
from dpcurator.query.backends import Backend, open_backend
from dpcurator.query.frontend.sql import parse_sql
from dpcurator.query.ir import AggregatePlan, ExactResult
from dpcurator.query.plan.noise import plan_with_noise
from dpcurator.query.plan.planner import Plan
from dpcurator.query.precomputed import precomputed_columns
from dpcurator.query.release.core import Release
from dpcurator.query.release.estimate import Estimate, estimate_plan
from dpcurator.random import SeededRng
from tests.neighbour_sql import INT64_MAX, VICTIM, NeighbourQuery

#: Every session starts with this budget, so the charge of each query is observed alone.
BUDGET = dpc.Budget(epsilon=1_000.0, delta=1e-3)
RNG_SEED = 20240601

# ----------------------------------------------------------------------------------------------
# The demo table and its neighbours


#: The metadata the neighbour tests declare for the demo table: its own (a person column,
#: add/remove), the same table declared replace-one (public n = its 5,000 persons), and
#: row-level with r = 2 rows a person and no person column (issue 29).
VARIANTS = ("demo", "replace_one", "rows")


@functools.cache
def demo_metadata(variant: str = "demo") -> dpc.Metadata:
    """The public metadata of the demo table, as declared by ``variant`` (:data:`VARIANTS`)."""
    metadata = dpc.Metadata.from_yaml(dpc.demo_path("people.yaml"))
    if variant == "replace_one":
        return replace(metadata, neighbouring="replace_one", public_size=len(_demo_frame()))
    if variant == "rows":
        return replace(metadata, person_column=None, max_rows_per_person=2)
    assert variant == "demo", variant
    return metadata


@functools.cache
def _demo_frame() -> pd.DataFrame:
    return pd.read_csv(dpc.demo_path("people.csv"))


def demo_frame() -> pd.DataFrame:
    """A fresh copy of the demo table D (one row per person ``pid``)."""
    return _demo_frame().copy()


#: Row changes a neighbour may apply to one person: extremes, NULL and NaN where types allow.
CHANGES: dict[str, dict[str, object]] = {
    "age=int64 max": {"age": INT64_MAX},
    "age=int64 min": {"age": -(2**63)},
    "age=NULL": {"age": None},
    "income=inf": {"income": math.inf},
    "income=-1e308": {"income": -1e308},
    "income=NaN": {"income": math.nan},
    "hours=NaN, employed=NULL": {"hours": math.nan, "employed": None},
    "sex='X', region=NULL": {"sex": "X", "region": None},
    "region='1', education=''": {"region": "1", "education": ""},
}


@dataclass(frozen=True)
class Neighbour:
    """D minus one person (``change`` None) or D with that person's row changed (a CHANGES key)."""

    pid: int
    change: str | None = None

    def __str__(self) -> str:
        what = "removed" if self.change is None else f"changed ({self.change})"
        return f"D with person {self.pid} {what}"

    def frame(self) -> pd.DataFrame:
        """The neighbouring table."""
        frame = demo_frame()
        rows = frame["pid"] == self.pid
        if self.change is None:
            return frame[~rows].reset_index(drop=True)
        for column, value in CHANGES[self.change].items():
            values = frame[column].astype(object)
            values[rows] = value
            frame[column] = (
                values if value is None or isinstance(value, str) else values.infer_objects()
            )
        return frame


def neighbours() -> st.SearchStrategy[Neighbour]:
    """Neighbours of D, mostly about the victim (the person the queries target)."""
    pid = st.one_of(st.just(VICTIM), st.integers(1, 5000))
    change = st.one_of(st.none(), st.sampled_from(sorted(CHANGES)))
    return st.builds(Neighbour, pid, change)


# ----------------------------------------------------------------------------------------------
# Engines


@dataclass(frozen=True)
class EngineConfig:
    """How a session opens a table: the engine, precomputed columns, a result cache."""

    name: str
    engine: str
    precompute: bool = False
    result_cache: bool = False

    def open(self, frame: pd.DataFrame, variant: str = "demo") -> Backend:
        """The table on this engine, opened as :meth:`dpcurator.Session.from_data` opens it."""
        metadata = demo_metadata(variant)
        return open_backend(
            frame,
            table=metadata.table,
            engine=self.engine,
            column_types=metadata.column_types(),
            precomputed=precomputed_columns(metadata) if self.precompute else None,
        )


#: The engines (the first mirrors the service: DuckDB, precomputed columns, result cache).
ENGINES = {
    config.name: config
    for config in (
        EngineConfig("duckdb", "duckdb", precompute=True, result_cache=True),
        EngineConfig("duckdb-plain", "duckdb"),
        EngineConfig("polars", "polars"),
        EngineConfig("memory", "memory"),
        EngineConfig("spark", "spark"),
    )
}


# ----------------------------------------------------------------------------------------------
# Observations


@dataclass(frozen=True)
class Observation:
    """Everything an analyst sees of one answer except the noisy numbers.

    Attributes:
        outcome: ``"release"``, the exception class, or ``"HTTP <status>"``.
        detail: the exception text or the problem+json body ("" for a release).
        charge: the budget spent (session) or the cost and remaining budget (service).
        columns: group and value column names, and the types of released values.
        keys: the released group keys when they are public (None under partition selection,
            where they are noisy outputs).
        ci: per value column, its public half-width and whether every interval has it, or
            whether its intervals are absent (quantiles).
        cached: whether the exact result went into the session's result cache (None: no cache).
    """

    outcome: str
    detail: str = ""
    charge: str = ""
    columns: tuple[object, ...] = ()
    keys: tuple[tuple[object, ...], ...] | None = None
    ci: tuple[tuple[object, ...], ...] = ()
    cached: bool | None = None


def public_plan(
    query: NeighbourQuery,
    *,
    noise: str | None = None,
    rho: float | None = None,
    variant: str = "demo",
) -> Plan | None:
    """The plan of ``query`` from the metadata alone (of ``variant``), with the session's
    automatic noise family or ``noise``, at ``rho`` instead of ε if given (None when the planner
    refuses it)."""
    metadata = demo_metadata(variant)
    epsilon = None if rho is not None else query.epsilon
    try:
        return plan_with_noise(
            parse_sql(query.sql, metadata),
            metadata,
            epsilon=epsilon,
            delta=query.delta,
            rho=rho,
            noise=noise,
        )
    except DPError:
        return None


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def _interval_has_width(estimate: Estimate, width: float) -> bool:
    """Whether ``value ± width`` (counts: each floored at 0) is the released interval."""
    value, low, high = estimate.value, estimate.ci_low, estimate.ci_high
    if low is None or high is None:
        return False
    if _close(low, value - width) and _close(high, value + width):
        return True
    floored_low = _close(low, max(value - width, 0.0))
    if value > 0:
        return floored_low and _close(high, value + width)
    return floored_low and value == 0 and -1e-9 <= high <= width + 1e-9


def ci_signature(
    value_columns: Sequence[str],
    rows: Sequence[Sequence[Estimate]],
    halfwidths: dict[str, float | None],
) -> tuple[tuple[object, ...], ...]:
    """Per column: (name, public half-width, every interval has it), or for columns without a
    public width (name, whether intervals are present in every row or absent in every row).

    Counts, sums and histograms have a half-width fixed by the plan; means, variances and
    quantiles have none (their intervals follow the noisy values). Nothing here
    depends on how many rows are released (partition selection releases a noisy number).
    """
    signature: list[tuple[object, ...]] = []
    for index, column in enumerate(value_columns):
        cells = [row[index] for row in rows]
        width = halfwidths.get(column)
        if width is None:
            uniform = len({e.ci_low is None for e in cells}) <= 1
            signature.append((column, "no public width", uniform))
        else:
            signature.append((column, width, all(_interval_has_width(e, width) for e in cells)))
    return tuple(signature)


def release_shape(
    plan: Plan | None,
    group_columns: Sequence[str],
    value_columns: Sequence[str],
    rows: Sequence[tuple[tuple[object, ...], Sequence[Estimate]]],
    alpha: float,
) -> dict[str, Any]:
    """The ``columns``, ``keys`` and ``ci`` fields of the observation of a release."""
    public = plan is not None and plan.keys is not None
    types = (
        {type(e.value).__name__ for _, estimates in rows for e in estimates} if public else set()
    )
    halfwidths = {} if plan is None else estimate_plan(plan, alpha).ci_halfwidths
    return {
        "columns": (tuple(group_columns), tuple(value_columns), tuple(sorted(types))),
        "keys": tuple(key for key, _ in rows) if public else None,
        "ci": ci_signature(value_columns, [e for _, e in rows], halfwidths),
    }


def new_session(backend: Backend, result_cache: bool, variant: str = "demo") -> dpc.Session:
    """A session over ``backend`` with a fresh budget and the seeded RNG."""
    return dpc.Session(
        backend,
        demo_metadata(variant),
        budget=BUDGET,
        rng=SeededRng(RNG_SEED),
        result_cache=LruCache(64) if result_cache else None,
    )


def observe_session(
    session: dpc.Session, query: NeighbourQuery, variant: str = "demo"
) -> Observation:
    """Release ``query`` through ``session`` (over the metadata of ``variant``) and observe
    everything but the noisy numbers."""
    try:
        release: Release = session.sql(query.sql, epsilon=query.epsilon, delta=query.delta)
    except Exception as exc:  # every exception is an observable outcome
        return Observation(type(exc).__name__, str(exc), repr(session.spent()))
    plan = public_plan(query, variant=variant)
    results = session._results  # cache eligibility is what is observed
    cached = None if results is None or plan is None else results.get(plan.exact) is not None
    return Observation(
        "release",
        charge=repr(session.spent()),
        cached=cached,
        **release_shape(
            plan, release.group_columns, release.value_columns, release.rows, release.alpha
        ),
    )


def differences(left: Observation, right: Observation) -> list[str]:
    """The fields in which two observations differ, each as ``field: left != right``, and
    whether either answer is the constant engine failure.

    That failure (``ENGINE_FAILURE_MESSAGE``: the engine or a mechanism raised after the charge)
    is a finding even when both tables give it: it is the last resort for bugs, and whether it
    happens can depend on the data (docs/PRIVACY.md), so the supported grammar must never reach
    it. A leak that fails on D and on D' alike (e.g. a mechanism whose precision follows the
    data, refusing at tiny ε on both) is found here though the observations are equal.
    """
    found = [
        f"{side}: the constant engine failure was reached ({obs.outcome})"
        for side, obs in (("left", left), ("right", right))
        if ENGINE_FAILURE_MESSAGE in obs.detail
    ]
    for name in Observation.__dataclass_fields__:
        a, b = getattr(left, name), getattr(right, name)
        if a != b:
            found.append(f"{name}: {str(a)[:300]!r} != {str(b)[:300]!r}")
    return found


# ----------------------------------------------------------------------------------------------
# Properties


@dataclass
class PairRunner:
    """Runs a query on D and on a neighbour through one engine, and compares observations.

    D's backend is opened once; neighbours are opened per check (opening takes ~0.1 s).
    ``open_table`` (default: the engine config's opener) is where the mutation check injects a
    broken engine.
    """

    config: EngineConfig
    open_table: Callable[[pd.DataFrame], Backend] | None = None
    variant: str = "demo"
    _base: Backend | None = field(default=None, repr=False)

    def _open(self, frame: pd.DataFrame) -> Backend:
        if self.open_table is not None:
            return self.open_table(frame)
        return self.config.open(frame, self.variant)

    def base(self) -> Backend:
        """The backend of D (opened on first use)."""
        if self._base is None:
            self._base = self._open(demo_frame())
        return self._base

    def observe(self, backend: Backend, query: NeighbourQuery) -> Observation:
        """The observation of ``query`` on ``backend`` in a fresh session."""
        session = new_session(backend, self.config.result_cache, self.variant)
        return observe_session(session, query, self.variant)

    def check(self, query: NeighbourQuery, neighbour: Neighbour | None) -> list[str]:
        """Differences between D and ``neighbour`` (None: D itself, the harness sanity check)."""
        left = self.observe(self.base(), query)
        if neighbour is None:
            return differences(left, self.observe(self.base(), query))
        other = self._open(neighbour.frame())
        try:
            return differences(left, self.observe(other, query))
        finally:
            other.close()

    def close(self) -> None:
        """Close D's backend."""
        if self._base is not None:
            self._base.close()
            self._base = None


def failure_report(query: NeighbourQuery, neighbour: object, found: list[str]) -> str:
    """An assertion message naming the query, the neighbour and the differing observations."""
    lines = "\n  ".join(found)
    return f"observation(D) != observation({neighbour}) for {query}:\n  {lines}"


class LeakyBackend:
    """A deliberately broken engine (mutation check): it fails, stating the table's row count.

    With ``even_only`` it fails only when the row count is even (D has 5,000 rows) and answers
    otherwise: the failure itself is decided by the data. Without, it always fails, and the
    leak is in the text, which reaches the analyst only when :func:`engine_text_reaches_analyst`
    reverts the session's constant engine-failure message.
    """

    def __init__(self, inner: Backend, rows: int, *, even_only: bool) -> None:
        self._inner = inner
        self._rows = rows
        self._even_only = even_only
        self.name = inner.name

    def tables(self) -> list[str]:
        """The inner engine's tables."""
        return self._inner.tables()

    def columns(self, table: str) -> dict[str, str]:
        """The inner engine's columns."""
        return self._inner.columns(table)

    def compute(self, plan: AggregatePlan) -> ExactResult:
        """Fail with the row count (the injected leak), or compute (odd counts, ``even_only``)."""
        if self._even_only and self._rows % 2:
            return self._inner.compute(plan)
        raise BackendError(f"the engine gave up after scanning {self._rows} rows")

    def close(self) -> None:
        """Close the inner engine."""
        self._inner.close()


def leaky_opener(config: EngineConfig, *, even_only: bool) -> Callable[[pd.DataFrame], Backend]:
    """An opener returning :class:`LeakyBackend` around ``config``'s engine."""

    def open_table(frame: pd.DataFrame) -> Backend:
        return LeakyBackend(config.open(frame), len(frame), even_only=even_only)

    return open_table


@contextlib.contextmanager
def engine_text_reaches_analyst() -> Iterator[None]:
    """Mutation: revert S6, so an engine's exception reaches the analyst unchanged.

    (``create``: before S6 there is nothing to revert; should the hook be renamed, the mutant
    leaks nothing and ``test_injected_data_dependent_failures_are_caught`` says so.)
    """
    with mock.patch.object(session_module, "_after_charge", lambda work: work(), create=True):
        yield


def mutation_findings(config: EngineConfig) -> dict[str, list[str]]:
    """Run the injected leaks of :class:`LeakyBackend` through the harness.

    Returns, per mutant, the differences found between D and D minus the victim: every list
    must be non-empty, else the harness is blind to that channel.
    """
    query = NeighbourQuery("SELECT COUNT(*) AS n FROM people", 1.0)
    found = {}
    for mutant, even_only in (("failure decided by the data", True), ("row count in text", False)):
        runner = PairRunner(config, leaky_opener(config, even_only=even_only))
        try:
            with contextlib.ExitStack() as stack:
                if not even_only:
                    stack.enter_context(engine_text_reaches_analyst())
                found[mutant] = runner.check(query, Neighbour(VICTIM))
        finally:
            runner.close()
    return found
