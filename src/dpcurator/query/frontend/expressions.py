"""Row-level SQL expressions to IR: the parsed sqlglot expression of a WHERE, GROUP BY or
aggregate argument becomes an :mod:`dpcurator.query.ir` expression over the metadata's columns.

Supported: arithmetic, comparisons, AND/OR/NOT, IS [NOT] NULL, IN (literals), BETWEEN, CASE, and
ABS, ROUND, FLOOR, CEIL, LOWER, UPPER, LENGTH, COALESCE. Identifiers are resolved against the
public metadata and literals become :class:`~dpcurator.query.ir.Lit` values (refused at once when
no engine can bind them); anything else is refused, free, naming the construct.
"""

from __future__ import annotations

from sqlglot import exp

from dpcurator.errors import UnsupportedQueryError
from dpcurator.query import ir
from dpcurator.query.frontend.join import JoinScope
from dpcurator.query.plan.typecheck import literal_type
from dpcurator.query.schema import Metadata

_ARITHMETIC: dict[type[exp.Expression], ir.ArithmeticOp] = {
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
}
_COMPARISON: dict[type[exp.Expression], ir.ComparisonOp] = {
    exp.EQ: "=",
    exp.NEQ: "!=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}
_FUNCTIONS: dict[type[exp.Expression], ir.FunctionName] = {
    exp.Abs: "abs",
    exp.Round: "round",
    exp.Floor: "floor",
    exp.Ceil: "ceil",
    exp.Lower: "lower",
    exp.Upper: "upper",
    exp.Length: "length",
    exp.Coalesce: "coalesce",
}


class ExpressionTranslator:
    """Translate the row-level expressions of one SELECT (``alias`` is its table's alias, set
    when the FROM clause is read)."""

    def __init__(self, metadata: Metadata) -> None:
        self.metadata = metadata
        self.alias: str | None = None
        self.joins: JoinScope | None = None

    def number(self, node: exp.Expression) -> float:
        value = self.expr(node)
        if not isinstance(value, ir.Lit) or isinstance(value.value, bool | str | None):
            raise UnsupportedQueryError(f"Expected a numeric literal; got {node.sql()!r}.")
        return float(value.value)

    def expr(self, node: exp.Expression) -> ir.Expr:
        if isinstance(node, exp.Paren):
            return self.expr(node.this)
        leaf = self._leaf(node)
        if leaf is not None:
            return leaf
        op = _ARITHMETIC.get(type(node))
        if op is not None:
            return ir.BinOp(op, self.expr(node.this), self.expr(node.expression))
        cmp = _COMPARISON.get(type(node))
        if cmp is not None:
            return ir.Compare(cmp, self.expr(node.this), self.expr(node.expression))
        name = _FUNCTIONS.get(type(node))
        if name is not None:
            return self._function(name, node)
        return self._logic(node)

    def _leaf(self, node: exp.Expression) -> ir.Expr | None:
        if isinstance(node, exp.Column):
            return self._column(node)
        if isinstance(node, exp.Literal):
            return _literal(node.this if node.is_string else _parse_number(node.this))
        if isinstance(node, exp.Boolean):
            return ir.Lit(bool(node.this))
        if isinstance(node, exp.Null):
            return ir.Lit(None)
        if isinstance(node, exp.Neg):
            if isinstance(node.this, exp.Literal) and not node.this.is_string:
                return _literal(-_parse_number(node.this.this))  # -9223372036854775808 fits
            return ir.BinOp("-", ir.Lit(0), self.expr(node.this))
        return None

    def _logic(self, node: exp.Expression) -> ir.Expr:
        if isinstance(node, exp.And):
            return ir.And(tuple(self.expr(operand) for operand in _chain(node)))
        if isinstance(node, exp.Or):
            return ir.Or(tuple(self.expr(operand) for operand in _chain(node)))
        if isinstance(node, exp.Not):
            return ir.Not(self.expr(node.this))
        if isinstance(node, exp.Is):
            if not isinstance(node.expression, exp.Null):
                raise UnsupportedQueryError(f"Only IS [NOT] NULL is supported; got {node.sql()!r}.")
            return ir.IsNull(self.expr(node.this))
        if isinstance(node, exp.In):
            return self._in(node)
        if isinstance(node, exp.Between):
            return ir.Between(
                self.expr(node.this), self.expr(node.args["low"]), self.expr(node.args["high"])
            )
        if isinstance(node, exp.Case):
            return self._case(node)
        if is_clamp(node):
            raise UnsupportedQueryError(
                "CLAMP(x, lower, upper) is supported only as the whole argument of an aggregate, "
                "e.g. SUM(CLAMP(x, 0, 100))."
            )
        raise UnsupportedQueryError(
            f"The SQL construct {node.sql()!r} ({node.key}) is not supported."
        )

    def _column(self, node: exp.Column) -> ir.Expr:
        public = None if self.joins is None else self.joins.column(node, self.metadata)
        if public is not None:
            return public
        if node.table and node.table.lower() not in {
            (self.alias or "").lower(),
            self.metadata.table.lower(),
        }:
            raise UnsupportedQueryError(f"Unknown table qualifier in {node.sql()!r}.")
        if isinstance(node.this, exp.Star):
            raise UnsupportedQueryError("SELECT * is not supported: ask for aggregates.")
        return ir.Col(self.metadata.column(node.name).name)

    def _in(self, node: exp.In) -> ir.Expr:
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            raise UnsupportedQueryError("IN (subquery) is not supported.")
        values = []
        for item in node.expressions:
            value = self.expr(item)
            if not isinstance(value, ir.Lit):
                raise UnsupportedQueryError(f"IN accepts literal values only; got {item.sql()!r}.")
            values.append(value.value)
        return ir.In(self.expr(node.this), tuple(values))

    def _case(self, node: exp.Case) -> ir.Expr:
        whens: tuple[tuple[ir.Expr, ir.Expr], ...]
        if node.this is not None:
            subject = self.expr(node.this)
            whens = tuple(
                (ir.Compare("=", subject, self.expr(i.this)), self.expr(i.args["true"]))
                for i in node.args["ifs"]
            )
        else:
            whens = tuple((self.expr(i.this), self.expr(i.args["true"])) for i in node.args["ifs"])
        default = node.args.get("default")
        return ir.Case(whens, None if default is None else self.expr(default))

    def _function(self, name: ir.FunctionName, node: exp.Expression) -> ir.Expr:
        if name == "round" and node.args.get("decimals") is not None:
            raise UnsupportedQueryError("ROUND with a number of decimals is not supported.")
        args = [self.expr(node.this)]
        args.extend(self.expr(e) for e in node.expressions)
        return ir.Func(name, tuple(args))


def _parse_number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def _literal(value: ir.ScalarValue) -> ir.Lit:
    """A literal, refused at once when no engine can bind it (beyond int64, not finite)."""
    literal_type(value)
    return ir.Lit(value)


def is_clamp(node: exp.Expression) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.lower() == "clamp"


def _chain(node: exp.And | exp.Or) -> list[exp.Expression]:
    """The operands of a chain ``a AND b AND c`` (one node type), left to right, without
    recursion (sqlglot nests a long chain as deep as it is long)."""
    operands: list[exp.Expression] = []
    stack: list[exp.Expression] = [node]
    while stack:
        current = stack.pop()
        if type(current) is type(node):
            stack.extend((current.expression, current.this))
        else:
            operands.append(current)
    return operands
