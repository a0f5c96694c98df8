"""The privacy ledger and audit log, stored with SQLAlchemy 2 (SQLite by default, or PostgreSQL).

The one operation that matters is :meth:`Ledger.reserve`: in a single write transaction it locks
the dataset row (the global cap) and the analyst's grant row, checks that the new cost fits BOTH,
adds it to both running totals and inserts the charge. Only then may the engine run. The
transaction is serialised by ``BEGIN IMMEDIATE`` on SQLite (one writer at a time) and by
``SELECT ... FOR UPDATE`` on PostgreSQL (rows locked in a fixed order: dataset, then grant), so two
concurrent requests can never both see the same remaining budget. A refused reservation rolls
back and changes nothing. On PostgreSQL a reservation without a request key (every query but a
retried one) runs the same steps as one statement, a function installed in the database (see
:mod:`dpcurator.service.ledger.postgres`), so the locks are not held across round trips; on
concentrated budgets that statement checks that the replays the event was admitted on are still
exact (:mod:`dpcurator.service.ledger.replayed`). On
SQLite the same reservations and every completion run their statements on the raw ``sqlite3``
cursor (see :mod:`dpcurator.service.ledger.sqlite`), so the write lock is held for less time.

A query costs three short transactions: :meth:`Ledger.access` (read: the dataset row and the
caller's grant, to check visibility before any planning), :meth:`Ledger.reserve` (write: check both
budgets and insert the charge) and :meth:`Ledger.complete` (write: store the release).

Durability. SQLite runs in WAL mode with ``synchronous=NORMAL``: a committed transaction is in the
WAL file before ``COMMIT`` returns, so it survives the server process being killed at any point
(the crash test SIGKILLs the server under load), but the WAL is fsynced only at checkpoints, so an
OS crash or power loss may lose the last few commits (never corrupt the ledger). Where that matters,
use PostgreSQL (with its default ``synchronous_commit=on``). Writers wait for the lock up to
``busy_timeout``. PostgreSQL connections are pooled (``pool_size`` + ``max_overflow``).

On PostgreSQL the reservation alone commits without waiting for its WAL flush
(``SET LOCAL synchronous_commit = off``): it holds the dataset row's lock, which every query on
the dataset needs, so a flush inside it would queue all of them behind the disk (measured, with
the transaction of several statements: ~22% more queries/s without it). Nothing released is at
risk: no value leaves the server before :meth:`Ledger.complete` (or :meth:`Ledger.fail`) commits
with a flush, and a flush makes the whole WAL before it durable, the reservation included (the
WAL is written in order). A database crash in between can lose only reservations whose answers
were never sent.

A budget composes its charges by basic sequential composition in (ε, δ) (costs add exactly,
Fractions stored as text) or, by default for a new budget with δ > 0 or a ρ, by replaying their
events through the concentrated filter (:mod:`~dpcurator.service.ledger.accounts`). A charge,
once reserved, is never refunded: if the engine fails afterwards the charge stays (``failed``),
because the failure may already depend on the data.

The ledger is assembled from one module per job: :mod:`~dpcurator.service.ledger.database` (the
engine and its transactions), :mod:`~dpcurator.service.ledger.statements` (the hot-path SQL),
:mod:`~dpcurator.service.ledger.budgets` (exact costs), :mod:`~dpcurator.service.ledger.admission`
(whether a charge fits the grant and the cap), :mod:`~dpcurator.service.ledger.charges`
(reservations and their outcomes; :mod:`~dpcurator.service.ledger.replayed`, their
one-statement form on concentrated PostgreSQL budgets) and
:mod:`~dpcurator.service.ledger.history` (entries, replays, published releases);
:mod:`~dpcurator.service.ledger.core` assembles them into
:class:`~dpcurator.service.ledger.core.Ledger` and adds principals, tokens, datasets, grants and
the audit log. The package exports :class:`Ledger` and :class:`Access`.
"""

from dpcurator.service.ledger.core import Access, Ledger

__all__ = ["Access", "Ledger"]
