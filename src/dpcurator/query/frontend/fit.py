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

from dataclasses import replace

from sqlglot import exp

from dpcurator.errors import UnsupportedQueryError
from dpcurator.query.fit.core import FitRequest
from dpcurator.query.frontend.calls import column_argument, lone_call
from dpcurator.query.frontend.sql import FIT_FUNCTIONS
from dpcurator.query.schema import Metadata


def parse_fit_sql(sql: str, metadata: Metadata) -> FitRequest | None:
    """The fit a SQL text asks for, or None when it calls no fit function (an ordinary query).

    Raises:
        UnsupportedQueryError: a fit mixed with other SELECT items or clauses, or called with
            something other than column names (and a numeric bound for LOGISTIC).
        DomainError: an unknown column.
    """
    call = lone_call(sql, FIT_FUNCTIONS, metadata, "a model fit")
    if call is None:
        return None
    name = call.name.upper()
    kind = FIT_FUNCTIONS[call.name.lower()]
    args = list(call.expressions)
    bound: float | None = None
    if kind == "logistic_regression" and args and isinstance(args[-1], exp.Literal | exp.Neg):
        bound = _number(name, args.pop())
    columns = [column_argument(name, arg, metadata) for arg in args]
    if len(columns) < 2:
        raise UnsupportedQueryError(
            f"{name} takes the response and at least one feature column: {name}(y, x1, ...)."
        )
    request = FitRequest(kind, columns[0], tuple(columns[1:]))
    return request if bound is None else replace(request, coef_bound=bound)


def _number(name: str, node: exp.Expression) -> float:
    text = node.sql()
    try:
        return float(text)
    except ValueError:
        raise UnsupportedQueryError(
            f"{name}'s last argument, the coefficient bound, must be a number; got {text!r}."
        ) from None
