"""Public facts about row-level expressions, derived from the metadata alone.

The planner and the type checker ask these questions of an expression: which columns it reads,
its public key set (for GROUP BY), its public bounds (interval arithmetic over the declared column
bounds) and whether it only takes integer values. None of them reads data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dpcurator.query import ir
from dpcurator.query.plan.limits import MAX_KEYS_FROM_BOUNDS
from dpcurator.query.schema import Metadata


def resolve_expr(node: ir.Expr, metadata: Metadata) -> ir.Expr:
    """Check every column against the metadata and use its declared spelling."""
    return ir.map_columns(node, lambda c: ir.Col(metadata.column(c.name).name))


_PREDICATES = (ir.Compare, ir.And, ir.Or, ir.Not, ir.IsNull, ir.In, ir.Between)


def public_keys(node: ir.Expr, metadata: Metadata) -> tuple[ir.ScalarValue, ...] | None:
    """The public key set of a grouping expression, or None if it is not public.

    Columns with declared keys (and bool columns), int columns whose public bounds span at most
    :data:`~dpcurator.query.plan.limits.MAX_KEYS_FROM_BOUNDS` integers (the keys are those
    integers), CASE expressions whose results are all literals, and predicates (True/False) have
    public key sets.
    """
    if isinstance(node, ir.Col):
        column = metadata.column(node.name)
        bounds = (column.lower, column.upper)
        if column.public_keys is None and column.type == "int" and None not in bounds:
            low, high = math.ceil(bounds[0] or 0), math.floor(bounds[1] or 0)
            if 0 < high - low + 1 <= MAX_KEYS_FROM_BOUNDS:
                return tuple(range(low, high + 1))
        return column.public_keys
    if isinstance(node, _PREDICATES):
        return (False, True)
    if isinstance(node, ir.Case):
        results = [v for _, v in node.whens] + ([] if node.default is None else [node.default])
        if all(isinstance(v, ir.Lit) for v in results):
            values = [v.value for v in results if isinstance(v, ir.Lit)]
            return tuple(dict.fromkeys(values))
    return None


def infer_bounds(node: ir.Expr, metadata: Metadata) -> tuple[float, float] | None:
    """Public bounds of a numeric expression by interval arithmetic (None when unknown)."""
    if isinstance(node, ir.Col):
        column = metadata.column(node.name)
        if column.lower is None or column.upper is None:
            return None
        return float(column.lower), float(column.upper)
    if isinstance(node, ir.Lit):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value), float(value)
    if isinstance(node, ir.BinOp):
        return _binop_bounds(node, metadata)
    if isinstance(node, ir.Case):
        results = [v for _, v in node.whens] + ([] if node.default is None else [node.default])
        return _union([infer_bounds(v, metadata) for v in results])
    if isinstance(node, ir.Func):
        inner = [infer_bounds(a, metadata) for a in node.args]
        if node.name == "coalesce":
            return _union(inner)
        if node.name not in ("abs", "round", "floor", "ceil") or inner[0] is None:
            return None
        low, high = inner[0]
        if node.name == "abs":
            return (0.0 if low <= 0 <= high else min(abs(low), abs(high)), max(abs(low), abs(high)))
        return float(math.floor(low)), float(math.ceil(high))
    return None


def _union(bounds: Sequence[tuple[float, float] | None]) -> tuple[float, float] | None:
    if not bounds or any(b is None for b in bounds):
        return None
    known = [b for b in bounds if b is not None]
    return min(b[0] for b in known), max(b[1] for b in known)


def _binop_bounds(node: ir.BinOp, metadata: Metadata) -> tuple[float, float] | None:
    left = infer_bounds(node.left, metadata)
    right = infer_bounds(node.right, metadata)
    if left is None or right is None:
        return None
    (a, b), (c, d) = left, right
    if node.op == "+":
        return a + c, b + d
    if node.op == "-":
        return a - d, b - c
    if node.op == "*":
        products = [a * c, a * d, b * c, b * d]
        return min(products), max(products)
    if c <= 0 <= d:
        return None
    quotients = [a / c, a / d, b / c, b / d]
    return min(quotients), max(quotients)


def is_integer_valued(node: ir.Expr, metadata: Metadata) -> bool:
    """Whether an expression only takes integer values (so sums need no rounding)."""
    if isinstance(node, ir.Col):
        return metadata.column(node.name).type == "int"
    if isinstance(node, ir.Lit):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, ir.BinOp):
        return node.op != "/" and all(
            is_integer_valued(x, metadata) for x in (node.left, node.right)
        )
    if isinstance(node, ir.Case):
        results = [v for _, v in node.whens] + ([] if node.default is None else [node.default])
        return all(is_integer_valued(v, metadata) for v in results)
    if isinstance(node, ir.Func):
        if node.name in ("round", "floor", "ceil"):
            return True
        return node.name in ("abs", "coalesce") and all(
            is_integer_valued(a, metadata) for a in node.args
        )
    return False


def columns_of(node: ir.Expr) -> list[str]:
    """The columns an expression reads, in order of first appearance (no recursion)."""
    found: dict[str, None] = {}
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ir.Col):
            found.setdefault(current.name)
        stack.extend(reversed(ir.children(current)))
    return list(found)
