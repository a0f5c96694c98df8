"""Public limits of one query: checked at parse and plan time, before any charge.

Each limit bounds work or memory that an analyst could otherwise make unbounded with a short
request, or keeps numbers inside the ranges the mechanisms compute exactly. All of them are
decided from the query text, the requested budget and the public metadata, never from the data,
so a refusal is free (nothing charged, no data touched) and reveals nothing. Refusals raise
:class:`~dpcurator.errors.UnsupportedQueryError` (:class:`~dpcurator.errors.ParameterError` for ε)
and name the limit and the value received.

============================  ==============  ====================================================
limit                         value           what it bounds
============================  ==============  ====================================================
``MAX_SQL_LENGTH``            20,000 chars    the SQL text (parsing time)
``MAX_EXPRESSION_DEPTH``      32 levels       nesting of parentheses, CASE, NOT, unary minus and
                                              operators (parser and planner recursion; a chain
                                              ``a AND b AND ...`` is one level)
``MAX_AGGREGATES``            64              aggregates per query (engine work per row)
``MAX_HISTOGRAM_BINS``        10,000          bins of one HISTOGRAM (plan size, engine memory)
``MAX_PUBLIC_GROUPS``         100,000         released groups: the product of the key sets
``MAX_KEYS_FROM_BOUNDS``      1,000           integers an int column's bounds may span to give
                                              it public keys (GROUP BY without declared keys)
``MIN_EPSILON``               1e-9            ε of one query (noise scales stay exact in int64)
``MAX_BOUND_MAGNITUDE``       1e300           |bounds| of an aggregated value (finite sums,
                                              differences and grids)
``MAX_FIT_FEATURES``          16              feature columns of one fit (a Gram plan has
                                              (d + 2)(d + 3)/2 aggregates; objective
                                              perturbation a (d + 1)² Hessian)
``MAX_FIT_BLOCKS``            20,000          blocks of one block-based fit (sample-and-aggregate
                                              fits one model per block: about 0.2 ms of CPU per
                                              block, 4.8 CPU-s at the limit; also caps the PTR
                                              default k = 200·T)
``MAX_SPARSE_QUERIES``        200             queries of one sparse vector request (each is
                                              parsed and planned: about 4 ms of CPU each)
``MAX_STREAM_TRACKED``        2,000,000       users a density or incidence stream keeps a state
                                              for (its universe, or its public ``sample_size``):
                                              the state is rewritten whole by every batch
``MAX_STREAM_STATE_BYTES``    1,000,000       bytes of that state (a bit a user for density,
                                              1-2 bytes for incidence, plus 8 a user for a
                                              sample's ids): at most about 0.15 s a batch
============================  ==============  ====================================================

The CPU times were measured on a 2-core machine (docs/sql.md, "Public limits"): the limits keep
each request under about 5 CPU-seconds, so that one request cannot tie a worker for long.

Why 32 levels: sqlglot parses by recursive descent and spends about 24 Python frames per
parenthesis; 32 levels keep a parse well inside Python's default limit of 1,000 frames.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final, TypeVar

from dpcurator.errors import UnsupportedQueryError
from dpcurator.query import ir

MAX_SQL_LENGTH: Final = 20_000
MAX_EXPRESSION_DEPTH: Final = 32
MAX_AGGREGATES: Final = 64
MAX_HISTOGRAM_BINS: Final = 10_000
MAX_PUBLIC_GROUPS: Final = 100_000
MAX_KEYS_FROM_BOUNDS: Final = 1_000
MIN_EPSILON: Final = 1e-9
MAX_BOUND_MAGNITUDE: Final = 1e300
MAX_FIT_FEATURES: Final = 16
MAX_FIT_BLOCKS: Final = 20_000
MAX_SPARSE_QUERIES: Final = 200
MAX_STREAM_TRACKED: Final = 2_000_000
MAX_STREAM_STATE_BYTES: Final = 1_000_000

Node = TypeVar("Node")


def exceeded(what: str, value: object, name: str, limit: object) -> UnsupportedQueryError:
    """The refusal of a query over a public limit (names the limit and the value)."""
    return UnsupportedQueryError(
        f"{what} is {value}, over the limit {name} = {limit} "
        "(dpcurator.query.plan.limits): simplify the query."
    )


def check_at_most(what: str, value: int, name: str, limit: int) -> None:
    """Refuse when ``value`` exceeds ``limit``."""
    if value > limit:
        raise exceeded(what, f"{value:,}", name, f"{limit:,}")


def check_expression_depth(node: ir.Expr) -> None:
    """Refuse an IR expression nested deeper than :data:`MAX_EXPRESSION_DEPTH` (an operand of an
    AND inside an AND, or of an OR inside an OR, stays on its parent's level)."""
    check_depth(node, _ir_children)


def _ir_children(node: ir.Expr) -> Iterable[tuple[ir.Expr, int]]:
    chain = isinstance(node, ir.And | ir.Or)
    return ((child, 0 if chain and type(child) is type(node) else 1) for child in ir.children(node))


def check_depth(
    root: Node, children: Callable[[Node], Iterable[tuple[Node, int]]], *, slack: int = 0
) -> None:
    """Refuse a tree deeper than ``MAX_EXPRESSION_DEPTH + slack`` without recursing.

    ``children(node)`` yields each child with the depth it adds (0 for a child that continues
    its parent's level, such as an operand of the same AND chain); ``slack`` allows for wrapper
    levels a tree has around its expressions. An explicit stack replaces recursion, and a path is
    abandoned at the first node past the limit.
    """
    limit = MAX_EXPRESSION_DEPTH + slack
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            raise depth_exceeded()
        stack.extend((child, depth + step) for child, step in children(node))


def depth_exceeded() -> UnsupportedQueryError:
    """The refusal of an expression nested deeper than :data:`MAX_EXPRESSION_DEPTH`."""
    return exceeded(
        "The expression nesting depth",
        f"over {MAX_EXPRESSION_DEPTH}",
        "MAX_EXPRESSION_DEPTH",
        MAX_EXPRESSION_DEPTH,
    )
