"""The backend protocol, the engine-failure rule and the constants every backend shares.

The shared code lives beside it by job: :mod:`~dpcurator.query.backends.plan_checks` (static types
and the plan checks), :mod:`~dpcurator.query.backends.grid` (fixed-point grid values),
:mod:`~dpcurator.query.backends.results` (result collection) and
:mod:`~dpcurator.query.backends.sources` (data sources).

A backend executes an :class:`~dpcurator.query.ir.AggregatePlan` and returns EXACT aggregates
(:class:`~dpcurator.query.ir.ExactResult`); it never adds noise and never imports
:mod:`dpcurator.random`, :mod:`dpcurator.mechanisms` or :mod:`dpcurator.accounting`.

Semantics fixed here for all backends (in addition to those of :mod:`dpcurator.query.ir`, whose
docstring defines the total evaluation rules: integer overflow is NULL, floats are IEEE doubles):

* Rows whose person id is NULL are dropped when the plan bounds contributions per person: they
  cannot be attributed to a person, so they cannot be bounded.
* An aggregate with ``fill=None`` skips NULL/NaN values (they add nothing to sums and histograms).
* ``In`` with an empty value list is FALSE (even for a NULL argument); otherwise ``In`` follows SQL.
* Public group keys match NULL-safely: a key ``None`` selects the rows whose group value is NULL.
* ``Func("round", (x,))`` rounds half away from zero (SQL ``ROUND``); only one argument is accepted.
* Sums accumulate exactly (wider than int64) and each group's total is then clamped to
  ``[-(2**63-1), 2**63-1]`` grid units (:func:`~dpcurator.query.backends.grid.clamp_total`).
  Clamping the exact total is 1-Lipschitz, so a sum's sensitivity is unchanged, and no sum is
  refused after the charge. A plan whose ONE row could already exceed int64 on its grid is refused
  by :func:`~dpcurator.query.backends.plan_checks.check_plan` (a public fact of the bounds and
  grid: the planner refuses it first, before any charge).
* Evaluation is total: once :func:`~dpcurator.query.backends.plan_checks.check_plan` has accepted
  a plan, no data value makes ``compute`` raise. Whatever an engine raises anyway becomes
  ``BackendError(ENGINE_FAILURE_MESSAGE)`` (:func:`engine_failure`), the same text for every
  failure; the engine's own text, which can quote data values, goes to the logger
  ``dpcurator.engine`` only.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from dpcurator.errors import (
    ENGINE_FAILURE_MESSAGE,
    BackendError,
)
from dpcurator.query.ir import (
    AggregatePlan,
    ExactResult,
)

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
#: The most negative and positive grid values a group total is clamped to (see
#: :func:`~dpcurator.query.backends.grid.clamp_total`).
TOTAL_LIMIT = INT64_MAX
#: The grid exponents a plan may use: 2**-k is then a product of at most two finite powers of two.
GRID_EXPONENTS = range(-2046, 2047)
HIDDEN_PREFIX = "__dp_"
VALUE_KINDS = frozenset({"sum", "sum_squares", "histogram"})
UNARY_FUNCTIONS = frozenset({"abs", "round", "floor", "ceil", "lower", "upper", "length"})
ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
}
"""The arithmetic operators other than ``/`` (whose NULL-on-zero rule each backend writes)."""
COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
OPERATORS = {**ARITHMETIC, **COMPARISONS}
"""Python operators for the IR's binary operators, for engines that overload them."""

ENGINE_LOG = logging.getLogger("dpcurator.engine")
"""Where engine failures are logged in full (the data owner's log; never shown to an analyst)."""


def engine_failure(engine: str, plan: AggregatePlan) -> BackendError:
    """Log the exception being handled on :data:`ENGINE_LOG` and return the one analyst-facing
    error, ``BackendError(ENGINE_FAILURE_MESSAGE)`` (raise it ``from None``).

    Call it in an ``except`` block: the traceback and the engine's text (which can quote data
    values) go to the log only.
    """
    ENGINE_LOG.error(
        "The %s engine failed to compute a plan on %r.", engine, plan.table, exc_info=True
    )
    return BackendError(ENGINE_FAILURE_MESSAGE)


@runtime_checkable
class Backend(Protocol):
    """An engine that computes exact aggregates for aggregate plans."""

    name: str

    def tables(self) -> list[str]:
        """Return the names of the tables this backend can query."""
        ...

    def columns(self, table: str) -> dict[str, str]:
        """Return the columns of ``table`` mapped to engine type names (metadata checks only)."""
        ...

    def compute(self, plan: AggregatePlan) -> ExactResult:
        """Execute ``plan`` and return its exact aggregates."""
        ...

    def close(self) -> None:
        """Release the engine resources this backend opened (not those it was given)."""
        ...
