"""The fluent, immutable query builder (the Python front end; :mod:`~dpcurator.query.frontend.sql`
is the other one).

>>> from dpcurator.query.frontend.row_expressions import col
>>> q = (Query("pums").filter(col("age") >= 18).group_by("sex")
...      .agg(count().alias("n"), mean("income")))
>>> [a.output_name for a in q.aggregates]
['n', 'mean_income']

Every method returns a new frozen :class:`Query`; nothing runs until a session releases it. Its
statistics are :class:`Aggregate` values (``count``, ``mean``, ...); the row-level expressions they
read (``col``, ``lit``, ``when``) are :mod:`~dpcurator.query.frontend.row_expressions`.

``sum`` is exported as ``sum_`` (and as ``sum`` for ``dpc.sum``); it is not the builtin.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from dpcurator._validation import check_int, check_positive, check_probability, check_real, fail
from dpcurator.query import ir
from dpcurator.query.frontend.row_expressions import Expression, to_ir
from dpcurator.query.plan.limits import check_expression_depth

AggregateKind = Literal[
    "count", "count_persons", "sum", "mean", "variance", "stddev", "quantile", "histogram"
]


def _expr_arg(owner: str, value: object) -> ir.Expr:
    if isinstance(value, str):
        return ir.Col(value)
    if isinstance(value, Expression):
        return value.node
    raise fail(owner, "expr", "a column name or a dpcurator expression", value)


def _default_name(kind: str, expr: ir.Expr | None) -> str:
    if expr is None:
        return kind
    if isinstance(expr, ir.Col):
        return f"{kind}_{expr.name}"
    return f"{kind}_expr"


@dataclass(frozen=True)
class Aggregate:
    """One requested statistic (what the user asks; the planner decides how).

    Attributes:
        kind: the statistic.
        expr: the value it reads (None for COUNT(*)).
        name: the output column name (a default is derived from kind and column).
        p: the quantile level (quantile only).
        bins: the number of equal-width bins (histogram only).
        lower, upper: bounds for ``expr`` overriding the ones inferred from metadata.
        weight: the share of the query's budget, relative to the other aggregates (default 1).
    """

    kind: AggregateKind
    expr: ir.Expr | None = None
    name: str | None = None
    p: float | None = None
    bins: int = 0
    lower: float | None = None
    upper: float | None = None
    weight: float = 1.0

    def __post_init__(self) -> None:
        owner = f"aggregate {self.kind}"
        check_positive(owner, "weight", self.weight)
        if self.kind == "quantile":
            check_probability(owner, "p", self.p)
        if self.kind == "histogram":
            check_int(owner, "bins", self.bins, minimum=1)
        if (self.lower is None) != (self.upper is None):
            raise fail(owner, "lower/upper", "given together", (self.lower, self.upper))
        if (
            self.lower is not None
            and self.upper is not None
            and not check_real(owner, "lower", self.lower) < check_real(owner, "upper", self.upper)
        ):
            raise fail(owner, "upper", f"> lower ({self.lower})", self.upper)
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise fail(owner, "name", "a non-empty string", self.name)

    @property
    def output_name(self) -> str:
        """The output column name."""
        return self.name or _default_name(self.kind, self.expr)

    def alias(self, name: str) -> Aggregate:
        """The same aggregate under another output name."""
        return replace(self, name=name)

    def with_weight(self, weight: float) -> Aggregate:
        """The same aggregate with another budget weight."""
        return replace(self, weight=weight)


def _bounded(
    kind: AggregateKind,
    expr: str | Expression,
    bins: int = 0,
    *,
    lower: float | None,
    upper: float | None,
    name: str | None,
    weight: float,
) -> Aggregate:
    """An aggregate of a bounded value (its name defaults lazily, from kind and column)."""
    return Aggregate(kind, _expr_arg(kind, expr), name, None, bins, lower, upper, weight)


def _quantile(
    owner: str,
    expr: str | Expression,
    p: float,
    *,
    lower: float | None,
    upper: float | None,
    name: str | None,
    weight: float,
    suffix: str = "",
) -> Aggregate:
    """The p-quantile requested as ``owner`` (named from owner, column and ``suffix``)."""
    node = _expr_arg(owner, expr)
    label = name or f"{_default_name(owner, node)}{suffix}"
    return Aggregate("quantile", node, label, p, 0, lower, upper, weight)


def count(
    expr: str | Expression | None = None, *, name: str | None = None, weight: float = 1.0
) -> Aggregate:
    """COUNT(*) (rows), or COUNT(expr) (rows where expr is not NULL)."""
    node = None if expr is None else _expr_arg("count", expr)
    return Aggregate("count", node, name=name, weight=weight)


def count_persons(*, name: str | None = None, weight: float = 1.0) -> Aggregate:
    """COUNT(DISTINCT person): the number of distinct persons (privacy units)."""
    return Aggregate("count_persons", None, name=name, weight=weight)


def sum_(
    expr: str | Expression,
    *,
    lower: float | None = None,
    upper: float | None = None,
    name: str | None = None,
    weight: float = 1.0,
) -> Aggregate:
    """SUM(expr) of values clamped to their public bounds (NULL/NaN replaced by the fill value)."""
    return _bounded("sum", expr, lower=lower, upper=upper, name=name, weight=weight)


def mean(
    expr: str | Expression,
    *,
    lower: float | None = None,
    upper: float | None = None,
    name: str | None = None,
    weight: float = 1.0,
) -> Aggregate:
    """AVG(expr) as a noisy (centred) sum divided by a noisy count."""
    return _bounded("mean", expr, lower=lower, upper=upper, name=name, weight=weight)


def variance(
    expr: str | Expression,
    *,
    lower: float | None = None,
    upper: float | None = None,
    name: str | None = None,
    weight: float = 1.0,
) -> Aggregate:
    """VARIANCE(expr) (sample variance) from noisy count, sum and sum of squares."""
    return _bounded("variance", expr, lower=lower, upper=upper, name=name, weight=weight)


def stddev(
    expr: str | Expression,
    *,
    lower: float | None = None,
    upper: float | None = None,
    name: str | None = None,
    weight: float = 1.0,
) -> Aggregate:
    """STDDEV(expr): the square root of :func:`variance`."""
    return _bounded("stddev", expr, lower=lower, upper=upper, name=name, weight=weight)


def quantile(
    expr: str | Expression,
    p: float,
    *,
    lower: float | None = None,
    upper: float | None = None,
    name: str | None = None,
    weight: float = 1.0,
) -> Aggregate:
    """The p-quantile, chosen by the exponential mechanism (permute-and-flip) over candidates."""
    return _quantile(
        "quantile", expr, p, lower=lower, upper=upper, name=name, weight=weight, suffix=f"_{p:g}"
    )


def median(
    expr: str | Expression,
    *,
    lower: float | None = None,
    upper: float | None = None,
    name: str | None = None,
    weight: float = 1.0,
) -> Aggregate:
    """The median (the 0.5-quantile)."""
    return _quantile("median", expr, 0.5, lower=lower, upper=upper, name=name, weight=weight)


def min_(
    expr: str | Expression,
    *,
    lower: float | None = None,
    upper: float | None = None,
    name: str | None = None,
    weight: float = 1.0,
) -> Aggregate:
    """MIN(expr) as the DP 0-quantile (an extreme quantile, not the exact minimum)."""
    return _quantile("min", expr, 0.0, lower=lower, upper=upper, name=name, weight=weight)


def max_(
    expr: str | Expression,
    *,
    lower: float | None = None,
    upper: float | None = None,
    name: str | None = None,
    weight: float = 1.0,
) -> Aggregate:
    """MAX(expr) as the DP 1-quantile (an extreme quantile, not the exact maximum)."""
    return _quantile("max", expr, 1.0, lower=lower, upper=upper, name=name, weight=weight)


def histogram(
    expr: str | Expression,
    bins: int = 10,
    *,
    lower: float | None = None,
    upper: float | None = None,
    name: str | None = None,
    weight: float = 1.0,
) -> Aggregate:
    """Counts in ``bins`` equal-width public bins over [lower, upper] (bounds from metadata)."""
    return _bounded("histogram", expr, bins, lower=lower, upper=upper, name=name, weight=weight)


@dataclass(frozen=True)
class Query:
    """An immutable aggregate query over one private table.

    Attributes:
        table: the table name (resolved against the metadata by the planner).
        where: the row filter (None keeps every row).
        derived: columns defined by :meth:`with_column` (already substituted where used).
        groups: the grouping columns (set by :meth:`group_by`).
        aggregates: the requested statistics.
        order_by: output columns to sort the released rows by, with a descending flag
            (post-processing of released values).
    """

    table: str
    where: ir.Expr | None = None
    derived: tuple[tuple[str, ir.Expr], ...] = ()
    groups: tuple[ir.GroupColumn, ...] = ()
    aggregates: tuple[Aggregate, ...] = ()
    order_by: tuple[tuple[str, bool], ...] = field(default=())

    def _resolve(self, node: ir.Expr) -> ir.Expr:
        if not self.derived:
            return node
        check_expression_depth(node)  # before the substitution recurses
        return substitute(node, dict(self.derived))

    def filter(self, predicate: Expression) -> Query:
        """Keep rows where ``predicate`` is TRUE (ANDed with earlier filters)."""
        node = self._resolve(to_ir(predicate))
        where = node if self.where is None else ir.And((self.where, node))
        return replace(self, where=where)

    def with_column(self, name: str, expr: Expression) -> Query:
        """Define a derived column usable by later filters, groupings and aggregates."""
        if not isinstance(name, str) or not name:
            raise fail("Query.with_column", "name", "a non-empty string", name)
        return replace(self, derived=(*self.derived, (name, self._resolve(to_ir(expr)))))

    def group_by(self, *columns: str | Expression) -> Query:
        """Group by columns (names) or expressions (named ``group_<i>``)."""
        groups = list(self.groups)
        for column in columns:
            if isinstance(column, str):
                groups.append(ir.GroupColumn(column, self._resolve(ir.Col(column))))
            elif isinstance(column, Expression):
                name = (
                    column.node.name if isinstance(column.node, ir.Col) else f"group_{len(groups)}"
                )
                groups.append(ir.GroupColumn(name, self._resolve(column.node)))
            else:
                raise fail("Query.group_by", "columns", "column names or expressions", column)
        return replace(self, groups=tuple(groups))

    def agg(self, *aggregates: Aggregate) -> Query:
        """Add statistics to release."""
        resolved = []
        for aggregate in aggregates:
            if not isinstance(aggregate, Aggregate):
                raise fail("Query.agg", "aggregates", "results of count(), mean(), ...", aggregate)
            expr = None if aggregate.expr is None else self._resolve(aggregate.expr)
            resolved.append(replace(aggregate, expr=expr))
        return replace(self, aggregates=(*self.aggregates, *resolved))

    def sort(self, *columns: str, descending: bool = False) -> Query:
        """Sort the released rows by output columns (post-processing)."""
        return replace(self, order_by=(*self.order_by, *((c, descending) for c in columns)))


def substitute(node: ir.Expr, columns: dict[str, ir.Expr]) -> ir.Expr:
    """Replace references to derived columns by their defining expressions."""
    return ir.map_columns(node, lambda c: columns.get(c.name, c))


sum = sum_  # ``dpc.sum``; the builtin is not used in this module
