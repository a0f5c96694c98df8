"""The frozen intermediate representation shared by the front ends, the planner and the backends.

Two levels:

* **Expressions** (:class:`Col`, :class:`Lit`, :class:`BinOp`, ...) describe row-level values:
  filters, derived columns and the value an aggregate reads. Literals are values, never SQL text:
  backends bind them as parameters or engine literals, so no string-built SQL reaches an engine.
* **The exact-aggregate plan** (:class:`AggregatePlan`) is what a backend executes. It contains
  everything the engine must do — filter, bound each person's contribution, clamp, discretise,
  group, aggregate — and nothing random that matters for privacy. Backends return the EXACT
  aggregates (:class:`ExactResult`); noise is added afterwards by :mod:`dpcurator.mechanisms`.

Semantics that every backend must reproduce bit-for-bit (the in-memory backend is the oracle).

Expression evaluation is TOTAL: no data value makes an engine raise, because whether a release
answers must not depend on private data. Each expression has a static type decided from the
column types and literals alone (:func:`~dpcurator.query.backends.plan_checks.expr_type`): int
(int64), float (IEEE double), string, bool. Type mismatches (arithmetic on strings, string
compared with number, ...) are refused by the planner before any charge; a backend that meets
one anyway fails with the one constant ``ENGINE_FAILURE_MESSAGE``.

* S1 ``+ - *`` of two ints is the exact integer result, or NULL when it leaves int64;
  ``abs(-2**63)`` is NULL. ``round``, ``floor`` and ``ceil`` of an int are the int itself.
* S2 ``+ - *`` with a float operand converts the int operand to the nearest double and follows
  IEEE 754 (overflow is ±inf, inf - inf is NaN). ``/`` always divides the two operands converted to
  doubles, and is NULL when the divisor is zero (±0.0). ``round`` (half away from zero),
  ``floor`` and ``ceil`` of a double are doubles; ±inf and NaN are their own round, floor and ceil.
  ``abs`` of a double is its magnitude.
* CASE and ``coalesce`` whose results mix int and float are float (an int result is converted).
  ``length``, ``lower`` and ``upper`` apply to strings (length in code points). Known gap: the
  few letters whose full case mapping differs from the simple one (``upper('ß')``) map
  differently on DuckDB ('ẞ') than on Polars and memory ('SS'): values only, never an error.
* Comparisons of an int with a float compare the int converted to a double; NaN equals NaN and is
  above every other double (+inf included); -0.0 equals 0.0. Any side NULL makes NULL.
* Casts inside engines never raise (``TRY_CAST``, non-strict casts): a value that has no image
  is NULL.

* ``where`` keeps rows for which the predicate is TRUE (NULL counts as false).
* Group keys: when ``group_keys`` is given (public key sets), rows whose key is not in the set are
  dropped before contribution bounding. Groups absent from the data are NOT added by backends; the
  planner adds them from the public key set.
* Contribution bounding (``bound``, when ``bound.person_column`` is set): each person keeps at most
  ``max_groups`` groups and, within each kept group, at most ``max_rows_per_group`` rows. Which
  groups/rows are kept is decided by a deterministic hash ordering seeded by ``bound.seed``
  (utility only: privacy never depends on which rows are kept, only on how many). Row-level privacy
  (no person column) applies no bounding: each row is its own person.
* Aggregate values: ``value = fill`` if the expression is NULL or NaN, else
  clamp(expr, lower, upper) (±inf clamp to the bounds).
  ``sum`` returns sum(round_half_even(value / 2**grid_exponent) - offset) as an exact integer
  (fixed-point sum: the defence against float-sum sensitivity attacks, Casacuberta et al. 2022;
  ``offset`` is an integer number of grid steps, 0 unless the planner centres the values);
  ``sum_squares`` the same for value**2 on the grid of ``grid_exponent``: round(value**2 / 2**k);
  the division by 2**k is the multiplication by the factors of
  :func:`~dpcurator.query.backends.grid.grid_scales`, in double. Sums accumulate exactly (wider
  than int64) and each group's total is then clamped to [-(2**63-1), 2**63-1] grid units: a
  1-Lipschitz map, so the sensitivity is unchanged, and no sum is refused after the charge;
  ``count`` counts the rows of the group; ``count_persons`` counts distinct persons of the group;
  ``histogram`` counts rows per bin: bin = min(floor((value - lower) / (upper - lower) * bins),
  bins - 1), returned as an int64 array of length ``bins``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

# ----------------------------------------------------------------------------------------------
# Expressions

ScalarValue = int | float | str | bool | None

ArithmeticOp = Literal["+", "-", "*", "/"]
ComparisonOp = Literal["=", "!=", "<", "<=", ">", ">="]
FunctionName = Literal["abs", "round", "floor", "ceil", "lower", "upper", "length", "coalesce"]


@dataclass(frozen=True)
class Col:
    """A column of the private table (or a derived column defined earlier in the query)."""

    name: str


@dataclass(frozen=True)
class Lit:
    """A literal value (bound as a parameter by every backend)."""

    value: ScalarValue


@dataclass(frozen=True)
class BinOp:
    """Arithmetic: ``left op right``. Division by zero yields NULL on every backend."""

    op: ArithmeticOp
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Compare:
    """Comparison ``left op right`` (NULL if either side is NULL)."""

    op: ComparisonOp
    left: Expr
    right: Expr


@dataclass(frozen=True)
class And:
    """Logical conjunction of two or more predicates."""

    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Or:
    """Logical disjunction of two or more predicates."""

    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Not:
    """Logical negation."""

    arg: Expr


@dataclass(frozen=True)
class IsNull:
    """``arg IS NULL`` (NaN is not NULL here; aggregates treat both via ``fill``)."""

    arg: Expr


@dataclass(frozen=True)
class In:
    """``arg IN (values...)``."""

    arg: Expr
    values: tuple[ScalarValue, ...]


@dataclass(frozen=True)
class Between:
    """``low <= arg <= high``."""

    arg: Expr
    low: Expr
    high: Expr


@dataclass(frozen=True)
class Case:
    """``CASE WHEN c1 THEN v1 ... ELSE default END`` (default NULL when omitted)."""

    whens: tuple[tuple[Expr, Expr], ...]
    default: Expr | None = None


@dataclass(frozen=True)
class Func:
    """A whitelisted scalar function applied to arguments."""

    name: FunctionName
    args: tuple[Expr, ...]


Expr = Col | Lit | BinOp | Compare | And | Or | Not | IsNull | In | Between | Case | Func


def children(node: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of ``node``, in evaluation order (CASE: each condition, then
    its value, then the default)."""
    if isinstance(node, BinOp | Compare):
        return (node.left, node.right)
    if isinstance(node, And | Or | Func):
        return node.args
    if isinstance(node, Not | IsNull | In):
        return (node.arg,)
    if isinstance(node, Between):
        return (node.arg, node.low, node.high)
    if isinstance(node, Case):
        parts = tuple(x for pair in node.whens for x in pair)
        return parts if node.default is None else (*parts, node.default)
    return ()


def map_columns(node: Expr, column: Callable[[Col], Expr]) -> Expr:
    """The expression with every column reference ``c`` replaced by ``column(c)``."""
    if isinstance(node, Col):
        return column(node)
    if isinstance(node, Lit):
        return node
    if isinstance(node, BinOp):
        return BinOp(node.op, map_columns(node.left, column), map_columns(node.right, column))
    if isinstance(node, Compare):
        return Compare(node.op, map_columns(node.left, column), map_columns(node.right, column))
    if isinstance(node, And | Or):
        return type(node)(tuple(map_columns(a, column) for a in node.args))
    if isinstance(node, Not):
        return Not(map_columns(node.arg, column))
    if isinstance(node, IsNull):
        return IsNull(map_columns(node.arg, column))
    if isinstance(node, In):
        return In(map_columns(node.arg, column), node.values)
    if isinstance(node, Between):
        return Between(
            map_columns(node.arg, column),
            map_columns(node.low, column),
            map_columns(node.high, column),
        )
    if isinstance(node, Case):
        whens = tuple((map_columns(c, column), map_columns(v, column)) for c, v in node.whens)
        default = None if node.default is None else map_columns(node.default, column)
        return Case(whens, default)
    return Func(node.name, tuple(map_columns(a, column) for a in node.args))


# ----------------------------------------------------------------------------------------------
# The exact-aggregate plan

AggregateKind = Literal["count", "count_persons", "sum", "sum_squares", "histogram"]


@dataclass(frozen=True)
class ExactAggregate:
    """One exact aggregate the engine computes per group (see the module docstring)."""

    name: str
    kind: AggregateKind
    expr: Expr | None = None
    lower: float | None = None
    upper: float | None = None
    fill: float | None = None
    grid_exponent: int = 0
    bins: int = 0
    offset: int = 0


@dataclass(frozen=True)
class FixedPointColumn:
    """A column whose fixed-point values an engine may compute once, when it opens the table.

    Per row: ``round_half_even(clamp(column, lower, upper) / 2**grid_exponent)``, NULL where the
    column is NULL or NaN. This is exactly what a ``sum`` of the bare column with the same bounds
    and grid adds up before its fill and offset, so an engine holding the column answers such a
    sum with a plain integer SUM (and COUNT) and no per-row work. Bounds are public metadata, so
    computing the column reads nothing a query would not read.
    """

    column: str
    lower: float
    upper: float
    grid_exponent: int


@dataclass(frozen=True)
class BinCodeColumn:
    """A column whose fine histogram bins an engine may compute once, when it opens the table.

    Per row: ``min(floor((clamp(column, lower, upper) - lower) / (upper - lower) * 2**bits),
    2**bits - 1)`` (in [0, 2**bits); NULL where the column is NULL or NaN), with the float
    operations of a ``histogram``'s bin rule. Scaling by a power of two is exact and floor
    commutes with it, so the code divided by 2**(bits - b) is exactly the bin of a histogram of
    2**b bins over the same bounds (the upper bound in the last bin, as the rule puts it), and
    likewise the value of the quantile windows' ``floor((x - lower) / (upper - lower) * 2**b)``
    clamped to a window inside [0, 2**b) (:mod:`dpcurator.query.plan.quantile`: the upper bound's
    2**b and the code's 2**b - 1 both land in the window's last bin). Bounds are public
    metadata, so computing the column reads nothing a query would not read.
    """

    column: str
    lower: float
    upper: float
    bits: int


@dataclass(frozen=True)
class KeyCodeColumn:
    """A column whose public keys an engine may encode once, when it opens the table.

    Per row: the 0-based position of the column's value among ``keys``, NULL when the value is
    not one of them. Grouping a row-level plan by the small integer code instead of the value
    (then mapping codes back to keys and dropping the NULL code, which no public key has) gives
    the same groups; the keys are public metadata, so computing the codes reveals nothing.
    """

    column: str
    keys: tuple[ScalarValue, ...]


@dataclass(frozen=True)
class ContributionBound:
    """How many rows and groups each person may contribute (public metadata)."""

    person_column: str | None = None
    max_groups: int = 1
    max_rows_per_group: int = 1
    seed: int = 0


@dataclass(frozen=True)
class BoundingColumn:
    """Which rows contribution bounding keeps, which an engine may decide once per table.

    Per row: TRUE when ``bound`` keeps the row in a plan without ``where`` that is ungrouped
    (``group`` is None) or grouped by the bare column ``group.column`` alone with exactly the
    public keys ``group.keys``. Rows without a person, or (grouped) outside the keys, are FALSE.
    Like every bounding, the choice of a person's rows depends on that person's rows only
    (hashes of the person, the group and the whole row, seeded by ``bound.seed``), so it may
    serve every such plan: which rows are kept never changes how many (the sensitivity).
    """

    bound: ContributionBound
    group: KeyCodeColumn | None = None


@dataclass(frozen=True)
class PrecomputedColumns:
    """Columns an engine may compute once when it opens a table (all from public metadata)."""

    fixed_point: tuple[FixedPointColumn, ...] = ()
    key_codes: tuple[KeyCodeColumn, ...] = ()
    bounding: tuple[BoundingColumn, ...] = ()
    bin_codes: tuple[BinCodeColumn, ...] = ()


@dataclass(frozen=True)
class BlockSample:
    """Sample-and-aggregate's engine-side cap (issue 14): persons in blocks, a few per block.

    Applied to the table before anything else, and only with ``bound.person_column`` set (rows
    without a person are dropped). Each person p gets the block ``H(seed, p) mod blocks``, which
    the plan's expressions read as the int column ``column``; within each block the persons are
    ordered by a second keyed hash H'(seed, p) (then by p) and only the first ``per_block`` keep
    their rows. H is the engine's own hash (SHA-256 in memory, DuckDB ``hash``, Polars' struct
    hash, Spark ``xxhash64``): engines may pick other persons, never more. A person's block is a
    function of its id and the seed alone, and whether it is kept depends on its block's persons
    only: removing a person changes the rows of its own block (another person may enter it) and
    of no other block.
    """

    blocks: int
    per_block: int
    seed: int
    column: str = "__block"


@dataclass(frozen=True)
class GroupColumn:
    """A grouping column: a name and the expression that computes it."""

    name: str
    expr: Expr


@dataclass(frozen=True)
class AggregatePlan:
    """Everything a backend must compute for one release (see the module docstring)."""

    table: str
    aggregates: tuple[ExactAggregate, ...]
    where: Expr | None = None
    group_by: tuple[GroupColumn, ...] = ()
    group_keys: tuple[tuple[ScalarValue, ...], ...] | None = None
    bound: ContributionBound = field(default_factory=ContributionBound)
    sample: BlockSample | None = None


@dataclass(frozen=True)
class ExactResult:
    """Exact aggregates per group present in the data.

    ``groups`` maps a key tuple (``()`` for an ungrouped plan; an ungrouped plan always has this one
    entry, even over zero rows) to a mapping from aggregate name to an ``int`` (count, sums) or an
    int64 numpy array (histogram).
    """

    groups: dict[tuple[ScalarValue, ...], dict[str, object]]
