"""Public metadata: native and SmartNoise formats, validation, public updates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpcurator.errors import DomainError, ParameterError
from dpcurator.query.columns import ColumnMeta
from dpcurator.query.ir import ContributionBound
from dpcurator.query.schema import Metadata

SMARTNOISE_FILES = ("PUMS.yaml", "PUMS_pid.yaml", "PUMS_dup.yaml", "PUMS_large.yaml")


@pytest.fixture
def smartnoise(shared_data: Path) -> Path:
    return shared_data / "pums_smartnoise"


NATIVE = {
    "table": "people",
    "person_column": "pid",
    "max_rows_per_person": 2,
    "max_groups_per_person": 3,
    "columns": {
        "pid": {"type": "int"},
        "age": {"type": "int", "lower": 0, "upper": 100},
        "sex": {"type": "string", "keys": ["F", "M"]},
        "income": {"type": "float", "lower": 0, "upper": 1e5, "nullable": True, "fill": 0},
        "employed": {"type": "bool"},
    },
}


def test_all_smartnoise_files_are_listed(smartnoise: Path) -> None:
    assert sorted(p.name for p in smartnoise.glob("*.yaml")) == sorted(SMARTNOISE_FILES)


@pytest.mark.parametrize("name", SMARTNOISE_FILES)
def test_every_smartnoise_file_loads(smartnoise: Path, name: str) -> None:
    meta = Metadata.from_yaml(smartnoise / name)
    assert meta.columns
    assert meta.schema == "PUMS"


def test_smartnoise_row_privacy(smartnoise: Path) -> None:
    meta = Metadata.from_yaml(smartnoise / "PUMS.yaml")
    assert meta.table == "PUMS"
    assert meta.person_column is None
    assert meta.contribution_bound == ContributionBound(None, 1, 1)
    age = meta.column("age")
    assert (age.type, age.lower, age.upper) == ("int", 0, 100)
    assert meta.column("sex").type == "string"
    assert meta.column("income").nullable  # SmartNoise default


def test_smartnoise_pid_and_dup(smartnoise: Path) -> None:
    for name in ("PUMS_pid.yaml", "PUMS_dup.yaml"):
        meta = Metadata.from_yaml(smartnoise / name)
        assert meta.person_column == "pid"
        assert meta.contribution_bound == ContributionBound("pid", 1, 1)


def test_smartnoise_private_id_and_max_ids() -> None:
    meta = Metadata.from_dict(
        {
            "": {
                "S": {
                    "T": {
                        "max_ids": 3,
                        "pid": {"type": "int", "private_id": True},
                        "x": {
                            "type": "float",
                            "lower": 0,
                            "upper": 1,
                            "nullable": False,
                            "missing_value": 0.5,
                        },
                    }
                }
            }
        }
    )
    assert meta.person_column == "pid"
    assert (meta.max_rows_per_person, meta.max_groups_per_person) == (3, 3)
    assert meta.column("x").fill == 0.5
    assert not meta.column("x").nullable
    assert meta.has_table(("S", "T"))
    assert meta.has_table(("t",))
    assert not meta.has_table(("other", "T"))


def test_smartnoise_large_bool_columns(smartnoise: Path) -> None:
    meta = Metadata.from_yaml(smartnoise / "PUMS_large.yaml")
    assert meta.person_column == "PersonID"
    assert meta.column("married").type == "bool"
    assert meta.column("married").public_keys == (False, True)


def test_native_roundtrip_and_json(tmp_path: Path) -> None:
    meta = Metadata.from_dict(NATIVE)
    assert meta.contribution_bound == ContributionBound("pid", 3, 2)
    assert Metadata.from_dict(meta.to_dict()) == meta
    path = tmp_path / "m.json"
    path.write_text(json.dumps(NATIVE))
    assert Metadata.from_json(path) == meta


def test_column_lookup_is_case_insensitive_and_unknown_names_fail() -> None:
    meta = Metadata.from_dict(NATIVE)
    assert meta.column("AGE").name == "age"
    with pytest.raises(DomainError, match="Unknown column 'zzz'"):
        meta.column("zzz")


def test_with_bounds_and_keys_return_new_metadata() -> None:
    meta = Metadata.from_dict(NATIVE)
    updated = meta.with_bounds("income", 10.0, 20.0).with_keys("age", (1, 2))
    assert updated.column("income").lower == 10.0
    assert updated.column("income").fill == 10.0  # fill moved inside the new bounds
    assert updated.column("age").keys == (1, 2)
    assert meta.column("income").lower == 0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"type": "decimal"}, "'type'"),
        ({"type": "int", "lower": 5, "upper": 1}, "'upper'"),
        ({"type": "int", "lower": 5}, "lower/upper"),
        ({"type": "string", "lower": 0, "upper": 1}, "'lower'"),
        ({"type": "int", "keys": ["a"]}, "'keys'"),
        ({"type": "int", "keys": [1, 1]}, "'keys'"),
        ({"type": "int", "lower": 0, "upper": 1, "fill": 5}, "'fill'"),
        ({"type": "int", "colour": "red"}, "unknown field 'colour'"),
    ],
)
def test_invalid_columns_are_refused(spec: dict[str, object], message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        Metadata.from_dict({"table": "t", "columns": {"c": spec}})


def test_invalid_tables_are_refused() -> None:
    with pytest.raises(ParameterError, match="person_column"):
        Metadata("t", (ColumnMeta("a", "int"),), person_column="pid")
    with pytest.raises(ParameterError, match="max_rows_per_person"):
        Metadata("t", (ColumnMeta("a", "int"),), max_rows_per_person=0)
    with pytest.raises(ParameterError, match="uniquely named"):
        Metadata("t", (ColumnMeta("a", "int"), ColumnMeta("A", "int")))
    two_tables = {"": {"S": {"A": {"x": {"type": "int"}}, "B": {"x": {"type": "int"}}}}}
    with pytest.raises(ParameterError, match="'table'"):
        Metadata.from_dict(two_tables)
    assert Metadata.from_dict(two_tables, table="S.B").table == "B"
    with pytest.raises(ParameterError, match="SmartNoise"):
        Metadata.from_dict({"a": 1})


def test_int_keys_and_fills_must_fit_int64() -> None:
    ColumnMeta("n", "int", keys=(-(2**63), 2**63 - 1))
    with pytest.raises(ParameterError, match="int64"):
        ColumnMeta("n", "int", keys=(0, 2**63))
    with pytest.raises(ParameterError, match="'fill'"):
        ColumnMeta("n", "int", fill=-(2**63) - 1)
