"""Private streams in the service, their state persisted in the ledger database (issue 16, §3).

Kinds (public parameters fixed at creation by an owner):

* ``count`` / ``sum`` — :class:`~dpcurator.streams.ContinualSum` (binary tree mechanism, Dwork,
  Naor, Pitassi & Rothblum 2010; Chan, Shi & Song 2011): a running count of 0/1 events, or a
  running sum of values clamped to public [lower, upper], released after every batch for a public
  horizon T. The whole stream of releases is ε-DP at event level, or for each person with
  ``max_events_per_person=k`` (user level: each event carries a person id, events past a
  person's k-th count as 0, the noise is k-fold); ε is charged to the dataset at creation. The
  persisted state is the tree's noisy node sums plus the exact running totals at the dyadic
  boundaries it needs to continue, and for user-level streams each person's event count (the
  curator is trusted; these are not pan-private).
* ``density`` — :class:`~dpcurator.streams.PanPrivateDensity` (Dwork, Naor, Pitassi, Rothblum &
  Yekhanin 2010): the fraction of a public universe of user ids that appeared. ONLY its ε-DP bit
  array (:meth:`~dpcurator.streams.PanPrivateDensity.to_bytes`) touches disk; event ids are never
  stored, logged or returned. Each estimate adds discrete Laplace noise at ``output_epsilon``;
  at most ``outputs`` estimates, so the charge at creation is ε + outputs · output_epsilon
  (the paper's Theorem 3.1 composition: one intrusion plus the outputs).
* ``incidence`` — :class:`~dpcurator.streams.PanPrivateIncidence` (the same paper's incidence
  counter): the fraction of the universe that appeared at least k times (k chosen per estimate,
  1 <= k < ``modulus``; counts wrap mod the public modulus). Persisted, charged and limited to
  ``outputs`` estimates like a density stream; only its ε-DP counters touch disk.
* ``correlated_count`` / ``correlated_sum`` (ρ-zCDP, correlated discrete Gaussian noise) and
  ``kary_count`` / ``kary_sum`` (ε-DP, the k-ary tree with consistent estimates): running totals
  like ``count`` / ``sum``, their parameters, charge and state in
  :mod:`dpcurator.service.stores.stream_counters`. A correlated stream is charged its ρ as a
  zCDP event, which only a budget with concentrated accounting admits.

Bounded work (issue 24, item 4): a pan-private stream tracks its whole universe, or with the
public ``sample_size`` a uniformly random sample of it chosen at creation, and at most
:data:`~dpcurator.query.plan.limits.MAX_STREAM_TRACKED` users either way; its persisted state
(:func:`state_bytes`: a bit a user for density, one or two bytes for incidence, plus 8 bytes a
user for a sample's ids) is at most :data:`~dpcurator.query.plan.limits.MAX_STREAM_STATE_BYTES`.
Both are refused free, before the charge, naming the parameters, their values and the limit.
The state is one row rewritten whole by every batch: O(state) bytes per batch, whatever the
batch, and the update in memory touches only the batch's users. The whole-state write is
deliberate. A state kept as per-user (or per-chunk) rows, with each batch touching only the
rows of the users it names, would leave the batch's users in the database itself: PostgreSQL
stamps each row version with the transaction that wrote it (``xmin``) and SQLite's write-ahead
log holds the pages a transaction changed, so an intrusion would learn who appeared and when,
which the pan-private design (the state at any moment is ε-DP, free of raw events; Dwork et al.
2010) forbids. Rewriting a data-independent subset of chunks instead would have to hold the
other users' events until their chunk's turn, and those pending ids are raw events. A write
whose extent depends only on public parameters reveals nothing of the kind; the byte limit
bounds its cost (measured: ``docs/sql.md``, "Public limits"). (Old row versions of the whole
state can outlive a write, as any database page can: erase the database file securely when
that matters.)

Every change of a stream's state is one write transaction that reads the row (locked), updates
the mechanism and writes it back, so concurrent batches are serialised and a restart resumes
where the last committed batch left it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session as OrmSession

from dpcurator.accounting.events import PrivacyEvent, PureEvent
from dpcurator.core.measures import ZCDP, ApproxDP
from dpcurator.errors import ENGINE_FAILURE_MESSAGE, BackendError, ParameterError
from dpcurator.query.plan.limits import MAX_STREAM_STATE_BYTES, MAX_STREAM_TRACKED
from dpcurator.service.auth import Identity, random_id
from dpcurator.service.errors import ConflictError, NotFoundError
from dpcurator.service.idempotency import (
    KeyedChange,
    conflict,
    earlier_change,
    record_change,
    request_fingerprint,
    stored_result,
)
from dpcurator.service.ledger import Ledger
from dpcurator.service.ledger.accounts import basic_cost
from dpcurator.service.ledger.charges import ChargeRequest
from dpcurator.service.models import Stream
from dpcurator.service.stores import stream_counters as counters
from dpcurator.streams import ContinualSum, PanPrivateDensity, PanPrivateIncidence

KINDS = ("count", "sum", "density", "incidence", *counters.KINDS)
_PAN_PRIVATE = ("density", "incidence")
_ALPHA = 0.05


@dataclass(frozen=True)
class StreamSpec:
    """The public parameters of a new stream (see the module docstring)."""

    kind: str
    epsilon: Fraction | None
    horizon: int | None = None
    lower: float = 0.0
    upper: float = 1.0
    universe: int | None = None
    output_epsilon: Fraction | None = None
    outputs: int = 1
    max_events_per_person: int | None = None
    modulus: int | None = None
    sample_size: int | None = None
    rho: Fraction | None = None
    resolution: float | None = None
    branching: int | None = None

    def params(self) -> dict[str, Any]:
        """The parameters as stored (exact fractions as text)."""
        if self.kind in counters.KINDS:
            return counters.params(
                self.kind,
                epsilon=self.epsilon,
                rho=self.rho,
                horizon=self.horizon,
                bounds=(self.lower, self.upper),
                resolution=self.resolution,
                max_events_per_person=self.max_events_per_person,
                branching=self.branching,
            )
        if self.kind in _PAN_PRIVATE:
            params: dict[str, Any] = {
                "epsilon": str(self.epsilon),
                "universe": self.universe,
                "output_epsilon": str(self.output_epsilon),
                "outputs": self.outputs,
            }
            if self.kind == "incidence":
                params["modulus"] = self.modulus
            if self.sample_size is not None:
                params["sample_size"] = self.sample_size
            return params
        params = {"epsilon": str(self.epsilon), "horizon": self.horizon}
        if self.max_events_per_person is not None:
            params["max_events_per_person"] = self.max_events_per_person
        if self.kind == "sum":
            params.update(lower=self.lower, upper=self.upper)
        return params

    def cost(self) -> ApproxDP | ZCDP:
        """The whole stream's ε (or ρ), charged at creation."""
        if self.kind in counters.KINDS:
            return counters.cost(self.kind, self.params())
        assert self.epsilon is not None  # the route requires it of these kinds
        if self.kind in _PAN_PRIVATE:
            assert self.output_epsilon is not None  # checked by new_state
            return ApproxDP(self.epsilon + self.outputs * self.output_epsilon, 0)
        return ApproxDP(self.epsilon, 0)


def _tree(kind: str, params: dict[str, Any]) -> ContinualSum:
    epsilon = Fraction(params["epsilon"])
    per_person = params.get("max_events_per_person")
    if kind == "count":
        return ContinualSum.counter(
            epsilon, int(params["horizon"]), max_events_per_person=per_person
        )
    return ContinualSum(
        epsilon,
        int(params["horizon"]),
        params["lower"],
        params["upper"],
        max_events_per_person=per_person,
    )


def new_state(spec: StreamSpec) -> tuple[bytes, PrivacyEvent]:
    """The initial persisted state and the event charged at creation; every parameter is
    checked here, before any charge."""
    if spec.kind not in KINDS:
        raise ParameterError(f"kind must be one of {KINDS}; got {spec.kind!r}.")
    if spec.kind in counters.KINDS:
        stored = spec.params()
        counter = counters.build(spec.kind, stored)
        counters.check_grid(spec.kind, counter)
        if spec.universe is not None or spec.modulus is not None or spec.sample_size is not None:
            raise ParameterError(
                "universe, modulus and sample_size apply to density and incidence streams only."
            )
        return counters.encode(counter), counters.event(spec.kind, stored, counter)
    if spec.epsilon is None or spec.rho is not None:
        raise ParameterError(f"A {spec.kind} stream is charged in epsilon: give epsilon, not rho.")
    if spec.resolution is not None or spec.branching is not None:
        raise ParameterError(
            "resolution and branching apply to correlated_sum, kary_count and kary_sum streams."
        )
    cost = spec.cost()
    assert isinstance(cost, ApproxDP)  # these kinds cost an ε
    return _old_state(spec), PureEvent(cost.epsilon)


def _old_state(spec: StreamSpec) -> bytes:
    """The initial state of a count, sum, density or incidence stream."""
    if (spec.modulus is not None) != (spec.kind == "incidence"):
        raise ParameterError("An incidence stream, and only it, needs a modulus.")
    if spec.kind in _PAN_PRIVATE:
        if spec.universe is None or spec.output_epsilon is None:
            raise ParameterError(f"A {spec.kind} stream needs universe and output_epsilon.")
        if spec.outputs < 1:
            raise ParameterError(f"outputs must be >= 1; got {spec.outputs}.")
        if spec.max_events_per_person is not None:
            raise ParameterError("max_events_per_person applies to count and sum streams only.")
        _check_tracked(spec.kind, spec.universe, spec.sample_size, spec.modulus)
        if spec.modulus is not None:
            return PanPrivateIncidence(
                spec.epsilon, spec.universe, spec.modulus, sample_size=spec.sample_size
            ).to_bytes()
        return PanPrivateDensity(spec.epsilon, spec.universe, spec.sample_size).to_bytes()
    if spec.sample_size is not None:
        raise ParameterError("sample_size applies to density and incidence streams only.")
    if spec.horizon is None:
        raise ParameterError(f"A {spec.kind} stream needs a horizon (the public maximum T).")
    return _encode_tree(_tree(spec.kind, spec.params()))


def _check_tracked(kind: str, universe: int, sample_size: int | None, modulus: int | None) -> None:
    """Refuse (free, before the charge) a pan-private stream that would track more than
    :data:`~dpcurator.query.plan.limits.MAX_STREAM_TRACKED` users, a sample above the universe,
    or a state of more than :data:`~dpcurator.query.plan.limits.MAX_STREAM_STATE_BYTES` bytes
    (:func:`state_bytes`: every batch rewrites it whole)."""
    if sample_size is not None and not 1 <= sample_size <= universe:
        raise ParameterError(
            f"sample_size must be between 1 and the universe ({universe:,}); got {sample_size:,}."
        )
    tracked = universe if sample_size is None else sample_size
    given = f"universe={universe:,}" + (
        "" if sample_size is None else f" and sample_size={sample_size:,}"
    )
    if tracked > MAX_STREAM_TRACKED:
        raise ParameterError(
            f"{'An' if kind == 'incidence' else 'A'} {kind} stream with {given} would keep a "
            f"state for {tracked:,} users, over the "
            f"limit MAX_STREAM_TRACKED = {MAX_STREAM_TRACKED:,} (every batch rewrites the whole "
            f"state): set sample_size to at most {MAX_STREAM_TRACKED:,} to track a public "
            "uniformly random sample of the universe."
        )
    size = state_bytes(tracked, modulus, sampled=sample_size is not None)
    if size > MAX_STREAM_STATE_BYTES:
        if modulus is not None:
            given += f" and modulus={modulus:,}"
        raise ParameterError(
            f"{'An' if kind == 'incidence' else 'A'} {kind} stream with {given} would keep a "
            f"state of {size:,} bytes, over the limit MAX_STREAM_STATE_BYTES = "
            f"{MAX_STREAM_STATE_BYTES:,} (every batch rewrites the whole state, so that no write "
            "reveals which users appeared): keep the universe at most "
            f"{_most_tracked(modulus, sampled=False):,}, or track a public uniformly random "
            f"sample of it with sample_size at most {_most_tracked(modulus, sampled=True):,}."
        )


def _most_tracked(modulus: int | None, *, sampled: bool) -> int:
    """The most users a state within MAX_STREAM_STATE_BYTES can track."""
    per_8_users = (1 if modulus is None else 8 * (1 if modulus <= 256 else 2)) + 64 * sampled
    most = MAX_STREAM_STATE_BYTES * 8 // per_8_users + 8
    while state_bytes(most, modulus, sampled=sampled) > MAX_STREAM_STATE_BYTES:
        most -= 1
    return min(most, MAX_STREAM_TRACKED)


def state_bytes(tracked: int, modulus: int | None, *, sampled: bool) -> int:
    """Bytes of a pan-private state tracking ``tracked`` users (the private part, plus 8 bytes
    a user for the ids of a public sample): one bit a user for a density stream (``modulus``
    None), one or two bytes a user for an incidence stream."""
    private = (tracked + 7) // 8 if modulus is None else tracked * (1 if modulus <= 256 else 2)
    return private + (8 * tracked if sampled else 0)


def _encode_tree(tree: ContinualSum) -> bytes:
    """The tree's position: time, exact running totals at the boundaries, noisy node sums."""
    state = {
        "time": tree.time,
        "total": tree._total,
        "anchor": tree._anchor,
        "node": tree._node,
        "persons": sorted(tree.events_per_person.items(), key=repr),
    }
    return json.dumps(state).encode()


def _decode_tree(kind: str, params: dict[str, Any], data: bytes) -> ContinualSum:
    tree = _tree(kind, params)
    state = json.loads(data)
    tree.time = int(state["time"])
    tree._total = int(state["total"])
    tree._anchor = [int(v) for v in state["anchor"]]
    tree._node = [int(v) for v in state["node"]]
    tree.events_per_person = {person: int(n) for person, n in state.get("persons", [])}
    return tree


class StreamStore:
    """Create streams, ingest batches and release estimates, through the ledger's database."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def create(
        self,
        identity: Identity,
        dataset_id: str,
        spec: StreamSpec,
        *,
        request_key: str | None = None,
    ) -> Stream:
        """Check the parameters (free), charge the whole stream's ε to the dataset, store it;
        a retry with the same ``request_key`` returns the stream created first
        (:mod:`dpcurator.service.idempotency`)."""
        identity.require_owner()
        state, event = new_state(spec)
        stream_id = f"str_{random_id(9)}"
        text = json.dumps({"stream": stream_id, "kind": spec.kind, **spec.params()})
        reservation = self.ledger.reserve(
            ChargeRequest(
                principal_id=identity.principal_id,
                dataset_id=dataset_id,
                kind="stream",
                query_text=text,
                fingerprint=request_fingerprint("streams", kind=spec.kind, **spec.params()),
                cost=basic_cost(event),
                events=[event.to_dict()],
                request_key=request_key,
                charge_grant=False,
            )
        )
        stored = stored_result(reservation)
        if stored is not None:
            return self.get(str(stored["stream_id"]))
        stream = Stream(
            id=stream_id,
            dataset_id=dataset_id,
            kind=spec.kind,
            params=spec.params(),
            charge_id=reservation.charge_id,
            state=state,
            latest=None,
            created_by=identity.principal_id,
        )
        with self.ledger._transaction(write=True) as s:
            s.add(stream)
        self.ledger.complete(reservation.charge_id, {"stream_id": stream_id})
        return stream

    def get(self, stream_id: str) -> Stream:
        """The stream row, or NotFoundError."""
        with self.ledger._transaction(write=False) as s:
            stream = s.get(Stream, stream_id)
        if stream is None:
            raise NotFoundError(f"No stream with id {stream_id!r}.")
        return stream

    def ingest(
        self,
        stream_id: str,
        values: list[float] | list[int],
        persons: list[int | str] | None = None,
    ) -> tuple[Stream, list[float]]:
        """Ingest one batch (its length is public: the clock); a tree stream releases its
        running total after every event of it (returned, one per event; the last is kept as
        ``latest``), a pan-private stream releases nothing. A user-level stream needs
        ``persons`` (one id per event); other streams refuse them."""
        with self.ledger._transaction(write=True) as s:
            stream = _locked(s, stream_id)
            return stream, _apply(stream, values, persons)

    def ingest_once(
        self,
        stream_id: str,
        values: list[float] | list[int],
        persons: list[int | str] | None,
        *,
        change: KeyedChange,
        answer: Callable[[Stream, list[float]], dict[str, Any]],
    ) -> tuple[dict[str, Any], bool]:
        """:meth:`ingest` a batch sent with an ``Idempotency-Key``: its answer (built by
        ``answer`` from the stream and the releases) and whether it is the stored one.

        ONE write transaction locks the stream row, looks the key up, ingests the batch and
        records the key with the answer (:func:`~dpcurator.service.idempotency.record_change`):
        a server killed at any point commits both or neither, so a retry ingests the batch
        exactly once or replays its answer. Concurrent requests with one key queue on the
        stream's lock; the later ones find the record. A refused batch (a ParameterError)
        rolls back and records nothing: the key may be used again.

        Raises:
            ConflictError: the key was used for another request (of this or another route).
        """
        try:
            with self.ledger._transaction(write=True) as s:
                stream = _locked(s, stream_id)
                earlier = earlier_change(s, change, stream.dataset_id)
                if earlier is not None and earlier.status == "released":
                    return dict(earlier.result or {}), True
                if earlier is not None and earlier.status != "reserved":
                    raise BackendError(ENGINE_FAILURE_MESSAGE)
                out = answer(stream, _apply(stream, values, persons))
                record_change(
                    s, self.ledger, change, stream.dataset_id, answer=out, earlier=earlier
                )
        except IntegrityError:  # a request of another route took the key meanwhile
            raise conflict(change.key) from None
        return out, False

    def estimate(self, stream_id: str, at_least: int | None = None) -> Stream:
        """Release a new estimate of a density stream, or of an incidence stream's fraction seen
        ``at_least`` times (one of its paid ``outputs``)."""
        with self.ledger._transaction(write=True) as s:
            stream = _locked(s, stream_id)
            if stream.kind not in _PAN_PRIVATE:
                raise ConflictError(
                    f"Stream {stream_id!r} is a {stream.kind} stream: it releases its running "
                    "total after every batch; only density and incidence streams release on "
                    "request."
                )
            if (at_least is not None) != (stream.kind == "incidence"):
                raise ParameterError("at_least is required by incidence streams, and only them.")
            used = 0 if stream.latest is None else int(stream.latest["outputs_used"])
            if used >= int(stream.params["outputs"]):
                raise ConflictError(f"Stream {stream_id!r} has released all {used} paid estimates.")
            output_epsilon = Fraction(stream.params["output_epsilon"])
            state = _pan_private(stream)
            if isinstance(state, PanPrivateIncidence):
                assert at_least is not None
                out = state.estimate_at_least(at_least, output_epsilon, alpha=_ALPHA)
            else:
                out = state.estimate(output_epsilon, alpha=_ALPHA)
            stream.latest = {
                **_interval(None, out.fraction, out.ci_low, out.ci_high),
                "outputs_used": used + 1,
            }
            if at_least is not None:
                stream.latest["at_least"] = at_least
            return stream


def _locked(s: OrmSession, stream_id: str) -> Stream:
    """The stream row, locked for this write transaction, or NotFoundError."""
    stream = s.scalar(select(Stream).where(Stream.id == stream_id).with_for_update())
    if stream is None:
        raise NotFoundError(f"No stream with id {stream_id!r}.")
    return stream


def _apply(
    stream: Stream, values: list[float] | list[int], persons: list[int | str] | None
) -> list[float]:
    """Ingest a batch into the locked ``stream`` row (see :meth:`StreamStore.ingest`)."""
    if stream.kind in _PAN_PRIVATE:
        if persons is not None:
            raise ParameterError(f"A {stream.kind} stream takes user ids as its values.")
        if any(not isinstance(v, int) for v in values):
            raise ParameterError(f"A {stream.kind} stream takes integer user ids.")
        state = _pan_private(stream)
        state.observe(values)
        stream.state = state.to_bytes()
        return []
    tree: ContinualSum | counters.Counter
    if stream.kind in counters.KINDS:
        tree = counters.restore(stream.kind, stream.params, stream.state)
        released = tree.update(values, persons=persons)
        stream.state = counters.encode(tree)
    else:
        tree = _decode_tree(stream.kind, stream.params, stream.state)
        released = tree.update(values, persons=persons)
        stream.state = _encode_tree(tree)
    if released.size:
        half = tree.ci_halfwidth(alpha=_ALPHA)
        value = float(released[-1])
        stream.latest = _interval(tree.time, value, value - half, value + half)
    return [float(v) for v in released]


def _pan_private(stream: Stream) -> PanPrivateDensity | PanPrivateIncidence:
    """The persisted pan-private state of a density or incidence stream."""
    if stream.kind == "incidence":
        return PanPrivateIncidence.from_bytes(stream.state)
    return PanPrivateDensity.from_bytes(stream.state)


def _interval(time: int | None, value: float, low: float, high: float) -> dict[str, Any]:
    latest: dict[str, Any] = {"value": value, "ci_low": low, "ci_high": high, "alpha": _ALPHA}
    if time is not None:
        latest["time"] = time
    return latest
