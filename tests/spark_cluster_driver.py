"""The checks run through a real Spark cluster, and the driver process that runs them.

:func:`outcomes` evaluates the cases on one engine (a classic driver those in :data:`CLASSIC`):
a representative subset of the engine conformance plans (grouped counts, sums, histograms,
derived groups, public keys, NULL/NaN fills, strings, bounded plans), over-bound contribution
bounding (checked by the counts that do not depend on which rows an engine keeps), the totality
edge values under ANSI mode on and off, D and D minus pid 4322 under adversarial plans, and
user-level :class:`dpcurator.Session` releases with a seeded RNG; :func:`failure_text` an engine
failure's text (both drivers). The tests compare the
outcomes on the cluster with those of the in-memory oracle, computed in the test process.

Run as ``python -m tests.spark_cluster_driver classic spark://HOST:PORT OUT`` (a classic driver)
or ``... connect sc://HOST:PORT OUT`` (a Spark Connect client): it pickles the outcomes to OUT.
"""

from __future__ import annotations

import logging
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

import dpcurator
from dpcurator import Budget, Metadata, Session
from dpcurator.errors import DPError
from dpcurator.query.backends import Backend, open_backend
from dpcurator.query.ir import AggregatePlan, ExactAggregate, ExactResult
from dpcurator.random import SeededRng
from tests import conformance_cases as conformance
from tests import test_backends_spark_totality as totality
from tests.conftest import SHARED_DATA
from tests.spark_cluster import APP_CONF, CLASSIC_APP

CONFORMANCE = (
    "count", "sum_offset", "sum_squares", "histogram", "derived_groups", "functions",
    "division_by_zero", "public_keys", "nan_fill", "strings", "within_bounds_keys",
    "within_bounds_adult",
)  # fmt: skip
ANSI = ("true", "false")
#: The cases a classic driver runs: those whose outcome depends on the work being split between
#: executors in the workers' JVMs (partial aggregates merged after a shuffle between them, each
#: person's rows brought together before bounding, an executor's failure reaching the driver,
#: user-level releases end to end). A classic driver evaluates every other case's plan exactly as
#: local Spark does, where it is checked already: the plans by test_backends_conformance.py::
#: test_matches_oracle[spark-*], ANSI off by test_backends_spark_totality.py::
#: test_edge_values_match_the_oracle[legacy-*], the neighbours by ::test_neighbours_never_raise.
#: A Connect client runs every case: its plans reach Spark through Spark Connect only here.
CLASSIC = (
    "plan:histogram", "over_bound_rows", "over_bound_groups", "edge_values:ansi=true",
    "session:demo", "session:adult_bounded",
)  # fmt: skip
NEIGHBOUR = "people minus the victim"  # the demo table without pid 4322
NEIGHBOUR_PLANS = ("overflow_in_bounded_value", "floor_of_infinity", "division_by_zero")
FAILURE = "engine_failure_text"  # a Spark-only case: see failure_text
DEMO_SQL = (
    "SELECT region, COUNT(*) AS n, SUM(income) AS total, AVG(age) AS mean_age "
    "FROM people WHERE employed AND hours > 10 GROUP BY region"
)
ADULT_METADATA = {  # user level: persons of ~8 rows, at most 3 kept
    "table": "adult",
    "person_column": "uid",
    "max_rows_per_person": 3,
    "max_groups_per_person": 1,
    "columns": {"uid": {"type": "int"}, "age": {"type": "int", "lower": 17, "upper": 90}},
}


@dataclass(frozen=True)
class Engine:
    """The engine under test: how it opens a table, and how ANSI mode is set (Spark only)."""

    name: str
    frame: Callable[[pa.Table], object]
    set_ansi: Callable[[str], None]

    def open(self, table: pa.Table, name: str, **kw: object) -> Backend:
        return open_backend(self.frame(table), table=name, engine=self.name, **kw)  # type: ignore[arg-type]


def _groups(result: ExactResult) -> dict[tuple[object, ...], dict[str, object]]:
    return conformance.normalise(result)


def _over_bound_summary(result: ExactResult) -> tuple[bool, int]:
    """What bounding fixes whichever rows an engine keeps: one row per kept (person, group), so
    each group's count equals its persons, and the total count."""
    groups = result.groups.values()
    return all(v["n"] == v["p"] for v in groups), sum(int(v["n"]) for v in groups)  # type: ignore[call-overload]


def _edge_plan() -> AggregatePlan:
    """Every totality edge expression as one per-row sum, grouped by pid."""
    exprs = [expr for case in totality.CASES.values() for expr, _ in case]
    return totality._per_row_plan(exprs)


def _release(engine: Engine, table: pa.Table, metadata: Metadata, sql: str) -> object:
    session = Session.from_data(
        engine.frame(table),
        metadata=metadata,
        engine=engine.name,
        budget=Budget(10.0),
        rng=SeededRng(20),
    )
    return session.sql(sql, epsilon=1.0).to_dict()


def failure_text(engine: Engine) -> tuple[str, str]:
    """The error an analyst sees when the owner's DataFrame makes Spark raise on one row (with
    a message quoting the row's value)."""
    from pyspark.sql import functions as sf  # noqa: PLC0415 (only with Spark)

    frame = engine.frame(totality.EDGE.select(["pid", "x"]))
    secret = sf.concat(sf.lit("secret value "), sf.col("x").cast("string"))
    failing = frame.withColumn(  # type: ignore[attr-defined]
        "x", sf.when(sf.col("pid") == 3, sf.raise_error(secret)).otherwise(sf.col("x"))
    )
    plan = AggregatePlan("t", (ExactAggregate("s", "sum", totality.X, 0, 10, 0.0),))
    logging.getLogger("dpcurator.engine").disabled = True  # Spark's text: the owner's log only
    try:
        open_backend(failing, table="t").compute(plan)
    except DPError as exc:
        return type(exc).__name__, str(exc)
    return "answered", ""


def outcomes(
    engine: Engine, tables: dict[str, pa.Table], names: tuple[str, ...] | None = None
) -> dict[str, object]:
    """Each case's outcome on ``engine`` (those in ``names``, default all): a comparable value,
    or the error's class and text."""
    opened: dict[str, Backend] = {}
    demo = pa_csv.read_csv(dpcurator.demo_path("people.csv"))
    tables = {
        **tables,
        "people": demo,
        NEIGHBOUR: demo.filter(pc.not_equal(demo["pid"], totality.VICTIM)),
    }
    cases = _cases(engine, tables, opened)
    results = {name: _outcome(cases[name]) for name in names or cases}
    for backend in opened.values():
        backend.close()
    return results


def case_ids(mode: str) -> list[str]:
    """The names of the cases a driver of ``mode`` runs (nothing is evaluated)."""
    return list(CLASSIC) if mode == "classic" else list(_cases(memory_engine(), {}, {}))


def _cases(
    engine: Engine, tables: dict[str, pa.Table], opened: dict[str, Backend]
) -> dict[str, Callable[[], object]]:

    def backend(name: str) -> Backend:
        if name not in opened:  # the neighbour of "people" is a table "people" too
            opened[name] = engine.open(tables[name], "people" if name == NEIGHBOUR else name)
        return opened[name]

    cases: dict[str, Callable[[], object]] = {}
    for plan_id in CONFORMANCE:
        plan = conformance.PLANS[plan_id]
        cases[f"plan:{plan_id}"] = lambda p=plan: _groups(backend(p.table).compute(p))  # type: ignore[misc]
    rows, groups = conformance.OVER_ROWS[3], conformance.OVER_GROUPS[2]
    cases["over_bound_rows"] = lambda: _groups(backend(rows.table).compute(rows))
    cases["over_bound_groups"] = lambda: _over_bound_summary(backend(groups.table).compute(groups))
    for mode in ANSI:
        cases[f"edge_values:ansi={mode}"] = lambda mode=mode: _edge_values(engine, mode)  # type: ignore[misc]
    for name in NEIGHBOUR_PLANS:
        plan = totality.NEIGHBOUR_PLANS[name]
        cases[f"neighbours:{name}"] = lambda p=plan: [  # type: ignore[misc]
            _answers(backend(table), p) for table in ("people", NEIGHBOUR)
        ]
    demo = Metadata.from_yaml(dpcurator.demo_path("people.yaml"))
    cases["session:demo"] = lambda: _release(engine, tables["people"], demo, DEMO_SQL)
    adult = Metadata.from_dict(ADULT_METADATA)
    sql = "SELECT COUNT(*) AS n FROM adult WHERE age > 30"
    cases["session:adult_bounded"] = lambda: _release(engine, tables["adult"], adult, sql)
    return cases


def _outcome(case: Callable[[], object]) -> object:
    try:
        return case()
    except DPError as exc:
        return ("raised", type(exc).__name__, str(exc))


def _edge_values(engine: Engine, ansi: str) -> object:
    engine.set_ansi(ansi)
    try:
        return engine.open(totality.EDGE, "t").compute(_edge_plan()).groups
    finally:
        engine.set_ansi("true")


def _answers(backend: Backend, plan: AggregatePlan) -> bool:
    """Whether ``plan`` answers (on D and on D minus the victim, only noisy values may differ)."""
    try:
        backend.compute(plan)
    except DPError:
        return False
    return True


def memory_engine() -> Engine:
    """The in-memory oracle."""
    return Engine("memory", lambda table: table, lambda _: None)


def spark_engine(mode: str, url: str) -> Engine:
    """A SparkSession on the cluster: a classic driver (``spark://``) or a Connect client."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 (only in the driver process)

    if mode == "connect":
        spark = SparkSession.builder.remote(url).getOrCreate()
    else:
        builder = SparkSession.builder.master(url).appName(CLASSIC_APP)
        for key, value in APP_CONF.items():
            builder = builder.config(key, value)
        spark = builder.config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
    return Engine(
        "spark",
        spark.createDataFrame,
        lambda value: spark.conf.set("spark.sql.ansi.enabled", value),
    )


def main(argv: list[str]) -> int:
    """``MODE URL OUTPUT``: evaluate every case on the cluster and pickle the outcomes."""
    mode, url, output = argv
    engine = spark_engine(mode, url)
    results = outcomes(engine, conformance.load_tables(SHARED_DATA), tuple(case_ids(mode)))
    results[FAILURE] = failure_text(engine)
    with Path(output).open("wb") as handle:
        pickle.dump(results, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
