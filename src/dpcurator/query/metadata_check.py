"""The data owner's metadata check: how much of the data the declared metadata silently changes.

**This check is NOT differentially private.** It reads the private table and reports exact
counts, so it is for the data owner only, before publishing metadata or opening a dataset to
analysts; its output must never be shown to an analyst.

Every query clamps values to the declared bounds, drops group keys outside the declared key sets,
replaces NULL/NaN by the public fill (or skips them) and keeps at most ``max_rows_per_person``
rows of each person. All of that is silent by design: a query cannot say how many values it
changed without leaking them. So an owner who declares ``income`` in [0, 100000] when a tenth of
the incomes are larger gets biased sums with no warning. This check shows those shares up front,
per column:

* ``below`` / ``above``: values below the declared ``lower`` or above ``upper`` (±inf included;
  NaN counts as missing), which every aggregate clamps to the bound;
* ``not_key``: non-missing values outside the declared ``keys``, which GROUP BY drops;
* ``missing``: NULL (and NaN in a float column), worth a look where the column is not declared
  ``nullable``;
* ``unconvertible``: values with no exact value of the declared type (text that is not a number,
  a fraction in an int column); any such value makes the engines refuse to open the table;

and, for user-level metadata, the rows beyond ``max_rows_per_person`` per person (or without a
person), which contribution bounding drops from every ungrouped query.

The work is bounded: one DuckDB aggregate pass over the table for the columns (a constant number
of aggregates per declared column) and one grouped pass over the person column.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import pandas as pd

from dpcurator.errors import BackendError
from dpcurator.query.backends.duckdb_sql import quote
from dpcurator.query.backends.sources import file_format, is_path, to_arrow
from dpcurator.query.backends.types import is_fractional, needed_casts, text_columns, type_class
from dpcurator.query.columns import ColumnMeta
from dpcurator.query.schema import Metadata

#: The notice printed above every report (it is exact, private data).
NOT_DP_NOTICE = (
    "NOT differentially private: exact shares of the private data, for the data owner only. "
    "Do not publish or share this report."
)

_SQL_TYPES = {"int": "BIGINT", "float": "DOUBLE", "string": "VARCHAR", "bool": "BOOLEAN"}
_INTEGER_TEXT = r"\s*[+-]?[0-9]+\s*"
_RAW = "__dpcurator_check_raw"


@dataclass(frozen=True)
class ColumnCheck:
    """Exact counts for one declared column (None where the metadata declares nothing to check).

    Attributes:
        name, type: the column and its declared type.
        rows: rows of the table.
        missing: NULL values (and NaN in a float column).
        nullable: whether the metadata declares the column nullable.
        below, above: values below ``lower`` / above ``upper`` (None without bounds).
        not_key: non-missing values outside the declared keys (None without keys).
        unconvertible: non-NULL values with no exact value of the declared type.
    """

    name: str
    type: str
    rows: int
    missing: int
    nullable: bool
    below: int | None
    above: int | None
    not_key: int | None
    unconvertible: int

    def share(self, count: int | None) -> float | None:
        """``count`` as a share of the rows (0 for an empty table; None stays None)."""
        if count is None:
            return None
        return count / self.rows if self.rows else 0.0

    @property
    def outside_bounds(self) -> int | None:
        """Values clamped by every aggregate: below plus above the bounds."""
        if self.below is None or self.above is None:
            return None
        return self.below + self.above

    def problems(self) -> list[str]:
        """What the metadata silently changes in this column, in words (empty if nothing)."""
        found = []
        if self.unconvertible:
            found.append(f"{self.share(self.unconvertible):.2%} not of type {self.type}")
        if self.missing and not self.nullable:
            found.append(f"{self.share(self.missing):.2%} missing but not nullable")
        if self.below:
            found.append(f"{self.share(self.below):.2%} below lower")
        if self.above:
            found.append(f"{self.share(self.above):.2%} above upper")
        if self.not_key:
            found.append(f"{self.share(self.not_key):.2%} outside keys")
        return found


@dataclass(frozen=True)
class MetadataCheck:
    """The report of :func:`check_metadata` (NOT differentially private: owner only).

    Attributes:
        table: the metadata's table name.
        rows: rows of the table.
        columns: one check per declared column, in declaration order.
        person_column: the person column, or None (row-level metadata).
        max_rows_per_person: the declared limit the bounding enforces.
        rows_over_limit: rows that contribution bounding drops from an ungrouped query (beyond
            ``max_rows_per_person`` per person, or without a person); None without a person
            column.
        persons_over_limit: persons with more than ``max_rows_per_person`` rows (None likewise).
        public_size: replace-one metadata: the declared public n (None otherwise).
        data_size: replace-one metadata: the rows (row-level) or persons (user-level) the data
            have, which queries never check against ``public_size`` (None otherwise).
    """

    table: str
    rows: int
    columns: tuple[ColumnCheck, ...]
    person_column: str | None
    max_rows_per_person: int
    rows_over_limit: int | None
    persons_over_limit: int | None
    public_size: int | None = None
    data_size: int | None = None

    def column(self, name: str) -> ColumnCheck:
        """The check of the column ``name``."""
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(name)

    def to_pandas(self) -> pd.DataFrame:
        """One row per column: the shares (NaN where nothing is declared to check)."""
        records = [
            {
                "column": c.name,
                "type": c.type,
                "missing": c.share(c.missing),
                "nullable": c.nullable,
                "below_lower": c.share(c.below),
                "above_upper": c.share(c.above),
                "outside_keys": c.share(c.not_key),
                "unconvertible": c.share(c.unconvertible),
            }
            for c in self.columns
        ]
        return pd.DataFrame.from_records(records)

    def format(self) -> str:
        """The report as text: the notice, an aligned table of shares, the bounding line."""
        header = ["column", "type", "missing", "nullable", "below", "above", "not key", "bad type"]
        lines = [header]
        for c in self.columns:
            lines.append(
                [
                    c.name,
                    c.type,
                    _percent(c.share(c.missing)),
                    "yes" if c.nullable else "no",
                    _percent(c.share(c.below)),
                    _percent(c.share(c.above)),
                    _percent(c.share(c.not_key)),
                    _percent(c.share(c.unconvertible)),
                ]
            )
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        table = [
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
            for line in lines
        ]
        out = [NOT_DP_NOTICE, f"table {self.table!r}: {self.rows:,} rows", *table]
        if self.rows_over_limit is not None:
            share = self.rows_over_limit / self.rows if self.rows else 0.0
            out.append(
                f"person column {self.person_column!r}: {self.persons_over_limit:,} persons have "
                f"more than max_rows_per_person = {self.max_rows_per_person} rows; bounding "
                f"drops {self.rows_over_limit:,} rows ({share:.2%}) from ungrouped queries"
            )
        if self.public_size is not None and self.data_size != self.public_size:
            unit = "rows" if self.person_column is None else "persons"
            out.append(
                f"neighbouring replace_one: public_size = {self.public_size:,} but the data have "
                f"{self.data_size:,} {unit}; whole-table counts and means use the public size"
            )
        problems = [f"{c.name}: {'; '.join(c.problems())}" for c in self.columns if c.problems()]
        out.append("silently changed: " + (" | ".join(problems) if problems else "nothing"))
        return "\n".join(out)


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{share:.2%}"


def check_metadata(source: object, metadata: Metadata) -> MetadataCheck:
    """Count, per declared column, the values the metadata silently changes (see the module
    docstring). NOT differentially private: exact counts of private data, for the owner only.

    Args:
        source: a CSV or Parquet path, or a pandas/polars/pyarrow/DuckDB table (as
            :func:`~dpcurator.query.backends.open_backend` takes, Spark excepted).
        metadata: the metadata to check.

    Raises:
        DomainError: a declared column is missing from the data.
        ParameterError: an unsupported source.
        BackendError: DuckDB cannot read the source.

    Example:
        >>> meta = Metadata.from_dict({"table": "t", "columns": {
        ...     "x": {"type": "int", "lower": 0, "upper": 10}}})
        >>> check_metadata({"x": [1, 5, 20, 30]}, meta).column("x").above
        2
    """
    connection = duckdb.connect()
    try:
        types = _load(connection, source, metadata)
        needed_casts(metadata.column_types(), types, table=metadata.table)  # missing columns
        columns, rows = _column_checks(connection, metadata, types)
        over_rows, over_persons = _bounding(connection, metadata)
        size = _data_size(connection, metadata, rows) if metadata.unit.replace_one else None
    except duckdb.Error as exc:
        raise BackendError(f"DuckDB could not read the table {metadata.table!r}: {exc}") from exc
    finally:
        connection.close()
    return MetadataCheck(
        metadata.table,
        rows,
        columns,
        metadata.person_column,
        metadata.max_rows_per_person,
        over_rows,
        over_persons,
        metadata.public_size,
        size,
    )


def _data_size(connection: duckdb.DuckDBPyConnection, metadata: Metadata, rows: int) -> int:
    """The table's rows (row-level) or distinct persons (user-level): replace-one's n."""
    if metadata.person_column is None:
        return rows
    person = quote(metadata.column(metadata.person_column).name)
    query = f"SELECT COUNT(DISTINCT {person}) FROM {quote(_RAW)}"
    return int(connection.execute(query).fetchall()[0][0])


def _load(
    connection: duckdb.DuckDBPyConnection, source: object, metadata: Metadata
) -> dict[str, str]:
    """Expose ``source`` as the view ``_RAW``; its column types. Files are scanned by DuckDB
    (columns declared strings read as text, as the engines read them); frames via Arrow."""
    declared = metadata.column_types()
    if is_path(source) and file_format(os.fspath(source)) == "parquet":  # type: ignore[call-overload]
        connection.read_parquet(os.fspath(source)).to_view(_RAW)  # type: ignore[call-overload]
    elif is_path(source):
        path = os.fspath(source)  # type: ignore[call-overload]
        text = text_columns(declared, connection.read_csv(path).columns)
        connection.read_csv(path, dtype=dict.fromkeys(text, "VARCHAR")).to_view(_RAW)
    else:
        connection.register(_RAW, to_arrow(source, metadata.table))
    described = connection.table(_RAW)
    return {n: str(t) for n, t in zip(described.columns, described.types, strict=True)}


def _converted(column: ColumnMeta, engine_type: str) -> tuple[str, str]:
    """SQL for the column's value in its declared type (NULL when there is none) and for
    "the value cannot be converted exactly"."""
    raw = quote(column.name)
    if type_class(engine_type) == column.type:
        return raw, "FALSE"
    target = _SQL_TYPES[column.type]
    value = f"TRY_CAST({raw} AS {target})"
    if column.type == "int" and is_fractional(engine_type):
        value = f"(CASE WHEN {raw} = trunc({raw}) THEN {value} END)"
    elif column.type == "int" and type_class(engine_type) == "string":
        value = f"(CASE WHEN regexp_full_match({raw}, '{_INTEGER_TEXT}') THEN {value} END)"
    return value, f"({raw} IS NOT NULL AND {value} IS NULL)"


def _column_checks(
    connection: duckdb.DuckDBPyConnection, metadata: Metadata, types: dict[str, str]
) -> tuple[tuple[ColumnCheck, ...], int]:
    """One aggregate query: per column, the counts of :class:`ColumnCheck`."""
    params: dict[str, object] = {}
    selected = ["COUNT(*)"]
    for i, column in enumerate(metadata.columns):
        value, bad = _converted(column, types[column.name])
        nan = f" OR isnan({value})" if column.type == "float" else ""
        present = f"{value} IS NOT NULL" + (f" AND NOT isnan({value})" if nan else "")
        selected += [
            f"COUNT(*) FILTER ({quote(column.name)} IS NULL{nan})",
            f"COUNT(*) FILTER ({bad})",
        ]
        if column.lower is not None:
            params[f"lo{i}"], params[f"hi{i}"] = column.lower, column.upper
            selected += [
                f"COUNT(*) FILTER ({present} AND {value} < $lo{i})",
                f"COUNT(*) FILTER ({present} AND {value} > $hi{i})",
            ]
        if column.keys is not None:
            params[f"keys{i}"] = list(column.keys)
            selected.append(f"COUNT(*) FILTER ({present} AND NOT list_contains($keys{i}, {value}))")
    query = f"SELECT {', '.join(selected)} FROM {quote(_RAW)}"
    counts: Sequence[int] = connection.execute(query, params).fetchall()[0]
    rows, position = int(counts[0]), 1
    checks = []
    for column in metadata.columns:
        missing, unconvertible = int(counts[position]), int(counts[position + 1])
        position += 2
        below = above = not_key = None
        if column.lower is not None:
            below, above = int(counts[position]), int(counts[position + 1])
            position += 2
        if column.keys is not None:
            not_key = int(counts[position])
            position += 1
        checks.append(
            ColumnCheck(
                column.name,
                column.type,
                rows,
                missing,
                column.nullable,
                below,
                above,
                not_key,
                unconvertible,
            )
        )
    return tuple(checks), rows


def _bounding(
    connection: duckdb.DuckDBPyConnection, metadata: Metadata
) -> tuple[int | None, int | None]:
    """Rows that contribution bounding drops from an ungrouped query, and persons over the
    limit (None, None without a person column)."""
    if metadata.person_column is None:
        return None, None
    person = quote(metadata.column(metadata.person_column).name)
    query = (
        "SELECT COALESCE(SUM(CASE WHEN p IS NULL THEN n ELSE GREATEST(n - $r, 0) END), 0), "
        "COUNT(*) FILTER (p IS NOT NULL AND n > $r) "
        f"FROM (SELECT {person} AS p, COUNT(*) AS n FROM {quote(_RAW)} GROUP BY {person})"
    )
    rows, persons = connection.execute(query, {"r": metadata.max_rows_per_person}).fetchall()[0]
    return int(rows), int(persons)
