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
``HISTOGRAM(x, lower, upper, bins)``; model fits ``REGRESS``/``LOGISTIC`` alone in their SELECT
(:mod:`dpcurator.query.sql_fit`). Expressions: arithmetic, comparisons, AND/OR/NOT, IS [NOT]
NULL, IN (literals), BETWEEN, CASE, and ABS, ROUND, FLOOR, CEIL, LOWER, UPPER, LENGTH, COALESCE.

Everything else is refused with :class:`~dpcurator.errors.UnsupportedQueryError` naming the
construct: several statements, anything but SELECT, joins, subqueries, CTEs, set operations,
window functions, DISTINCT, HAVING, LIMIT/OFFSET, ORDER BY on non-output columns, SELECT of
non-grouped columns, ``*``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Literal

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokenizer_core import Token, TokenType

from dpcurator._validation import fail
from dpcurator.errors import UnsupportedQueryError
from dpcurator.query import builder, ir
from dpcurator.query.limits import (
    MAX_EXPRESSION_DEPTH,
    MAX_SQL_LENGTH,
    check_at_most,
    check_depth,
    depth_exceeded,
)
from dpcurator.query.schema import Metadata
from dpcurator.query.typecheck import literal_type

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


#: The model fits of the SQL form (:mod:`dpcurator.query.sql_fit`): function -> fit kind.
FIT_FUNCTIONS: dict[str, Literal["linear_regression", "logistic_regression"]] = {
    "regress": "linear_regression",
    "logistic": "logistic_regression",
}

_DIALECT = Dialect.get_or_raise("duckdb")

#: Tokens that open a nesting level of the parser, and those that close one.
_OPENING = frozenset({TokenType.L_PAREN, TokenType.CASE})
_CLOSING = frozenset({TokenType.R_PAREN, TokenType.END})
#: Prefix operators: each one in a row nests the parser one level deeper.
_PREFIX = frozenset({TokenType.NOT, TokenType.DASH, TokenType.PLUS, TokenType.TILDE})
#: Tokens after which ``-`` and ``+`` are binary operators, not prefixes.
_OPERAND_ENDS = frozenset(
    {
        TokenType.VAR,
        TokenType.IDENTIFIER,
        TokenType.NUMBER,
        TokenType.STRING,
        TokenType.R_PAREN,
        TokenType.END,
        TokenType.NULL,
        TokenType.TRUE,
        TokenType.FALSE,
    }
)
#: Wrapper levels of a parsed SELECT around its expressions (SELECT, alias, column name).
_TREE_WRAPPERS = 3
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
_PARSE_FAILURE = "The SQL could not be parsed"


def parse_sql(sql: str, metadata: Metadata) -> builder.Query:
    """Parse one SELECT statement into a :class:`~dpcurator.query.builder.Query`.

    The text is checked against :data:`~dpcurator.query.limits.MAX_SQL_LENGTH` and its nesting
    against :data:`~dpcurator.query.limits.MAX_EXPRESSION_DEPTH` on the tokens, before the
    (recursive) parser runs, and again on the tree before it is translated.

    Raises:
        UnsupportedQueryError: for syntax errors, limits and every construct outside the subset.
        DomainError: for unknown tables or columns.
    """
    return _Translator(metadata).select(parse_select(sql))


def parse_select(sql: str) -> exp.Select:
    """The one SELECT statement of ``sql``, checked against the text's limits (see
    :func:`parse_sql`), not yet translated."""
    if not isinstance(sql, str) or not sql.strip():
        raise fail("sql", "query", "a non-empty SQL string", sql)
    check_at_most("The SQL text length", len(sql), "MAX_SQL_LENGTH", MAX_SQL_LENGTH)
    tokens = _tokenize(sql)
    _check_token_nesting(tokens)
    statements = _parse(tokens, sql)
    if len(statements) != 1:
        raise UnsupportedQueryError(
            f"Exactly one SQL statement is accepted; got {len(statements)} (stacked statements "
            "are refused)."
        )
    statement = statements[0]
    if not isinstance(statement, exp.Select):
        first = tokens[0]
        if first.token_type in (TokenType.VAR, TokenType.IDENTIFIER):
            raise UnsupportedQueryError(
                f"Only SELECT queries are accepted; the text starts with {first.text!r}, which "
                "is not a SQL keyword (check the spelling of SELECT)."
            )
        raise UnsupportedQueryError(
            f"Only SELECT queries are accepted; got a {statement.key.upper()} statement."
        )
    tree: exp.Expr = statement
    check_depth(tree, _tree_children, slack=_TREE_WRAPPERS)
    return statement


def from_table(node: exp.Select, metadata: Metadata) -> str:
    """The private table a SELECT reads: the metadata's table (anything else is refused)."""
    return _Translator(metadata)._table(node)


def _clean(text: str) -> str:
    """sqlglot's message without terminal colour codes, on one line."""
    return " ".join(_ANSI_ESCAPE.sub("", text).split())


def _tokenize(sql: str) -> list[Token]:
    try:
        tokens: list[Token] = _DIALECT.tokenize(sql)
    except TokenError as exc:
        raise UnsupportedQueryError(
            f"{_PARSE_FAILURE}: it has an unterminated string or quoted name, or a character "
            f"outside SQL ({_clean(str(exc))[:200]})."
        ) from exc
    if not tokens:
        raise UnsupportedQueryError(f"{_PARSE_FAILURE}: it holds no SQL statement.")
    return tokens


def _check_token_nesting(tokens: list[Token]) -> None:
    """Refuse nesting beyond MAX_EXPRESSION_DEPTH from the tokens alone: parentheses, CASE and
    runs of prefix operators (NOT, unary minus) are what the parser recurses on."""
    bases = [0]
    run = 0
    previous: TokenType | None = None
    for token in tokens:
        kind = token.token_type
        if kind in _PREFIX and (kind == TokenType.NOT or previous not in _OPERAND_ENDS):
            run += 1
        elif kind in _OPENING:
            bases.append(bases[-1] + run + 1)
            run = 0
        elif kind in _CLOSING:
            if len(bases) > 1:
                bases.pop()
            run = 0
        else:
            run = 0
        if bases[-1] + run > MAX_EXPRESSION_DEPTH:
            raise depth_exceeded()
        previous = kind


def _parse(tokens: list[Token], sql: str) -> list[exp.Expr]:
    try:
        parsed = _DIALECT.parser().parse(tokens, sql)
    except ParseError as exc:
        detail = exc.errors[0] if exc.errors else {}
        where = f" at line {detail.get('line')}, column {detail.get('col')}" if detail else ""
        description = _clean(str(detail.get("description", exc)))
        raise UnsupportedQueryError(f"{_PARSE_FAILURE}{where}: {description}.") from exc
    except RecursionError:  # only when the caller's own stack is already deep
        raise depth_exceeded() from None
    except Exception as exc:  # sqlglot raises assorted errors on malformed text
        raise UnsupportedQueryError(
            f"{_PARSE_FAILURE} ({type(exc).__name__}); check the syntax of the query."
        ) from exc
    return [statement for statement in parsed if statement is not None]


def _tree_children(node: exp.Expr) -> Iterable[tuple[exp.Expr, int]]:
    """Children of a parsed node with the depth each adds: parentheses and CASE branches add
    none (their content is the level), nor does an operand of the same AND or OR chain."""
    chain = isinstance(node, exp.And | exp.Or)
    for child in node.iter_expressions():
        same = chain and type(child) is type(node)
        yield child, 0 if same or isinstance(child, exp.Paren | exp.If) else 1


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
            value, lower, upper = self._clamped(node.this)
            return maker(value, lower=lower, upper=upper)
        if isinstance(node, exp.Quantile):
            value, lower, upper = self._clamped(node.this)
            p = self._number(node.args["quantile"])
            return builder.quantile(value, p, lower=lower, upper=upper)
        if isinstance(node, exp.WithinGroup) and isinstance(node.this, exp.PercentileCont):
            order = node.expression
            if not isinstance(order, exp.Order) or len(order.expressions) != 1:
                raise UnsupportedQueryError("PERCENTILE_CONT needs WITHIN GROUP (ORDER BY x).")
            value, lower, upper = self._clamped(order.expressions[0].this)
            p = self._number(node.this.this)
            return builder.quantile(value, p, lower=lower, upper=upper)
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
        if isinstance(node, exp.Anonymous) and node.name.lower() in FIT_FUNCTIONS:
            raise UnsupportedQueryError(
                f"{node.name.upper()}(...) is a model fit: it has no query plan or estimate; "
                "release it alone (SELECT REGRESS(y, x1, ...) FROM t) with Session.sql or "
                "Session.fit, and estimate it with POST /v1/datasets/{id}/fits:estimate."
            )
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

    def _clamped(
        self, node: exp.Expression
    ) -> tuple[builder.Expression, float | None, float | None]:
        """An aggregate's argument, with the bounds of ``CLAMP(x, lower, upper)`` when the
        whole argument is one (the aggregate then clamps its values to these public bounds)."""
        if not _is_clamp(node):
            return builder.Expression(self._value(node)), None, None
        args = node.expressions
        if len(args) != 3:
            raise UnsupportedQueryError("CLAMP takes (x, lower, upper).")
        value = builder.Expression(self._value(args[0]))
        return value, self._number(args[1]), self._number(args[2])

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
        if _is_clamp(node):
            raise UnsupportedQueryError(
                "CLAMP(x, lower, upper) is supported only as the whole argument of an aggregate, "
                "e.g. SUM(CLAMP(x, 0, 100))."
            )
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


def _literal(value: ir.ScalarValue) -> ir.Lit:
    """A literal, refused at once when no engine can bind it (beyond int64, not finite)."""
    literal_type(value)
    return ir.Lit(value)


def _is_clamp(node: exp.Expression) -> bool:
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
