"""The privacy unit's sensitivities against brute force on small cases (issue 29)."""

from __future__ import annotations

import itertools

import pytest

import dpcurator as dpc
from dpcurator.query.privacy_unit import PrivacyUnit


def _partitions(n: int, prefix: tuple[int, ...] = ()) -> list[tuple[int, ...]]:
    """Every partition of n cells, once each (restricted growth strings)."""
    if len(prefix) == n:
        return [prefix]
    top = max(prefix, default=-1) + 1
    return [p for part in range(top + 1) for p in _partitions(n, (*prefix, part))]


def _squared_after_merge(cells: tuple[int, ...], parts: list[int], rows: int) -> int:
    """Σ over merged cells of (rows · original cells of the person in it)²."""
    merged: dict[int, int] = {}
    for cell in cells:
        merged[parts[cell]] = merged.get(parts[cell], 0) + rows
    return sum(v * v for v in merged.values())


@pytest.mark.parametrize("relation", ["add_remove", "replace_one"])
@pytest.mark.parametrize(("rows", "groups"), [(1, 1), (1, 3), (2, 2), (3, 4)])
def test_merged_l2_bounds_every_merge_and_person(relation: str, rows: int, groups: int) -> None:
    """Every partition of 6 cells whose largest part has m cells, every person (at most g cells
    with r rows each, twice under replace-one): the squared L2 change is within the bound, and
    the bound is reached by some partition with that largest part."""
    unit = PrivacyUnit(relation, None, rows, groups)  # type: ignore[arg-type]
    cells = 6
    reached: dict[int, int] = {}
    for parts in _partitions(cells):
        largest = max(parts.count(p) for p in set(parts))
        bound = unit.merged_count_l2_squared(cells, largest)
        for size in range(1, groups + 1):
            for chosen in itertools.combinations(range(cells), size):
                one = _squared_after_merge(chosen, list(parts), rows)
                # replace-one: P's vector c and P''s c' are non-negative, ‖c' − c‖² <= ‖c‖² + ‖c'‖²
                worst = unit.sides * one
                assert worst <= bound
                reached[largest] = max(reached.get(largest, 0), worst)
    for largest, worst in reached.items():
        assert worst == unit.merged_count_l2_squared(cells, largest)


def test_merge_of_one_cell_each_is_the_plain_l2() -> None:
    unit = PrivacyUnit("replace_one", "pid", 2, 3)
    assert unit.merged_count_l2_squared(10, 1) == unit.count_l2_squared(10) == 2 * 3 * 4
    assert unit.count_l1(2) == 2 * 2 * 2  # sides · r · min(g, cells)


@pytest.mark.parametrize(("low", "high"), [(0, 5), (-3, 4), (2, 7), (-6, -1)])
def test_ungrouped_replace_one_sum_by_brute_force(low: int, high: int) -> None:
    """Replacing r = 2 rows by 2 others (each a value in [low, high], or absent): the sum moves by
    at most sum_l1, and by exactly that much for some pair."""
    unit = PrivacyUnit("replace_one", None, 2, 1, public_size=10)
    values = [*range(low, high + 1), 0]  # 0: an absent row (or one outside the WHERE)
    largest = max(
        abs(sum(new) - sum(old))
        for old in itertools.product(values, repeat=2)
        for new in itertools.product(values, repeat=2)
    )
    assert largest == unit.sum_l1(low, high, grouped=False)


def test_estimator_steps_count_the_units_an_estimator_sees() -> None:
    assert PrivacyUnit(rows=4).estimator_steps(keyed_by_person=True) == 4  # rows, no ids
    assert PrivacyUnit("replace_one", None, 4, 1, 9).estimator_steps(keyed_by_person=True) == 8
    assert PrivacyUnit(person_column="pid", rows=4).estimator_steps(keyed_by_person=True) == 1
    person = PrivacyUnit("replace_one", "pid", 4, 2, 9)
    assert person.estimator_steps(keyed_by_person=True) == 2
    assert person.estimator_steps(keyed_by_person=False) == 8
    assert person.rows_changed == 8


def test_metadata_builds_its_unit() -> None:
    meta = dpc.Metadata.from_dict(
        {
            "table": "t",
            "columns": {"PID": {"type": "int"}, "x": {"type": "float"}},
            "person_column": "pid",
            "max_rows_per_person": 3,
            "max_groups_per_person": 2,
            "neighbouring": "replace_one",
            "public_size": 50,
        }
    )
    assert meta.unit == PrivacyUnit("replace_one", "PID", 3, 2, 50)
