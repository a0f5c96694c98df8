"""A long neighbour-adversary search: the properties of tests/test_neighbours.py, many examples.

For each engine and each property (D vs D minus one person, D vs D with one person's row
changed), generate queries with hypothesis, compare the observations (everything but the noisy
numbers, see tests/neighbour_queries.py) and print a table: examples run, failures, first
counterexample. First, the harness checks itself: D against D must never differ, and injected
data-dependent failures (tests/neighbour_queries.LeakyBackend) must be caught.

    .venv/bin/python scripts/neighbour_search.py --examples 500 --engines duckdb,memory --seed 1
"""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.neighbour_queries import (
    CHANGES,
    ENGINES,
    Neighbour,
    PairRunner,
    mutation_findings,
)
from tests.neighbour_sql import VICTIM, NeighbourQuery, queries

#: The victim (whom the generated queries target) half the time, anyone otherwise.
PERSONS = st.one_of(st.just(VICTIM), st.integers(1, 5000))
PROPERTIES: dict[str, st.SearchStrategy[Neighbour | None]] = {
    "D = D (sanity)": st.none(),
    "remove a person": st.builds(Neighbour, PERSONS),
    "change a person": st.builds(Neighbour, PERSONS, st.sampled_from(sorted(CHANGES))),
}


@dataclass
class Tally:
    """Examples run, failures and the first counterexample of one engine x property."""

    runs: int = 0
    failures: int = 0
    first: str = ""
    outcomes: dict[str, int] = field(default_factory=dict)


def search(
    runner: PairRunner, neighbours: st.SearchStrategy[Neighbour | None], examples: int, at: int
) -> Tally:
    """Run ``examples`` generated (query, neighbour) pairs through ``runner``; never stops early."""
    tally = Tally()

    @seed(at)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(query=queries(), neighbour=neighbours)
    def run(query: NeighbourQuery, neighbour: Neighbour | None) -> None:
        found = runner.check(query, neighbour)
        tally.runs += 1
        outcome = runner.observe(runner.base(), query).outcome
        tally.outcomes[outcome] = tally.outcomes.get(outcome, 0) + 1
        if found:
            tally.failures += 1
            if not tally.first:
                tally.first = f"{query} vs {neighbour or 'D'}: {found[0]}"

    run()
    return tally


def mutation_check(engine: str) -> bool:
    """Print whether each injected leak is caught; True when all are."""
    caught = True
    for mutant, found in mutation_findings(ENGINES[engine]).items():
        print(f"mutation check ({engine}) {mutant}: {'caught' if found else 'MISSED'}")
        caught = caught and bool(found)
    return caught


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run the mutation check and the search, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200, help="examples per engine x property")
    parser.add_argument(
        "--engines", default="duckdb,duckdb-plain,polars,memory", help=f"from {sorted(ENGINES)}"
    )
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed")
    args = parser.parse_args(argv)
    engines = args.engines.split(",")
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        parser.error(f"unknown engines {unknown}; choose from {sorted(ENGINES)}")
    warnings.simplefilter("ignore")
    if "spark" in engines:
        start_spark()
    if not mutation_check(engines[0]):
        print("the harness is blind to an injected leak: fix it before trusting the table")
        return 2
    failed = 0
    print(f"{'engine':<13} {'property':<16} {'runs':>5} {'fail':>5}  first counterexample")
    for engine in engines:
        runner = PairRunner(ENGINES[engine])
        try:
            for name, neighbours in PROPERTIES.items():
                tally = search(runner, neighbours, args.examples, args.seed)
                failed += tally.failures
                print(f"{engine:<13} {name:<16} {tally.runs:>5} {tally.failures:>5}  {tally.first}")
                print(f"{'':<13} {'':<16} outcomes on D: {tally.outcomes}")
        finally:
            runner.close()
    return 1 if failed else 0


def start_spark() -> None:
    """Start the local SparkSession the Spark engine uses (as tests/backends_fixtures.py does)."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 (optional, heavy)

    session = (
        SparkSession.builder.master("local[2]")
        .appName("dpcurator-neighbour-search")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")


if __name__ == "__main__":
    sys.exit(main())
