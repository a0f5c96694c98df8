"""The plan of a fit (:class:`FitPlan`) and the rows a row-reading fit
(:mod:`dpcurator.query.fit.core`) fetches from the engine, capped.

Logistic regression, ``mle``, ``sample_and_aggregate`` and ``ptr_regression`` run their
estimator in Python on each person's bounded rows, which the engine returns grouped by
(person, values...) with their multiplicities (the rows stay inside the trusted curator).

**The engine-side cap** (issue 14). A sample-and-aggregate fit on a table with a person column
does not fetch every person: the engine forms the blocks itself (a
:class:`~dpcurator.query.ir.BlockSample`, with a seed drawn fresh for each fit) and keeps, in
each block, only the first ``per_block`` persons by a second keyed hash. The sizes are public:
``blocks`` engine blocks (the fit's ``blocks`` when given, else :data:`ENGINE_BLOCKS`, merged
in Python into the k blocks chosen from the noisy count, see :class:`~dpcurator.estimators.
sample_aggregate.EngineBlocks`) of ``per_block = max_rows // (blocks · rows_per_person)``
persons, so at most ``max_rows`` rows (default :data:`DEFAULT_MAX_ROWS`) leave the engine
whatever the table's size. Every row of a kept person is fetched (bounded by
``max_rows_per_person``), so the estimator sees whole persons.

**Privacy argument.** A person's engine block is a function of its id and the seed alone, and
whether a person is kept depends only on the persons of its own block. Removing a person
changes the rows of its block (it leaves, and at most one other person of that block, the
next by the second hash, enters) and of no other block; adding one is the reverse. So one
person still moves exactly one block estimate, inside the public parameter box, which is all
the aggregation's sensitivity uses (Λ₁/k for the Laplace mean; one substituted estimate for the
widened winsorised mean): the guarantee of :mod:`~dpcurator.estimators.sample_aggregate` is
unchanged. The noisy person count that chooses k counts the kept persons, which one person
changes by at most 1. The cap's sizes, hence the number of fetched rows' bound, the charge and
every refusal, are functions of public inputs only. Tables without a person column (row-level
privacy) fetch every row: there is no person id to hash (each row draws its block in Python).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Final

import numpy as np

from dpcurator._validation import check_int, fail
from dpcurator.accounting import ApproxEvent, PureEvent
from dpcurator.accounting.events import PrivacyEvent
from dpcurator.core.measures import ApproxDP, PureDP
from dpcurator.estimators.release import Estimate, FloatArray
from dpcurator.estimators.sample_aggregate import EngineBlocks
from dpcurator.query import ir
from dpcurator.query.columns import ColumnMeta
from dpcurator.query.fit.columns import OWNER, null_fill
from dpcurator.query.schema import Metadata
from dpcurator.random import Rng

#: The default cap of the rows a sample-and-aggregate fit fetches from the engine.
DEFAULT_MAX_ROWS: Final = 1_000_000
#: The engine's blocks when the fit chooses k from a noisy count: merged into k <= 16,384
#: blocks (k = round(ñ^0.6) reaches it at ñ ≈ 10^7 persons, beyond any default cap).
ENGINE_BLOCKS: Final = 16_384


@dataclass(frozen=True)
class FitPlan:
    """A fit decided from public inputs: what the engine computes, what is charged, and the
    post-processing that turns the engine's exact result into an :class:`Estimate`."""

    kind: str
    columns: tuple[str, ...]
    cost: PureDP | ApproxDP
    exact: ir.AggregatePlan
    finish: Callable[[ir.ExactResult, float, Rng], Estimate]
    #: The public names of the released coordinates (``intercept``, the features, ...).
    terms: tuple[str, ...]
    #: What the main mechanism perturbs, and its sensitivity per person (public): the L2 of
    #: the scaled Gram matrix (AdaSSP), or the L1 of the sum of block estimates (a person
    #: moves one block estimate inside the parameter box).
    statistic: str
    sensitivity: float

    @property
    def event(self) -> PrivacyEvent:
        """The event charged to the budget filter: exactly the requested cost."""
        if isinstance(self.cost, ApproxDP):
            return ApproxEvent(self.cost.epsilon, self.cost.delta)
        return PureEvent(self.cost.epsilon)

    def describe(self) -> str:
        """The ledger description of the charge."""
        return f"fit {self.kind}({', '.join(self.columns)})"


#: A fit's estimator on the fetched rows: (table, person ids or None, α, ε, rng) -> release.
Run = Callable[[FloatArray, Any, float, Fraction, Rng], Estimate]


def block_sample(
    metadata: Metadata, blocks: int | None, max_rows: int | None
) -> ir.BlockSample | None:
    """The public cap of a sample-and-aggregate fit (None without a person column); its seed is
    a placeholder that :func:`seeded` replaces with a fresh one. Refused (free) when
    ``max_rows`` cannot hold one person in each block."""
    limit = DEFAULT_MAX_ROWS if max_rows is None else max_rows
    check_int(OWNER, "max_rows", limit, minimum=1)
    unit = metadata.unit
    if not unit.user_level:
        return None
    rows = unit.rows
    count = blocks if blocks is not None else max(1, min(ENGINE_BLOCKS, limit // rows))
    per_block = limit // (count * rows)
    if per_block < 1:
        raise fail(
            OWNER, "max_rows", f">= blocks x max_rows_per_person = {count * rows} (one person "
            "per block)", limit,
        )  # fmt: skip
    return ir.BlockSample(count, per_block, seed=0)


def seeded(plan: ir.AggregatePlan, rng: Rng) -> ir.AggregatePlan:
    """The plan with a fresh random seed for its sample (public randomness: blocks independent
    of the data), unchanged when it has none."""
    if plan.sample is None:
        return plan
    seed = int.from_bytes(rng.random_bytes(8), "big") >> 2  # a BIGINT in every engine
    return replace(plan, sample=replace(plan.sample, seed=seed))


def rows_plan(
    metadata: Metadata, metas: Sequence[ColumnMeta], sample: ir.BlockSample | None = None
) -> ir.AggregatePlan:
    """Each person's bounded rows of ``metas``: groups ([block,] person, values...) with their
    counts; the blocks and the cap of ``sample`` when given."""
    person = metadata.person_column
    names = [] if sample is None else [sample.column]
    names += ([] if person is None else [metadata.column(person).name]) + [m.name for m in metas]
    groups = tuple(ir.GroupColumn(f"c{i}", ir.Col(name)) for i, name in enumerate(names))
    rows = metadata.unit.rows
    bound = replace(metadata.contribution_bound, max_groups=rows, max_rows_per_group=rows)
    return ir.AggregatePlan(
        metadata.table, (ir.ExactAggregate("n", "count"),), group_by=groups, bound=bound,
        sample=sample,
    )  # fmt: skip


def rows_finish(
    metadata: Metadata,
    metas: Sequence[ColumnMeta],
    run: Run,
    epsilon: Fraction,
    sample: ir.BlockSample | None = None,
) -> Callable[[ir.ExactResult, float, Rng], Estimate]:
    """The post-processing of :func:`rows_plan`'s result: the rows as a float table (NULL -> the
    column's public fill), each person's first ``max_rows_per_person`` rows, then ``run``."""
    has_person = metadata.unit.user_level
    skip = 0 if sample is None else 1
    limit = metadata.unit.rows
    fills = [null_fill(m) for m in metas]

    def finish(result: ir.ExactResult, alpha: float, rng: Rng) -> Estimate:
        kept: dict[object, int] = {}
        data: list[list[float]] = []
        people: list[object] = []
        blocks: list[int] = []
        for key in sorted(result.groups, key=repr):
            count = int(result.groups[key]["n"])  # type: ignore[call-overload]
            pid = key[skip] if has_person else None
            values = key[skip + 1 :] if has_person else key
            row = [f if v is None else float(v) for v, f in zip(values, fills, strict=True)]
            take = min(count, limit - kept.get(pid, 0)) if has_person else count
            kept[pid] = kept.get(pid, 0) + take
            data.extend([row] * take)
            people.extend([pid] * take)
            blocks.extend([int(key[0]) if sample is not None else 0] * take)  # type: ignore[arg-type]
        table = np.asarray(data, np.float64).reshape(-1, len(metas))
        person: object = people if has_person else None
        if sample is not None:
            person = EngineBlocks(tuple(people), np.asarray(blocks, np.int64), sample.blocks)
        return run(table, person, alpha, epsilon, rng)

    return finish
