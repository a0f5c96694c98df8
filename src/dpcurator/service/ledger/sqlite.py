"""The SQLite ledger's hot statements, compiled once and run on the raw ``sqlite3`` cursor.

SQLite admits one writer at a time, and every query writes the ledger twice (its reservation and
its completion), so the write lock is the service's one serialisation point. Run through
SQLAlchemy's execution machinery, each write held it for 0.46 ms on average, mostly SQLAlchemy's
bookkeeping rather than SQLite's work. A :class:`RawStatement` is the same SQLAlchemy Core
statement compiled once for SQLite (same SQL, same parameter and result conversions through the
dialect's types: the same stored formats), executed directly on the DBAPI cursor: 0.20 ms per
write (``benchmarks/ledger.py``: ~2,000 reservation + completion pairs/s from one thread, against
~1,150 when the reservation goes through SQLAlchemy, as a request with a key still does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from sqlite3 import Cursor
from typing import Any, cast

from sqlalchemy import Dialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement


class RawStatement:
    """A Core statement compiled for ``dialect`` with the parameters named ``column_keys``."""

    def __init__(
        self, statement: ClauseElement, dialect: Dialect, column_keys: Iterable[str]
    ) -> None:
        compiled = cast(
            "SQLCompiler", statement.compile(dialect=dialect, column_keys=list(column_keys))
        )
        self._compiled = compiled
        self.sql = str(compiled)
        self._names = list(compiled.positiontup or [])
        self._bind: dict[str, Callable[[Any], Any] | None] = {
            name: bind.type.dialect_impl(dialect).bind_processor(dialect)
            for name, bind in compiled.binds.items()
        }
        columns = getattr(statement, "exported_columns", [])
        self.columns = [column.key for column in columns]
        self._result = [
            column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
        ]

    def _arguments(self, params: Mapping[str, Any]) -> list[Any]:
        values = self._compiled.construct_params(dict(params)) or {}
        arguments = []
        for name in self._names:
            value = values[name]
            process = self._bind[name]
            arguments.append(value if process is None or value is None else process(value))
        return arguments

    def run(self, cursor: Cursor, params: Mapping[str, Any]) -> None:
        """Execute it (no rows wanted)."""
        cursor.execute(self.sql, self._arguments(params))

    def first(self, cursor: Cursor, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """Execute it; its first row with each column converted as SQLAlchemy would, or None."""
        rows = cursor.execute(self.sql, self._arguments(params)).fetchall()  # statement done
        if not rows:
            return None
        row = rows[0]
        return tuple(
            value if process is None or value is None else process(value)
            for value, process in zip(row, self._result, strict=True)
        )
