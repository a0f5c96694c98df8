"""The ledger's hot-path SQL, built once with bound parameters (no ORM per request).

:data:`SQL` holds the SQLAlchemy Core statements of the reservation, the completion, the claims
and :meth:`~dpcurator.service.ledger.Ledger.access`; :class:`RawStatements` compiles the SQLite
subset of them for the raw ``sqlite3`` cursor (see :mod:`dpcurator.service.ledger.sqlite`).
"""

from __future__ import annotations

from sqlalchemy import BindParameter, Dialect, Table, bindparam, insert, select, text, update

from dpcurator.errors import InternalInvariantError
from dpcurator.service.ledger.accounts import CAP, BudgetAccount
from dpcurator.service.ledger.sqlite import RawStatement
from dpcurator.service.models import Base, Charge, Dataset, Grant


def _table(model: type[Base]) -> Table:
    table = model.__table__
    if not isinstance(table, Table):
        raise InternalInvariantError(f"{model.__name__} is not mapped to a table.")
    return table


#: The columns of a dataset row, in table order (:meth:`Ledger.access` selects them all).
DATASET_COLUMNS = tuple(column.name for column in _table(Dataset).columns)
#: The columns :meth:`Ledger.reserve` sets when it inserts a charge.
_RESERVED_CHARGE_COLUMNS = (
    "principal_id",
    "dataset_id",
    "kind",
    "request_key",
    "fingerprint",
    "query_text",
    "epsilon",
    "delta",
    "events",
    "status",
    "claimed_by",
    "claimed_at",
    "created_at",
)


class Statements:
    """The statements of the hot path, built once with bound parameters (no ORM per request)."""

    def __init__(self) -> None:
        datasets, grants, charges = _table(Dataset), _table(Grant), _table(Charge)
        d: BindParameter[str] = bindparam("d")
        p: BindParameter[str] = bindparam("p")
        cap = (datasets.c.cap_epsilon, datasets.c.cap_delta)
        spent = (datasets.c.spent_epsilon, datasets.c.spent_delta)
        grant_cols = (grants.c.budget_epsilon, grants.c.budget_delta)
        grant_spent = (grants.c.spent_epsilon, grants.c.spent_delta)
        is_grant = (grants.c.principal_id == p) & (grants.c.dataset_id == d)
        granted = [column.label(f"grant_{column.name}") for column in (*grant_cols, *grant_spent)]
        accounts = _table(BudgetAccount)
        is_account = (accounts.c.dataset_id == d) & (accounts.c.principal_id == p)
        self.access = (  # the dataset, the grant's columns (NULL without a grant), and whether
            # the grant is concentrated (its account's principal, NULL if basic)
            select(*datasets.columns, *granted, accounts.c.principal_id.label("account"))
            .select_from(datasets.outerjoin(grants, is_grant).outerjoin(accounts, is_account))
            .where(datasets.c.id == d)
        )
        # The cap's (and the grant's) totals: read as they are, or locked for a reservation.
        self.peek_cap = select(*cap, *spent).where(datasets.c.id == d)
        self.peek_cap_and_grant = (
            select(*cap, *spent, *granted)
            .select_from(datasets.join(grants, is_grant))
            .where(datasets.c.id == d)
        )
        self.lock_cap = self.peek_cap.with_for_update(of=datasets)
        self.lock_cap_and_grant = self.peek_cap_and_grant.with_for_update(of=[datasets, grants])
        self.by_key = select(
            *(
                charges.c[name]
                for name in (
                    "id",
                    "fingerprint",
                    "dataset_id",
                    "status",
                    "claimed_by",
                    "claimed_at",
                    "epsilon",
                    "delta",
                    "result",
                )
            )
        ).where((charges.c.principal_id == p) & (charges.c.request_key == bindparam("k")))
        self.concentrated = select(accounts.c.principal_id).where(  # any: not the fast path
            (accounts.c.dataset_id == d) & accounts.c.principal_id.in_([CAP, p])
        )
        self.grant_spent = update(grants).where(is_grant)
        self.dataset_spent = update(datasets).where(datasets.c.id == d)
        self.insert_charge = insert(charges).returning(charges.c.id)
        # PostgreSQL's one-statement reservation: the running totals are updated by CTEs.
        dataset_cte = (
            update(datasets)
            .where(datasets.c.id == d)
            .values(
                spent_epsilon=bindparam("d_spent_epsilon"), spent_delta=bindparam("d_spent_delta")
            )
            .cte("ds")
        )
        grant_cte = (
            update(grants)
            .where(is_grant)
            .values(
                spent_epsilon=bindparam("g_spent_epsilon"), spent_delta=bindparam("g_spent_delta")
            )
            .cte("gr")
        )
        # Every value is an explicit parameter whose name is no column's: SQLAlchemy would
        # otherwise also SET any column named like a parameter in the UPDATE CTEs.
        insert_named = (
            insert(charges)
            .values({name: bindparam(f"c_{name}") for name in _RESERVED_CHARGE_COLUMNS})
            .returning(charges.c.id)
        )
        self.reserve_cap_only = insert_named.add_cte(dataset_cte)
        self.reserve_with_grant = insert_named.add_cte(grant_cte, dataset_cte)
        # This transaction only (LOCAL): the next one on the pooled connection flushes again.
        self.commit_without_flush = text("SET LOCAL synchronous_commit = off")
        self.claim = (
            update(charges)
            .where(charges.c.id == bindparam("i"))
            .values(claimed_by=bindparam("b"), claimed_at=bindparam("t"))
        )
        mine = (charges.c.status == "reserved") & (charges.c.claimed_by == bindparam("b"))
        self.renew = (
            update(charges)
            .where(charges.c.id.in_(bindparam("ids", expanding=True)) & mine)
            .values(claimed_at=bindparam("t"))
        )
        self.complete = (
            update(charges)
            .where((charges.c.id == bindparam("i")) & mine)
            .values(status="released")
            .returning(*(column for column in charges.columns if column.name != "result"))
        )


SQL = Statements()


class RawStatements:
    """The SQLite hot path's statements of :data:`SQL`, compiled for the raw cursor with the
    parameters the ledger passes them."""

    def __init__(self, dialect: Dialect) -> None:
        spent = ("spent_epsilon", "spent_delta")
        self.lock_cap = RawStatement(SQL.lock_cap, dialect, ())
        self.lock_cap_and_grant = RawStatement(SQL.lock_cap_and_grant, dialect, ())
        self.concentrated = RawStatement(SQL.concentrated, dialect, ())
        self.grant_spent = RawStatement(SQL.grant_spent, dialect, spent)
        self.dataset_spent = RawStatement(SQL.dataset_spent, dialect, spent)
        self.insert_charge = RawStatement(SQL.insert_charge, dialect, _RESERVED_CHARGE_COLUMNS)
        self.complete = RawStatement(SQL.complete, dialect, ("result", "completed_at"))
