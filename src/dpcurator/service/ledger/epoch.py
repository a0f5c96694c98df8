"""The revocation epoch: one counter that every change to a token or a principal increments.

Each server process caches the tokens it has verified (:mod:`dpcurator.service.auth`). So that a
revocation made anywhere (another worker, another server on the same ledger, ``dpcurator admin``,
or SQL typed by an operator) is honoured by every process before its next answer, the ledger
holds one row, ``auth_epoch``, whose ``value`` is incremented by database triggers in the same
transaction as every UPDATE or DELETE of ``tokens`` or ``principals`` (revocation, expiry
changes, hash upgrades, removals). A process reads the epoch on every request (one primary-key
read, no lock: it never waits for writers) and trusts a cached token only if the epoch has not
moved since the token's row was read; otherwise it reads the row again.

Order matters: the epoch is read BEFORE the token's row. If a revocation commits in between,
the row already shows it (refused), or the cached entry carries the older epoch and is read
again at the next request. A request whose epoch was read before a revocation committed is
treated as having arrived before it (as any request already running when the revocation came).

Triggers rather than increments in the ledger's own methods, so that no path that writes those
tables can forget the increment. The PostgreSQL function's name carries a version, as those of
:mod:`dpcurator.service.ledger.postgres` do.
"""

from __future__ import annotations

from sqlalchemy import Engine, Integer, text
from sqlalchemy.orm import Mapped, mapped_column

from dpcurator.service.models import Base

#: The one row's id.
EPOCH_ROW = 1
_BUMP = "dpcurator_bump_auth_epoch_v1"
_WATCHED = ("tokens", "principals")
READ_EPOCH = f"SELECT value FROM auth_epoch WHERE id = {EPOCH_ROW}"


class AuthEpoch(Base):
    """The revocation epoch (one row, ``id = 1``), incremented by triggers (module docstring)."""

    __tablename__ = "auth_epoch"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    value: Mapped[int] = mapped_column(Integer, default=0)


def _sqlite_triggers() -> list[str]:
    return [
        f"CREATE TRIGGER IF NOT EXISTS dpcurator_epoch_{table}_{what.lower()} "
        f"AFTER {what} ON {table} BEGIN "
        f"UPDATE auth_epoch SET value = value + 1 WHERE id = {EPOCH_ROW}; END"
        for table in _WATCHED
        for what in ("UPDATE", "DELETE")
    ]


_POSTGRES_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {_BUMP}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE auth_epoch SET value = value + 1 WHERE id = {EPOCH_ROW};
    RETURN NULL;
END
$$"""


_FUNCTION_EXISTS = "SELECT 1 FROM pg_proc WHERE proname = :n AND pg_function_is_visible(oid)"
_TRIGGER_EXISTS = "SELECT 1 FROM pg_trigger WHERE tgname = :n"


def _postgres_triggers() -> list[str]:
    return [
        f"CREATE OR REPLACE TRIGGER dpcurator_epoch_{table} AFTER UPDATE OR DELETE ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {_BUMP}()"
        for table in _WATCHED
    ]


def install(engine: Engine, *, postgres: bool) -> None:
    """Create the epoch's row and triggers unless they exist (safe when servers start at once:
    on PostgreSQL installers queue on an advisory lock, on SQLite on the database's lock)."""
    with engine.connect() as conn:
        conn.execution_options(dpcurator_write=True)  # BEGIN IMMEDIATE on SQLite
        with conn.begin():
            if postgres:
                conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:n))"), {"n": _BUMP})
                conn.execute(
                    text(
                        "INSERT INTO auth_epoch (id, value) VALUES (:i, 0) "
                        "ON CONFLICT (id) DO NOTHING"
                    ),
                    {"i": EPOCH_ROW},
                )
                # Created only when missing: replacing a trigger locks its table.
                if conn.execute(text(_FUNCTION_EXISTS), {"n": _BUMP}).first() is None:
                    conn.exec_driver_sql(_POSTGRES_FUNCTION)
                for table, trigger in zip(_WATCHED, _postgres_triggers(), strict=True):
                    name = f"dpcurator_epoch_{table}"
                    if conn.execute(text(_TRIGGER_EXISTS), {"n": name}).first() is None:
                        conn.exec_driver_sql(trigger)
                return
            conn.execute(
                text("INSERT OR IGNORE INTO auth_epoch (id, value) VALUES (:i, 0)"),
                {"i": EPOCH_ROW},
            )
            for trigger in _sqlite_triggers():
                conn.exec_driver_sql(trigger)
