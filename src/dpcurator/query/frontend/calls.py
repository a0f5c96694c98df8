"""SQL calls that are a release of their own: a model fit (``REGRESS``, ``LOGISTIC``) or a
hypothesis test (``TTEST``, ``ANOVA``, ``CHI2``, ...), asked for alone in its SELECT.

:func:`lone_call` finds such a call and refuses, at parse time and free, a SELECT that mixes it
with other items or adds any clause (WHERE, GROUP BY, ORDER BY, WITH): these releases run on the
whole table, planned by their own modules (:mod:`dpcurator.query.frontend.fit`,
:mod:`dpcurator.query.frontend.hypothesis`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sqlglot import exp

from dpcurator.errors import UnsupportedQueryError
from dpcurator.query.frontend.sql import from_table
from dpcurator.query.frontend.text import parse_select
from dpcurator.query.schema import Metadata

#: The arguments of a SELECT that a lone call accepts (the others are refused by name).
_ACCEPTED = frozenset({"expressions", "from", "from_", "kind"})
_CLAUSES = {"where": "WHERE", "group": "GROUP BY", "order": "ORDER BY", "with_": "WITH"}


def lone_call(
    sql: object, functions: Iterable[str], metadata: Metadata, what: str
) -> exp.Expression | None:
    """The call of one of ``functions`` (lower-case names) that ``sql`` asks for alone, or None
    when it calls none of them (an ordinary query). ``what`` names the release in refusals
    (``a model fit``).

    Raises:
        UnsupportedQueryError: the call mixed with other SELECT items or with a clause.
        DomainError: an unknown table.
    """
    names = tuple(functions)
    pattern = re.compile(rf"\b(?:{'|'.join(names)})\s*\(", re.IGNORECASE)
    if not isinstance(sql, str) or pattern.search(sql) is None:
        return None  # a cheap test on the text: most queries skip the parser here
    statement = parse_select(sql)
    call: exp.Expression | None = next(
        (f for f in statement.find_all(exp.Anonymous) if f.name.lower() in names), None
    )
    if call is None:  # the name appeared in a string or a comment
        return None
    name = call.name.upper()
    items = statement.expressions
    if len(items) != 1 or items[0].unalias() is not call:
        raise UnsupportedQueryError(
            f"{name}(...) must be the only item of its SELECT: {what} cannot be mixed with "
            "other aggregates or columns."
        )
    for key, value in statement.args.items():
        if value and key not in _ACCEPTED:
            clause = _CLAUSES.get(key, key.upper())
            raise UnsupportedQueryError(
                f"{name}(...) with {clause} is not supported: {what} runs on the whole "
                "table (no WHERE, GROUP BY, ORDER BY or other clause)."
            )
    from_table(statement, metadata)
    return call  # type: ignore[no-any-return]


def column_argument(name: str, node: exp.Expression, metadata: Metadata) -> str:
    """The column an argument of the call ``name`` names (anything else refused, free)."""
    if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
        raise UnsupportedQueryError(
            f"{name} takes column names; got {node.sql()!r} (expressions are not supported)."
        )
    return metadata.column(node.name).name
