"""The SQL form of model fits: ``SELECT REGRESS(y, x1, ..., xk) FROM t`` and ``LOGISTIC``.

``REGRESS(y, x1, ..., xk)`` is the linear regression of ``y`` on the features with an intercept
(AdaSSP on engine-computed sufficient statistics) and ``LOGISTIC(y, x1, ..., xk [, b])`` the
logistic regression of a 0/1 ``y`` with every coefficient in the public box [-b, b] (data units;
default: :data:`~dpcurator.query.fit.core.DEFAULT_COEFFICIENT_BOUND` in standardised units,
:func:`~dpcurator.query.fit.core.standardised_box`), both planned by
:func:`~dpcurator.query.fit.core.plan_fit` (see :mod:`dpcurator.query.fit.core` for their
guarantees). Arguments are plain column names. :meth:`Session.sql
<dpcurator.query.session.Session.sql>` releases the fit as a table of coefficients
(:mod:`dpcurator.query.fit.release`).

A fit runs on the whole table: the call must be the only item of its SELECT, with no WHERE, GROUP
BY, ORDER BY or any other clause. Everything else is refused at parse time, free, naming the
function and the construct.
"""

from __future__ import annotations

import re
from dataclasses import replace

from sqlglot import exp

from dpcurator.errors import UnsupportedQueryError
from dpcurator.query.fit.core import FitRequest
from dpcurator.query.frontend.sql import FIT_FUNCTIONS, from_table
from dpcurator.query.frontend.text import parse_select
from dpcurator.query.schema import Metadata

#: A cheap test on the text before parsing: most queries name no fit and skip the parser here.
_FIT_CALL = re.compile(rf"\b(?:{'|'.join(FIT_FUNCTIONS)})\s*\(", re.IGNORECASE)
#: The arguments of a SELECT that a fit accepts (the others are refused by name).
_ACCEPTED = frozenset({"expressions", "from", "from_", "kind"})
_CLAUSES = {"where": "WHERE", "group": "GROUP BY", "order": "ORDER BY", "with_": "WITH"}


def parse_fit_sql(sql: str, metadata: Metadata) -> FitRequest | None:
    """The fit a SQL text asks for, or None when it calls no fit function (an ordinary query).

    Raises:
        UnsupportedQueryError: a fit mixed with other SELECT items or clauses, or called with
            something other than column names (and a numeric bound for LOGISTIC).
        DomainError: an unknown column.
    """
    if not isinstance(sql, str) or _FIT_CALL.search(sql) is None:
        return None
    statement = parse_select(sql)
    call = next(
        (f for f in statement.find_all(exp.Anonymous) if f.name.lower() in FIT_FUNCTIONS), None
    )
    if call is None:  # the name appeared in a string or a comment
        return None
    name = call.name.upper()
    items = statement.expressions
    if len(items) != 1 or items[0].unalias() is not call:
        raise UnsupportedQueryError(
            f"{name}(...) must be the only item of its SELECT: a model fit cannot be mixed with "
            "other aggregates or columns."
        )
    for key, value in statement.args.items():
        if value and key not in _ACCEPTED:
            clause = _CLAUSES.get(key, key.upper())
            raise UnsupportedQueryError(
                f"{name}(...) with {clause} is not supported: a model fit runs on the whole "
                "table (no WHERE, GROUP BY, ORDER BY or other clause)."
            )
    from_table(statement, metadata)
    kind = FIT_FUNCTIONS[call.name.lower()]
    args = list(call.expressions)
    bound: float | None = None
    if kind == "logistic_regression" and args and isinstance(args[-1], exp.Literal | exp.Neg):
        bound = _number(name, args.pop())
    columns = [_column(name, arg, metadata) for arg in args]
    if len(columns) < 2:
        raise UnsupportedQueryError(
            f"{name} takes the response and at least one feature column: {name}(y, x1, ...)."
        )
    request = FitRequest(kind, columns[0], tuple(columns[1:]))
    return request if bound is None else replace(request, coef_bound=bound)


def _column(name: str, node: exp.Expression, metadata: Metadata) -> str:
    if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
        raise UnsupportedQueryError(
            f"{name} takes column names; got {node.sql()!r} (expressions are not supported)."
        )
    return metadata.column(node.name).name


def _number(name: str, node: exp.Expression) -> float:
    text = node.sql()
    try:
        return float(text)
    except ValueError:
        raise UnsupportedQueryError(
            f"{name}'s last argument, the coefficient bound, must be a number; got {text!r}."
        ) from None
