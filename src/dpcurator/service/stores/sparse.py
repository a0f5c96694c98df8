"""Sparse vector in the service: "which of these queries exceed T?", charged once.

The analyst sends a list of SQL counting/sum queries, a threshold T, a number c of positives and
ε. Each query is planned by the normal planner (same limits and type checks; free refusals) and
must release ONE ungrouped count or sum; its L1 sensitivity (in the table's units, user-level
contribution bounding included) comes from its plan, and Δ is the largest of them.

The mechanism is Sparse (Dwork & Roth 2014, Algorithm 2; the corrected analysis of Lyu, Su & Li
2017): c successive runs of :class:`~dpcurator.mechanisms.AboveThreshold`, each at ε/c with a
fresh noisy threshold, the next starting after the previous positive. Each run is (ε/c)-DP
however many below-threshold answers it gives, so the whole list is ε-DP by composition of the
c runs: one charge of ε, reserved in the ledger before any data is read. The answers to queries
after the c-th positive are never looked at.

Numeric sparse (``numeric``; Dwork & Roth 2014, Algorithm 3): the c runs get
:data:`NUMERIC_SPARSE_SHARE` of ε and each query found above the threshold also has its value
released with Laplace noise at the rest of ε divided by c (sensitivity Δ; at most c values, so
they compose to the rest). Still one charge of ε; the stated half-width is the values' 95% bound.

What the analyst sees depends on public inputs and the noisy outcomes only: the list of flags
has one entry per query (``true``/``false``, ``null`` after the halt), every refusal is decided
from the plans before the charge, and after the charge a failure is the constant
:data:`~dpcurator.errors.ENGINE_FAILURE_MESSAGE`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from numbers import Integral
from typing import Any, cast

from dpcurator.accounting.events import PureEvent
from dpcurator.accounting.filter import BudgetFilter
from dpcurator.errors import ParameterError, UnsupportedQueryError
from dpcurator.mechanisms.laplace import Laplace
from dpcurator.mechanisms.sparse_vector import AboveThreshold
from dpcurator.query.ir import AggregatePlan, ExactResult
from dpcurator.query.plan.limits import MAX_SPARSE_QUERIES
from dpcurator.query.plan.planner import Plan
from dpcurator.query.session import Session
from dpcurator.random import Rng
from dpcurator.service.auth import Identity
from dpcurator.service.curator import DatasetRuntime
from dpcurator.service.operations import Answer, CuratorService

#: The most queries one sparse vector request may carry (each is parsed and planned, about 4 ms
#: of CPU: 1,000 distinct queries took 4 CPU-s and 10-15 s of wall time on a busy 2-core machine).
MAX_QUERIES = MAX_SPARSE_QUERIES
_KINDS = ("count", "count_persons", "sum")

#: Numeric sparse: the share of ε spent on the threshold tests (the rest on the released values).
NUMERIC_SPARSE_SHARE = Fraction(8, 9)


@dataclass(frozen=True)
class SparseQuestion:
    """The public inputs of one sparse vector request."""

    queries: list[str]
    threshold: float
    positives: int
    epsilon: Fraction
    numeric: bool = False

    def text(self) -> str:
        """The request as stored in the ledger entry."""
        request: dict[str, Any] = {"queries": self.queries, "threshold": self.threshold}
        request["c"] = self.positives
        if self.numeric:
            request["numeric"] = True
        return json.dumps(request, sort_keys=True)

    def fingerprint(self) -> str:
        """The request's fingerprint (its request key's, in the ledger)."""
        return hashlib.sha256(f"{self.text()}\x00{self.epsilon}".encode()).hexdigest()

    def values_mechanism(self, sensitivity: Fraction) -> Laplace | None:
        """Numeric sparse: the Laplace mechanism of each released value (None: flags only)."""
        if not self.numeric:
            return None
        share = self.epsilon * (1 - NUMERIC_SPARSE_SHARE) / self.positives
        return Laplace.for_epsilon_floats(share, sensitivity)


@dataclass(frozen=True)
class _Scalar:
    """One planned query: the exact plan, the aggregate read, its grid and L1 sensitivity."""

    exact: AggregatePlan
    name: str
    exponent: int
    sensitivity: Fraction

    def value(self, result: ExactResult) -> float:
        """The exact answer in table units (total: a missing or non-integer value is NaN, which
        AboveThreshold reads as 0)."""
        raw = result.groups.get((), {}).get(self.name)
        if not isinstance(raw, Integral):
            return math.nan
        return float(int(raw) * Fraction(2) ** self.exponent)


def _scalar(index: int, plan: Plan) -> _Scalar:
    """The planned query as a scalar with its sensitivity in table units.

    Raises:
        UnsupportedQueryError: the query is not ONE ungrouped count or sum (free: plan time).
    """
    output = plan.outputs[0] if len(plan.outputs) == 1 else None
    if plan.group_columns or output is None or output.kind not in _KINDS or len(output.parts) != 1:
        raise UnsupportedQueryError(
            f"Sparse vector query {index} must release exactly one ungrouped COUNT or SUM "
            "(no GROUP BY, one aggregate)."
        )
    part = output.parts[0]
    step = Fraction(2) ** part.grid_exponent
    return _Scalar(plan.exact, part.exact, part.grid_exponent, part.sensitivity * step)


def plan_sparse(
    session: Session, question: SparseQuestion
) -> tuple[list[_Scalar], AboveThreshold, Laplace | None]:
    """Plan every query and build one run's mechanism (and numeric sparse's value mechanism),
    from public inputs only (free)."""
    n = len(question.queries)
    if not 1 <= n <= MAX_QUERIES:
        raise ParameterError(
            f"queries must hold 1 to {MAX_QUERIES} queries (MAX_SPARSE_QUERIES); got {n}: "
            "split the list into several requests."
        )
    if not 1 <= question.positives <= n:
        raise ParameterError(
            f"c (max positives) must be between 1 and the number of queries ({n}); "
            f"got {question.positives}."
        )
    if not math.isfinite(question.threshold):
        raise ParameterError(f"threshold must be finite; got {question.threshold}.")
    epsilon = cast("float", question.epsilon)  # the planner reads any Real exactly
    scalars = [
        _scalar(i, session.plan(sql, epsilon=epsilon)) for i, sql in enumerate(question.queries)
    ]
    sensitivity = max(s.sensitivity for s in scalars)
    tests = question.epsilon * (NUMERIC_SPARSE_SHARE if question.numeric else 1)
    mechanism = AboveThreshold(tests / question.positives, sensitivity, question.threshold)
    return scalars, mechanism, question.values_mechanism(sensitivity)


def sparse_flags(
    answers: list[float], mechanism: AboveThreshold, positives: int, rng: Rng | None = None
) -> list[Any]:
    """Sparse: up to ``positives`` runs of AboveThreshold, each restarting after a positive
    (noise from ``rng``, the session's: the secure default unless a seed was given).

    One flag per answer: True (above), False (below) or None (not examined: after the halt).
    """
    flags: list[Any] = [None] * len(answers)
    start = 0
    for _ in range(positives):
        hit = mechanism.first_above(answers[start:], rng)
        if hit is None:
            flags[start:] = [False] * (len(answers) - start)
            break
        flags[start : start + hit] = [False] * hit
        flags[start + hit] = True
        start += hit + 1
        if start == len(answers):
            break
    return flags


def answer_sparse(
    service: CuratorService,
    identity: Identity,
    dataset_id: str,
    question: SparseQuestion,
    *,
    request_key: str | None = None,
    wrap: Callable[[BudgetFilter], BudgetFilter] | None = None,
) -> Answer:
    """Plan (free) -> reserve ε once in the ledger -> compute the exact answers -> Sparse, as
    every charged release is (:meth:`CuratorService.charged`): a retry with the same
    ``request_key`` gets the first answer, charged once; never replayed from another request.
    ``wrap`` wraps the ledger's filter (a background job's, :mod:`dpcurator.service.jobs`)."""
    text = question.text()

    def run(runtime: DatasetRuntime, budget: BudgetFilter) -> dict[str, Any]:
        session = Session(
            runtime.backend,
            runtime.metadata,
            budget_filter=budget if wrap is None else wrap(budget),
            plan_cache=runtime.plans,
            result_cache=runtime.results,
        )
        scalars, mechanism, values = plan_sparse(session, question)
        results = session.compute_exact(
            [s.exact for s in scalars], PureEvent(question.epsilon), description="sparse vector"
        )
        answers = [s.value(r) for s, r in zip(scalars, results, strict=True)]
        flags = sparse_flags(answers, mechanism, question.positives, session.rng)
        release: dict[str, Any] = {"above": flags, "positives": sum(1 for f in flags if f)}
        if values is not None:
            release["values"] = _numeric_values(answers, flags, values, session.rng)
            release["ci_halfwidth"] = values.ci_halfwidth_floats(0.05)
        return release

    return service.charged(
        identity,
        dataset_id,
        text,
        question.fingerprint(),
        run,
        request_key=request_key,
        requested={"epsilon": str(question.epsilon), "delta": "0"},
        kind="sparse_vector",
        replayable=False,
    )


def _numeric_values(
    answers: list[float], flags: list[Any], values: Laplace, rng: Rng | None = None
) -> list[float | None]:
    """A noisy value for each positive, None elsewhere (a NaN answer counts as 0, as in the
    threshold test: total; noise from ``rng``, as :func:`sparse_flags`)."""
    positives = [i for i, flag in enumerate(flags) if flag]
    exact = [0.0 if math.isnan(answers[i]) else answers[i] for i in positives]
    noisy = values.release_floats(exact, rng)
    out: list[float | None] = [None] * len(flags)
    for i, value in zip(positives, noisy, strict=True):
        out[i] = float(value)
    return out
