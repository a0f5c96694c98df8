"""The owner's metadata check (NOT differentially private): exact shares of values outside the
declared bounds and keys, missing where not nullable, not of the declared type, and rows over
the per-person limit; and the ``dpcurator check-metadata`` command that prints them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from dpcurator.cli import main
from dpcurator.errors import DomainError
from dpcurator.query.metadata_check import NOT_DP_NOTICE, check_metadata
from dpcurator.query.schema import Metadata

META = Metadata.from_dict(
    {
        "table": "t",
        "person_column": "pid",
        "max_rows_per_person": 2,
        "columns": {
            "pid": {"type": "int"},
            "age": {"type": "int", "lower": 0, "upper": 10},
            "income": {"type": "float", "lower": 0, "upper": 100, "nullable": True, "fill": 0},
            "sex": {"type": "string", "keys": ["F", "M"]},
            "code": {"type": "int"},
        },
    }
)
INF = float("inf")
FRAME = pa.table(
    {
        "pid": pa.array([1, 1, 1, 2, 3, None, 4, 4], pa.int64()),
        "age": pa.array([5, -1, 11, 12, None, 0, 10, 3], pa.int64()),
        "income": pa.array([float("nan"), INF, -INF, 50.0, 100.5, None, 0.0, 1.0]),
        "sex": ["F", "M", "X", None, "f", "F", "M", "M"],
        "code": ["1", "2", "1.5", "x", "007", None, "-3", "4"],
        "extra": list(range(8)),
    }
)


def test_exact_counts_and_shares_per_column() -> None:
    report = check_metadata(FRAME, META)
    assert report.rows == 8
    age = report.column("age")
    assert (age.missing, age.below, age.above, age.not_key) == (1, 1, 2, None)
    assert age.share(age.above) == 2 / 8
    assert age.outside_bounds == 3
    income = report.column("income")  # NaN is missing; ±inf are outside the bounds
    assert (income.missing, income.below, income.above) == (2, 1, 2)
    sex = report.column("sex")  # keys compare exactly: "f" is not "F"
    assert (sex.missing, sex.not_key, sex.below) == (1, 2, None)
    code = report.column("code")  # text with no exact int value
    assert code.unconvertible == 2
    assert (report.rows_over_limit, report.persons_over_limit) == (2, 1)  # pid 1's third, NULL


def test_problems_name_only_what_the_metadata_changes() -> None:
    report = check_metadata(FRAME, META)
    assert report.column("income").problems() == ["12.50% below lower", "25.00% above upper"]
    assert "12.50% missing but not nullable" in report.column("age").problems()
    assert report.column("pid").problems() == ["12.50% missing but not nullable"]
    table = report.to_pandas().set_index("column")
    assert table.loc["sex", "outside_keys"] == 0.25
    assert table.loc["code", "unconvertible"] == 0.25


def test_clean_data_reports_nothing() -> None:
    meta = Metadata.from_dict(
        {"table": "t", "columns": {"x": {"type": "float", "lower": 0, "upper": 1}}}
    )
    report = check_metadata({"x": [0.0, 0.5, 1.0]}, meta)
    assert report.column("x").problems() == []
    assert report.rows_over_limit is None
    assert report.format().endswith("silently changed: nothing")


def test_a_declared_column_missing_from_the_data_is_named() -> None:
    meta = Metadata.from_dict({"table": "t", "columns": {"y": {"type": "int"}}})
    with pytest.raises(DomainError, match="'y'"):
        check_metadata({"x": [1]}, meta)


def _check_metadata_cli(tmp_path: Path, data: str, metadata: str) -> int:
    """Run ``dpcurator check-metadata`` on a CSV and a metadata YAML written from the texts."""
    data_path = tmp_path / "t.csv"
    data_path.write_text(data, encoding="utf-8")
    metadata_path = tmp_path / "t.yaml"
    metadata_path.write_text(metadata, encoding="utf-8")
    return main(["check-metadata", "--data", str(data_path), "--metadata", str(metadata_path)])


def test_cli_prints_the_table_with_the_not_dp_notice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = _check_metadata_cli(
        tmp_path,
        "pid,age,sex\n1,5,F\n1,50,M\n2,7,X\n3,,F\n",
        "table: t\nperson_column: pid\ncolumns:\n  pid: {type: int}\n"
        "  age: {type: int, lower: 0, upper: 10}\n  sex: {type: string, keys: [F, M]}\n",
    )
    out = capsys.readouterr().out
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == NOT_DP_NOTICE
    assert lines[2].split() == [
        "column", "type", "missing", "nullable", "below", "above", "not", "key", "bad", "type"
    ]  # fmt: skip
    assert lines[4].split() == ["age", "int", "25.00%", "no", "0.00%", "25.00%", "-", "0.00%"]
    assert lines[5].split() == ["sex", "string", "0.00%", "no", "-", "-", "25.00%", "0.00%"]
    assert "drops 1 rows (25.00%)" in out


def test_cli_reports_a_bad_metadata_file_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = _check_metadata_cli(tmp_path, "x\n1\n", "table: [unclosed\n")
    assert status == 1
    assert capsys.readouterr().err.startswith("error: ")
