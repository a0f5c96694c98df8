"""Declared column types: the metadata's types, applied by every backend when it opens a table.

Public metadata declares each column ``"int"``, ``"float"``, ``"string"`` or ``"bool"``. Engines
infer their own types (a CSV column of digits declared a string is read as integers), and a
comparison such as ``sex = '1'`` would then fail inside the engine, after the budget was charged.
So every backend exposes the table with each declared column converted to its declared type when it
is opened, and refuses (:class:`~dpcurator.errors.DomainError`) a conversion that is impossible
there and then, before any budget is involved.

Conversions are exact or refused: a float becomes an int only if it is integral (no rounding or
truncation, which differ between engines), text is parsed strictly, and CSV columns declared
strings are read as text directly, so codes such as ``"007"`` keep their leading zeros.

Error messages name the column, the declared type and the engine's type, never a data value: a
backend may be opened on behalf of an analyst (the HTTP service opens datasets lazily).
"""

from __future__ import annotations

from collections.abc import Mapping

from dpcurator._validation import fail
from dpcurator.errors import DomainError

DECLARED_TYPES = ("int", "float", "string", "bool")

# Engine type names (DuckDB, Polars, Spark, Arrow; compared lower-case) that already hold a
# declared type exactly. Unsigned 64-bit and 128-bit integers are absent: they are converted (and
# refused when a value does not fit int64).
_TYPE_CLASSES = {
    "int": frozenset(
        [
            "tinyint",
            "smallint",
            "integer",
            "int",
            "bigint",
            "utinyint",
            "usmallint",
            "uinteger",
            "int8",
            "int16",
            "int32",
            "int64",
            "uint8",
            "uint16",
            "uint32",
            "long",
            "short",
            "byte",
        ]
    ),
    "float": frozenset({"double", "float", "float32", "float64", "real"}),
    "string": frozenset({"varchar", "string", "large_string", "string_view", "utf8", "str"}),
    "bool": frozenset({"boolean", "bool"}),
}


def check_column_types(column_types: Mapping[str, str] | None) -> dict[str, str]:
    """Return ``column_types`` as a dict after checking names and types (ParameterError)."""
    if column_types is None:
        return {}
    if not isinstance(column_types, Mapping):
        raise fail("open_backend", "column_types", "a mapping column -> type", column_types)
    for name, declared in column_types.items():
        if not isinstance(name, str) or not name:
            raise fail("open_backend", "column_types", "keyed by non-empty column names", name)
        if declared not in DECLARED_TYPES:
            raise fail(
                "open_backend", f"column_types[{name!r}]", f"one of {DECLARED_TYPES}", declared
            )
    return dict(column_types)


def type_class(engine_type: str) -> str | None:
    """Return the declared type an engine type holds exactly, or None (then it is converted)."""
    lowered = engine_type.lower()
    return next((kind for kind, names in _TYPE_CLASSES.items() if lowered in names), None)


def is_fractional(engine_type: str) -> bool:
    """Whether an engine type holds fractions (floats, decimals): int needs an integrality check."""
    lowered = engine_type.lower()
    return type_class(engine_type) == "float" or lowered.startswith(("decimal", "float"))


def needed_casts(
    declared: Mapping[str, str], columns: Mapping[str, str], *, table: str
) -> dict[str, str]:
    """Return the declared columns whose engine type differs from their declared type.

    Raises:
        DomainError: a declared column is missing from the table.
    """
    missing = sorted(name for name in declared if name not in columns)
    if missing:
        raise DomainError(
            f"The metadata declares the column(s) {missing} but the table {table!r} has none of "
            f"that name. Its columns are {sorted(columns)}."
        )
    return {name: kind for name, kind in declared.items() if type_class(columns[name]) != kind}


def text_columns(declared: Mapping[str, str], present: list[str]) -> list[str]:
    """The columns declared strings among ``present``: CSV readers read them as text."""
    return [name for name in present if declared.get(name) == "string"]


def cast_error(
    engine: str, table: str, column: str, declared: str, engine_type: str
) -> DomainError:
    """The error for a declared type the engine cannot convert the column to (no data value)."""
    return DomainError(
        f"The column {column!r} of table {table!r} is declared {declared!r} in the metadata, but "
        f"{engine} holds it as {engine_type} and some value cannot be converted exactly to "
        f"{declared!r}. Fix the metadata's type or the data."
    )
