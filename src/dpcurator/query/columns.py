"""One public column of a private table: its declared type, bounds, key set and NULL fill.

A :class:`ColumnMeta` is a public fact the data owner declares (or a DP estimate that spent
budget), never read from the data; it checks its own consistency (bounds given together and
ordered, keys distinct and of the column's type, the fill within the bounds). The table's
metadata (:class:`~dpcurator.query.schema.Metadata`) holds one per column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, cast

from dpcurator._validation import check_real, fail
from dpcurator.query.ir import ScalarValue

ColumnType = Literal["int", "float", "string", "bool"]

_TYPES: dict[str, ColumnType] = {
    "int": "int",
    "integer": "int",
    "float": "float",
    "double": "float",
    "real": "float",
    "string": "string",
    "str": "string",
    "text": "string",
    "bool": "bool",
    "boolean": "bool",
}


@dataclass(frozen=True)
class ColumnMeta:
    """One public column description.

    Attributes:
        name: the column name in the private table.
        type: ``"int"``, ``"float"``, ``"string"`` or ``"bool"``.
        lower, upper: public bounds of a numeric column (values are clamped to them).
        keys: the public set of values of a categorical column (used for GROUP BY without
            partition selection; bool columns have the implicit keys ``(False, True)``).
        nullable: whether the column may hold NULL/NaN.
        fill: the public value that replaces NULL/NaN in aggregates (must lie within the bounds).
        point_masses: public values of a bounded numeric column that many rows hold exactly
            (e.g. ``[0]`` for an income that is mostly 0): synthetic data gives each its own bin
            and decodes that bin to exactly the value (:mod:`dpcurator.synth.domain`).
    """

    name: str
    type: ColumnType
    lower: float | None = None
    upper: float | None = None
    keys: tuple[ScalarValue, ...] | None = None
    nullable: bool = False
    fill: ScalarValue = None
    point_masses: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        owner = f"column {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise fail("ColumnMeta", "name", "a non-empty string", self.name)
        if self.type not in ("int", "float", "string", "bool"):
            raise fail(owner, "type", "one of int, float, string, bool", self.type)
        if (self.lower is None) != (self.upper is None):
            raise fail(owner, "lower/upper", "given together", (self.lower, self.upper))
        if self.lower is not None and self.upper is not None:
            if not self.is_numeric:
                raise fail(owner, "lower", "absent for a non-numeric column", self.lower)
            lower = check_real(owner, "lower", self.lower)
            upper = check_real(owner, "upper", self.upper)
            if not lower < upper:
                raise fail(owner, "upper", f"> lower ({self.lower})", self.upper)
        self._check_keys(owner)
        self._check_fill(owner)
        self._check_point_masses(owner)

    def _check_point_masses(self, owner: str) -> None:
        if self.point_masses is None:
            return
        if not self.is_numeric or self.lower is None or self.upper is None:
            raise fail(
                owner,
                "point_masses",
                "declared only for a numeric column with public 'lower'/'upper' bounds",
                list(self.point_masses),
            )
        if len(set(self.point_masses)) != len(self.point_masses):
            raise fail(owner, "point_masses", "a list of distinct values", list(self.point_masses))
        for value in self.point_masses:
            if not _matches_type(value, self.type) or isinstance(value, bool):
                raise fail(owner, "point_masses", f"values of type {self.type}", value)
            if not self.lower <= value <= self.upper:
                raise fail(owner, "point_masses", f"within [{self.lower}, {self.upper}]", value)

    def _check_keys(self, owner: str) -> None:
        if self.keys is None:
            return
        if len(self.keys) == 0 or len(set(self.keys)) != len(self.keys):
            raise fail(owner, "keys", "a non-empty list of distinct values", self.keys)
        for key in self.keys:
            if not _matches_type(key, self.type):
                raise fail(owner, "keys", f"values of type {self.type} (int: within int64)", key)

    def _check_fill(self, owner: str) -> None:
        if self.fill is not None:
            if not _matches_type(self.fill, self.type):
                raise fail(owner, "fill", f"a value of type {self.type}", self.fill)
            if self.lower is not None and not (
                self.lower <= cast(float, self.fill) <= cast(float, self.upper)
            ):
                raise fail(owner, "fill", f"within [{self.lower}, {self.upper}]", self.fill)

    @property
    def is_numeric(self) -> bool:
        """Whether the column holds numbers (int or float)."""
        return self.type in ("int", "float")

    @property
    def public_keys(self) -> tuple[ScalarValue, ...] | None:
        """The declared key set, or ``(False, True)`` for bool columns, or None."""
        if self.keys is None and self.type == "bool":
            return (False, True)
        return self.keys


def _matches_type(value: object, column_type: ColumnType) -> bool:
    if column_type == "bool":
        return isinstance(value, bool)
    if column_type == "string":
        return isinstance(value, str)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if column_type == "int":  # a value every engine can hold in int64
        integral = isinstance(value, int) or (math.isfinite(value) and value.is_integer())
        return integral and -(2**63) <= value < 2**63
    return math.isfinite(value)


def parse_column_type(owner: str, value: object) -> ColumnType:
    """The column type a metadata document names (``integer``, ``double``, ``text``, ``boolean``
    and the other aliases of :data:`_TYPES` included)."""
    if not isinstance(value, str) or value.lower() not in _TYPES:
        raise fail(owner, "type", "one of int, float, string, bool", value)
    return _TYPES[value.lower()]
