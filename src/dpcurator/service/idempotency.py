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
charge of cost zero, completed with the answer: the same guarantee, one ingestion per key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Header

from dpcurator.core.measures import ApproxDP
from dpcurator.errors import ENGINE_FAILURE_MESSAGE, BackendError, DPError
from dpcurator.service.auth import Identity
from dpcurator.service.errors import ConflictError
from dpcurator.service.ledger import Ledger
from dpcurator.service.ledger.charges import ChargeRequest, Reservation
from dpcurator.service.models import Charge

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


def changed_once(
    ledger: Ledger,
    identity: Identity,
    dataset_id: str,
    *,
    key: str | None,
    kind: str,
    text: str,
    fingerprint: str,
    change: Callable[[], dict[str, Any]],
) -> tuple[dict[str, Any], bool]:
    """Run a state change that costs nothing once per key: its answer and whether it was the
    stored one. The key is recorded as a charge of cost zero (kind ``kind``) before ``change``
    runs and completed with its answer; a refused change (a DPError) removes the record, so
    the key may be used again.

    A server that dies between the change and the record's completion leaves the record
    claimed; a retry after the lease expired runs the change again (the one case where a
    change may apply twice: a crash inside that window).
    """
    if key is None:
        return change(), False
    reserved = ledger.reserve(
        ChargeRequest(
            principal_id=identity.principal_id,
            dataset_id=dataset_id,
            kind=kind,
            query_text=text,
            fingerprint=fingerprint,
            cost=ApproxDP(0, 0),
            events=[],
            request_key=key,
            charge_grant=False,
        )
    )
    stored = stored_result(reserved)
    if stored is not None:
        return stored, True
    ledger.hold_claim(reserved.charge_id)
    try:
        answer = change()
    except DPError:
        _forget(ledger, reserved.charge_id)
        raise
    finally:
        ledger.drop_claim(reserved.charge_id)
    ledger.complete(reserved.charge_id, answer)
    return answer, False


def _forget(ledger: Ledger, charge_id: int) -> None:
    """Delete the zero-cost record of a refused change (no running total holds it)."""
    with ledger._transaction(write=True) as s:
        charge = s.get(Charge, charge_id)
        if charge is not None and charge.status == "reserved" and charge.epsilon == "0":
            s.delete(charge)
