"""The ledger's database tables (SQLAlchemy 2 declarative models).

Privacy costs are stored as exact fractions written as text (``"1/10"``), never as floats, so that
running totals and budget checks are exact on every database. The running totals ``spent_*`` of a
:class:`Grant` (one analyst on one dataset) and of a :class:`Dataset` (the global cap across all
analysts) are updated in the same transaction that inserts the :class:`Charge`, while those rows are
locked; the sum of the charges always equals them (a test checks this invariant).

Tables:

* ``principals`` — owners and analysts.
* ``tokens`` — API tokens: a public id (the lookup key) and the keyed hash of the secret.
* ``server_secrets`` — secrets shared by the server processes (the token HMAC key).
* ``datasets`` — registered data sources with their public metadata and global cap.
* ``grants`` — per-analyst, per-dataset budgets.
* ``charges`` — the ledger proper: every reservation, its cost, the query text and, once
  released, the released values. Replayed answers are rows with zero cost that point to the charge
  they repeat.
* ``releases`` — published batch releases readable without further spending.
* ``audit`` — everything else worth recording (tokens issued and revoked, budgets changed,
  refusals).
* ``streams`` — private streams (:mod:`dpcurator.service.stores.streams`): public parameters and
  the mechanism's state only (for pan-private streams the ε-DP bit array, never an event).
* ``surveys`` — local-model surveys: per category, how many randomised reports were received.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, ForeignKey, Index, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    """The current time in UTC, naive (every database stores and returns naive UTC timestamps)."""
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    """Declarative base of the ledger tables."""

    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class Principal(Base):
    """An owner (manages datasets, analysts and budgets) or an analyst (asks queries)."""

    __tablename__ = "principals"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Token(Base):
    """An API token: ``dpc_<token_id>_<secret>``; only a hash of the secret is stored."""

    __tablename__ = "tokens"

    token_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    principal_id: Mapped[str] = mapped_column(ForeignKey("principals.id"), index=True)
    secret_hash: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class ServerSecret(Base):
    """A secret shared by every process serving this ledger, e.g. the key of the token HMAC."""

    __tablename__ = "server_secrets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(200))


class Dataset(Base):
    """A registered data source, its public metadata and its global cap across all analysts."""

    __tablename__ = "datasets"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    source: Mapped[dict[str, Any]]
    metadata_doc: Mapped[dict[str, Any]]
    cap_epsilon: Mapped[str] = mapped_column(String(200))
    cap_delta: Mapped[str] = mapped_column(String(200))
    spent_epsilon: Mapped[str] = mapped_column(String(200), default="0")
    spent_delta: Mapped[str] = mapped_column(String(200), default="0")
    replay_enabled: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Grant(Base):
    """The budget of one analyst on one dataset, and what the analyst has spent of it."""

    __tablename__ = "grants"

    principal_id: Mapped[str] = mapped_column(ForeignKey("principals.id"), primary_key=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), primary_key=True)
    budget_epsilon: Mapped[str] = mapped_column(String(200))
    budget_delta: Mapped[str] = mapped_column(String(200))
    spent_epsilon: Mapped[str] = mapped_column(String(200), default="0")
    spent_delta: Mapped[str] = mapped_column(String(200), default="0")
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Charge(Base):
    """One entry of the ledger: a reservation of privacy budget and, once released, its values.

    ``status`` is ``reserved`` (budget taken, nothing released yet), ``released`` (values stored
    and returned) or ``failed`` (the engine failed after the reservation; the charge stands).
    ``claimed_by`` is the boot id of the server computing a ``reserved`` charge and
    ``claimed_at`` when it last renewed that claim (its lease; NULL for charges without a request
    key, which are never retried): a retry with the same request key answers 409 while the claim
    is live and may finish the charge elsewhere once it has expired (see
    :mod:`dpcurator.service.ledger.lease`).
    """

    __tablename__ = "charges"
    __table_args__ = (
        UniqueConstraint("principal_id", "request_key", name="uq_charge_request_key"),
        Index("ix_charge_history", "dataset_id", "principal_id", "id"),
        Index("ix_charge_replay", "dataset_id", "principal_id", "fingerprint"),
        # Covers the count a concentrated budget's cached replay checks (ledger/accounts.py).
        Index("ix_charge_budget", "dataset_id", "id", "kind", "status", "principal_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    principal_id: Mapped[str] = mapped_column(ForeignKey("principals.id"))
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"))
    kind: Mapped[str] = mapped_column(String(16))
    request_key: Mapped[str | None] = mapped_column(String(200), default=None)
    fingerprint: Mapped[str] = mapped_column(String(64))
    query_text: Mapped[str] = mapped_column(Text)
    epsilon: Mapped[str] = mapped_column(String(200))
    delta: Mapped[str] = mapped_column(String(200))
    events: Mapped[list[Any]]
    status: Mapped[str] = mapped_column(String(16))
    claimed_by: Mapped[str] = mapped_column(String(64), default="")
    claimed_at: Mapped[datetime | None] = mapped_column(default=None)
    replay_of: Mapped[int | None] = mapped_column(ForeignKey("charges.id"), default=None)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    completed_at: Mapped[datetime | None] = mapped_column(default=None)


class PublishedRelease(Base):
    """A batch of query results published by an owner; reading it spends nothing."""

    __tablename__ = "releases"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    charge_id: Mapped[int] = mapped_column(ForeignKey("charges.id"))
    results: Mapped[list[Any]]
    created_by: Mapped[str] = mapped_column(ForeignKey("principals.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class AuditEvent(Base):
    """An administrative or security event (token issued/revoked, budget set, query refused)."""

    __tablename__ = "audit"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    principal_id: Mapped[str | None] = mapped_column(String(40), default=None)
    action: Mapped[str] = mapped_column(String(40))
    dataset_id: Mapped[str | None] = mapped_column(String(64), default=None)
    detail: Mapped[dict[str, Any]]


class Stream(Base):
    """A private stream of a dataset: public parameters, the charge paid at creation, and the
    mechanism's persisted state (see :mod:`dpcurator.service.stores.streams`)."""

    __tablename__ = "streams"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    params: Mapped[dict[str, Any]]
    charge_id: Mapped[int] = mapped_column(ForeignKey("charges.id"))
    state: Mapped[bytes] = mapped_column(LargeBinary)
    latest: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    created_by: Mapped[str] = mapped_column(ForeignKey("principals.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Survey(Base):
    """A local-model survey: only the counts of randomised reports per public category."""

    __tablename__ = "surveys"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    categories: Mapped[list[Any]]
    epsilon: Mapped[str] = mapped_column(String(200))
    counts: Mapped[list[Any]]
    created_by: Mapped[str] = mapped_column(ForeignKey("principals.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Job(Base):
    """A background job computing one charged release (see the module docstring)."""

    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    principal_id: Mapped[str] = mapped_column(ForeignKey("principals.id"), index=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"))
    kind: Mapped[str] = mapped_column(String(20))
    charge_id: Mapped[int] = mapped_column(ForeignKey("charges.id"), index=True)
    status: Mapped[str] = mapped_column(String(16), default="queued")
    progress: Mapped[dict[str, Any]]
    server: Mapped[str] = mapped_column(String(64))
    result: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    error: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
