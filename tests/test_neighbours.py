"""The privacy rule, tested by a neighbour adversary (see ``tests/neighbour_queries.py``).

For generated queries of the supported SQL subset and neighbouring tables D, D' (D minus one
person, or one person's row changed), everything an analyst observes except the noisy numbers
must be equal on D and D': exception class and text or HTTP problem, the charge, the released
columns and public keys, CI widths, result-cache eligibility. Engines: DuckDB (with precomputed
columns and a result cache, as the service runs it, and plain), Polars, memory, Spark (marker
``spark``) and the HTTP service. The explicit regression tests replay the adversary's findings.
``scripts/neighbour_search.py`` runs the same properties with many more examples.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings

from tests.backends_fixtures import spark
from tests.neighbour_queries import (
    ENGINES,
    VARIANTS,
    Neighbour,
    PairRunner,
    demo_frame,
    demo_metadata,
    differences,
    failure_report,
    mutation_findings,
    neighbours,
)
from tests.neighbour_service import ServedTable
from tests.neighbour_sql import INT64_MAX, QUANTILE_QUERIES, VICTIM, NeighbourQuery, queries

__all__ = ["spark"]

pytestmark = pytest.mark.xdist_group("spark_local")  # one local Spark per run: backends_fixtures

LOCAL_ENGINES = ("duckdb", "duckdb-plain", "polars", "memory")


def _settings(examples: int) -> settings:
    """Reproducible in CI: derandomized, no example database, no deadline."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@pytest.fixture(scope="module")
def runners() -> Iterator[dict[str, PairRunner]]:
    """One runner (D opened once) per local engine."""
    opened = {name: PairRunner(ENGINES[name]) for name in LOCAL_ENGINES}
    yield opened
    for runner in opened.values():
        runner.close()


def _assert_same(runner: PairRunner, query: NeighbourQuery, neighbour: Neighbour | None) -> None:
    found = runner.check(query, neighbour)
    assert not found, failure_report(query, neighbour or "D", found)


# ----------------------------------------------------------------------------------------------
# The harness itself


@_settings(10)
@given(query=queries())
def test_identical_tables_observe_the_same(
    runners: dict[str, PairRunner], query: NeighbourQuery
) -> None:
    # sanity: D against D itself; a difference here is a harness bug (non-determinism)
    for name in ("duckdb", "memory"):
        _assert_same(runners[name], query, None)


def test_injected_data_dependent_failures_are_caught() -> None:
    # mutation check: an engine whose failure, or whose error text, depends on the row count
    for mutant, found in mutation_findings(ENGINES["memory"]).items():
        assert found, f"the harness missed the injected leak: {mutant}"


# ----------------------------------------------------------------------------------------------
# The property, per engine


@pytest.mark.parametrize("engine", LOCAL_ENGINES)
@_settings(30)
@given(query=queries(), neighbour=neighbours())
def test_neighbours_observe_the_same(
    runners: dict[str, PairRunner], engine: str, query: NeighbourQuery, neighbour: Neighbour
) -> None:
    _assert_same(runners[engine], query, neighbour)


@pytest.fixture(scope="module")
def declared_runners() -> Iterator[dict[str, PairRunner]]:
    """The service's engine (DuckDB, precomputed columns, result cache) under each declared
    metadata variant other than the demo's (replace-one; row-level with r = 2)."""
    opened = {
        variant: PairRunner(ENGINES["duckdb"], variant=variant)
        for variant in VARIANTS
        if variant != "demo"
    }
    yield opened
    for runner in opened.values():
        runner.close()


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "demo"])
@_settings(20)
@given(query=queries(), neighbour=neighbours())
def test_neighbours_observe_the_same_under_each_declared_unit(
    declared_runners: dict[str, PairRunner],
    variant: str,
    query: NeighbourQuery,
    neighbour: Neighbour,
) -> None:
    """The rule holds whatever relation and unit the metadata declare (issue 29)."""
    _assert_same(declared_runners[variant], query, neighbour)


@pytest.mark.spark
@_settings(8)
@given(query=queries(), neighbour=neighbours())
def test_neighbours_observe_the_same_on_spark(
    spark: object, query: NeighbourQuery, neighbour: Neighbour
) -> None:
    runner = PairRunner(ENGINES["spark"])
    try:
        _assert_same(runner, query, neighbour)
    finally:
        runner.close()


#: The neighbours each served: the victim removed, and the victim's row at the extremes.
SERVED_NEIGHBOURS = (Neighbour(VICTIM), Neighbour(VICTIM, "age=int64 max"))


@pytest.fixture(scope="module", params=VARIANTS)
def served(request: pytest.FixtureRequest) -> Iterator[dict[Neighbour | None, ServedTable]]:
    """One curator service per table: D (key None) and each of SERVED_NEIGHBOURS, under each
    declared metadata variant (the demo's, replace-one, row-level r = 2)."""
    tables: dict[Neighbour | None, pd.DataFrame] = {None: demo_frame()}
    tables.update({n: n.frame() for n in SERVED_NEIGHBOURS})
    services = {
        key: ServedTable(frame, variant=request.param).__enter__() for key, frame in tables.items()
    }
    yield services
    for service in services.values():
        service.__exit__(None, None, None)


def _assert_same_over_http(
    served: dict[Neighbour | None, ServedTable], query: NeighbourQuery
) -> None:
    # every service answers every query, in the same order (ledger ids and budgets advance alike)
    seen = {key: table.observe(query) for key, table in served.items()}
    for neighbour in SERVED_NEIGHBOURS:
        found = differences(seen[None], seen[neighbour])
        assert not found, failure_report(query, f"{neighbour}, over HTTP", found)


@_settings(12)
@given(query=queries())
def test_neighbours_observe_the_same_over_http(
    served: dict[Neighbour | None, ServedTable], query: NeighbourQuery
) -> None:
    _assert_same_over_http(served, query)


# ----------------------------------------------------------------------------------------------
# The adversary's findings, replayed


def _sum_overflow_query() -> NeighbourQuery:
    """SUM(age * m) with m such that max|grid value| x rows is just above 2^63-1 on D (5,000
    rows) and not above on D minus one person (age is an integer on the grid 2^0, at most 90)."""
    rows = len(demo_frame())
    largest = int(demo_metadata().column("age").upper or 0)
    m = INT64_MAX // (largest * (rows - 1))
    assert largest * m * rows > INT64_MAX >= largest * m * (rows - 1)
    return NeighbourQuery(f"SELECT SUM(age * {m}) AS s FROM people", 1.0)


FINDINGS = {
    "CASE on the victim overflows int64": NeighbourQuery(
        "SELECT COUNT(*) AS n FROM people WHERE "
        f"(CASE WHEN pid = {VICTIM} THEN age * {INT64_MAX} ELSE 0 END) = 0",
        0.001,
    ),
    "string compared with a number": NeighbourQuery(
        f"SELECT COUNT(*) AS n FROM people WHERE pid = {VICTIM} AND region = 1", 1.0
    ),
    "sum overflow decided by the row count": _sum_overflow_query(),
    "median at tiny epsilon": NeighbourQuery(
        "SELECT MEDIAN(age) AS m FROM people WHERE region = 'South'", 1e-6
    ),
    **QUANTILE_QUERIES,
}


@pytest.mark.parametrize("engine", LOCAL_ENGINES)
@pytest.mark.parametrize("finding", sorted(FINDINGS))
def test_finding_observes_the_same(
    runners: dict[str, PairRunner], engine: str, finding: str
) -> None:
    _assert_same(runners[engine], FINDINGS[finding], Neighbour(VICTIM))


@pytest.mark.parametrize("finding", sorted(FINDINGS))
def test_finding_observes_the_same_over_http(
    served: dict[Neighbour | None, ServedTable], finding: str
) -> None:
    _assert_same_over_http(served, FINDINGS[finding])


def _persons_with_distinct_incomes(groups: int) -> tuple[int, int]:
    """A pid range ending at the victim whose incomes take ``groups`` distinct values on D and
    one fewer without the victim (reading the data is fine for a test harness)."""
    frame = demo_frame().set_index("pid").sort_index()
    for low in range(VICTIM - groups + 1, 0, -1):
        incomes = frame.loc[low:VICTIM, "income"]
        if incomes.nunique() == groups and (incomes == incomes[VICTIM]).sum() == 1:
            return low, VICTIM
    raise AssertionError(f"no pid range with {groups} distinct incomes")


def test_result_cache_is_chosen_by_plan_not_by_group_count(runners: dict[str, PairRunner]) -> None:
    # partition selection over 1,025 present groups on D and 1,024 on D minus the victim
    # (MAX_CACHED_GROUPS = 1,024): whether the exact result is cached must not follow the count
    low, high = _persons_with_distinct_incomes(1_025)
    query = NeighbourQuery(
        f"SELECT income, COUNT(*) AS n FROM people WHERE pid BETWEEN {low} AND {high} "
        "GROUP BY income",
        1.0,
        1e-6,
    )
    assert ENGINES["duckdb"].result_cache
    _assert_same(runners["duckdb"], query, Neighbour(VICTIM))
