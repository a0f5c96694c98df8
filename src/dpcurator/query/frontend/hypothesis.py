"""The SQL form of hypothesis tests, each alone in its SELECT, on the whole table::

    SELECT TTEST(x, g) FROM t            -- Welch two-sample t: mean of x in g's 2 public keys
    SELECT TTEST(x, 5.0) FROM t          -- one-sample t: H0 mean(x) = 5.0
    SELECT TTEST(x - y) FROM t           -- paired t: H0 mean(x - y) = 0 (or TTEST(x - y, d))
    SELECT ANOVA(x, g) FROM t            -- one-way ANOVA over g's public keys (>= 2)
    SELECT PROPTEST(y, g) FROM t         -- two-proportion z: rate of y = 1 in g's 2 keys
    SELECT CHI2(a, b) FROM t             -- chi-square independence of a and b (public keys)
    SELECT CHI2(a) FROM t                -- goodness of fit: a uniform over its public keys
    SELECT CHI2(a, 0.5, 0.3, 0.2) FROM t -- goodness of fit to these probabilities
    SELECT KS(x, g, 10, 20, 30) FROM t   -- binned two-sample KS at public cut points

``TTEST`` and ``PROPTEST`` take a last string argument ``'greater'`` or ``'less'`` for a
one-sided test (default two-sided; ``greater``: the first key's mean or rate is the larger).
Arguments are plain column names and numeric literals (the paired form's first argument is the
difference of two columns, measured on the same row); the groups are the BY column's public
keys, in the metadata's order. Planned by :mod:`dpcurator.query.hypothesis.plan`; anything else
is refused at parse time, free, naming the function.
"""

from __future__ import annotations

from sqlglot import exp

from dpcurator.errors import UnsupportedQueryError
from dpcurator.query.frontend.calls import column_argument, lone_call
from dpcurator.query.frontend.sql import TEST_FUNCTIONS
from dpcurator.query.hypothesis.plan import TestRequest
from dpcurator.query.schema import Metadata

#: The one-sided alternatives a last string argument may name.
_SIDES = ("two-sided", "greater", "less")
_USAGE = {
    "t": "TTEST(x, g), TTEST(x, mean) or TTEST(x - y, mean)",
    "anova": "ANOVA(x, g)",
    "proportions": "PROPTEST(y, g)",
    "chi_square": "CHI2(a, b), CHI2(a) or CHI2(a, p1, ..., pk)",
    "ks": "KS(x, g, c1, ..., cm)",
}


def parse_test_sql(sql: object, metadata: Metadata) -> TestRequest | None:
    """The test a SQL text asks for, or None when it calls no test function (an ordinary query).

    Raises:
        UnsupportedQueryError: a test mixed with other SELECT items or clauses, or called with
            arguments of the wrong kind or number.
        DomainError: an unknown column.
    """
    call = lone_call(sql, TEST_FUNCTIONS, metadata, "a hypothesis test")
    if call is None:
        return None
    name = call.name.upper()
    kind = TEST_FUNCTIONS[call.name.lower()]
    args = list(call.expressions)
    alternative = "two-sided"
    last = args[-1] if args else None
    if kind in ("t", "proportions") and isinstance(last, exp.Literal) and last.is_string:
        alternative = args.pop().name.lower()
        if alternative not in _SIDES:
            raise UnsupportedQueryError(
                f"{name}'s last argument names the alternative: 'two-sided', 'greater' or "
                f"'less'; got {alternative!r}."
            )
    if kind == "t" and args and isinstance(args[0], exp.Sub):
        return _paired(call, args, metadata, alternative)
    numbers = [_number(name, kind, a) for a in args[1:] if not isinstance(a, exp.Column)]
    columns = [column_argument(name, a, metadata) for a in args if isinstance(a, exp.Column)]
    if not args or not isinstance(args[0], exp.Column) or not _shape_ok(kind, args, columns):
        raise UnsupportedQueryError(f"{name} takes {_USAGE[kind]}; got {call.sql()!r}.")
    by = columns[1] if len(columns) > 1 else None
    if kind == "t" and by is None:
        return TestRequest(kind, columns[0], mean=numbers[0], alternative=alternative)
    return TestRequest(kind, columns[0], by, numbers=tuple(numbers), alternative=alternative)


def _paired(
    call: exp.Expression, args: list[exp.Expression], metadata: Metadata, alternative: str
) -> TestRequest:
    """``TTEST(x - y)`` or ``TTEST(x - y, mean)``: the one-sample t of the rows' x - y."""
    difference = args[0]
    if len(args) > 2 or not all(isinstance(a, exp.Column) for a in difference.iter_expressions()):
        raise UnsupportedQueryError(f"TTEST takes {_USAGE['t']}; got {call.sql()!r}.")
    first, second = (column_argument("TTEST", a, metadata) for a in difference.iter_expressions())
    mean = _number("TTEST", "t", args[1]) if len(args) == 2 else 0.0
    return TestRequest("t", first, mean=mean, minus=second, alternative=alternative)


def _shape_ok(kind: str, args: list[exp.Expression], columns: list[str]) -> bool:
    """Whether the arguments' kinds fit the function: columns first, then numbers."""
    firsts = [isinstance(a, exp.Column) for a in args]
    if firsts != sorted(firsts, reverse=True):  # a column after a number
        return False
    if kind == "t":
        return len(args) == 2
    if kind in ("anova", "proportions"):
        return len(args) == len(columns) == 2
    if kind == "ks":
        return len(columns) == 2 and len(args) > 2
    return len(columns) == 1 or len(args) == len(columns) == 2  # CHI2


def _number(name: str, kind: str, node: exp.Expression) -> float:
    text = node.sql()
    try:
        return float(text)
    except ValueError:
        raise UnsupportedQueryError(
            f"{name} takes {_USAGE[kind]}: {text!r} is neither a column nor a number."
        ) from None
