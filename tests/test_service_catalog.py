"""Registration opens the data with its declared types: the owner, not an analyst, meets errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpcurator.errors import DomainError
from dpcurator.service.curator import Catalog

METADATA = {
    "table": "t",
    "columns": {"x": {"type": "int", "lower": 0, "upper": 10}, "g": {"type": "string"}},
}


def test_registration_refuses_data_that_contradicts_the_metadata(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("x,g\n1,a\nseven,b\n")  # 'seven' cannot be the declared int
    with pytest.raises(DomainError, match="'x'"):
        Catalog().check({"path": str(path)}, METADATA)


def test_registration_accepts_consistent_data(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("x,g\n1,a\n7,b\n")
    metadata, backend = Catalog().check({"path": str(path)}, METADATA)
    assert metadata["table"] == "t"
    assert backend.columns("t") == {"x": "BIGINT", "g": "VARCHAR"}
    backend.close()
