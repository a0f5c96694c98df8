"""Hypothesis tests on a session's table: the plan of SQL ``TTEST``, ``ANOVA``, ``PROPTEST``,
``CHI2`` and ``KS`` (:mod:`dpcurator.query.frontend.hypothesis`).

**Guarantee.** A test releases the noisy sufficient statistics of
:mod:`dpcurator.estimators.hypothesis` — per public group the count, the sum of the values
clamped to the column's public bounds and their centred squares (t, ANOVA), or the counts of
public cells (two proportions, χ², binned KS) — with discrete Laplace noise at the requested ε,
so the release is ε-DP for the table's privacy unit; its statistic and its p-value (a simulated
null of sampling *and* the public noise law: Ferrando, Wang & Sheldon 2022; Gaboardi, Lim,
Rogers & Vadhan 2016) are post-processing. Every sensitivity is asked of the unit
(:attr:`Metadata.unit <dpcurator.query.schema.Metadata.unit>`, through
:class:`~dpcurator.estimators.hypothesis.core.Setup`: ``count_l1(cells)`` times a row's largest
contribution), and the ENGINE computes the exact statistics under the metadata's contribution
bound (each person at most r rows in each of at most g cells), which is what that sensitivity
assumes; rows whose BY value is not a public key fall in no cell.

Everything a test depends on besides the noisy numbers is public and decided here, before the
charge: the groups are the BY column's public keys (declared ``keys``, or a bool's two values),
the bounds are the metadata's, the cut points and probabilities are the query's. A column without
them is refused, free.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Final

import numpy as np

from dpcurator._validation import fail
from dpcurator.accounting import PureEvent
from dpcurator.core.measures import PureDP
from dpcurator.errors import UnsupportedQueryError
from dpcurator.estimators.hypothesis.anova import anova_result
from dpcurator.estimators.hypothesis.chi_square import (
    goodness_of_fit_result,
    independence_result,
)
from dpcurator.estimators.hypothesis.core import (
    SIMULATIONS,
    FloatArray,
    HypothesisTestResult,
    Setup,
    release_counts,
)
from dpcurator.estimators.hypothesis.ks import ks_result
from dpcurator.estimators.hypothesis.means import one_sample_result, welch_result
from dpcurator.estimators.hypothesis.moments import noisy_moments
from dpcurator.estimators.hypothesis.proportions import two_proportion_result
from dpcurator.query import ir
from dpcurator.query.columns import ColumnMeta
from dpcurator.query.fit.columns import difference_column, scaled_column
from dpcurator.query.fit.linear import GRAM_GRID_EXPONENT
from dpcurator.query.plan.validation import check_epsilon
from dpcurator.query.schema import Metadata
from dpcurator.random import Rng

#: The owner named in the refusals.
OWNER: Final = "Session.sql"
#: The SQL name of each test kind.
FUNCTION: Final = {
    "t": "TTEST",
    "anova": "ANOVA",
    "proportions": "PROPTEST",
    "chi_square": "CHI2",
    "ks": "KS",
}

Finish = Callable[[ir.ExactResult, Rng], HypothesisTestResult]


@dataclass(frozen=True)
class TestRequest:
    """A hypothesis test asked for in SQL (every field public).

    ``kind`` is ``t``, ``anova``, ``proportions``, ``chi_square`` or ``ks``; ``value`` the tested
    column and ``by`` the grouping (or second categorical) column; ``mean`` the one-sample t's
    H0 mean; ``minus`` the paired t's second column (the test is the one-sample t of the rows'
    ``value - minus`` against ``mean``); ``numbers`` the χ² goodness-of-fit probabilities or the
    KS cut points; ``alternative`` the t and two-proportion tests' side.
    """

    __test__ = False  # not a pytest class

    kind: str
    value: str
    by: str | None = None
    mean: float | None = None
    numbers: tuple[float, ...] = ()
    alternative: str = "two-sided"
    minus: str | None = None

    def describe(self) -> str:
        """The request as one line (the ledger's text)."""
        first = self.value if self.minus is None else f"{self.value} - {self.minus}"
        args = [first, *([self.by] if self.by else [])]
        args += [f"{v:g}" for v in ((self.mean,) if self.mean is not None else self.numbers)]
        side = "" if self.alternative == "two-sided" else f" [{self.alternative}]"
        return f"TEST {FUNCTION[self.kind]}({', '.join(args)}){side}"


@dataclass(frozen=True)
class TestPlan:
    """A test decided from public inputs: what the engine computes, the ε charged and the
    post-processing from the exact result to the test's result. ``labels`` name the released
    cells (the public keys, in the order of the released statistics)."""

    __test__ = False  # not a pytest class

    request: TestRequest
    cost: PureDP
    exact: ir.AggregatePlan
    finish: Finish
    labels: tuple[str, ...] = field(default=())
    #: The L1 sensitivity of each noisy vector (asked of the unit): the moments' (n, Σu,
    #: Σ(u² − h²/2)), or the cell counts'.
    sensitivities: tuple[float, ...] = field(default=())

    @property
    def event(self) -> PureEvent:
        """The event charged: ε-DP (pure)."""
        return PureEvent(self.cost.epsilon)

    def describe(self) -> str:
        return self.request.describe()


def plan_test(metadata: Metadata, request: TestRequest, *, epsilon: float) -> TestPlan:
    """The plan of ``request`` at ``epsilon``, from the metadata alone (refusals are free)."""
    eps = check_epsilon(OWNER, epsilon)
    if request.kind in ("t", "anova"):
        return _moments_plan(metadata, request, eps)
    return _counts_plan(metadata, request, eps)


# ----------------------------------------------------------------------------------------------
# Columns


def _function(request: TestRequest) -> str:
    return FUNCTION[request.kind]


def _not_person(metadata: Metadata, meta: ColumnMeta, function: str) -> None:
    if meta.name == metadata.person_column:
        raise UnsupportedQueryError(
            f"{function}: column {meta.name!r} is the person column; it cannot be tested."
        )


def _bounded(metadata: Metadata, name: str, function: str) -> ColumnMeta:
    """A numeric column with public bounds (the values are clamped to them)."""
    meta = metadata.column(name)
    _not_person(metadata, meta, function)
    if not meta.is_numeric or meta.lower is None or meta.upper is None:
        raise UnsupportedQueryError(
            f"{function}({name}, ...) needs a numeric column with public bounds: declare lower "
            f"and upper for {name!r} in the metadata (it is {meta.type}, bounds "
            f"{meta.lower}, {meta.upper})."
        )
    return meta


def _keys(metadata: Metadata, name: str | None, function: str, sizes: str) -> tuple[object, ...]:
    """The public keys of a grouping column, ``sizes`` ``two`` (exactly 2) or ``many`` (>= 2)."""
    if name is None:
        raise UnsupportedQueryError(f"{function} needs a grouping column: {function}(x, g).")
    meta = metadata.column(name)
    _not_person(metadata, meta, function)
    keys = meta.public_keys
    if keys is None:
        raise UnsupportedQueryError(
            f"{function}: the groups of {name!r} must be public: declare 'keys' for {name!r} "
            "in the metadata (the groups are never read from the data)."
        )
    if len(keys) < 2 or (sizes == "two" and len(keys) != 2):
        wanted = "exactly 2" if sizes == "two" else "at least 2"
        raise UnsupportedQueryError(
            f"{function}: {name!r} has {len(keys)} public keys; this test compares {wanted} "
            "groups (use ANOVA for more than two means)."
        )
    return tuple(keys)


def _grouped(
    metadata: Metadata,
    aggregates: tuple[ir.ExactAggregate, ...],
    groups: tuple[ir.Expr, ...],
    keys: list[tuple[object, ...]],
) -> ir.AggregatePlan:
    """The engine plan over the public cells ``keys`` of ``groups`` (ungrouped when none), with
    the metadata's contribution bound."""
    if not groups:
        bound = replace(metadata.contribution_bound, max_groups=1)
        return ir.AggregatePlan(metadata.table, aggregates, bound=bound)
    columns = tuple(ir.GroupColumn(f"key_{i}", expr) for i, expr in enumerate(groups))
    cells = tuple(tuple(key) for key in keys)
    return ir.AggregatePlan(
        metadata.table, aggregates, group_by=columns, group_keys=cells,  # type: ignore[arg-type]
        bound=metadata.contribution_bound,
    )  # fmt: skip


def _setup(metadata: Metadata, epsilon: Fraction, rng: Rng) -> Setup:
    """The tests' privacy setup: ε, the table's unit (the engine bounds a person's rows as the
    unit says, so a person column is served here, unlike on arrays) and M simulations."""
    return Setup(epsilon, False, metadata.unit, SIMULATIONS, rng)


def _cell(result: ir.ExactResult, key: tuple[object, ...], name: str) -> float:
    return float(result.groups.get(key, {}).get(name, 0))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------
# Moments: TTEST and ANOVA


def _moments_plan(metadata: Metadata, request: TestRequest, eps: Fraction) -> TestPlan:
    function = _function(request)
    meta = _bounded(metadata, request.value, function)
    low, high = float(meta.lower), float(meta.upper)  # type: ignore[arg-type]
    z = scaled_column(meta, 0.0, 1.0)  # clamped (NULL -> the column's fill)
    if request.minus is not None:  # paired: each row's x - y, in [Lx - Uy, Ux - Ly]
        z, low, high = difference_column(meta, _bounded(metadata, request.minus, function))
    centre, half = (low + high) / 2, (high - low) / 2
    if request.mean is not None and not low <= request.mean <= high:
        raise fail(OWNER, "query", f"a TTEST mean in the bounds [{low:g}, {high:g}]", request.mean)
    one_sample = request.kind == "t" and request.by is None and request.mean is not None
    if one_sample:
        keys: tuple[object, ...] = ()
    else:
        keys = _keys(metadata, request.by, function, "two" if request.kind == "t" else "many")
    z = ir.BinOp("*", ir.BinOp("-", z, ir.Lit(centre)), ir.Lit(1.0 / half))  # in [-1, 1]
    aggregates = (
        ir.ExactAggregate("n", "count"),
        ir.ExactAggregate("s", "sum", z, -1.0, 1.0, 0.0, GRAM_GRID_EXPONENT),
        ir.ExactAggregate(
            "q", "sum", ir.BinOp("-", ir.BinOp("*", z, z), ir.Lit(0.5)), -0.5, 0.5, -0.5,
            GRAM_GRID_EXPONENT,
        ),
    )  # fmt: skip
    groups = () if one_sample else (ir.Col(str(request.by)),)
    cells: list[tuple[object, ...]] = [()] if one_sample else [(key,) for key in keys]
    exact = _grouped(metadata, aggregates, groups, cells)
    grid = math.ldexp(1.0, GRAM_GRID_EXPONENT)
    names = tuple(str(key) for key in keys)

    def finish(result: ir.ExactResult, rng: Rng) -> HypothesisTestResult:
        counts = np.array([_cell(result, c, "n") for c in cells], np.int64)
        sums = np.array([_cell(result, c, "s") for c in cells]) * grid * half
        squares = np.array([_cell(result, c, "q") for c in cells]) * grid * half * half
        setup = _setup(metadata, eps, rng)
        moments = noisy_moments(setup, (counts, sums, squares), centre, half)
        if one_sample:
            assert request.mean is not None
            if request.minus is None:
                return one_sample_result("one-sample t", moments, request.mean, setup,
                                         request.alternative)  # fmt: skip
            pair = f"{request.value} - {request.minus}"
            return one_sample_result("paired t", moments, request.mean, setup,
                                     request.alternative, pair)  # fmt: skip
        if request.kind == "t":
            first, second = names
            return welch_result(moments, setup, request.alternative, (first, second))
        return anova_result(moments, setup)

    moved = metadata.unit.count_l1(len(cells))
    sensitivities = (float(moved), moved * half, moved * half * half / 2)
    return TestPlan(request, PureDP(eps), exact, finish, names or (request.value,), sensitivities)


# ----------------------------------------------------------------------------------------------
# Counts of public cells: PROPTEST, CHI2 and KS


def _label(metadata: Metadata, name: str, function: str) -> tuple[object, object]:
    """The (success, failure) values of a 0/1 or bool column."""
    meta = metadata.column(name)
    _not_person(metadata, meta, function)
    if meta.type == "bool":
        return True, False
    if meta.type == "int":
        return 1, 0
    if meta.type == "float":
        return 1.0, 0.0
    raise UnsupportedQueryError(
        f"{function}({name}, ...) needs a 0/1 or bool column; {name!r} is {meta.type}."
    )


def increasing_cuts(cuts: Sequence[float]) -> bool:
    """Whether KS cut points are usable: at least one, finite, strictly increasing."""
    return (
        bool(cuts)
        and all(math.isfinite(c) for c in cuts)
        and all(a < b for a, b in itertools.pairwise(cuts))
    )


def _bins(metadata: Metadata, request: TestRequest, function: str) -> ir.Expr:
    """The bin of each row at the public cut points: 0 below the first, b in [c_b, c_b+1), the
    last at or above the last cut; NULL in no bin (-1, not a key)."""
    meta = metadata.column(request.value)
    _not_person(metadata, meta, function)
    cuts = request.numbers
    if not meta.is_numeric:
        raise UnsupportedQueryError(
            f"{function} needs a numeric column; {meta.name!r} is {meta.type}."
        )
    if not increasing_cuts(cuts):
        raise fail(OWNER, "query", f"{function}(x, g, c1, c2, ...) with increasing finite cut "
                   "points", list(cuts))  # fmt: skip
    column = ir.Col(meta.name)
    whens: list[tuple[ir.Expr, ir.Expr]] = [(ir.IsNull(column), ir.Lit(-1))]
    whens += [(ir.Compare("<", column, ir.Lit(float(c))), ir.Lit(b)) for b, c in enumerate(cuts)]
    return ir.Case(tuple(whens), ir.Lit(len(cuts)))


def _counts_plan(metadata: Metadata, request: TestRequest, eps: Fraction) -> TestPlan:
    function = _function(request)
    value = ir.Col(metadata.column(request.value).name)
    if request.kind == "proportions":
        outer = _keys(metadata, request.by, function, "two")
        inner: tuple[object, ...] = _label(metadata, request.value, function)
        groups: tuple[ir.Expr, ...] = (ir.Col(str(request.by)), value)
    elif request.kind == "ks":
        outer = _keys(metadata, request.by, function, "two")
        inner = tuple(range(len(request.numbers) + 1))
        groups = (ir.Col(str(request.by)), _bins(metadata, request, function))
    elif request.by is not None:  # CHI2 independence
        outer = _keys(metadata, request.value, function, "many")
        inner = _keys(metadata, request.by, function, "many")
        groups = (value, ir.Col(metadata.column(request.by).name))
    else:  # CHI2 goodness of fit
        outer, inner = _keys(metadata, request.value, function, "many"), ()
        groups = (value,)
    p0 = _probabilities(request, len(outer)) if request.kind == "chi_square" else None
    cells = [(a, *b) for a in outer for b in (itertools.product(inner) if inner else [()])]
    exact = _grouped(metadata, (ir.ExactAggregate("n", "count"),), groups, cells)
    shape = (len(outer), len(inner)) if inner else (len(outer),)
    names = (str(outer[0]), str(outer[-1]))

    def finish(result: ir.ExactResult, rng: Rng) -> HypothesisTestResult:
        setup = _setup(metadata, eps, rng)
        counts = np.array([_cell(result, c, "n") for c in cells], np.int64).reshape(shape)
        table, noise = release_counts(setup, counts)
        if request.kind == "proportions":
            return two_proportion_result(table, noise, setup, request.alternative)
        if request.kind == "ks":
            return ks_result(table, noise, setup, names)
        if p0 is None:
            return independence_result(table, noise, setup)
        return goodness_of_fit_result(table, noise, p0, setup)

    if request.kind == "proportions":
        labels = tuple(str(key) for key in outer)
    elif request.kind == "ks":
        cuts = [f"{c:g}" for c in request.numbers]
        middle = [f"[{a},{b})" for a, b in itertools.pairwise(cuts)]
        labels = (f"<{cuts[0]}", *middle, f">={cuts[-1]}")
    else:
        labels = tuple(",".join(str(part) for part in cell) for cell in cells)
    moved = float(metadata.unit.count_l1(len(cells)))
    return TestPlan(request, PureDP(eps), exact, finish, labels, (moved,))


def _probabilities(request: TestRequest, size: int) -> FloatArray | None:
    """The goodness-of-fit H0 probabilities (uniform when none are given), None for the
    independence test; refused unless one positive finite value a key."""
    if request.by is not None:
        if request.numbers:
            raise fail(
                OWNER, "query", "CHI2(a, b) or CHI2(a, p1, ..., pk), not both", request.numbers
            )
        return None
    given = np.asarray(request.numbers or [1.0] * size, np.float64)
    if given.size != size or not np.all(np.isfinite(given)) or not np.all(given > 0):
        raise fail(OWNER, "query", f"{size} probabilities > 0 in CHI2(a, p1, ..., p{size}) (one "
                   "a public key)", list(request.numbers))  # fmt: skip
    return np.asarray(given / given.sum(), np.float64)
