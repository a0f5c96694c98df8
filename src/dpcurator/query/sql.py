"""The SQL front end: one SELECT of a supported subset, parsed with sqlglot into a :class:`Query`.

The SQL text is only ever parsed, never executed or re-emitted: identifiers are resolved against
the public metadata and literals become :class:`~dpcurator.query.ir.Lit` values, so no string built
from user input reaches an engine (SQL injection has nothing to inject into). Comments are
ignored.

Supported::

    SELECT <group columns>, <aggregates> FROM <table> [AS alias]
    [WHERE <predicate>] [GROUP BY <columns or expressions>] [ORDER BY <output columns>]

Aggregates: ``COUNT(*)``, ``COUNT(x)``, ``COUNT(DISTINCT <person column>)``, ``SUM``, ``AVG``,
``VARIANCE``/``VAR_SAMP``, ``STDDEV``/``STDDEV_SAMP``, ``MEDIAN``, ``QUANTILE(x, p)``,
``PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY x)``, ``MIN``, ``MAX`` (DP extreme quantiles) and
``HISTOGRAM(x, lower, upper, bins)``. Expressions: arithmetic, comparisons, AND/OR/NOT, IS [NOT]
NULL, IN (literals), BETWEEN, CASE, and ABS, ROUND, FLOOR, CEIL, LOWER, UPPER, LENGTH, COALESCE.

Everything else is refused with :class:`~dpcurator.errors.UnsupportedQueryError` naming the
construct: several statements, anything but SELECT, joins, subqueries, CTEs, set operations,
window functions, DISTINCT, HAVING, LIMIT/OFFSET, ORDER BY on non-output columns, SELECT of
non-grouped columns, ``*``.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from dpcurator._validation import fail
from dpcurator.errors import UnsupportedQueryError
from dpcurator.query import builder, ir
from dpcurator.query.schema import Metadata

#: Clauses of a SELECT that are refused, with the name used in the message.
_REFUSED_CLAUSES = {
    "joins": "JOIN",
    "having": "HAVING",
    "limit": "LIMIT",
    "offset": "OFFSET",
    "with_": "WITH (common table expressions)",
    "qualify": "QUALIFY",
    "windows": "WINDOW",
    "laterals": "LATERAL",
    "distinct": "SELECT DISTINCT",
    "into": "SELECT INTO",
    "sample": "TABLESAMPLE",
}

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
_AGGREGATES = (
    exp.Count,
    exp.Sum,
    exp.Avg,
    exp.Variance,
    exp.VariancePop,
    exp.Stddev,
    exp.StddevSamp,
    exp.StddevPop,
    exp.Median,
    exp.Quantile,
    exp.PercentileCont,
    exp.PercentileDisc,
    exp.WithinGroup,
    exp.Min,
    exp.Max,
)


def parse_sql(sql: str, metadata: Metadata) -> builder.Query:
    """Parse one SELECT statement into a :class:`~dpcurator.query.builder.Query`.

    Raises:
        UnsupportedQueryError: for syntax errors and every construct outside the subset.
        DomainError: for unknown tables or columns.
    """
    if not isinstance(sql, str) or not sql.strip():
        raise fail("sql", "query", "a non-empty SQL string", sql)
    try:
        statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except ParseError as exc:
        raise UnsupportedQueryError(f"The SQL could not be parsed: {exc}") from exc
    if len(statements) != 1:
        raise UnsupportedQueryError(
            f"Exactly one SQL statement is accepted; got {len(statements)} (stacked statements "
            "are refused)."
        )
    statement = statements[0]
    if not isinstance(statement, exp.Select):
        raise UnsupportedQueryError(
            f"Only SELECT queries are accepted; got a {statement.key.upper()} statement."
        )
    return _Translator(metadata).select(statement)


class _Translator:
    """Translate one sqlglot SELECT tree (a new instance per query)."""

    def __init__(self, metadata: Metadata) -> None:
        self.metadata = metadata
        self.alias: str | None = None

    def select(self, node: exp.Select) -> builder.Query:
        self._refuse_constructs(node)
        table = self._table(node)
        where_clause = node.args.get("where")
        where = None
        if where_clause is not None:
            self._no_aggregates(where_clause.this, "WHERE")
            where = self.expr(where_clause.this)
        groups = self._groups(node)
        aggregates: list[builder.Aggregate] = []
        outputs: list[str] = []
        for item in node.expressions:
            alias = item.alias if isinstance(item, exp.Alias) else None
            inner = item.this if isinstance(item, exp.Alias) else item
            if isinstance(inner, exp.Star):
                raise UnsupportedQueryError("SELECT * is not supported: ask for aggregates.")
            if inner.find(*_AGGREGATES) is not None or isinstance(inner, exp.Anonymous):
                aggregate = self.aggregate(inner)
                if alias:
                    aggregate = aggregate.alias(alias)
                aggregates.append(aggregate)
                outputs.append(aggregate.output_name)
            else:
                outputs.append(self._select_group(inner, alias, groups))
        if not aggregates:
            raise UnsupportedQueryError("The query has no aggregate: nothing to release.")
        return builder.Query(
            table, where, (), tuple(groups), tuple(aggregates), self._order(node, outputs)
        )

    def _refuse_constructs(self, node: exp.Select) -> None:
        for arg, construct in _REFUSED_CLAUSES.items():
            if node.args.get(arg):
                raise UnsupportedQueryError(f"{construct} is not supported on private tables.")
        for refused, construct in (
            (exp.Subquery, "subqueries"),
            (exp.Window, "window functions"),
            (exp.Union, "UNION"),
            (exp.Intersect, "INTERSECT"),
            (exp.Except, "EXCEPT"),
            (exp.Join, "JOIN"),
        ):
            if node.find(refused) is not None:
                raise UnsupportedQueryError(f"{construct} are not supported on private tables.")
        if any(n is not node for n in node.find_all(exp.Select)):
            raise UnsupportedQueryError("subqueries are not supported on private tables.")

    def _groups(self, node: exp.Select) -> list[ir.GroupColumn]:
        group = node.args.get("group")
        if group is None:
            return []
        if any(group.args.get(a) for a in ("rollup", "cube", "grouping_sets")):
            raise UnsupportedQueryError("ROLLUP, CUBE and GROUPING SETS are not supported.")
        select_aliases = {
            e.alias: e.this for e in node.expressions if isinstance(e, exp.Alias) and e.alias
        }
        groups: list[ir.GroupColumn] = []
        for position, g in enumerate(group.expressions):
            if isinstance(g, exp.Literal) and not g.is_string:
                raise UnsupportedQueryError("GROUP BY position is not supported; name the column.")
            if isinstance(g, exp.Column) and not g.table and g.name in select_aliases:
                source = select_aliases[g.name]
                self._no_aggregates(source, "GROUP BY")
                groups.append(ir.GroupColumn(g.name, self.expr(source)))
                continue
            self._no_aggregates(g, "GROUP BY")
            name = g.name if isinstance(g, exp.Column) else f"group_{position}"
            groups.append(ir.GroupColumn(name, self.expr(g)))
        return groups

    def _select_group(
        self, inner: exp.Expression, alias: str | None, groups: list[ir.GroupColumn]
    ) -> str:
        """The output name of a selected grouping column (renamed by its alias)."""
        translated = self.expr(inner)
        for index, group in enumerate(groups):
            if group.expr == translated or (alias is not None and group.name == alias):
                if alias and alias != group.name:
                    groups[index] = ir.GroupColumn(alias, group.expr)
                return groups[index].name
        raise UnsupportedQueryError(
            f"The selected expression {inner.sql()!r} is neither an aggregate nor a GROUP BY "
            "column: row-level values of private tables cannot be released."
        )

    # ------------------------------------------------------------------------------------------

    def _table(self, node: exp.Select) -> str:
        source = node.args.get("from_") or node.args.get("from")
        if source is None:
            raise UnsupportedQueryError("The query has no FROM clause.")
        table = source.this
        if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
            raise UnsupportedQueryError(
                f"FROM must name the private table; got {table.sql()!r} (subqueries, table "
                "functions and file reads are not supported)."
            )
        parts = tuple(p for p in (table.catalog, table.db, table.name) if p)
        if not self.metadata.has_table(parts):
            raise UnsupportedQueryError(
                f"Unknown table {'.'.join(parts)!r}: this session serves {self.metadata.table!r}."
            )
        self.alias = table.alias or None
        return self.metadata.table

    def _no_aggregates(self, node: exp.Expression, clause: str) -> None:
        found = node.find(*_AGGREGATES)
        if found is not None:
            raise UnsupportedQueryError(f"Aggregates are not allowed in {clause}: {found.sql()!r}.")

    def _order(self, node: exp.Select, outputs: list[str]) -> tuple[tuple[str, bool], ...]:
        order = node.args.get("order")
        if order is None:
            return ()
        keys = []
        for ordered in order.expressions:
            target = ordered.this
            if not isinstance(target, exp.Column) or target.table or target.name not in outputs:
                raise UnsupportedQueryError(
                    f"ORDER BY {target.sql()!r} is not supported: order only by output columns "
                    f"({', '.join(outputs)}); ordering private rows is refused."
                )
            keys.append((target.name, bool(ordered.args.get("desc"))))
        return tuple(keys)

    # ------------------------------------------------------------------------------------------
    # Aggregates

    def aggregate(self, node: exp.Expression) -> builder.Aggregate:
        if isinstance(node, exp.Count):
            return self._count(node)
        simple: dict[type[exp.Expression], Callable[..., builder.Aggregate]] = {
            exp.Sum: builder.sum_,
            exp.Avg: builder.mean,
            exp.Variance: builder.variance,
            exp.Stddev: builder.stddev,
            exp.StddevSamp: builder.stddev,
            exp.Median: builder.median,
            exp.Min: builder.min_,
            exp.Max: builder.max_,
        }
        maker = simple.get(type(node))
        if maker is not None:
            if node.args.get("expressions"):
                raise UnsupportedQueryError(f"{node.key.upper()} takes one argument.")
            return maker(builder.Expression(self._value(node.this)))
        if isinstance(node, exp.Quantile):
            return builder.quantile(
                builder.Expression(self._value(node.this)), self._number(node.args["quantile"])
            )
        if isinstance(node, exp.WithinGroup) and isinstance(node.this, exp.PercentileCont):
            order = node.expression
            if not isinstance(order, exp.Order) or len(order.expressions) != 1:
                raise UnsupportedQueryError("PERCENTILE_CONT needs WITHIN GROUP (ORDER BY x).")
            return builder.quantile(
                builder.Expression(self._value(order.expressions[0].this)),
                self._number(node.this.this),
            )
        if isinstance(node, exp.Anonymous) and node.name.lower() == "histogram":
            args = node.expressions
            if len(args) != 4:
                raise UnsupportedQueryError("HISTOGRAM takes (x, lower, upper, bins).")
            bins = self._number(args[3])
            if not float(bins).is_integer():
                raise UnsupportedQueryError(f"HISTOGRAM bins must be an integer; got {bins}.")
            return builder.histogram(
                builder.Expression(self._value(args[0])),
                int(bins),
                lower=self._number(args[1]),
                upper=self._number(args[2]),
            )
        if isinstance(node, exp.Variance | exp.VariancePop | exp.StddevPop | exp.PercentileDisc):
            raise UnsupportedQueryError(f"{node.key.upper()} is not supported.")
        if isinstance(node, exp.Anonymous):
            raise UnsupportedQueryError(f"Unknown function {node.name.upper()}.")
        raise UnsupportedQueryError(
            f"{node.sql()!r}: aggregates must be the outermost expression of a SELECT item "
            "(arithmetic on aggregates is not supported)."
        )

    def _count(self, node: exp.Count) -> builder.Aggregate:
        arg = node.this
        if isinstance(arg, exp.Star):
            return builder.count()
        if isinstance(arg, exp.Distinct):
            columns = arg.expressions
            person = self.metadata.person_column
            if (
                len(columns) == 1
                and isinstance(columns[0], exp.Column)
                and person is not None
                and columns[0].name.lower() == person.lower()
            ):
                return builder.count_persons()
            raise UnsupportedQueryError(
                "COUNT(DISTINCT ...) is supported only on the person column "
                f"({person or 'none: this table has row-level privacy'})."
            )
        return builder.count(builder.Expression(self._value(arg)))

    def _value(self, node: exp.Expression) -> ir.Expr:
        self._no_aggregates(node, "aggregate arguments")
        return self.expr(node)

    def _number(self, node: exp.Expression) -> float:
        value = self.expr(node)
        if not isinstance(value, ir.Lit) or isinstance(value.value, bool | str | None):
            raise UnsupportedQueryError(f"Expected a numeric literal; got {node.sql()!r}.")
        return float(value.value)

    # ------------------------------------------------------------------------------------------
    # Row-level expressions

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
            return ir.Lit(node.this if node.is_string else _parse_number(node.this))
        if isinstance(node, exp.Boolean):
            return ir.Lit(bool(node.this))
        if isinstance(node, exp.Null):
            return ir.Lit(None)
        if isinstance(node, exp.Neg):
            inner = self.expr(node.this)
            if isinstance(inner, ir.Lit) and isinstance(inner.value, int | float):
                return ir.Lit(-inner.value)
            return ir.BinOp("-", ir.Lit(0), inner)
        return None

    def _logic(self, node: exp.Expression) -> ir.Expr:
        if isinstance(node, exp.And):
            return ir.And((self.expr(node.this), self.expr(node.expression)))
        if isinstance(node, exp.Or):
            return ir.Or((self.expr(node.this), self.expr(node.expression)))
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
        raise UnsupportedQueryError(
            f"The SQL construct {node.sql()!r} ({node.key}) is not supported."
        )

    def _column(self, node: exp.Column) -> ir.Expr:
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
