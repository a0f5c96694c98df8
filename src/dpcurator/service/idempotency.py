"""``Idempotency-Key`` on every route that charges or changes state (issue 24, item 2).

One mechanism for all of them: the ledger's request keys (:meth:`Ledger.reserve
<dpcurator.service.ledger.charges.LedgerCharges.reserve>`). A request with a key reserves its
charge with that key and a fingerprint of what was asked (the route, the path's ids and the
body); the key is unique per caller, and it is looked up under the dataset's lock, so of any
number of concurrent requests with one key exactly one is charged and computes. The others get
409 while it computes (its claim is live, :mod:`dpcurator.service.ledger.lease`), and a retry
afterwards gets the first answer without a new charge. The same key with another fingerprint
(another body, path or route) is 409 and changes nothing.

Routes that charge nothing but change state (a stream's event batches) record their key as a
charge of cost zero holding the answer, written in the same database transaction as the change
(:func:`earlier_change`, :func:`record_change`): the same guarantee, one ingestion per key, and
no window for a crash between the change and its record (the transaction commits both or
neither; ``tests/test_service_streams_crash.py`` kills a real server at every point).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Header
from sqlalchemy import select
from sqlalchemy.orm import Session as OrmSession

from dpcurator.core.measures import ApproxDP
from dpcurator.errors import ENGINE_FAILURE_MESSAGE, BackendError
from dpcurator.service.errors import ConflictError
from dpcurator.service.ledger import Ledger
from dpcurator.service.ledger.charges import ChargeRequest, Reservation
from dpcurator.service.models import Charge, utcnow

#: The ``Idempotency-Key`` header (optional; 1 to 200 visible ASCII characters).
IdempotencyKey = Annotated[
    str | None,
    Header(
        min_length=1,
        max_length=200,
        pattern=r"^[\x21-\x7e]+$",
        description="A key chosen by the client, unique per request: a retry with the same key "
        "and body gets the first answer at no new cost (409 while it is still computing); the "
        "same key with another body is refused with 409.",
    ),
]


def request_fingerprint(route: str, **parts: Any) -> str:
    """The fingerprint of a keyed request: SHA-256 of its route and canonical JSON parts."""
    text = json.dumps({"route": route, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def conflict(key: str | None) -> ConflictError:
    """The refusal of a key reused for another request (the words of the query routes)."""
    return ConflictError(
        f"The request key {key!r} was already used for a different request. Use a fresh key "
        "for every new question."
    )


def same_request(charge: Charge, fingerprint: str, dataset_id: str) -> Charge:
    """The charge found for a key, if it was made for this request (else 409)."""
    if charge.fingerprint != fingerprint or charge.dataset_id != dataset_id:
        raise conflict(charge.request_key)
    return charge


def stored_result(reserved: Reservation) -> dict[str, Any] | None:
    """The stored result of a keyed request answered before (None: compute it now, a new
    charge or one whose server died while computing it).

    Raises:
        BackendError: the first request failed after its charge (the constant text).
    """
    if not reserved.reused or reserved.status == "reserved":
        return None
    if reserved.status != "released":
        raise BackendError(ENGINE_FAILURE_MESSAGE)
    return reserved.result or {}


@dataclass(frozen=True)
class KeyedChange:
    """A state change that costs nothing, sent with an ``Idempotency-Key``: who sent it, the
    key, the fingerprint of what was asked and the text recorded in the caller's history."""

    principal_id: str
    key: str
    kind: str
    text: str
    fingerprint: str


def earlier_change(session: OrmSession, change: KeyedChange, dataset_id: str) -> Charge | None:
    """The record of ``change.key`` made by an earlier request, read inside the transaction that
    will apply the change (after the caller locked what it changes); 409 if it was made for
    another request."""
    earlier = session.scalar(
        select(Charge).where(
            (Charge.principal_id == change.principal_id) & (Charge.request_key == change.key)
        )
    )
    return None if earlier is None else same_request(earlier, change.fingerprint, dataset_id)


def record_change(
    session: OrmSession,
    ledger: Ledger,
    change: KeyedChange,
    dataset_id: str,
    *,
    answer: dict[str, Any],
    earlier: Charge | None,
) -> None:
    """Record ``answer`` as the key's stored response, as a charge of cost zero, in the SAME
    transaction as the change itself: a crash before its commit leaves neither, after it both,
    so a retry either applies the change once or replays the answer (issue 24, item 2).
    ``earlier`` is a record left ``reserved`` by a version of dpcurator that recorded the key
    first and applied the change in a second transaction: it is completed here."""
    now = utcnow()
    if earlier is not None:
        earlier.status, earlier.result, earlier.completed_at = "released", answer, now
        earlier.claimed_by, earlier.claimed_at = ledger.boot_id, None
        return
    row = ledger._charge_row(
        ChargeRequest(
            principal_id=change.principal_id,
            dataset_id=dataset_id,
            kind=change.kind,
            query_text=change.text,
            fingerprint=change.fingerprint,
            cost=ApproxDP(0, 0),
            events=[],
            request_key=change.key,
            charge_grant=False,
        )
    )
    row.update(status="released", result=answer, claimed_at=None, completed_at=now)
    session.add(Charge(**row))
