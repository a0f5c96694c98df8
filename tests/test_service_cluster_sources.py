"""What an owner may register on a server using the Spark engine (no cluster needed: the rules
are checked before Spark is asked anything), and the ``serve`` options that configure it."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpcurator.cli.main import main
from dpcurator.errors import ParameterError
from dpcurator.service.cluster import (
    NO_SOURCE,
    OUTSIDE_ROOTS,
    TABLE_REFUSED,
    SparkSettings,
    cluster_source,
)
from dpcurator.service.curator import Catalog

METADATA = {"table": "t", "columns": {"x": {"type": "int", "lower": 0, "upper": 10}}}
ROOT = "s3a://bucket/datasets"
SETTINGS = SparkSettings("spark://head:7077", roots=(ROOT,), databases=("analytics",))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A local data root with a Parquet directory and a CSV file, and an outside file."""
    inside = tmp_path / "root"
    (inside / "people.parquet").mkdir(parents=True)
    (inside / "t.csv").write_text("x\n1\n")
    (tmp_path / "secret.csv").write_text("x\n1\n")
    (inside / "escape.csv").symlink_to(tmp_path / "secret.csv")
    return inside


def test_paths_and_tables_inside_the_roots_are_accepted(root: Path) -> None:
    accepted = [
        {"path": f"{ROOT}/people.parquet"},
        {"path": f"{ROOT}/2026/people.csv"},
        {"path": str(root / "people.parquet")},  # a directory, as Spark writes Parquet
        {"path": str(root / "t.csv")},
        {"table": "analytics.people"},
    ]
    for source in accepted:
        assert cluster_source(source, SETTINGS, root) == source


def test_every_refused_path_reads_the_same(root: Path) -> None:
    """Outside the roots, escaping by '..', a neighbouring prefix, a query, a wrong suffix, a
    missing local file, a symbolic link out of the data root: one text (no oracle)."""
    refused = [
        "s3a://bucket/other/people.parquet",
        f"{ROOT}/../other/people.parquet",
        f"{ROOT}/./people.parquet",
        f"{ROOT}//people.parquet",
        f"{ROOT}-evil/people.parquet",
        f"{ROOT}/people.parquet?x=1",
        f"{ROOT}/people.parquet#x",
        f"{ROOT}/people.json",
        f"{ROOT}/people.duckdb",
        "hdfs://bucket/datasets/people.parquet",
        str(root / "missing.csv"),
        str(root / "escape.csv"),
        str(root.parent / "secret.csv"),
        "",
        7,
    ]
    messages = set()
    for path in refused:
        with pytest.raises(ParameterError) as caught:
            cluster_source({"path": path}, SETTINGS, root)
        messages.add(str(caught.value))
    assert messages == {OUTSIDE_ROOTS}


@pytest.mark.parametrize(
    "table", ["other.people", "people", "analytics.people.x", "analytics.`p`", "analytics.p q", 3]
)
def test_tables_outside_the_allowed_databases_are_refused(table: object) -> None:
    with pytest.raises(ParameterError) as caught:
        cluster_source({"table": table}, SETTINGS, None)
    assert str(caught.value) == TABLE_REFUSED


def test_nothing_is_registered_without_a_root(root: Path) -> None:
    with pytest.raises(ParameterError) as caught:
        cluster_source({"path": f"{ROOT}/people.parquet"}, SparkSettings("local[1]"), None)
    assert str(caught.value) == NO_SOURCE
    with pytest.raises(ParameterError, match="'source' parameter must be"):
        cluster_source({"path": str(root / "t.csv"), "table": "t"}, SETTINGS, root)


def test_the_catalog_refuses_before_opening_anything(root: Path) -> None:
    """A refused source never reaches Spark (the catalog has no session to start here)."""
    catalog = Catalog(data_root=root, spark=SETTINGS)
    assert catalog.engine == "spark"
    with pytest.raises(ParameterError) as caught:
        catalog.check({"path": "s3a://bucket/other/x.parquet"}, METADATA)
    assert str(caught.value) == OUTSIDE_ROOTS


def test_settings_travel_to_workers_as_json() -> None:
    settings = SparkSettings("sc://h:15002", (("spark.a", "1"),), (ROOT,), ("analytics",))
    assert SparkSettings.from_dict(settings.to_dict()) == settings


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--spark-master", "local[1]"], "--spark-master needs --engine spark"),
        (["--engine", "spark"], "--engine spark needs --spark-master"),
        (
            ["--engine", "spark", "--spark-master", "local[1]", "--data-table", "a.b"],
            "--data (or --data-table) and --metadata go together",
        ),
    ],
)
def test_serve_checks_its_spark_options(
    argv: list[str],
    expected: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("serve started despite bad options")

    monkeypatch.setattr("dpcurator.service.server.serve", never)
    ledger = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    assert main(["serve", "--port", "1", "--ledger", ledger, *argv]) == 1
    assert expected in capsys.readouterr().err


def test_serve_refuses_a_malformed_master_url(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--engine", "spark", "--spark-master", "head:7077"])
    assert exited.value.code == 2
    assert "spark://HOST:PORT" in capsys.readouterr().err
