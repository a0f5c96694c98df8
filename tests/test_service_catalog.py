"""Registration opens the data with its declared types: the owner, not an analyst, meets errors."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpcurator.accounting.budget import Budget
from dpcurator.accounting.filter import PrivacyFilter
from dpcurator.errors import BackendError, DomainError
from dpcurator.query import caches as caches_module
from dpcurator.query.backends import DuckDBBackend
from dpcurator.query.schema import Metadata
from dpcurator.service.curator import Catalog, DatasetRuntime

METADATA = {
    "table": "t",
    "columns": {"x": {"type": "int", "lower": 0, "upper": 10}, "g": {"type": "string"}},
}


def test_registration_refuses_data_that_contradicts_the_metadata(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("x,g\n1,a\nseven,b\n")  # 'seven' cannot be the declared int
    with pytest.raises(DomainError, match="'x'"):
        Catalog(data_root=tmp_path).check({"path": str(path)}, METADATA)


def test_registration_accepts_consistent_data(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("x,g\n1,a\n7,b\n")
    metadata, backend = Catalog(data_root=tmp_path).check({"path": str(path)}, METADATA)
    assert metadata["table"] == "t"
    assert backend.columns("t") == {"x": "BIGINT", "g": "VARCHAR"}
    backend.close()


def _answer(runtime: DatasetRuntime, sql: str) -> None:
    runtime.run(sql, Fraction(1), Fraction(0), PrivacyFilter(Budget(100)))


def test_a_loaded_copy_keeps_exact_results_even_without_the_result_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dataset loaded into a private DuckDB copy (which nothing writes) gets a result cache:
    asked again, a plan is answered without the engine (still answered once the copy is
    dropped), while a new plan reads it (and then fails). A Parquet file read in place
    (precompute off) may change: it gets none. Results over MAX_CACHED_GROUPS groups are not
    kept."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": [1, 7, 3], "g": ["a", "b", "a"]}), path)
    metadata = Metadata.from_dict(METADATA)
    catalog = Catalog(result_cache=False)
    loaded = catalog._runtime(metadata, catalog._open({"path": str(path)}, metadata))
    assert loaded.results is not None
    try:
        _answer(loaded, "SELECT COUNT(*) AS n FROM t WHERE x > 2")
        assert isinstance(loaded.backend, DuckDBBackend)
        loaded.backend._connection.execute('DROP TABLE "t"')
        _answer(loaded, "SELECT COUNT(*) AS n FROM t WHERE x > 2")
        with pytest.raises(BackendError):
            _answer(loaded, "SELECT COUNT(*) AS n FROM t WHERE x > 3")
    finally:
        loaded.backend.close()
    in_place = Catalog(precompute=False)
    viewed = in_place._runtime(metadata, in_place._open({"path": str(path)}, metadata))
    assert viewed.results is None
    viewed.backend.close()
    monkeypatch.setattr(caches_module, "MAX_CACHED_GROUPS", 0)
    again = catalog._runtime(metadata, catalog._open({"path": str(path)}, metadata))
    try:
        _answer(again, "SELECT COUNT(*) AS n FROM t WHERE x > 2")
        assert again.results is not None
        assert len(again.results) == 0
    finally:
        again.backend.close()
