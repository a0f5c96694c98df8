"""The SQL front end: one SELECT of a supported subset, parsed with sqlglot into a :class:`Query`.

The SQL text is only ever parsed, never executed or re-emitted: identifiers are resolved against
the public metadata and literals become :class:`~dpcurator.query.ir.Lit` values, so no string built
from user input reaches an engine (SQL injection has nothing to inject into). Comments are
ignored. This module translates the statement (clauses, grouping, aggregates);
:mod:`dpcurator.query.frontend.text` turns the text into a parsed SELECT under the length and
nesting limits, and :mod:`dpcurator.query.frontend.expressions` translates row-level expressions.

Supported::

    SELECT <group columns>, <aggregates> FROM <table> [AS alias]
    [[INNER | LEFT] JOIN <public table> [AS p] ON <table column> = <p column>] ...
    [WHERE <predicate>] [GROUP BY <columns or expressions>] [ORDER BY <output columns>]

Aggregates: ``COUNT(*)``, ``COUNT(x)``, ``COUNT(DISTINCT <person column>)``, ``SUM``, ``AVG``,
``VARIANCE``/``VAR_SAMP``, ``STDDEV``/``STDDEV_SAMP``, ``MEDIAN``, ``QUANTILE(x, p)``,
``PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY x)``, ``MIN``, ``MAX`` (DP extreme quantiles) and
``HISTOGRAM(x, lower, upper, bins)``; model fits ``REGRESS``/``LOGISTIC`` alone in their SELECT
(:mod:`dpcurator.query.frontend.fit`), and so are the hypothesis tests ``TTEST``, ``ANOVA``,
``PROPTEST``, ``CHI2`` and ``KS`` (:mod:`dpcurator.query.frontend.hypothesis`). Expressions:
arithmetic, comparisons, AND/OR/NOT, IS [NOT] NULL, IN (literals), BETWEEN, CASE, and ABS, ROUND,
FLOOR, CEIL, LOWER, UPPER, LENGTH, COALESCE.

Everything else is refused with :class:`~dpcurator.errors.UnsupportedQueryError` naming the
construct: several statements, anything but SELECT, joins other than with a registered public
table (:mod:`dpcurator.query.frontend.join`), subqueries, CTEs, set operations,
window functions, DISTINCT, HAVING, LIMIT/OFFSET, ORDER BY on non-output columns, SELECT of
non-grouped columns, ``*``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from sqlglot import exp

from dpcurator.errors import UnsupportedQueryError
from dpcurator.query import ir
from dpcurator.query.frontend import builder
from dpcurator.query.frontend.expressions import ExpressionTranslator, is_clamp
from dpcurator.query.frontend.join import read_joins
from dpcurator.query.frontend.row_expressions import Expression
from dpcurator.query.frontend.text import parse_select
from dpcurator.query.schema import Metadata

#: Clauses of a SELECT that are refused, with the name used in the message.
_REFUSED_CLAUSES = {
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


#: The model fits of the SQL form (:mod:`dpcurator.query.frontend.fit`): function -> fit kind.
FIT_FUNCTIONS: dict[str, Literal["linear_regression", "logistic_regression"]] = {
    "regress": "linear_regression",
    "logistic": "logistic_regression",
}


#: The hypothesis tests of the SQL form (:mod:`dpcurator.query.frontend.hypothesis`): function ->
#: test kind.
TEST_FUNCTIONS: dict[str, str] = {
    "ttest": "t",
    "anova": "anova",
    "proptest": "proportions",
    "chi2": "chi_square",
    "ks": "ks",
}


def parse_sql(sql: str, metadata: Metadata) -> builder.Query:
    """Parse one SELECT statement into a :class:`~dpcurator.query.frontend.builder.Query`.

    The text is checked against :data:`~dpcurator.query.plan.limits.MAX_SQL_LENGTH` and its nesting
    against :data:`~dpcurator.query.plan.limits.MAX_EXPRESSION_DEPTH` on the tokens, before the
    (recursive) parser runs, and again on the tree before it is translated.

    Raises:
        UnsupportedQueryError: for syntax errors, limits and every construct outside the subset.
        DomainError: for unknown tables or columns.
    """
    return _Translator(metadata).select(parse_select(sql))


def from_table(node: exp.Select, metadata: Metadata) -> str:
    """The private table a SELECT reads: the metadata's table (anything else is refused)."""
    return _Translator(metadata)._table(node)


class _Translator(ExpressionTranslator):
    """Translate one sqlglot SELECT tree (a new instance per query)."""

    def select(self, node: exp.Select) -> builder.Query:
        self._refuse_constructs(node)
        table = self._table(node)
        self.joins = read_joins(node, self.metadata, self.alias)
        where_clause = node.args.get("where")
        filters = [] if self.joins is None else self.joins.filters()
        if where_clause is not None:
            self._no_aggregates(where_clause.this, "WHERE")
            filters.append(self.expr(where_clause.this))
        where = None if not filters else filters[0] if len(filters) == 1 else ir.And(tuple(filters))
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
            p = self.number(node.args["quantile"])
            return builder.quantile(value, p, lower=lower, upper=upper)
        if isinstance(node, exp.WithinGroup) and isinstance(node.this, exp.PercentileCont):
            order = node.expression
            if not isinstance(order, exp.Order) or len(order.expressions) != 1:
                raise UnsupportedQueryError("PERCENTILE_CONT needs WITHIN GROUP (ORDER BY x).")
            value, lower, upper = self._clamped(order.expressions[0].this)
            p = self.number(node.this.this)
            return builder.quantile(value, p, lower=lower, upper=upper)
        if isinstance(node, exp.Anonymous) and node.name.lower() == "histogram":
            args = node.expressions
            if len(args) != 4:
                raise UnsupportedQueryError("HISTOGRAM takes (x, lower, upper, bins).")
            bins = self.number(args[3])
            if not float(bins).is_integer():
                raise UnsupportedQueryError(f"HISTOGRAM bins must be an integer; got {bins}.")
            return builder.histogram(
                Expression(self._value(args[0])),
                int(bins),
                lower=self.number(args[1]),
                upper=self.number(args[2]),
            )
        if isinstance(node, exp.Variance | exp.VariancePop | exp.StddevPop | exp.PercentileDisc):
            raise UnsupportedQueryError(f"{node.key.upper()} is not supported.")
        if isinstance(node, exp.Anonymous) and node.name.lower() in (
            *FIT_FUNCTIONS,
            *TEST_FUNCTIONS,
        ):
            fit = node.name.lower() in FIT_FUNCTIONS
            what, example = (
                ("a model fit", "SELECT REGRESS(y, x1, ...) FROM t")
                if fit
                else ("a hypothesis test", "SELECT TTEST(x, g) FROM t")
            )
            raise UnsupportedQueryError(
                f"{node.name.upper()}(...) is {what}, not a query plan: ask for it alone "
                f"({example}) with Session.sql or Session.estimate"
                + (" (or Session.fit)." if fit else ".")
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
        return builder.count(Expression(self._value(arg)))

    def _value(self, node: exp.Expression) -> ir.Expr:
        self._no_aggregates(node, "aggregate arguments")
        return self.expr(node)

    def _clamped(self, node: exp.Expression) -> tuple[Expression, float | None, float | None]:
        """An aggregate's argument, with the bounds of ``CLAMP(x, lower, upper)`` when the
        whole argument is one (the aggregate then clamps its values to these public bounds)."""
        if not is_clamp(node):
            return Expression(self._value(node)), None, None
        args = node.expressions
        if len(args) != 3:
            raise UnsupportedQueryError("CLAMP takes (x, lower, upper).")
        value = Expression(self._value(args[0]))
        return value, self.number(args[1]), self.number(args[2])
