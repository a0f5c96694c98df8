"""Static checks of a query's expressions against the public metadata, before any charge.

Engines evaluate expressions totally after the charge (integer overflow gives NULL, ``x/0`` gives
NULL, aggregate values are clamped and filled), so a value can never make a release fail. What is
left to refuse is decided here, from the query and the declared column types and bounds only, and
raises a free :class:`~dpcurator.errors.UnsupportedQueryError` naming the column, its declared type
and a fix:

* **types** (:func:`expression_type`): comparisons, IN lists, BETWEEN, CASE results and COALESCE
  arguments of incompatible types (a string against a number, a bool against anything else);
  arithmetic, ABS/ROUND/FLOOR/CEIL on strings or bools; LOWER/UPPER/LENGTH on non-strings; AND,
  OR, NOT, WHERE and CASE conditions that are not predicates; unknown functions and wrong arity.
  int and float mix freely (int op int is int, except ``/``, which is float division).
* **literals**: integers must fit int64 and floats must be finite (what every engine can bind).
* **aggregated values** (:func:`check_aggregated_value`): SUM, AVG, VARIANCE, STDDEV, quantiles
  and histograms read numbers. When the public bounds of an integer-valued sub-expression show it
  can leave int64 (where engines would give NULL), or those of a float sub-expression are not
  finite or exceed :data:`~dpcurator.query.plan.limits.MAX_BOUND_MAGNITUDE`, the query is refused:
  the value would silently be replaced by the fill instead of meaning what it says.
"""

from __future__ import annotations

import math
from typing import Literal

from dpcurator.errors import UnsupportedQueryError
from dpcurator.query import ir
from dpcurator.query.plan.analysis import columns_of, infer_bounds
from dpcurator.query.plan.limits import MAX_BOUND_MAGNITUDE
from dpcurator.query.schema import Metadata

ValueType = Literal["int", "float", "string", "bool", "null"]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_NUMERIC = frozenset({"int", "float"})
_NUMERIC_FUNCTIONS = frozenset({"abs", "round", "floor", "ceil"})
_STRING_FUNCTIONS = frozenset({"lower", "upper", "length"})
_COMPARISON_HINTS = {
    "string": "compare it with a quoted string, e.g. = '1'",
    "int": "compare it with a number (no quotes)",
    "float": "compare it with a number (no quotes)",
    "bool": "compare it with TRUE or FALSE",
}
_PREDICATE_HINT = (
    "use a comparison, IS NULL, IN, BETWEEN or a bool column, e.g. age > 30 or sex = 'F'"
)


def expression_type(node: ir.Expr, metadata: Metadata) -> ValueType:
    """The static type of an expression whose columns exist in ``metadata``.

    Raises:
        UnsupportedQueryError: a type mismatch or an invalid literal, function or arity.
    """
    return _Checker(metadata).type_of(node)


def check_predicate(node: ir.Expr, metadata: Metadata, clause: str) -> None:
    """Refuse a ``clause`` (WHERE) whose expression is not a predicate."""
    checker = _Checker(metadata)
    checker.require_predicate(node, checker.type_of(node), clause)


def check_aggregated_value(node: ir.Expr, metadata: Metadata, aggregate: str) -> ValueType:
    """Check the value a SUM/AVG/quantile/histogram reads: a number whose public bounds, where
    known, keep every integer sub-expression in int64 and every float one finite."""
    checker = _Checker(metadata)
    value_type = checker.type_of(node)
    if value_type not in _NUMERIC and value_type != "null":
        raise UnsupportedQueryError(
            f"{aggregate} reads numbers, but {_describe(node, metadata, value_type)}. Count rows "
            "with COUNT(*), or turn a condition into 0/1 with CASE WHEN ... THEN 1 ELSE 0 END."
        )
    stack = [node]
    while stack:
        current = stack.pop()
        stack.extend(ir.children(current))
        current_type = checker.type_of(current)
        if not isinstance(current, ir.Lit | ir.Col) and current_type in _NUMERIC:
            _check_range(current, current_type, metadata, aggregate)
    return value_type


def _check_range(node: ir.Expr, value_type: ValueType, metadata: Metadata, aggregate: str) -> None:
    bounds = infer_bounds(node, metadata)
    if bounds is None:
        return
    low, high = bounds
    if value_type == "int":
        if low < INT64_MIN or high > INT64_MAX:
            raise UnsupportedQueryError(
                f"In {aggregate}, {render(node)} can leave the int64 range: from the public "
                f"bounds of {_columns_text(node)} it lies in [{low:g}, {high:g}]. Engines "
                "would give NULL where it overflows; use smaller factors or tighter bounds."
            )
    elif not (math.isfinite(low) and math.isfinite(high)) or max(-low, high) > MAX_BOUND_MAGNITUDE:
        raise UnsupportedQueryError(
            f"In {aggregate}, {render(node)} can reach [{low:g}, {high:g}] from the public bounds "
            f"of {_columns_text(node)}: values must stay within ±{MAX_BOUND_MAGNITUDE:g} "
            "(MAX_BOUND_MAGNITUDE); use smaller factors or tighter bounds."
        )


class _Checker:
    """Types of the nodes of one expression (memoised per node: the IR is a DAG of frozen
    values, so a sub-expression shared by several parents is typed once)."""

    def __init__(self, metadata: Metadata) -> None:
        self.metadata = metadata
        # keyed by identity (Lit(1) == Lit(1.0) == Lit(True)); holding the node keeps its id
        self.types: dict[int, tuple[ir.Expr, ValueType]] = {}

    def type_of(self, node: ir.Expr) -> ValueType:
        known = self.types.get(id(node))
        if known is None:
            known = (node, self._type(node))
            self.types[id(node)] = known
        return known[1]

    def _type(self, node: ir.Expr) -> ValueType:
        if isinstance(node, ir.Col):
            return self.metadata.column(node.name).type
        if isinstance(node, ir.Lit):
            return literal_type(node.value)
        if isinstance(node, ir.BinOp):
            return self._arithmetic(node)
        if isinstance(node, ir.Case):
            for condition, _ in node.whens:
                self.require_predicate(condition, self.type_of(condition), "CASE WHEN")
            results = [v for _, v in node.whens] + ([] if node.default is None else [node.default])
            return self._common(results, "the results of a CASE")
        if isinstance(node, ir.Func):
            return self._function(node)
        self._predicate(node)
        return "bool"

    def _predicate(self, node: ir.Expr) -> None:
        """Check the operands of a comparison, logical operator, IS NULL, IN or BETWEEN."""
        if isinstance(node, ir.Compare):
            self._comparable(node.left, node.right, f"the comparison {render(node)}")
        elif isinstance(node, ir.And | ir.Or | ir.Not):
            word = "NOT" if isinstance(node, ir.Not) else type(node).__name__.upper()
            for arg in ir.children(node):
                self.require_predicate(arg, self.type_of(arg), word)
        elif isinstance(node, ir.IsNull):
            self.type_of(node.arg)
        elif isinstance(node, ir.In):
            for value in node.values:
                self._comparable(node.arg, ir.Lit(value), f"the IN list of {render(node.arg)}")
        elif isinstance(node, ir.Between):
            for bound in (node.low, node.high):
                self._comparable(node.arg, bound, f"the BETWEEN {render(node)}")
        else:
            raise UnsupportedQueryError(f"Unknown expression {node!r}.")

    # ------------------------------------------------------------------------------------------

    def require_predicate(self, node: ir.Expr, value_type: ValueType, clause: str) -> None:
        if value_type not in ("bool", "null"):
            raise UnsupportedQueryError(
                f"{clause} needs a condition, but {_describe(node, self.metadata, value_type)}: "
                f"{_PREDICATE_HINT}."
            )

    def _arithmetic(self, node: ir.BinOp) -> ValueType:
        types = [self.type_of(node.left), self.type_of(node.right)]
        for operand, value_type in zip((node.left, node.right), types, strict=True):
            if value_type not in _NUMERIC and value_type != "null":
                raise UnsupportedQueryError(
                    f"Arithmetic {node.op!r} needs numbers, but "
                    f"{_describe(operand, self.metadata, value_type)}. Arithmetic applies to int "
                    "and float values; for a bool use CASE WHEN flag THEN 1 ELSE 0 END."
                )
        if node.op == "/":
            return "float"
        if "float" in types:
            return "float"
        return "int" if "int" in types else "null"

    def _comparable(self, left: ir.Expr, right: ir.Expr, where: str) -> None:
        left_type, right_type = self.type_of(left), self.type_of(right)
        if _unify(left_type, right_type) is not None:
            return
        swap = isinstance(right, ir.Col) and not isinstance(left, ir.Col)
        column, other = (right, left) if swap else (left, right)
        column_type = self.type_of(column)
        other_type = right_type if column is left else left_type
        raise UnsupportedQueryError(
            f"In {where}, {_describe(column, self.metadata, column_type)} but "
            f"{_describe(other, self.metadata, other_type)}: values of different types never "
            f"match; {_COMPARISON_HINTS[column_type]}."
        )

    def _common(self, values: list[ir.Expr], where: str) -> ValueType:
        common: ValueType = "null"
        first = values[0]
        for value in values:
            unified = _unify(common, self.type_of(value))
            if unified is None:
                raise UnsupportedQueryError(
                    f"In {where}, {_describe(first, self.metadata, self.type_of(first))} but "
                    f"{_describe(value, self.metadata, self.type_of(value))}: all values must "
                    "have one type (numbers, strings or booleans)."
                )
            if common == "null":
                first = value
            common = unified
        return common

    def _function(self, node: ir.Func) -> ValueType:
        name = node.name
        if name == "coalesce":
            if not node.args:
                raise UnsupportedQueryError("COALESCE needs at least one argument.")
            return self._common(list(node.args), "COALESCE")
        if name not in _NUMERIC_FUNCTIONS | _STRING_FUNCTIONS:
            raise UnsupportedQueryError(f"The function {name!r} is not supported.")
        if len(node.args) != 1:
            raise UnsupportedQueryError(
                f"{name.upper()} takes exactly one argument; got {len(node.args)}."
            )
        arg = node.args[0]
        arg_type = self.type_of(arg)
        if name in _STRING_FUNCTIONS:
            if arg_type not in ("string", "null"):
                raise UnsupportedQueryError(
                    f"{name.upper()} applies to strings, but "
                    f"{_describe(arg, self.metadata, arg_type)}."
                )
            return "int" if name == "length" else "string"
        if arg_type not in _NUMERIC and arg_type != "null":
            raise UnsupportedQueryError(
                f"{name.upper()} applies to int and float values, but "
                f"{_describe(arg, self.metadata, arg_type)}."
            )
        return arg_type


def literal_type(value: object) -> ValueType:
    """The type of a literal; refuses integers beyond int64 and non-finite floats."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise UnsupportedQueryError(
                f"The integer literal {value} does not fit in int64 "
                f"([{INT64_MIN}, {INT64_MAX}]); write it as a float (e.g. {float(value):g}) if "
                "an approximate value will do."
            )
        return "int"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UnsupportedQueryError(f"The literal {value} is not a finite number.")
        return "float"
    raise UnsupportedQueryError(f"The literal {value!r} is not an int, float, string or bool.")


def _unify(left: ValueType, right: ValueType) -> ValueType | None:
    """The common type of two values that may be compared or mixed, or None."""
    if left == "null":
        return right
    if right in ("null", left):
        return left
    if left in _NUMERIC and right in _NUMERIC:
        return "float"
    return None


def _describe(node: ir.Expr, metadata: Metadata, value_type: ValueType) -> str:
    """``column 'sex' is declared string`` / ``the number 1 is int`` / ``LOWER(sex) is a
    string (column 'sex' is declared string)``."""
    if isinstance(node, ir.Col):
        return f"column {node.name!r} is declared {value_type}"
    if isinstance(node, ir.Lit):
        return f"the literal {render(node)} is {_TYPE_WORDS[value_type]}"
    columns = columns_of(node)
    origin = ""
    if columns:
        first = metadata.column(columns[0])
        origin = f" (column {first.name!r} is declared {first.type})"
    return f"{render(node)} is {_TYPE_WORDS[value_type]}{origin}"


_TYPE_WORDS: dict[ValueType, str] = {
    "int": "an int",
    "float": "a float",
    "string": "a string",
    "bool": "a bool",
    "null": "NULL",
}

_RENDER_LIMIT = 80


def render(node: ir.Expr) -> str:
    """A short SQL-like text of an expression for messages (cut at 80 characters)."""
    text = _render(node)
    return text if len(text) <= _RENDER_LIMIT else text[: _RENDER_LIMIT - 3] + "..."


def _render(node: ir.Expr) -> str:
    if isinstance(node, ir.Col):
        return node.name
    if isinstance(node, ir.Lit):
        value = node.value
        if value is None:
            return "NULL"
        if isinstance(value, bool):
            return "TRUE" if value else "FALSE"
        if isinstance(value, str):
            return "'" + value.replace("'", "''") + "'"
        return repr(value)
    if isinstance(node, ir.BinOp | ir.Compare):
        return f"({_render(node.left)} {node.op} {_render(node.right)})"
    if isinstance(node, ir.And | ir.Or):
        word = f" {type(node).__name__.upper()} "
        return "(" + word.join(_render(a) for a in node.args) + ")"
    if isinstance(node, ir.Not):
        return f"NOT {_render(node.arg)}"
    if isinstance(node, ir.IsNull):
        return f"{_render(node.arg)} IS NULL"
    if isinstance(node, ir.In):
        values = ", ".join(_render(ir.Lit(v)) for v in node.values)
        return f"{_render(node.arg)} IN ({values})"
    if isinstance(node, ir.Between):
        return f"{_render(node.arg)} BETWEEN {_render(node.low)} AND {_render(node.high)}"
    if isinstance(node, ir.Case):
        whens = " ".join(f"WHEN {_render(c)} THEN {_render(v)}" for c, v in node.whens)
        default = "" if node.default is None else f" ELSE {_render(node.default)}"
        return f"CASE {whens}{default} END"
    return f"{node.name.upper()}({', '.join(_render(a) for a in node.args)})"


def _columns_text(node: ir.Expr) -> str:
    return ", ".join(repr(c) for c in columns_of(node)) or "its literals"
