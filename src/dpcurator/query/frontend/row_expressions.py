"""Row-level expressions of the query builder (:mod:`~dpcurator.query.frontend.builder`):
``col``, ``lit``, ``when`` and the Python operators of :class:`Expression`.

>>> (col("age") >= 18).node
Compare(op='>=', left=Col(name='age'), right=Lit(value=18))

An :class:`Expression` wraps the frozen IR of :mod:`dpcurator.query.ir`; Python values become
:class:`~dpcurator.query.ir.Lit` literals, never SQL text.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dpcurator._validation import check_real, fail
from dpcurator.query import ir


@dataclass(frozen=True, eq=False)
class Expression:
    """A row-level expression with Python operators (``==`` builds a comparison, not a bool)."""

    node: ir.Expr

    # arithmetic
    def __add__(self, other: object) -> Expression:
        return Expression(ir.BinOp("+", self.node, to_ir(other)))

    def __radd__(self, other: object) -> Expression:
        return Expression(ir.BinOp("+", to_ir(other), self.node))

    def __sub__(self, other: object) -> Expression:
        return Expression(ir.BinOp("-", self.node, to_ir(other)))

    def __rsub__(self, other: object) -> Expression:
        return Expression(ir.BinOp("-", to_ir(other), self.node))

    def __mul__(self, other: object) -> Expression:
        return Expression(ir.BinOp("*", self.node, to_ir(other)))

    def __rmul__(self, other: object) -> Expression:
        return Expression(ir.BinOp("*", to_ir(other), self.node))

    def __truediv__(self, other: object) -> Expression:
        return Expression(ir.BinOp("/", self.node, to_ir(other)))

    def __rtruediv__(self, other: object) -> Expression:
        return Expression(ir.BinOp("/", to_ir(other), self.node))

    def __neg__(self) -> Expression:
        return Expression(ir.BinOp("-", ir.Lit(0), self.node))

    # comparisons
    def __eq__(self, other: object) -> Expression:  # type: ignore[override]
        return Expression(ir.Compare("=", self.node, to_ir(other)))

    def __ne__(self, other: object) -> Expression:  # type: ignore[override]
        return Expression(ir.Compare("!=", self.node, to_ir(other)))

    def __lt__(self, other: object) -> Expression:
        return Expression(ir.Compare("<", self.node, to_ir(other)))

    def __le__(self, other: object) -> Expression:
        return Expression(ir.Compare("<=", self.node, to_ir(other)))

    def __gt__(self, other: object) -> Expression:
        return Expression(ir.Compare(">", self.node, to_ir(other)))

    def __ge__(self, other: object) -> Expression:
        return Expression(ir.Compare(">=", self.node, to_ir(other)))

    __hash__ = object.__hash__

    # logic
    def __and__(self, other: object) -> Expression:
        return Expression(ir.And((self.node, to_ir(other))))

    def __or__(self, other: object) -> Expression:
        return Expression(ir.Or((self.node, to_ir(other))))

    def __invert__(self) -> Expression:
        return Expression(ir.Not(self.node))

    def __bool__(self) -> bool:
        raise TypeError(
            "A dpcurator expression has no truth value: combine predicates with &, | and ~ "
            "(not and/or/not), and compare with ==, <, ... inside filter()."
        )

    # predicates and functions
    def is_null(self) -> Expression:
        """``expr IS NULL``."""
        return Expression(ir.IsNull(self.node))

    def is_not_null(self) -> Expression:
        """``expr IS NOT NULL``."""
        return Expression(ir.Not(ir.IsNull(self.node)))

    def isin(self, values: Iterable[ir.ScalarValue]) -> Expression:
        """``expr IN (values...)`` for literal values."""
        return Expression(ir.In(self.node, tuple(_literal_value(v) for v in values)))

    def between(self, low: object, high: object) -> Expression:
        """``low <= expr <= high``."""
        return Expression(ir.Between(self.node, to_ir(low), to_ir(high)))

    def fill_null(self, value: object) -> Expression:
        """``COALESCE(expr, value)``."""
        return Expression(ir.Func("coalesce", (self.node, to_ir(value))))

    def abs(self) -> Expression:
        """Absolute value."""
        return Expression(ir.Func("abs", (self.node,)))

    def round(self) -> Expression:
        """Round to the nearest integer."""
        return Expression(ir.Func("round", (self.node,)))

    def floor(self) -> Expression:
        """Round down to an integer."""
        return Expression(ir.Func("floor", (self.node,)))

    def ceil(self) -> Expression:
        """Round up to an integer."""
        return Expression(ir.Func("ceil", (self.node,)))

    def lower(self) -> Expression:
        """Lower-case a string."""
        return Expression(ir.Func("lower", (self.node,)))

    def upper(self) -> Expression:
        """Upper-case a string."""
        return Expression(ir.Func("upper", (self.node,)))

    def length(self) -> Expression:
        """Length of a string."""
        return Expression(ir.Func("length", (self.node,)))


def _literal_value(value: object) -> ir.ScalarValue:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        check_real("lit", "value", value)
        return value
    raise fail("lit", "value", "an int, float, str, bool or None", value)


def to_ir(value: object) -> ir.Expr:
    """An :class:`Expression` or a Python literal as an IR expression."""
    if isinstance(value, Expression):
        return value.node
    return ir.Lit(_literal_value(value))


def col(name: str) -> Expression:
    """A column of the private table (or a column defined by :meth:`Query.with_column`)."""
    if not isinstance(name, str) or not name:
        raise fail("col", "name", "a non-empty string", name)
    return Expression(ir.Col(name))


def lit(value: ir.ScalarValue) -> Expression:
    """A literal value."""
    return Expression(ir.Lit(_literal_value(value)))


@dataclass(frozen=True)
class When:
    """A CASE expression under construction: ``when(c, v).when(c2, v2).otherwise(d)``."""

    whens: tuple[tuple[ir.Expr, ir.Expr], ...]

    def when(self, condition: object, value: object) -> When:
        """Add a ``WHEN condition THEN value`` branch."""
        return When((*self.whens, (to_ir(condition), to_ir(value))))

    def otherwise(self, value: object) -> Expression:
        """Finish with ``ELSE value``."""
        return Expression(ir.Case(self.whens, to_ir(value)))

    def end(self) -> Expression:
        """Finish without ELSE (NULL when no branch matches)."""
        return Expression(ir.Case(self.whens))


def when(condition: object, value: object) -> When:
    """Start a CASE expression."""
    return When(((to_ir(condition), to_ir(value)),))
