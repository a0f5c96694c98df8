"""``dpcurator serve --engine spark`` on the tests' standalone cluster (:mod:`tests.spark_cluster`):
real server processes, one a classic driver of the master (``spark://``), the others Spark
Connect clients (``sc://``), each registering the demo table by a path the cluster reads.

Checked over HTTP: registration, count / sum / grouped releases near the exact values, the
charge, plan-time refusals identical (status, problem body, budget) to a DuckDB server's for the
same request, registration refusals that show nothing of the engine, and the neighbour property
(:mod:`tests.neighbour_queries`) on neighbouring tables served from the cluster.

The file sorts after ``test_spark_cluster.py``, whose check of the master's application list
runs first in the shared ``xdist_group``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

import httpx
import pandas as pd
import pytest

from dpcurator.service.cluster import OUTSIDE_ROOTS
from tests.neighbour_queries import Neighbour, demo_frame, differences, failure_report
from tests.neighbour_service import DATASET, ServedTable
from tests.neighbour_sql import NeighbourQuery
from tests.service_fixtures import LiveServer
from tests.spark_cluster import APP_CONF, SparkCluster
from tests.test_neighbours import FINDINGS, SERVED_NEIGHBOURS

pytestmark = [
    pytest.mark.spark,
    pytest.mark.spark_cluster,
    pytest.mark.slow,
    pytest.mark.xdist_group("spark_cluster"),  # the one cluster of the run
]
START_WITHIN = 300.0  # seconds for a server to answer (imports and a JVM on a loaded machine)


class SparkServedTable(ServedTable):
    """A :class:`ServedTable` whose curator is a ``dpcurator serve --engine spark`` process of
    the cluster (``mode`` classic or connect); queries and observations are the same."""

    def __init__(self, frame: pd.DataFrame, cluster: SparkCluster, mode: str) -> None:
        # not ServedTable.__init__: that builds an in-process DuckDB service
        self._accounting = "basic"
        self._variant = "demo"
        self._dir = tempfile.TemporaryDirectory(prefix="dpc-spark-served-")
        self.root = Path(self._dir.name)
        self._csv = self.root / "people.csv"
        frame.to_csv(self._csv, index=False)
        if mode == "connect":
            cluster.wait_for_connect()
        url = cluster.master_url if mode == "classic" else cluster.connect_url
        # the classic server's application: one 1-core executor per worker, beside the Connect
        # server, its JVMs started as the drivers' (tests.spark_cluster.APP_CONF)
        conf = APP_CONF if mode == "classic" else {}
        args = [
            "--engine", "spark", "--spark-master", url,
            "--data-root", str(self.root),
            "--ledger", f"sqlite:///{self.root / 'ledger.sqlite3'}",
            *(arg for key, value in conf.items() for arg in ("--spark-conf", f"{key}={value}")),
        ]  # fmt: skip
        self.server = LiveServer(args, env=cluster.env())

    def __enter__(self) -> SparkServedTable:
        self.server.start(wait_lines=1, within=START_WITHIN)
        owner_token = self.server.first_lines[0].removeprefix("owner token: ")
        headers = {"Authorization": f"Bearer {owner_token}"}
        self.owner = httpx.Client(base_url=self.server.url, headers=headers, timeout=300)
        token = self.register(self.owner, self._csv)
        self._client = httpx.Client(
            base_url=self.server.url, headers={"Authorization": f"Bearer {token}"}, timeout=300
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for client in ("owner", "_client"):
            if hasattr(self, client):
                getattr(self, client).close()
        self.server.stop()
        self._dir.cleanup()

    @property
    def analyst(self) -> httpx.Client:
        """The analyst's client (granted ε = 10^6 on the table)."""
        return self._client


@pytest.fixture(scope="module", params=["classic", "connect"])
def served(
    request: pytest.FixtureRequest,
    spark_cluster: SparkCluster,
) -> Iterator[SparkServedTable]:
    """The demo table served on the cluster, by a classic driver and by a Connect client."""
    with SparkServedTable(demo_frame(), spark_cluster, request.param) as table:
        yield table


@pytest.fixture(scope="module")
def on_duckdb() -> Iterator[ServedTable]:
    """The same table on an in-process DuckDB server, for comparing refusals."""
    with ServedTable(demo_frame()) as table:
        yield table


def _release(client: httpx.Client, sql: str, epsilon: float) -> dict[str, dict[str, float]]:
    """The released values of a query, by group key (``()`` for an ungrouped one)."""
    response = client.post(f"/v1/datasets/{DATASET}/queries", json={"sql": sql, "epsilon": epsilon})
    assert response.status_code == 200, response.text
    release = response.json()["release"]
    return {
        ",".join(str(row["group"][c]) for c in release["group_columns"]): {
            name: value["value"] for name, value in row["values"].items()
        }
        for row in release["rows"]
    }


#: Plan-time refusals: a non-aggregate, a column not declared, an unbounded sum's expression on
#: a string, ε above the grant (409 without a charge).
REFUSED = (
    NeighbourQuery("SELECT age FROM people", 1.0),
    NeighbourQuery("SELECT SUM(salary) AS s FROM people", 1.0),
    NeighbourQuery("SELECT SUM(region) AS s FROM people", 1.0),
    NeighbourQuery("SELECT COUNT(*) AS n FROM people", 2e6),
)


def test_releases_and_refusals_through_the_service(
    served: SparkServedTable, on_duckdb: ServedTable
) -> None:
    # refusals first, while both ledgers are fresh: the same status, problem body and budget
    for query in REFUSED:
        on_spark = served.observe(query)
        assert on_spark.outcome.startswith("HTTP 4"), on_spark
        assert on_spark == on_duckdb.observe(query), query.sql
    # releases near the exact values: Laplace noise of scale Δ/ε with ε = 100 (Δ = 1 for the
    # counts, 90 for the sum of age) exceeds the tolerance with probability below e^-40
    frame = demo_frame()
    counted = _release(served.analyst, "SELECT COUNT(*) AS n FROM people", 100)
    assert abs(counted[""]["n"] - len(frame)) < 1
    summed = _release(served.analyst, "SELECT SUM(age) AS s FROM people", 100)
    assert abs(summed[""]["s"] - frame["age"].sum()) < 40 * 90 / 100
    grouped = _release(
        served.analyst, "SELECT region, COUNT(*) AS n FROM people GROUP BY region", 100
    )
    exact = frame.groupby("region").size()
    assert sorted(grouped) == sorted(exact.index)
    for region, count in exact.items():
        assert abs(grouped[str(region)]["n"] - count) < 1
    # the refusals cost nothing, each release its ε
    budget = served.analyst.get(f"/v1/datasets/{DATASET}/budget").json()
    assert budget["spent"]["epsilon_exact"] == "300"


def test_registration_refusals_show_nothing_of_the_engine(served: SparkServedTable) -> None:
    metadata = {"table": "people", "columns": {"nope": {"type": "int"}}}
    outside = {"path": "/etc/passwd.csv"}
    unreadable = {"path": str(served.root / "people.csv")}  # declares a column it lacks
    answers = [
        served.owner.post(
            "/v1/datasets",
            json={"id": f"d{i}", "source": source, "metadata": metadata, "cap_epsilon": 1},
        )
        for i, source in enumerate([outside, unreadable])
    ]
    assert [a.status_code for a in answers] == [422, 422]
    assert answers[0].json()["detail"] == OUTSIDE_ROOTS
    detail = answers[1].json()["detail"]
    assert "cannot be read as the metadata declares table 'people'" in detail
    assert "Spark" not in detail
    assert "Exception" not in detail


@pytest.fixture(scope="module")
def neighbours_served(
    spark_cluster: SparkCluster,
) -> Iterator[dict[Neighbour | None, SparkServedTable]]:
    """D and each of SERVED_NEIGHBOURS, each served by its own Spark Connect server process
    (started side by side: each start is mostly waiting for its process and the cluster)."""
    tables: dict[Neighbour | None, pd.DataFrame] = {None: demo_frame()}
    tables.update({n: n.frame() for n in SERVED_NEIGHBOURS})
    opened = {
        key: SparkServedTable(frame, spark_cluster, "connect") for key, frame in tables.items()
    }
    try:
        with ThreadPoolExecutor(len(opened)) as pool:
            for started in [pool.submit(table.__enter__) for table in opened.values()]:
                started.result()
        yield opened
    finally:
        for table in opened.values():  # also a table whose start failed: its server is ended
            table.__exit__(None, None, None)


@pytest.mark.parametrize("finding", sorted(FINDINGS))
def test_neighbours_observe_the_same_over_http_on_spark(
    neighbours_served: dict[Neighbour | None, SparkServedTable], finding: str
) -> None:
    query = FINDINGS[finding]
    with ThreadPoolExecutor(len(neighbours_served)) as pool:  # each table its own server
        observed = pool.map(lambda table: table.observe(query), neighbours_served.values())
        seen = dict(zip(neighbours_served, observed, strict=True))
    for neighbour in SERVED_NEIGHBOURS:
        found = differences(seen[None], seen[neighbour])
        assert not found, failure_report(query, f"{neighbour}, over HTTP on Spark", found)
