"""SQL ``JOIN`` of the private table with public lookup tables (:mod:`.public_tables`).

Accepted: ``[INNER] JOIN`` and ``LEFT [OUTER] JOIN`` of a registered public table, ``ON`` one
equality between a column of the private table and a column of that public table, which must be
unique in it. Each public column a query reads becomes a row-level expression of the private
table, and an INNER join a filter (see :mod:`.public_tables` for why sensitivities are
unchanged). Refused at parse time, by name and free: joins of the private table with itself
(private–private joins), unregistered tables, RIGHT/FULL/CROSS/NATURAL joins, ``USING``, an ON
that is not one key equality, and a public key with duplicate values.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dpcurator.errors import UnsupportedQueryError
from dpcurator.query import ir
from dpcurator.query.public_tables import PublicTable, inner_join_filter, joined_column
from dpcurator.query.schema import Metadata


@dataclass(frozen=True)
class _Join:
    table: PublicTable
    names: frozenset[str]  # the table's name and alias, lower case
    key: str  # the public key column
    private_key: ir.Col
    inner: bool


@dataclass(frozen=True)
class JoinScope:
    """The public tables joined in one SELECT, and how their columns read."""

    private_names: frozenset[str]
    joins: tuple[_Join, ...]

    def column(self, node: exp.Column, metadata: Metadata) -> ir.Expr | None:
        """The expression of a public column reference, or None for a private column."""
        qualifier = node.table.lower()
        if qualifier:
            if qualifier in self.private_names:
                return None
            for join in self.joins:
                if qualifier in join.names:
                    return self._read(join, node.name)
            raise UnsupportedQueryError(f"Unknown table qualifier in {node.sql()!r}.")
        matches = [j for j in self.joins if _has_column(j.table, node.name)]
        private = any(c.name.lower() == node.name.lower() for c in metadata.columns)
        if len(matches) + private > 1:
            raise UnsupportedQueryError(
                f"The column name {node.name!r} is ambiguous: qualify it with its table."
            )
        return self._read(matches[0], node.name) if matches else None

    def _read(self, join: _Join, column: str) -> ir.Expr:
        name = join.table.columns[join.table.column(column)]
        return joined_column(join.table, join.key, join.private_key, name)

    def filters(self) -> list[ir.Expr]:
        """The filters of the INNER joins (rows whose key has no public match are dropped)."""
        return [inner_join_filter(j.table, j.key, j.private_key) for j in self.joins if j.inner]


def _has_column(table: PublicTable, name: str) -> bool:
    return any(c.lower() == name.lower() for c in table.columns)


def read_joins(node: exp.Select, metadata: Metadata, alias: str | None) -> JoinScope | None:
    """The joins of a SELECT whose FROM names the private table (``alias``: its alias), or None
    without joins.

    Raises:
        UnsupportedQueryError: every join form outside the accepted one (module docstring).
        DomainError: an unknown public column, or a key column with duplicate values.
    """
    joins = node.args.get("joins") or []
    if not joins:
        return None
    private_names = frozenset(n.lower() for n in (metadata.table, alias) if n)
    scope = JoinScope(private_names, ())
    for join in joins:
        scope = JoinScope(private_names, (*scope.joins, _read_join(join, metadata, scope)))
    return scope


def _read_join(join: exp.Join, metadata: Metadata, scope: JoinScope) -> _Join:
    target = join.this
    if not isinstance(target, exp.Table) or not isinstance(target.this, exp.Identifier):
        raise UnsupportedQueryError(
            f"JOIN must name a public table; got {target.sql()!r} (subqueries are not supported)."
        )
    parts = tuple(p for p in (target.catalog, target.db, target.name) if p)
    if metadata.has_table(parts):
        raise UnsupportedQueryError(
            f"JOIN of the private table {metadata.table!r} with itself is refused: joins of "
            "private tables (private–private joins) are not supported; join public tables only."
        )
    table = _public(metadata, parts)
    side, kind = (join.side or "").upper(), (join.kind or "").upper()
    if join.method or side not in ("", "LEFT") or kind not in ("", "INNER", "OUTER"):
        form = " ".join(p for p in (join.method, side, kind) if p).upper()
        raise UnsupportedQueryError(
            f"{form} JOIN is not supported: use [INNER] JOIN or LEFT JOIN with a public table."
        )
    if join.args.get("using") or not isinstance(join.args.get("on"), exp.EQ):
        raise UnsupportedQueryError(
            f"JOIN {table.name} needs ON <private column> = <public column> (one equality; "
            "USING and other conditions are not supported)."
        )
    names = frozenset(n.lower() for n in (table.name, target.alias) if n)
    on: exp.EQ = join.args["on"]
    sides = [on.this, on.expression]
    if not all(isinstance(s, exp.Column) for s in sides):
        raise UnsupportedQueryError(
            f"JOIN {table.name} ON {on.sql()!r}: both sides must be columns."
        )
    public = [s for s in sides if s.table.lower() in names]
    private = [s for s in sides if s.table.lower() in scope.private_names or not s.table]
    if len(public) != 1 or len(private) != 1 or public[0] is private[0]:
        raise UnsupportedQueryError(
            f"JOIN {table.name} ON {on.sql()!r}: compare one column of the private table with "
            f"one column of {table.name} (qualify both, e.g. t.zip = {table.name}.zip)."
        )
    key = table.join_key(public[0].name)
    private_key = ir.Col(metadata.column(private[0].name).name)
    _check_key_types(table, key, metadata, private_key.name)
    return _Join(table, names, key, private_key, inner=side != "LEFT")


def _public(metadata: Metadata, parts: tuple[str, ...]) -> PublicTable:
    for table in metadata.public_tables:
        if len(parts) == 1 and parts[0].lower() == table.name.lower():
            return table
    known = ", ".join(t.name for t in metadata.public_tables) or "none registered"
    raise UnsupportedQueryError(
        f"Unknown table {'.'.join(parts)!r} in JOIN: only public tables registered by the owner "
        f"can be joined ({known})."
    )


def _check_key_types(table: PublicTable, key: str, metadata: Metadata, private: str) -> None:
    public_type = table.types[table.column(key)]
    private_type = metadata.column(private).type
    numeric = ("int", "float")
    if public_type != private_type and not (public_type in numeric and private_type in numeric):
        raise UnsupportedQueryError(
            f"JOIN key types differ: {metadata.table}.{private} is {private_type}, "
            f"{table.name}.{key} is {public_type}."
        )
