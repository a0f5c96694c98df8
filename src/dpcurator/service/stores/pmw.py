"""Private multiplicative weights as a curator mode of a dataset, its state in the ledger database.

An owner opens a mode on a dataset (:class:`PmwSpec`: public-key columns, total ε, threshold T,
max updates c, and what to do once the c updates are used); analysts who may see the dataset then
ask counting queries over those columns, answered by
:class:`~dpcurator.interactive.PrivateMultiplicativeWeights` (Hardt & Rothblum 2010; the online
sparse-vector variant of Dwork & Roth 2014, section 4.2): from the public synthetic distribution
when the sparse vector test says it is close enough, else by a noisy answer that updates it.

**Accounting: the whole ε is charged once, to the dataset's global cap, when the mode opens.**
That is what the PMW theorem accounts for: the one-way marginals plus c rounds (one
AboveThreshold run and one Laplace answer each) compose to ε for ANY adaptively chosen sequence
of queries, however many are answered from the synthetic distribution, and whoever asks them.
Charging per update instead would still have to pay each round's sparse-vector share when its run
starts, not when it ends, and would make a paid budget depend on how queries happen to fall.
Queries cost analysts nothing (their grants are not charged); the ledger entry of the opening
(kind ``pmw``) is the mode's whole cost. Each answer is also written to the asker's ledger history
as a free entry (kind ``pmw-answer``, ε = δ = 0: the question, the value and its source), in the
same transaction as the state, so analysts and owners see every PMW answer like any release.

**What is public.** Whether a query is answered depends on public inputs only: its text (refused
at once, free, when it is not a conjunction of ``column = value`` / ``column IN (...)`` over the
mode's columns and public keys) and the mode's update counter, a function of released
sparse-vector outcomes. Once the c updates are used, the owner's rule at opening decides:
``refuse`` (409, free) or ``synthetic`` (answers from the distribution only: post-processing,
free, no accuracy guarantee; the answer says so). Each answer says whether it came from the
synthetic distribution or from an update (the released sparse-vector bit), and carries a 95%
interval for the exact count (``ci_low``/``ci_high``: the noisy answer's Laplace CI for an
update, the sparse vector's accuracy guarantee for a synthetic answer; none for
``synthetic-only``): a function of public parameters and that bit
(:mod:`dpcurator.interactive.pmw`).

**State.** One row of ``pmw_modes`` (:class:`~dpcurator.service.ledger.database.PmwMode`) per
mode holds the public parameters and the curator's state
(:meth:`~dpcurator.interactive.PrivateMultiplicativeWeights.to_bytes`): the exact histogram (the
curator is trusted, as for the exact running totals of tree streams), the synthetic
distribution, the measured updates and the open sparse-vector run's noisy threshold; these never
leave the server. Each query is one write transaction that locks the row, restores the curator,
answers and writes the state back, so concurrent queries are serialised (no update is spent
twice) and a restart resumes from the last committed answer.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, cast

from sqlalchemy import select

from dpcurator.core.measures import ApproxDP
from dpcurator.errors import (
    ENGINE_FAILURE_MESSAGE,
    BackendError,
    ParameterError,
    UnsupportedQueryError,
)
from dpcurator.interactive import PrivateMultiplicativeWeights, counting_query, counting_where
from dpcurator.interactive.linear import Weights
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from dpcurator.service.auth import Identity, random_id
from dpcurator.service.curator import AlreadyCharged, LedgerFilter
from dpcurator.service.errors import NotFoundError
from dpcurator.service.idempotency import request_fingerprint
from dpcurator.service.ledger.budgets import BudgetView
from dpcurator.service.ledger.charges import ChargeRequest
from dpcurator.service.ledger.database import PmwMode, found
from dpcurator.service.models import Charge, Dataset, utcnow
from dpcurator.service.operations import CuratorService
from dpcurator.synth.domain import SynthDomain

#: What a mode does once its updates are used: refuse every query, or answer from the synthetic
#: distribution only.
EXHAUSTED_RULES = ("refuse", "synthetic")

#: The miscoverage of every PMW answer's interval (:meth:`PrivateMultiplicativeWeights.interval`).
ANSWER_ALPHA = 0.05

#: The kind of the free ledger history entry of one PMW answer.
ANSWER_KIND = "pmw-answer"


@dataclass(frozen=True)
class PmwSpec:
    """The public parameters of a new mode (see the module docstring)."""

    epsilon: Fraction
    threshold: float | None = None
    max_updates: int | None = None
    queries: int = 1000
    columns: list[str] | None = None
    when_exhausted: str = "refuse"


@dataclass(frozen=True)
class PmwOpened:
    """The new mode, its cost and the dataset's cap afterwards."""

    mode: PmwMode
    cost: ApproxDP
    cap: BudgetView | None


@dataclass(frozen=True)
class PmwAnswer:
    """One answer: its value, where it came from, its (1 - α) interval (None for
    ``synthetic-only``: no accuracy guarantee) and the mode's public counters after it."""

    value: float
    source: str
    mode: PmwMode
    ci_low: float | None = None
    ci_high: float | None = None
    alpha: float = ANSWER_ALPHA


def _domain(metadata: Metadata, columns: list[str] | None) -> SynthDomain:
    """The mode's domain; every column must have public keys (free refusal otherwise)."""
    domain = SynthDomain.from_metadata(metadata, columns)
    binned = [c.name for c in domain.columns if c.keys is None]
    if binned:
        raise UnsupportedQueryError(
            f"A PMW mode counts over public-key columns only; {binned} have no public keys "
            "(declare keys in the metadata, or leave them out of columns)."
        )
    return domain


class PmwStore:
    """Open PMW modes and answer their queries, through the service's ledger and catalog."""

    def __init__(self, service: CuratorService) -> None:
        self.service = service
        self.ledger = service.ledger

    def open(
        self,
        identity: Identity,
        dataset_id: str,
        spec: PmwSpec,
        *,
        request_key: str | None = None,
    ) -> PmwOpened:
        """Check everything (free), charge ε to the dataset's cap, compute the histogram once,
        store the mode (owners only); a retry with the same ``request_key`` returns the mode
        opened first (:mod:`dpcurator.service.idempotency`)."""
        identity.require_owner()
        if spec.when_exhausted not in EXHAUSTED_RULES:
            raise ParameterError(
                f"when_exhausted must be one of {EXHAUSTED_RULES}; got {spec.when_exhausted!r}."
            )
        service = self.service
        dataset = service.visible_dataset(identity, dataset_id)
        runtime = service.catalog.runtime(dataset)
        _domain(runtime.metadata, spec.columns)
        mode_id = f"pmw_{random_id(9)}"
        public: dict[str, object] = {"epsilon": str(spec.epsilon), "threshold": spec.threshold}
        public.update(max_updates=spec.max_updates, queries=spec.queries, columns=spec.columns)
        text = json.dumps({"pmw": mode_id, **public}, sort_keys=True)
        template = ChargeRequest.owner_release(
            identity.principal_id,
            dataset.id,
            kind="pmw",
            text=text,
            cost=ApproxDP(0, 0),
            events=[],
        )
        asked = {**public, "when_exhausted": spec.when_exhausted}
        template = replace(
            template, fingerprint=request_fingerprint("pmw", **asked), request_key=request_key
        )
        charge_filter = LedgerFilter(self.ledger, template)
        session = Session(runtime.backend, runtime.metadata, budget_filter=charge_filter)
        try:
            curator = PrivateMultiplicativeWeights(
                session,
                spec.columns,
                epsilon=spec.epsilon,
                max_updates=spec.max_updates,
                threshold=spec.threshold,
                queries=spec.queries,
            )
            mode = PmwMode(
                id=mode_id,
                dataset_id=dataset.id,
                params={**curator.parameters(), "when_exhausted": spec.when_exhausted},
                charge_id=charge_filter.require_charge(),
                state=curator.to_bytes(),
                updates_used=0,
                queries_answered=0,
                created_by=identity.principal_id,
            )
            with self.ledger._transaction(write=True) as s:
                s.add(mode)
        except AlreadyCharged as done:  # a retry of a keyed request answered before
            return self._opened(done.charge_id, spec)
        except Exception as exc:
            if charge_filter.charge_id is None:  # refused before the charge: free
                raise
            raise service._failed(charge_filter.charge_id, exc) from None
        finally:
            if charge_filter.charge_id is not None:
                self.ledger.drop_claim(charge_filter.charge_id)
        self.ledger.complete(charge_filter.require_charge(), {"pmw_id": mode_id})
        return PmwOpened(mode, ApproxDP(spec.epsilon, 0), charge_filter.budget)

    def _opened(self, charge_id: int, spec: PmwSpec) -> PmwOpened:
        """The mode opened by an earlier request with the same key (its charge released)."""
        charge = self.ledger.charge(charge_id)
        if charge.status != "released" or charge.result is None:
            raise BackendError(ENGINE_FAILURE_MESSAGE)
        with self.ledger._transaction(write=False) as s:
            mode = found(s.get(PmwMode, str(charge.result["pmw_id"])), "PMW mode", charge_id)
        return PmwOpened(mode, ApproxDP(spec.epsilon, 0), self.ledger.cap_view(mode.dataset_id))

    def get(self, identity: Identity, mode_id: str) -> tuple[PmwMode, Dataset]:
        """The mode and its dataset, if the caller may see the dataset (else 404, as for an
        unknown id)."""
        with self.ledger._transaction(write=False) as s:
            mode = found(s.get(PmwMode, mode_id), "PMW mode", mode_id)
        try:
            return mode, self.service.visible_dataset(identity, mode.dataset_id)
        except NotFoundError as exc:  # not "No dataset 'x'": that would tell the mode exists
            raise NotFoundError(f"No PMW mode with id {mode_id!r}.") from exc

    def answer(
        self, identity: Identity, mode_id: str, sql: str | None, where: Mapping[str, Any] | None
    ) -> PmwAnswer:
        """Answer one counting query: ``sql`` (``SELECT COUNT(*) FROM t WHERE a = 'x' AND b IN
        (...)``) or ``where`` (``{column: value or [values]}``), exactly one of them."""
        mode, dataset = self.get(identity, mode_id)
        metadata = self.service.catalog.runtime(dataset).metadata
        weights = _weights(metadata, mode.params, sql, where)  # free refusals, before any lock
        with self.ledger._transaction(write=True) as s:
            locked = s.scalar(select(PmwMode).where(PmwMode.id == mode_id).with_for_update())
            mode = found(locked, "PMW mode", mode_id)
            curator = PrivateMultiplicativeWeights.restore(metadata, mode.params, mode.state)
            low = high = None
            if curator.updates_left == 0 and mode.params["when_exhausted"] == "synthetic":
                value, source = curator.synthetic_answer(weights), "synthetic-only"
            else:
                before = curator.updates_used
                value = curator.answer_linear(weights)  # BudgetExceededError once exhausted
                source = "update" if curator.updates_used > before else "synthetic"
                interval = curator.interval(value, source, ANSWER_ALPHA)
                low, high = interval.ci_low, interval.ci_high
                mode.state = curator.to_bytes()
                mode.updates_used = curator.updates_used
            mode.queries_answered += 1
            text = sql if sql is not None else json.dumps({"where": where})
            s.add(_history_entry(identity, mode, text, value, source))
        return PmwAnswer(value, source, mode, low, high)


def _history_entry(
    identity: Identity,
    mode: PmwMode,
    text: str,
    value: float,
    source: str,
) -> Charge:
    """The free ledger entry of one answer (ε = δ = 0, no events: the opening paid for it)."""
    now = utcnow()
    return Charge(
        principal_id=identity.principal_id,
        dataset_id=mode.dataset_id,
        kind=ANSWER_KIND,
        fingerprint=hashlib.sha256(f"{mode.id}\n{text}".encode()).hexdigest(),
        query_text=text,
        epsilon="0",
        delta="0",
        events=[],
        status="released",
        result={"pmw_id": mode.id, "value": value, "source": source},
        created_at=now,
        completed_at=now,
    )


def _weights(
    metadata: Metadata,
    params: Mapping[str, Any],
    sql: str | None,
    where: Mapping[str, Any] | None,
) -> Weights:
    """The query's 0/1 weights over the mode's domain, from public inputs only."""
    if (sql is None) == (where is None):
        raise ParameterError("Send exactly one of sql and where.")
    domain = _domain(metadata, cast("list[str]", params["columns"]))
    conditions = counting_where(sql, metadata) if sql is not None else where
    assert conditions is not None
    return counting_query(domain, conditions)


def mode_json(mode: PmwMode) -> dict[str, Any]:
    """A mode's public description: parameters and counters (never its state)."""
    return {
        "id": mode.id,
        "dataset_id": mode.dataset_id,
        "params": mode.params,
        "charge_id": mode.charge_id,
        "updates_used": mode.updates_used,
        "updates_left": int(mode.params["max_updates"]) - mode.updates_used,
        "queries_answered": mode.queries_answered,
    }
