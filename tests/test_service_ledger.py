"""The ledger: atomic reservations against the analyst budget AND the global cap, exact totals,
request keys (exactly-once retries), refunds, on SQLite and on PostgreSQL."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from fractions import Fraction
from pathlib import Path
from typing import Protocol, cast

import pytest
from sqlalchemy import Connection, QueuePool, event, text

from dpcurator.accounting.events import ConcentratedEvent, LaplaceEvent, ParallelEvent
from dpcurator.core.measures import ApproxDP
from dpcurator.errors import AuthError, BudgetExceededError
from dpcurator.service.auth import TokenAuthority
from dpcurator.service.errors import ConflictError, NotFoundError
from dpcurator.service.ledger import Ledger
from dpcurator.service.ledger import postgres as ledger_postgres
from dpcurator.service.ledger.budgets import dataset_budget, grant_budget
from dpcurator.service.ledger.charges import ChargeRequest
from dpcurator.service.ledger.lease import LEASE_SECONDS
from dpcurator.service.models import Charge
from tests._service_helpers import race
from tests.service_fixtures import (
    CountingHasher,
    fresh_postgres_url,
    ledger_with_analysts,
    postgres_server,
)

__all__ = ["postgres_server"]

EPS = Fraction(1, 8)


def _request(analyst: str, cost: ApproxDP, key: str | None = None, sql: str = "q") -> ChargeRequest:
    return ChargeRequest(
        principal_id=analyst,
        dataset_id="d",
        kind="query",
        query_text=sql,
        fingerprint=sql,
        cost=cost,
        events=[],
        request_key=key,
    )


class MakeLedger(Protocol):
    def __call__(self, *, lease_seconds: float = LEASE_SECONDS) -> Ledger: ...


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def make_ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeLedger]:
    """A factory of Ledger objects (servers: one boot id each) on one fresh database (SQLite
    file or PostgreSQL)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    else:
        url = fresh_postgres_url(request.getfixturevalue("postgres_server"))
    made: list[Ledger] = []

    def make(*, lease_seconds: float = LEASE_SECONDS) -> Ledger:
        made.append(Ledger(url, lease_seconds=lease_seconds))
        return made[-1]

    yield make
    for ledger in made:
        ledger.close()


def test_reserve_updates_running_totals_exactly(make_ledger: MakeLedger) -> None:
    ledger = make_ledger()
    (analyst,) = ledger_with_analysts(ledger, grant=ApproxDP(1, 0), cap=ApproxDP(2, 0))
    for _ in range(8):
        ledger.reserve(_request(analyst, ApproxDP(EPS, 0)))
    with pytest.raises(BudgetExceededError) as info:
        ledger.reserve(_request(analyst, ApproxDP(EPS, 0)))
    assert info.value.remaining == ApproxDP(0, 0)
    grant = ledger.grant(analyst, "d")
    assert grant is not None
    assert grant_budget(grant).spent == ApproxDP(1, 0)
    assert dataset_budget(ledger.dataset("d")).spent == ApproxDP(1, 0)
    assert ledger.charged_total("d") == ApproxDP(1, 0)
    assert ledger.count_charges("d") == 8


def test_refusal_changes_nothing(make_ledger: MakeLedger) -> None:
    ledger = make_ledger()
    (analyst,) = ledger_with_analysts(
        ledger, grant=ApproxDP(1, Fraction(1, 10**6)), cap=ApproxDP(5, 0)
    )
    ledger.reserve(_request(analyst, ApproxDP(Fraction(1, 2), 0)))
    with pytest.raises(BudgetExceededError):
        ledger.reserve(_request(analyst, ApproxDP(Fraction(1, 4), Fraction(1, 10**5))))
    assert ledger.count_charges("d") == 1
    assert ledger.charged_total("d") == ApproxDP(Fraction(1, 2), 0)


def test_global_cap_binds_across_analysts(make_ledger: MakeLedger) -> None:
    ledger = make_ledger()
    a, b = ledger_with_analysts(
        ledger, grant=ApproxDP(1, 0), cap=ApproxDP(Fraction(3, 2), 0), analysts=2
    )
    ledger.reserve(_request(a, ApproxDP(1, 0)))
    ledger.reserve(_request(b, ApproxDP(Fraction(1, 2), 0)))
    with pytest.raises(BudgetExceededError, match="global"):
        ledger.reserve(_request(b, ApproxDP(EPS, 0)))
    assert ledger.charged_total("d") == ApproxDP(Fraction(3, 2), 0)


def test_an_owner_charges_only_the_global_cap(make_ledger: MakeLedger) -> None:
    """A charge without a grant (an owner's batch) counts against the cap alone, with δ too."""
    ledger = make_ledger()
    (analyst,) = ledger_with_analysts(
        ledger, grant=ApproxDP(1, 0), cap=ApproxDP(2, Fraction(1, 10**6))
    )
    batch = replace(
        _request("own_1", ApproxDP(Fraction(3, 2), Fraction(1, 10**6))),
        kind="batch",
        events=[{"epsilon": "3/2"}],
        charge_grant=False,
    )
    reservation = ledger.reserve(batch)
    assert reservation.budget is None
    # Stored as its one event: what was given is not an event, so the cost's (ε, δ) event.
    stored = ledger.charge(reservation.charge_id).events
    assert stored == [{"kind": "approx", "epsilon": "3/2", "delta": "1/1000000"}]
    with pytest.raises(BudgetExceededError, match="global"):
        ledger.reserve(replace(batch, cost=ApproxDP(Fraction(1, 2), Fraction(1, 10**9))))
    with pytest.raises(BudgetExceededError, match="global"):
        ledger.reserve(_request(analyst, ApproxDP(Fraction(3, 4), 0)))
    grant = ledger.grant(analyst, "d")
    assert grant is not None
    assert grant_budget(grant).spent == ApproxDP(0, 0)
    assert dataset_budget(ledger.dataset("d")).spent == ApproxDP(Fraction(3, 2), Fraction(1, 10**6))


def test_no_grant_is_not_found(make_ledger: MakeLedger) -> None:
    ledger = make_ledger()
    ledger_with_analysts(ledger, grant=ApproxDP(1, 0), cap=ApproxDP(1, 0))
    ledger.create_principal("ana_x", "stranger", "analyst")
    with pytest.raises(NotFoundError):
        ledger.reserve(_request("ana_x", ApproxDP(EPS, 0)))
    assert ledger.count_charges("d") == 0


def test_request_key_charges_once_and_claims_after_a_crash(
    make_ledger: MakeLedger,
) -> None:
    ledger = make_ledger()
    restarted = make_ledger(lease_seconds=0.5)  # another server (new boot id)
    (analyst,) = ledger_with_analysts(ledger, grant=ApproxDP(1, 0), cap=ApproxDP(1, 0))
    first = ledger.reserve(_request(analyst, ApproxDP(EPS, 0), key="k1"))
    # The same process is still running it: a concurrent duplicate is refused.
    with pytest.raises(ConflictError, match="still running"):
        ledger.reserve(_request(analyst, ApproxDP(EPS, 0), key="k1"))
    # A different question under the same key is refused.
    with pytest.raises(ConflictError, match="different"):
        ledger.reserve(_request(analyst, ApproxDP(EPS, 0), key="k1", sql="other"))
    # Another server sees a live claim: the first one may still be computing.
    with pytest.raises(ConflictError, match="still running"):
        restarted.reserve(_request(analyst, ApproxDP(EPS, 0), key="k1"))
    # Once the claim has expired unrenewed (its server died), the retry takes the first charge
    # over; nothing is charged again, and the first server can no longer release an answer.
    time.sleep(0.6)
    again = restarted.reserve(_request(analyst, ApproxDP(EPS, 0), key="k1"))
    assert again.reused
    assert again.charge_id == first.charge_id
    restarted.complete(first.charge_id, {"rows": [1]})
    with pytest.raises(ConflictError, match="not reserved by this server"):
        ledger.complete(first.charge_id, {"rows": [2]})
    done = restarted.reserve(_request(analyst, ApproxDP(EPS, 0), key="k1"))
    assert done.status == "released"
    assert done.result == {"rows": [1]}
    assert restarted.charged_total("d") == ApproxDP(EPS, 0)


def test_a_claim_renewed_while_computing_is_never_taken_over(make_ledger: MakeLedger) -> None:
    """A server computing a keyed charge keeps its claim live past the lease (renewals); another
    server retrying the key meanwhile is refused, and may take it over only once the renewals
    stop (the first server died) and the lease has run out."""
    first, second = make_ledger(lease_seconds=1.0), make_ledger(lease_seconds=1.0)
    (analyst,) = ledger_with_analysts(first, grant=ApproxDP(1, 0), cap=ApproxDP(1, 0))
    reserved = first.reserve(_request(analyst, ApproxDP(EPS, 0), key="k"))
    first.hold_claim(reserved.charge_id)
    time.sleep(2.5)  # two and a half leases: only the renewals keep the claim live
    with pytest.raises(ConflictError, match="still running"):
        second.reserve(_request(analyst, ApproxDP(EPS, 0), key="k"))
    first.drop_claim(reserved.charge_id)
    time.sleep(1.5)
    taken = second.reserve(_request(analyst, ApproxDP(EPS, 0), key="k"))
    assert (taken.reused, taken.charge_id, taken.status) == (True, reserved.charge_id, "reserved")
    assert second.charged_total("d") == ApproxDP(EPS, 0)


def test_a_ledger_made_before_leases_gets_the_claim_column(make_ledger: MakeLedger) -> None:
    """Opening a ledger whose charges table lacks ``claimed_at`` adds it (a migration)."""
    ledger = make_ledger()
    (analyst,) = ledger_with_analysts(ledger, grant=ApproxDP(1, 0), cap=ApproxDP(1, 0))
    old = ledger.reserve(_request(analyst, ApproxDP(EPS, 0), key="old"))
    with ledger._engine.begin() as conn:
        conn.execute(text("ALTER TABLE charges DROP COLUMN claimed_at"))
    reopened = make_ledger(lease_seconds=60)
    # The old claim has no lease time: it counts as expired, and is taken over.
    assert reopened.reserve(_request(analyst, ApproxDP(EPS, 0), key="old")).reused
    new = reopened.reserve(_request(analyst, ApproxDP(EPS, 0), key="new"))
    assert reopened.charge(new.charge_id).claimed_at is not None
    assert reopened.charge(old.charge_id).claimed_at is not None
    make_ledger()  # a third server finds the column in place


def test_cancel_refunds_only_reserved_charges(make_ledger: MakeLedger) -> None:
    ledger = make_ledger()
    (analyst,) = ledger_with_analysts(ledger, grant=ApproxDP(1, 0), cap=ApproxDP(1, 0))
    kept = ledger.reserve(_request(analyst, ApproxDP(EPS, 0)))
    refunded = ledger.reserve(_request(analyst, ApproxDP(EPS, 0)))
    ledger.cancel(refunded.charge_id)
    ledger.complete(kept.charge_id, {})
    with pytest.raises(ConflictError):
        ledger.cancel(kept.charge_id)
    grant = ledger.grant(analyst, "d")
    assert grant is not None
    assert grant_budget(grant).spent == ApproxDP(EPS, 0)
    assert ledger.charged_total("d") == ApproxDP(EPS, 0)


def test_concurrent_reservations_never_overspend(make_ledger: MakeLedger) -> None:
    ledger = make_ledger()
    analysts = ledger_with_analysts(
        ledger, grant=ApproxDP(1, 0), cap=ApproxDP(Fraction(5, 4), 0), analysts=4
    )
    outcomes = race(lambda i: ledger.reserve(_request(analysts[i % 4], ApproxDP(EPS, 0))))
    assert outcomes.count("ok") == 10
    assert outcomes.count("refused") == 30
    assert ledger.charged_total("d") == ApproxDP(Fraction(5, 4), 0)
    assert dataset_budget(ledger.dataset("d")).spent == ApproxDP(Fraction(5, 4), 0)
    spent = [grant_budget(g).spent.epsilon for g in ledger.grants()]
    assert sum(spent) == Fraction(5, 4)
    assert all(s <= 1 for s in spent)


def test_concurrent_retries_of_one_request_are_charged_once(
    make_ledger: MakeLedger,
) -> None:
    """Two servers (one boot id each) reserve the same request keys at once: each key is charged
    once: a server finds the reservation already made for the key, by itself or by the other
    (a live claim): "still running", never a second charge."""
    first, second = make_ledger(), make_ledger()
    (analyst,) = ledger_with_analysts(first, grant=ApproxDP(100, 0), cap=ApproxDP(100, 0))
    charges: dict[str, set[int]] = {}
    lock = threading.Lock()
    start = threading.Barrier(24)

    def worker(ledger: Ledger, key: str) -> None:
        start.wait()
        try:
            reservation = ledger.reserve(_request(analyst, ApproxDP(EPS, 0), key=key))
        except ConflictError:  # a server already runs this key: "still running"
            return
        with lock:
            charges.setdefault(key, set()).add(reservation.charge_id)

    threads = [
        threading.Thread(target=worker, args=(ledger, f"key-{i % 6}"))
        for i in range(12)
        for ledger in (first, second)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(charges) == 6
    assert all(len(ids) == 1 for ids in charges.values())  # one charge per key
    assert first.charged_total("d") == ApproxDP(6 * EPS, 0)


@pytest.mark.postgres
def test_on_postgresql_only_the_reservation_commits_without_a_flush(
    postgres_server: str,
) -> None:
    """The reservation (which holds the dataset row's lock) commits without waiting for its WAL
    flush; the setting is LOCAL to it (a transaction, or the one statement of a reservation
    without a request key), so every later transaction on the same pooled connection (a refund,
    a grant, the completion) flushes as before."""
    ledger = Ledger(fresh_postgres_url(postgres_server))
    settings: list[tuple[str, str]] = []
    doing = ["setup"]

    def record(conn: Connection) -> None:  # just before each COMMIT
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None
        cursor = dbapi.cursor()
        cursor.execute("SHOW synchronous_commit")
        row = cursor.fetchone()
        assert row is not None
        settings.append((doing[0], row[0]))

    event.listen(ledger._engine, "commit", record)
    try:
        (analyst,) = ledger_with_analysts(ledger, grant=ApproxDP(1, 0), cap=ApproxDP(1, 0))
        doing[0] = "reserve"  # with a request key: a transaction of several statements
        charge = ledger.reserve(_request(analyst, ApproxDP(EPS, 0), key="k1"))
        doing[0] = "cancel"
        ledger.cancel(charge.charge_id)
        doing[0] = "reserve"
        charge = ledger.reserve(_request(analyst, ApproxDP(EPS, 0), key="k2"))
        doing[0] = "autocommit reserve"  # without: one statement, no COMMIT of ours
        ledger.reserve(_request(analyst, ApproxDP(EPS, 0)))
        doing[0] = "fail"
        ledger.fail(charge.charge_id, "engine failed")
        pool = cast("QueuePool", ledger._engine.pool)
        assert pool.checkedin() == 1  # every transaction used one connection
        with ledger._engine.connect() as conn:  # as complete() does: autocommit, no COMMIT
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar_one() == "on"
    finally:
        ledger.close()
    assert {s for what, s in settings if what == "reserve"} == {"off"}
    assert {s for what, s in settings if what != "reserve"} == {"on"}
    assert [what for what, _ in settings].count("reserve") == 2
    assert "autocommit reserve" not in {what for what, _ in settings}


@pytest.mark.postgres
def test_postgresql_fraction_arithmetic_equals_python_fractions(postgres_server: str) -> None:
    """The reservation function adds and compares costs in the database: on random fractions
    (tiny to 60-digit numerators and denominators, integers, zero) its sums are written exactly
    as ``str(Fraction)`` writes them and its comparisons agree with Python's."""
    generator = random.Random(20261123)

    def fraction() -> Fraction:
        digits = generator.choice([1, 3, 12, 60])
        numerator = generator.randrange(0, 10**digits)
        return Fraction(numerator, generator.choice([1, generator.randrange(1, 10**digits) + 1]))

    pairs = [(fraction(), fraction()) for _ in range(400)]
    pairs += [(a, a) for a, _ in pairs[:50]]  # equal values: at most, not less
    ledger = Ledger(fresh_postgres_url(postgres_server))
    try:
        with ledger._engine.connect() as conn:
            rows = conn.execute(
                text(
                    f"SELECT {ledger_postgres.ADD}(a, b), {ledger_postgres.AT_MOST}(a, b)"
                    " FROM unnest(CAST(:a AS text[]), CAST(:b AS text[])) AS t(a, b)"
                ),
                {"a": [str(a) for a, _ in pairs], "b": [str(b) for _, b in pairs]},
            ).all()
    finally:
        ledger.close()
    assert [row[0] for row in rows] == [str(a + b) for a, b in pairs]
    assert [row[1] for row in rows] == [a <= b for a, b in pairs]


def _columns(charge: Charge) -> dict[str, object]:
    return {column.name: getattr(charge, column.name) for column in Charge.__table__.columns}


def test_sqlite_raw_statements_store_what_sqlalchemy_stores(tmp_path: Path) -> None:
    """A reservation and completion run on the raw sqlite3 cursor (no request key) write the
    same stored formats as SQLAlchemy's execution of the same statements (with a key), and the
    completed entry reads back as the ORM reads it."""
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite3'}")
    try:
        (analyst,) = ledger_with_analysts(ledger, grant=ApproxDP(1, 0), cap=ApproxDP(1, 0))
        nested = ParallelEvent([LaplaceEvent(8, 1), ConcentratedEvent(1, 0, EPS)])
        events = [nested.to_dict()]  # nested lists, None: one event costing (EPS, 0)
        raw = ledger.reserve(replace(_request(analyst, ApproxDP(EPS, 0)), events=events))
        core = ledger.reserve(replace(_request(analyst, ApproxDP(EPS, 0), key="k"), events=events))
        completed = ledger.complete(raw.charge_id, {"rows": [[1, 0.5]]})
        assert _columns(completed) == _columns(ledger.charge(raw.charge_id))
        assert isinstance(completed.created_at, datetime)
        assert isinstance(completed.completed_at, datetime)
        with ledger._engine.connect() as conn:
            stored = conn.exec_driver_sql(
                "SELECT id, typeof(created_at), length(created_at), events, status FROM charges"
            ).all()
    finally:
        ledger.close()
    by_id = {row[0]: row[1:] for row in stored}
    assert by_id[raw.charge_id][:3] == by_id[core.charge_id][:3]
    assert by_id[raw.charge_id][3:] == ("released",)
    assert by_id[core.charge_id][3:] == ("reserved",)
    assert ledger.charge(raw.charge_id).events == events


def test_a_verified_token_is_rechecked_for_revocation_without_argon2(
    make_ledger: MakeLedger,
) -> None:
    """Past the cache time the same token is checked again in the ledger (a revocation made
    through another server process takes effect) but its secret is not hashed again; a legacy
    argon2 row is verified with argon2 once, then holds an HMAC that refuses other secrets."""
    ledger = make_ledger()
    (analyst,) = ledger_with_analysts(ledger, grant=ApproxDP(1, 0), cap=ApproxDP(1, 0))
    hasher = CountingHasher()
    authority = TokenAuthority(ledger, hasher=hasher, cache_seconds=0.0)
    ledger.add_token("legacy", analyst, hasher.hash("s3cret"))
    header = "Bearer dpc_legacy_s3cret"
    for _ in range(3):
        assert authority.authenticate(header, "client").principal_id == analyst
    assert hasher.verified == 1
    with pytest.raises(AuthError):  # another token of the same id: the HMAC refuses its secret
        authority.authenticate(f"{header[:-4]}AAAA", "client")
    assert hasher.verified == 1
    make_ledger().revoke_token("legacy", by="own_1")  # as another process would
    with pytest.raises(AuthError, match="revoked"):
        authority.authenticate(header, "client")
    with pytest.raises(AuthError, match="revoked"):  # and it stays refused
        authority.authenticate(header, "client")
