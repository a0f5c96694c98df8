"""Public metadata of a private table: what the curator declares, never what the data says.

Everything the planner needs to bound sensitivity comes from here: column types, bounds of numeric
columns, public key sets of categorical columns, a public fill value for NULL/NaN, and the privacy
unit (a person-id column, or row-level privacy) with the maximum contribution of one person.
Nothing in this module reads data: bounds and keys are public facts supplied by the data owner, or
DP estimates that spent budget (:meth:`dpcurator.query.session.Session.dp_bounds`). Each column's
declaration is a :class:`~dpcurator.query.columns.ColumnMeta`; this module holds the table's.

Two file formats are read:

* the native format (YAML, JSON or a dict)::

      table: pums
      person_column: pid          # omit (or null) for row-level privacy
      max_rows_per_person: 2      # per group
      max_groups_per_person: 1
      neighbouring: replace_one   # or add_remove (the default)
      public_size: 1000           # replace_one: the public number of rows (persons)
      public_tables:              # public lookup tables for JOIN (dpcurator.query.public_tables)
        regions: {path: regions.csv, keys: [zip]}
      columns:
        age: {type: int, lower: 0, upper: 100}
        sex: {type: string, keys: [F, M]}
        income: {type: float, lower: 0, upper: 500000, nullable: true, fill: 0}

* SmartNoise SQL metadata, as is (``collection -> schema -> table -> columns``): ``row_privacy``,
  ``max_ids`` (mapped to at most ``max_ids`` rows per group and ``max_ids`` groups per person),
  ``private_id``, ``lower``/``upper``, ``nullable`` and ``missing_value`` (the public fill value).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, cast

import yaml

from dpcurator._validation import check_int, fail, unknown_fields
from dpcurator.errors import DomainError, ParameterError
from dpcurator.query.columns import ColumnMeta, ColumnType, parse_column_type
from dpcurator.query.ir import ContributionBound, ScalarValue
from dpcurator.query.privacy_unit import PrivacyUnit
from dpcurator.query.public_tables import PublicTable, public_tables

Neighbouring = Literal["add_remove", "replace_one"]

#: SmartNoise table options that concern performance or utility, not privacy; accepted and unused.
_SMARTNOISE_TABLE_OPTIONS = frozenset(
    {
        "rows",
        "clamp_counts",
        "clamp_columns",
        "censor_dims",
        "use_dpsu",
        "sample_max_ids",
        "tau",
    }
)


@dataclass(frozen=True)
class Metadata:
    """Public metadata of one private table.

    Attributes:
        table: the table name used in queries (``FROM table``).
        columns: the column descriptions.
        person_column: the column identifying the privacy unit (user-level privacy), or None for
            row-level privacy (each row is a person, unless ``max_rows_per_person`` > 1 declares
            that a person may own several rows without an id: then no bounding is applied and
            sensitivities are scaled by the declared limits, i.e. group privacy).
        max_rows_per_person: rows one person may contribute to one group (enforced by
            contribution bounding when ``person_column`` is set).
        max_groups_per_person: groups one person may contribute to.
        schema: an optional qualifier accepted in ``FROM schema.table`` (SmartNoise style).
        neighbouring: the neighbouring relation the guarantee is stated for:
            ``"add_remove"`` (unbounded DP: add or remove one person, the default) or
            ``"replace_one"`` (bounded DP: replace one person's rows by others; the table's
            size is public). Under replace-one a whole-table count is the public
            ``public_size`` (free, exact), an ungrouped mean divides a noisy sum by it, and
            every other sensitivity is that of removing one person plus adding one
            (:mod:`dpcurator.query.plan.planner`).
        public_size: replace-one only: the public number of rows (row-level tables) or of
            persons (with ``person_column``). Never checked against the data by a query (it is
            public; ``dpcurator metadata-check`` compares it with the data for the owner).
        public_tables: public lookup tables analysts may JOIN (:mod:`.public_tables`).
    """

    table: str
    columns: tuple[ColumnMeta, ...]
    person_column: str | None = None
    max_rows_per_person: int = 1
    max_groups_per_person: int = 1
    schema: str | None = None
    neighbouring: Neighbouring = "add_remove"
    public_size: int | None = None
    public_tables: tuple[PublicTable, ...] = ()

    def __post_init__(self) -> None:
        self._check_neighbouring()
        if not isinstance(self.table, str) or not self.table:
            raise fail("Metadata", "table", "a non-empty string", self.table)
        if not self.columns:
            raise fail("Metadata", "columns", "a non-empty collection", self.columns)
        names = [c.name.lower() for c in self.columns]
        if len(set(names)) != len(names):
            raise fail("Metadata", "columns", "uniquely named (case-insensitive)", names)
        check_int("Metadata", "max_rows_per_person", self.max_rows_per_person, minimum=1)
        check_int("Metadata", "max_groups_per_person", self.max_groups_per_person, minimum=1)
        if self.person_column is not None and self.person_column.lower() not in names:
            raise fail(
                "Metadata", "person_column", f"one of the columns {names}", self.person_column
            )

    def _check_neighbouring(self) -> None:
        if self.neighbouring not in ("add_remove", "replace_one"):
            raise fail("Metadata", "neighbouring", "add_remove or replace_one", self.neighbouring)
        if self.neighbouring == "replace_one":
            check_int("Metadata", "public_size", self.public_size, minimum=1)
        elif self.public_size is not None:
            raise fail(
                "Metadata",
                "public_size",
                "absent unless neighbouring is replace_one",
                self.public_size,
            )
        names = [t.name.lower() for t in self.public_tables]
        if len(set(names)) != len(names) or self.table.lower() in names:
            raise fail(
                "Metadata",
                "public_tables",
                f"distinct names other than the private table {self.table!r}",
                names,
            )

    @property
    def unit(self) -> PrivacyUnit:
        """The privacy unit of the guarantee: the one object every release path asks how far
        one neighbour moves a statistic (:mod:`dpcurator.query.privacy_unit`)."""
        return PrivacyUnit(
            self.neighbouring,
            None if self.person_column is None else self.column(self.person_column).name,
            self.max_rows_per_person,
            self.max_groups_per_person,
            self.public_size,
        )

    # ------------------------------------------------------------------------------------------
    # Lookup

    def column(self, name: str) -> ColumnMeta:
        """The column called ``name`` (exact match first, then case-insensitive)."""
        for column in self.columns:
            if column.name == name:
                return column
        for column in self.columns:
            if column.name.lower() == name.lower():
                return column
        known = ", ".join(c.name for c in self.columns)
        raise DomainError(
            f"Unknown column {name!r} in table {self.table!r}. Known columns: {known}."
        )

    def has_table(self, parts: tuple[str, ...]) -> bool:
        """Whether a (possibly schema-qualified) table reference names this table."""
        if not parts or parts[-1].lower() != self.table.lower():
            return False
        if len(parts) == 1:
            return True
        return (
            len(parts) == 2 and self.schema is not None and parts[0].lower() == self.schema.lower()
        )

    @property
    def contribution_bound(self) -> ContributionBound:
        """The contribution bound the backends enforce (no bounding without a person column)."""
        return ContributionBound(
            person_column=None
            if self.person_column is None
            else self.column(self.person_column).name,
            max_groups=self.max_groups_per_person,
            max_rows_per_group=self.max_rows_per_person,
        )

    # ------------------------------------------------------------------------------------------
    # Public updates (each returns a new Metadata)

    def column_types(self) -> dict[str, ColumnType]:
        """Each column's declared type: how engines must expose the table."""
        return {column.name: column.type for column in self.columns}

    def with_bounds(self, name: str, lower: float, upper: float) -> Metadata:
        """A copy with public (or DP-estimated) bounds for a numeric column."""
        target = self.column(name)
        fill = target.fill
        if fill is not None and not (lower <= cast(float, fill) <= upper):
            fill = min(max(cast(float, fill), lower), upper)
        masses = target.point_masses
        if masses is not None:
            masses = tuple(m for m in masses if lower <= m <= upper) or None
        updated = replace(target, lower=lower, upper=upper, fill=fill, point_masses=masses)
        return replace(self, columns=tuple(updated if c is target else c for c in self.columns))

    def with_public_tables(self, tables: Mapping[str, object]) -> Metadata:
        """A copy with more public lookup tables (name -> frame, CSV/Parquet path, or the
        native mapping; :func:`~dpcurator.query.public_tables.public_table`)."""
        return replace(self, public_tables=(*self.public_tables, *public_tables(tables)))

    def with_keys(self, name: str, keys: tuple[ScalarValue, ...]) -> Metadata:
        """A copy with a public key set for a categorical column."""
        target = self.column(name)
        updated = replace(target, keys=tuple(keys))
        return replace(self, columns=tuple(updated if c is target else c for c in self.columns))

    # ------------------------------------------------------------------------------------------
    # Reading and writing

    @classmethod
    def from_dict(
        cls, data: Mapping[str, object], *, table: str | None = None, base: Path | None = None
    ) -> Metadata:
        """Read the native format or SmartNoise metadata (detected from the structure);
        ``base``: the directory relative paths of public tables start from (default: the
        working directory)."""
        if not isinstance(data, Mapping):
            raise fail("Metadata.from_dict", "data", "a mapping", type(data).__name__)
        if _looks_native(data):
            return _from_native(data, base)
        return _from_smartnoise(data, table)

    @classmethod
    def from_yaml(cls, path: str | Path, *, table: str | None = None) -> Metadata:
        """Read a YAML file in the native or SmartNoise format."""
        with Path(path).open(encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
        return cls.from_dict(data, table=table, base=Path(path).parent)

    @classmethod
    def from_json(cls, path: str | Path, *, table: str | None = None) -> Metadata:
        """Read a JSON file in the native or SmartNoise format."""
        with Path(path).open(encoding="utf-8") as handle:
            data = json.load(handle)
        return cls.from_dict(data, table=table, base=Path(path).parent)

    def to_dict(self) -> dict[str, object]:
        """The native format (JSON/YAML-serialisable)."""
        columns: dict[str, object] = {}
        for c in self.columns:
            entry: dict[str, object] = {"type": c.type}
            if c.lower is not None:
                entry["lower"] = c.lower
                entry["upper"] = c.upper
            if c.keys is not None:
                entry["keys"] = list(c.keys)
            if c.nullable:
                entry["nullable"] = True
            if c.fill is not None:
                entry["fill"] = c.fill
            if c.point_masses is not None:
                entry["point_masses"] = list(c.point_masses)
            columns[c.name] = entry
        out: dict[str, object] = {
            "table": self.table,
            "person_column": self.person_column,
            "max_rows_per_person": self.max_rows_per_person,
            "max_groups_per_person": self.max_groups_per_person,
            "columns": columns,
        }
        if self.schema is not None:
            out["schema"] = self.schema
        if self.unit.replace_one:
            out["neighbouring"] = self.neighbouring
            out["public_size"] = self.public_size
        if self.public_tables:
            out["public_tables"] = {t.name: t.to_dict() for t in self.public_tables}
        return out


_NATIVE_TABLE_KEYS = frozenset(
    {
        "table",
        "schema",
        "columns",
        "person_column",
        "max_rows_per_person",
        "max_groups_per_person",
        "neighbouring",
        "public_size",
        "public_tables",
    }
)
_NATIVE_COLUMN_KEYS = frozenset(
    {"type", "lower", "upper", "keys", "nullable", "fill", "point_masses"}
)


def _looks_native(data: Mapping[str, object]) -> bool:
    """Native metadata names its table or columns, or a key close to a native one (a typo such
    as ``colums`` must be answered about the native format, not SmartNoise's): SmartNoise's top
    level holds collection names only."""
    return any(
        key in _NATIVE_TABLE_KEYS or difflib.get_close_matches(str(key), _NATIVE_TABLE_KEYS, 1, 0.8)
        for key in data
    )


def _from_native(data: Mapping[str, object], base: Path | None) -> Metadata:
    unknown = set(data) - _NATIVE_TABLE_KEYS
    if unknown:
        raise unknown_fields("The metadata", unknown, _NATIVE_TABLE_KEYS)
    for required in ("table", "columns"):
        if required not in data:
            raise ParameterError(
                f"The metadata has no '{required}' field. Native metadata names its 'table' and "
                "its 'columns' (a mapping from column name to its description)."
            )
    raw_columns = data["columns"]
    if not isinstance(raw_columns, Mapping):
        raise fail(
            "Metadata", "columns", "a mapping from column name to its description", raw_columns
        )
    columns = []
    for name, spec in raw_columns.items():
        owner = f"column {name!r}"
        if not isinstance(spec, Mapping):
            raise fail(owner, "description", "a mapping", spec)
        extra = set(spec) - _NATIVE_COLUMN_KEYS
        if extra:
            raise unknown_fields(f"Column {name!r}", extra, _NATIVE_COLUMN_KEYS)
        keys = spec.get("keys")
        if keys is not None and not isinstance(keys, list | tuple):
            raise fail(owner, "keys", "a list", keys)
        masses = spec.get("point_masses")
        if masses is not None and not isinstance(masses, list | tuple):
            raise fail(owner, "point_masses", "a list of values, e.g. [0]", masses)
        columns.append(
            ColumnMeta(
                name=str(name),
                type=parse_column_type(owner, spec.get("type")),
                lower=spec.get("lower"),
                upper=spec.get("upper"),
                keys=None if keys is None else tuple(keys),
                nullable=bool(spec.get("nullable", False)),
                fill=spec.get("fill"),
                point_masses=None if masses is None else tuple(masses),
            )
        )
    person = data.get("person_column")
    schema = data.get("schema")
    return Metadata(
        table=cast(str, data["table"]),
        columns=tuple(columns),
        person_column=None if person is None else str(person),
        max_rows_per_person=cast(int, data.get("max_rows_per_person", 1)),
        max_groups_per_person=cast(int, data.get("max_groups_per_person", 1)),
        schema=None if schema is None else str(schema),
        neighbouring=cast(Neighbouring, data.get("neighbouring", "add_remove")),
        public_size=cast(int | None, data.get("public_size")),
        public_tables=public_tables(
            cast(Mapping[str, object], data.get("public_tables", {})), base=base
        ),
    )


def _smartnoise_tables(data: Mapping[str, object]) -> dict[tuple[str, str], Mapping[str, object]]:
    """All ``(schema, table) -> table dict`` entries of a SmartNoise collection file."""
    tables: dict[tuple[str, str], Mapping[str, object]] = {}
    for collection in data.values():
        if not isinstance(collection, Mapping):
            continue
        for schema, schema_tables in collection.items():
            if not isinstance(schema_tables, Mapping):
                continue
            for table, spec in schema_tables.items():
                if isinstance(spec, Mapping):
                    tables[(str(schema), str(table))] = spec
    return tables


def _from_smartnoise(data: Mapping[str, object], table: str | None) -> Metadata:
    tables = _smartnoise_tables(data)
    if not tables:
        raise fail(
            "Metadata",
            "data",
            "native metadata (with 'table' and 'columns') or SmartNoise metadata "
            "(collection -> schema -> table -> columns)",
            sorted(data),
        )
    if table is None:
        if len(tables) != 1:
            names = sorted(f"{s}.{t}" for s, t in tables)
            raise fail("Metadata", "table", f"given to choose one of {names}", table)
        ((schema, name), spec) = next(iter(tables.items()))
    else:
        matches = [
            key for key in tables if table.lower() in (key[1].lower(), f"{key[0]}.{key[1]}".lower())
        ]
        if len(matches) != 1:
            names = sorted(f"{s}.{t}" for s, t in tables)
            raise fail("Metadata", "table", f"one of {names}", table)
        schema, name = matches[0]
        spec = tables[(schema, name)]
    return _smartnoise_table(schema, name, spec)


def _smartnoise_table(schema: str, name: str, spec: Mapping[str, object]) -> Metadata:
    columns = []
    person: str | None = None
    options: dict[str, object] = {}
    for key, value in spec.items():
        if not isinstance(value, Mapping):
            options[str(key)] = value
            continue
        owner = f"column {key!r}"
        raw_type = value.get("type", "unknown")
        if raw_type == "unknown":
            raise fail(owner, "type", "declared (int, float, string, boolean)", raw_type)
        column_type = parse_column_type(owner, raw_type)
        if value.get("private_id"):
            person = str(key)
        fill = value.get("missing_value")
        if column_type == "string" and fill is not None:
            fill = str(fill)
        columns.append(
            ColumnMeta(
                name=str(key),
                type=column_type,
                lower=value.get("lower"),
                upper=value.get("upper"),
                nullable=bool(value.get("nullable", True)),
                fill=fill,
            )
        )
    unknown = set(options) - _SMARTNOISE_TABLE_OPTIONS - {"row_privacy", "max_ids"}
    if unknown:
        raise fail(f"SmartNoise table {name!r}", "options", "known options", sorted(unknown))
    max_ids = check_int(
        f"SmartNoise table {name!r}", "max_ids", options.get("max_ids", 1), minimum=1
    )
    if options.get("row_privacy"):
        return Metadata(table=name, columns=tuple(columns), schema=schema or None)
    return Metadata(
        table=name,
        columns=tuple(columns),
        person_column=person,
        max_rows_per_person=max_ids,
        max_groups_per_person=max_ids,
        schema=schema or None,
    )
