"""Linear and counting queries over a public domain, built from public inputs only.

A linear query is a weight in [0, 1] for every cell of the domain
(:class:`~dpcurator.synth.domain.SynthDomain`, cells in row-major order of the codes); its answer
on a histogram ``h`` is ``sum(w * h)``. A counting query ``COUNT(*) WHERE c1 IN (...) AND c2 =
...`` is the 0/1 weight of the cells that satisfy every condition; :func:`counting_where` reads
one from SQL. Every check is on the query and the public domain, so a malformed query is refused
(ParameterError or UnsupportedQueryError, free) before any noise.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from dpcurator._validation import fail
from dpcurator.errors import UnsupportedQueryError
from dpcurator.query import ir
from dpcurator.query.frontend.sql import parse_sql
from dpcurator.query.schema import Metadata
from dpcurator.synth.domain import ColumnDomain, SynthDomain

Weights = npt.NDArray[np.float64]


def _indicator(owner: str, column: ColumnDomain, wanted: object) -> Weights:
    """0/1 over ``column``'s codes: the codes whose value (a key, or a bin index for a binned
    column) is ``wanted`` or one of the values of a list/tuple/set ``wanted``."""
    values = list(wanted) if isinstance(wanted, list | tuple | set | frozenset) else [wanted]
    codes = column.group_values()
    indicator = np.zeros(column.size, dtype=np.float64)
    for value in values:
        matches = [i for i, code in enumerate(codes) if _same(code, value)]
        if not matches:
            what = "keys" if column.keys is not None else "bin indices"
            raise fail(owner, column.name, f"values among the public {what} {list(codes)}", value)
        indicator[matches] = 1.0
    return indicator


def _same(code: ir.ScalarValue, value: object) -> bool:
    """Equality that keeps True apart from 1 (bool keys vs int keys)."""
    return isinstance(code, bool) == isinstance(value, bool) and code == value


def counting_query(domain: SynthDomain, where: Mapping[str, object]) -> Weights:
    """The 0/1 weights of ``COUNT(*) WHERE`` every ``column IN values`` of ``where`` holds.

    ``where`` maps a column of the domain to one value or a list of values: keys for a column
    with public keys, bin indices (0-based) for a binned column. An empty ``where`` counts every
    row of the domain.
    """
    owner = "counting_query"
    if not isinstance(where, Mapping):
        raise fail(owner, "where", "a mapping {column: value or list of values}", where)
    shape = tuple(c.size for c in domain.columns)
    weights = np.ones(shape, dtype=np.float64)
    for name, wanted in where.items():
        if name not in domain.names:
            raise fail(owner, "where", f"columns among {list(domain.names)}", name)
        axis = domain.names.index(name)
        indicator = _indicator(owner, domain.columns[axis], wanted)
        view = [1] * len(shape)
        view[axis] = shape[axis]
        weights = weights * indicator.reshape(view)
    return weights.reshape(-1)


def linear_query(domain: SynthDomain, weights: npt.ArrayLike) -> Weights:
    """Check ``weights`` (one per cell, or the domain's shape) are finite numbers in [0, 1]."""
    owner = "linear_query"
    cells = int(np.prod([c.size for c in domain.columns]))
    try:
        array = np.asarray(weights, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise fail(owner, "weights", "an array of numbers", type(weights).__name__) from None
    if array.size != cells:
        raise fail(owner, "weights", f"{cells} weights (one per cell)", f"{array.size} weights")
    if not bool(np.all((array >= 0) & (array <= 1))):  # NaN fails both comparisons
        raise fail(owner, "weights", "numbers in [0, 1]", "a weight outside [0, 1] or NaN")
    return array


def counting_where(sql: str, metadata: Metadata) -> dict[str, list[ir.ScalarValue]]:
    """The ``where`` of :func:`counting_query` for ``SELECT COUNT(*) FROM t [WHERE ...]`` whose
    condition is an AND of ``column = literal`` and ``column IN (literals)`` (a column named
    twice keeps the values both allow).

    Raises (free, from the text and the metadata only): UnsupportedQueryError for any other
    shape (GROUP BY, another aggregate, OR, NOT, ranges, expressions), DomainError for an
    unknown table or column.
    """
    query = parse_sql(sql, metadata)
    aggregates = query.aggregates
    if (
        query.groups
        or query.derived
        or len(aggregates) != 1
        or aggregates[0].kind != "count"
        or aggregates[0].expr is not None
    ):
        raise UnsupportedQueryError(
            "A counting query is SELECT COUNT(*) FROM <table> [WHERE ...]: one COUNT(*), "
            "no GROUP BY, no other aggregate."
        )
    conditions = () if query.where is None else _conjuncts(query.where)
    where: dict[str, list[ir.ScalarValue]] = {}
    for column, values in (_condition(c) for c in conditions):
        kept = where.get(column)
        where[column] = (
            values if kept is None else [v for v in kept if any(_same(v, w) for w in values)]
        )
    return where


def _conjuncts(node: ir.Expr) -> tuple[ir.Expr, ...]:
    if isinstance(node, ir.And):
        return tuple(c for arg in node.args for c in _conjuncts(arg))
    return (node,)


def _condition(node: ir.Expr) -> tuple[str, list[ir.ScalarValue]]:
    """``(column, allowed values)`` of one ``column = literal`` or ``column IN (...)``."""
    if isinstance(node, ir.In) and isinstance(node.arg, ir.Col):
        return node.arg.name, list(node.values)
    if isinstance(node, ir.Compare) and node.op == "=":
        if isinstance(node.left, ir.Col) and isinstance(node.right, ir.Lit):
            return node.left.name, [node.right.value]
        if isinstance(node.right, ir.Col) and isinstance(node.left, ir.Lit):
            return node.right.name, [node.left.value]
    raise UnsupportedQueryError(
        "A counting query's WHERE is an AND of `column = value` and `column IN (values)` over "
        "public-key columns; OR, NOT, ranges and expressions are not linear in the histogram of "
        "those keys."
    )
