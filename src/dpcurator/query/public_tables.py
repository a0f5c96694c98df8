"""Public lookup tables the owner registers beside the private table, for JOINs.

A public table is public data (region of each zip code, population of each region...): the
curator may read, type and check it at will, and analysts may join the private table to it::

    SELECT r.region, COUNT(*) FROM people JOIN regions r ON people.zip = r.zip GROUP BY r.region

**Why sensitivities are unchanged.** The join key must be unique in the public table (checked
here, at registration, on the public data). Then each private row matches at most one public
row: an INNER join keeps a subset of the private rows, a LEFT join keeps all of them, and either
adds columns that are a fixed public function of the row's key. A person's rows, groups and
bounded values are therefore no more than without the join, so every contribution bound and
sensitivity of the private side stands (the join is a row-wise map of a stable transformation,
McSherry 2009, PINQ §3). A duplicated key would make one private row count several times, which
is why it is refused.

The join is compiled into row-level expressions of the private table
(:func:`joined_column`, :func:`inner_join_filter`): a public column becomes
``CASE WHEN key IN (k1, k2, ...) THEN v1 WHEN key IN (...) THEN v2 END`` with one branch per
distinct public value, and an INNER join a ``key IN (all keys)`` filter. Every engine therefore
runs it with the shared semantics and nothing to register; the public column's type, bounds
(its public minimum and maximum) and keys (its distinct values) come from the public data.
Unmatched rows of a LEFT join read NULL; grouped by a public column, they fall outside its
public keys and are dropped like any other value outside declared keys.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

import numpy as np
import pandas as pd

from dpcurator._validation import fail
from dpcurator.errors import DomainError
from dpcurator.query import ir

PublicType = Literal["int", "float", "string", "bool"]

#: The most rows of one public table (its join compiles to an IN-list of this many keys).
MAX_PUBLIC_TABLE_ROWS = 100_000


@dataclass(frozen=True)
class PublicTable:
    """A public table: its name, typed columns and rows (plain Python values; None is NULL).

    Attributes:
        name: the name queries use (``JOIN regions r``).
        columns: the column names, in order.
        types: each column's type, inferred from the public data.
        rows: the rows.
        unique: the columns whose non-NULL values are distinct (the columns a JOIN may use).
        digest: a hash of the content (equality and hashing use it, not the rows).
    """

    name: str
    columns: tuple[str, ...]
    types: tuple[PublicType, ...]
    rows: tuple[tuple[ir.ScalarValue, ...], ...] = field(compare=False, repr=False)
    unique: frozenset[str] = field(default=frozenset(), compare=False)
    digest: str = field(default="", repr=False)

    def column(self, name: str) -> int:
        """The position of column ``name`` (exact match first, then case-insensitive)."""
        for exact in (True, False):
            for position, column in enumerate(self.columns):
                if column == name or (not exact and column.lower() == name.lower()):
                    return position
        raise DomainError(
            f"Unknown column {name!r} in public table {self.name!r}. Known columns: "
            f"{', '.join(self.columns)}."
        )

    def join_key(self, name: str) -> str:
        """Column ``name`` (declared spelling) after checking it is unique, so a JOIN on it
        matches each private row with at most one public row."""
        column = self.columns[self.column(name)]
        if column not in self.unique:
            raise DomainError(
                f"The public table {self.name!r} has duplicate values in {column!r}: join on a "
                "unique column (a private row must match at most one public row)."
            )
        return column

    def values(self, name: str) -> list[ir.ScalarValue]:
        """The values of column ``name`` in row order."""
        position = self.column(name)
        return [row[position] for row in self.rows]

    def to_dict(self) -> dict[str, object]:
        """The native metadata form (``columns``: name -> type, ``rows``, ``keys``)."""
        return {
            "columns": dict(zip(self.columns, self.types, strict=True)),
            "rows": [list(row) for row in self.rows],
            "keys": sorted(self.unique),
        }


def public_table(name: str, source: object, *, keys: Sequence[str] = ()) -> PublicTable:
    """Read a public table from a pandas/Polars/pyarrow frame, a CSV or Parquet path, or the
    native mapping (``{"columns": {name: type}, "rows": [...]}``, ``{"path": ..., "keys":
    [...]}`` or ``{"data": frame, "keys": [...]}``); ``keys``: columns that must be unique (join
    keys), checked now.

    Raises:
        ParameterError: an invalid name or source, a column type that is not int, float, string
            or bool, too many rows, or a declared key column with duplicate values (named, with
            the first duplicated value: the table is public).
    """
    owner = f"public table {name!r}"
    if not isinstance(name, str) or not name.isidentifier():
        raise fail("public_tables", "name", "an SQL identifier (letters, digits, _)", name)
    if isinstance(source, Mapping) and "columns" in source:
        columns, types, rows = _from_mapping(owner, source)
    else:
        if isinstance(source, Mapping):
            keys = [*keys, *_string_list(owner, source.get("keys", []))]
            source = source.get("data", source.get("path"))
        columns, types, rows = _from_frame(owner, _frame(owner, source))
    lowered = [c.lower() for c in columns]
    if not columns or len(set(lowered)) != len(lowered):
        raise fail(owner, "columns", "at least one, uniquely named (case-insensitive)", columns)
    if not rows or len(rows) > MAX_PUBLIC_TABLE_ROWS:
        raise fail(owner, "rows", f"between 1 and {MAX_PUBLIC_TABLE_ROWS:,}", len(rows))
    unique = set()
    for position, column in enumerate(columns):
        duplicate = _first_duplicate([row[position] for row in rows])
        if duplicate is None:
            unique.add(column)
        elif column.lower() in {k.lower() for k in keys}:
            raise fail(
                owner,
                f"key column {column!r}",
                "unique values (a duplicated key would count a private row more than once)",
                f"{duplicate!r} appears more than once",
            )
    for key in keys:
        if key.lower() not in lowered:
            raise fail(owner, "keys", f"columns of the table {list(columns)}", key)
    digest = hashlib.sha256(repr((columns, types, rows)).encode()).hexdigest()
    return PublicTable(name, columns, types, rows, frozenset(unique), digest)


def public_tables(
    tables: Mapping[str, object], *, base: Path | None = None
) -> tuple[PublicTable, ...]:
    """Several public tables by name (``base``: the directory relative paths start from)."""
    if not isinstance(tables, Mapping):
        raise fail("metadata", "public_tables", "a mapping from name to table", tables)
    out = []
    for name, source in tables.items():
        if isinstance(source, PublicTable):
            out.append(source)
            continue
        located = source
        if base is not None and isinstance(source, str):
            located = base / source
        elif base is not None and isinstance(source, Mapping) and "path" in source:
            located = {**source, "path": base / str(source["path"])}
        out.append(public_table(str(name), located))
    return tuple(out)


def _string_list(owner: str, value: object) -> list[str]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise fail(owner, "keys", "a list of column names", value)
    return list(value)


def _frame(owner: str, source: object) -> pd.DataFrame:
    if isinstance(source, pd.DataFrame):
        return source
    if isinstance(source, str | Path):
        path = Path(source)
        if path.suffix.lower() == ".parquet":
            return pd.read_parquet(path)
        if path.suffix.lower() == ".csv":
            return pd.read_csv(path)
        raise fail(owner, "path", "a .csv or .parquet file", str(source))
    to_pandas = getattr(source, "to_pandas", None)  # Polars and pyarrow frames
    if callable(to_pandas):
        frame = to_pandas()
        if isinstance(frame, pd.DataFrame):
            return frame
    raise fail(owner, "source", "a pandas/Polars/pyarrow frame or a CSV/Parquet path", source)


def _from_frame(
    owner: str, frame: pd.DataFrame
) -> tuple[tuple[str, ...], tuple[PublicType, ...], tuple[tuple[ir.ScalarValue, ...], ...]]:
    columns = tuple(str(c) for c in frame.columns)
    types = tuple(_frame_type(owner, str(c), frame[c]) for c in frame.columns)
    cells = [
        [_scalar(v, kind) for v in frame[c].tolist()]
        for c, kind in zip(frame.columns, types, strict=True)
    ]
    return columns, types, tuple(zip(*cells, strict=True))


def _frame_type(owner: str, name: str, series: pd.Series) -> PublicType:
    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype):
        return "bool"
    if pd.api.types.is_integer_dtype(dtype):
        return "int"
    if pd.api.types.is_float_dtype(dtype):
        present = series.dropna()
        whole = bool(len(present)) and bool(np.all(np.mod(present, 1) == 0))
        return "int" if whole and bool(np.all(np.abs(present) < 2**53)) else "float"
    if all(isinstance(v, str) for v in series.dropna().tolist()):
        return "string"
    raise fail(owner, f"column {name!r}", "int, float, string or bool values", str(dtype))


def _scalar(value: object, kind: PublicType) -> ir.ScalarValue:
    """A cell as a plain Python value of the column's type (None for NULL/NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    if kind == "int":
        return int(cast(int, value))
    if kind == "float":
        return float(cast(float, value))
    if kind == "bool":
        return bool(value)
    return str(value)


def _from_mapping(
    owner: str, source: Mapping[object, object]
) -> tuple[tuple[str, ...], tuple[PublicType, ...], tuple[tuple[ir.ScalarValue, ...], ...]]:
    raw_columns, raw_rows = source.get("columns"), source.get("rows")
    if not isinstance(raw_columns, Mapping):
        raise fail(owner, "columns", "a mapping from column name to type", raw_columns)
    if not isinstance(raw_rows, list | tuple):
        raise fail(owner, "rows", "a list of rows", raw_rows)
    columns = tuple(str(c) for c in raw_columns)
    types: list[PublicType] = []
    for column, kind in raw_columns.items():
        if kind not in ("int", "float", "string", "bool"):
            raise fail(owner, f"column {column!r}", "type int, float, string or bool", kind)
        types.append(kind)
    rows = []
    for row in raw_rows:
        if not isinstance(row, list | tuple) or len(row) != len(columns):
            raise fail(owner, "rows", f"lists of {len(columns)} values", row)
        rows.append(
            tuple(_checked(owner, c, v, t) for c, v, t in zip(columns, row, types, strict=True))
        )
    return columns, tuple(types), tuple(rows)


def _checked(owner: str, column: str, value: object, kind: PublicType) -> ir.ScalarValue:
    if value is None:
        return None
    expected = {"int": int, "float": int | float, "string": str, "bool": bool}[kind]
    if not isinstance(value, expected) or (kind != "bool" and isinstance(value, bool)):
        raise fail(owner, f"column {column!r}", f"values of type {kind}", value)
    if kind == "int" and not -(2**63) <= value < 2**63:  # type: ignore[operator]
        raise fail(owner, f"column {column!r}", "int values within int64", value)
    if kind == "float" and not math.isfinite(value):  # type: ignore[arg-type]
        raise fail(owner, f"column {column!r}", "finite values", value)
    return _scalar(value, kind)


def _first_duplicate(values: Sequence[ir.ScalarValue]) -> ir.ScalarValue:
    seen: set[ir.ScalarValue] = set()
    for value in values:
        if value is None:
            continue
        if value in seen:
            return value
        seen.add(value)
    return None


# ----------------------------------------------------------------------------------------------
# The join as row-level expressions of the private table


def joined_column(table: PublicTable, key: str, private_key: ir.Expr, column: str) -> ir.Expr:
    """The value of ``table.column`` for the public row whose ``key`` equals ``private_key``
    (NULL when none does): a CASE with one IN-branch per distinct value of the column.
    ``key`` comes from :meth:`PublicTable.join_key` (unique)."""
    by_value: dict[ir.ScalarValue, list[ir.ScalarValue]] = {}
    for key_value, value in zip(table.values(key), table.values(column), strict=True):
        if key_value is not None and value is not None:
            by_value.setdefault(value, []).append(key_value)
    whens = tuple(
        (ir.In(private_key, tuple(keys)), ir.Lit(value)) for value, keys in by_value.items()
    )
    if not whens:
        return ir.Case(((ir.Lit(False), ir.Lit(None)),))
    return ir.Case(whens)


def inner_join_filter(table: PublicTable, key: str, private_key: ir.Expr) -> ir.Expr:
    """The rows an INNER join keeps: those whose key is one of the table's (non-NULL) keys."""
    return ir.In(private_key, tuple(v for v in table.values(key) if v is not None))
