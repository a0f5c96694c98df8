"""The :class:`Ledger`: reservations and their outcomes (:mod:`~dpcurator.service.ledger.charges`)
and the history (:mod:`~dpcurator.service.ledger.history`), with principals, tokens, datasets,
grants and the audit log; how it keeps both budgets exact under concurrency is the package's
docstring (:mod:`dpcurator.service.ledger`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session as OrmSession

from dpcurator.core.measures import ZCDP, ApproxDP
from dpcurator.service.errors import ConflictError, NotFoundError
from dpcurator.service.ledger.accounts import (
    CAP,
    BudgetAccount,
    OverdrawnError,
    account_budget,
    account_view,
    check_account_budget,
    replayed_history,
)
from dpcurator.service.ledger.admission import check_fits
from dpcurator.service.ledger.budgets import (
    BudgetView,
    Cost,
    budget_view,
    dataset_budget,
    grant_budget,
)
from dpcurator.service.ledger.charges import ChargeRequest, LedgerCharges
from dpcurator.service.ledger.database import found
from dpcurator.service.ledger.history import LedgerHistory
from dpcurator.service.ledger.statements import DATASET_COLUMNS, SQL
from dpcurator.service.models import (
    AuditEvent,
    Dataset,
    Grant,
    Principal,
    ServerSecret,
    Token,
    utcnow,
)

ROLES = ("owner", "analyst")


@dataclass(frozen=True)
class Access:
    """A dataset as one caller may use it: its row and, for analysts, their budget on it (a
    concentrated grant's view replays its events, so it is computed when first read)."""

    dataset: Dataset
    _budget: Callable[[], BudgetView | None] = field(repr=False)

    @functools.cached_property
    def budget(self) -> BudgetView | None:
        """The analyst's budget on the dataset (None for owners)."""
        return self._budget()


class Ledger(LedgerCharges, LedgerHistory):
    """Budgets, charges, releases, tokens and the audit log in one relational database.

    Args:
        url: an SQLAlchemy URL, e.g. ``sqlite:///ledger.sqlite3`` (default dialect) or
            ``postgresql+psycopg://user@host/db``.
        boot_id: the identity of the running server, stored with each reservation it makes: a
            retried request whose reservation carries this id is still running (ConflictError);
            one carrying another id is still running there while its lease is live
            (ConflictError), and may be claimed and run here once it has expired (see
            :mod:`dpcurator.service.ledger.lease`). Every worker process of one server must
            share it (default: a new id for this process).
        lease_seconds: how long another server's claim on a reserved charge stays live without
            renewal; this ledger renews its own claims every third of it.
    """

    # -- principals and tokens --------------------------------------------------------------

    def create_principal(self, principal_id: str, name: str, role: str) -> Principal:
        """Add an owner or analyst; names are unique."""
        if role not in ROLES:
            raise ConflictError(f"The role must be one of {ROLES}. Got {role!r}.")
        with self._transaction(write=True) as s:
            if s.scalar(select(Principal).where(Principal.name == name)) is not None:
                raise ConflictError(f"A principal named {name!r} already exists.")
            principal = Principal(id=principal_id, name=name, role=role, created_at=utcnow())
            s.add(principal)
            s.add(_audit("principal_created", None, None, id=principal_id, name=name, role=role))
        return principal

    def principal(self, principal_id: str) -> Principal:
        """The principal with this id, or :class:`NotFoundError`."""
        with self._transaction(write=False) as s:
            return found(s.get(Principal, principal_id), "analyst or owner", principal_id)

    def principals(self, role: str | None = None) -> list[Principal]:
        """Every principal (of one role, if given), oldest first."""
        query = select(Principal).order_by(Principal.created_at, Principal.id)
        if role is not None:
            query = query.where(Principal.role == role)
        with self._transaction(write=False) as s:
            return list(s.scalars(query))

    def add_token(
        self,
        token_id: str,
        principal_id: str,
        secret_hash: str,
        expires_at: Any = None,
        *,
        by: str | None = None,
    ) -> Token:
        """Store a new token (only the hash of its secret), audited as issued ``by`` an owner
        (None: by the server's operator, e.g. at start-up or from the command line)."""
        with self._transaction(write=True) as s:
            token = Token(
                token_id=token_id,
                principal_id=principal_id,
                secret_hash=secret_hash,
                created_at=utcnow(),
                expires_at=expires_at,
            )
            s.add(token)
            s.add(_audit("token_issued", by, None, token_id=token_id, principal=principal_id))
        return token

    def token(self, token_id: str) -> tuple[Token, Principal] | None:
        """The token with this public id and its principal, if any."""
        with self._transaction(write=False) as s:
            row = s.execute(
                select(Token, Principal)
                .join(Principal, Principal.id == Token.principal_id)
                .where(Token.token_id == token_id)
            ).first()
        return None if row is None else (row[0], row[1])

    def tokens(self, principal_id: str) -> list[Token]:
        """The tokens of a principal, oldest first."""
        with self._transaction(write=False) as s:
            return list(
                s.scalars(
                    select(Token)
                    .where(Token.principal_id == principal_id)
                    .order_by(Token.created_at, Token.token_id)
                )
            )

    def rehash_token(self, token_id: str, old_hash: str, new_hash: str) -> None:
        """Replace a token's stored hash, if it is still ``old_hash`` (a hash upgrade)."""
        with self._transaction(write=True) as s:
            token = s.get(Token, token_id)
            if token is not None and token.secret_hash == old_hash:
                token.secret_hash = new_hash

    def server_secret(self, name: str, make: Callable[[], str]) -> str:
        """The server secret ``name``, stored as ``make()`` on first use (the first writer wins
        when processes race)."""
        with suppress(IntegrityError), self._transaction(write=True) as s:
            if s.get(ServerSecret, name) is None:
                s.add(ServerSecret(name=name, value=make()))
        with self._transaction(write=False) as s:
            return found(s.get(ServerSecret, name), "server secret", name).value

    def revoke_token(self, token_id: str, *, by: str) -> Token:
        """Mark a token revoked (idempotent); :class:`NotFoundError` if unknown."""
        with self._transaction(write=True) as s:
            token = found(s.get(Token, token_id), "token", token_id)
            if token.revoked_at is None:
                token.revoked_at = utcnow()
                s.add(_audit("token_revoked", by, None, token_id=token_id))
        return token

    # -- datasets and grants ----------------------------------------------------------------

    def add_dataset(
        self,
        dataset_id: str,
        *,
        name: str,
        source: dict[str, Any],
        metadata_doc: dict[str, Any],
        cap: Cost,
        replay_enabled: bool,
        by: str,
        accounting: str | None = None,
    ) -> Dataset:
        """Register a dataset with its global cap (ε, (ε, δ) or ρ; ``accounting``: see
        :func:`_set_account`, default concentrated for δ > 0 or ρ); ids are unique."""
        concentrated = check_account_budget(cap, accounting)
        with self._transaction(write=True) as s:
            if s.get(Dataset, dataset_id) is not None:
                raise ConflictError(f"A dataset with id {dataset_id!r} already exists.")
            cap_epsilon, cap_delta = _columns(cap)
            dataset = Dataset(
                id=dataset_id,
                name=name,
                source=source,
                metadata_doc=metadata_doc,
                cap_epsilon=cap_epsilon,
                cap_delta=cap_delta,
                spent_epsilon="0",
                spent_delta="0",
                replay_enabled=replay_enabled,
                created_at=utcnow(),
            )
            s.add(dataset)
            s.flush()
            _set_account(s, dataset_id, CAP, cap, concentrated=concentrated)
            cost = _cost_json(cap, _name(concentrated))
            s.add(_audit("dataset_registered", by, dataset_id, cap=cost))
        return dataset

    def dataset(self, dataset_id: str) -> Dataset:
        """The dataset with this id, or :class:`NotFoundError`."""
        with self._transaction(write=False) as s:
            return found(s.get(Dataset, dataset_id), "dataset", dataset_id)

    def datasets(self) -> list[Dataset]:
        """Every registered dataset, by id."""
        with self._transaction(write=False) as s:
            return list(s.scalars(select(Dataset).order_by(Dataset.id)))

    def update_dataset(
        self,
        dataset_id: str,
        *,
        cap: Cost | None,
        replay_enabled: bool | None,
        by: str,
        accounting: str | None = None,
    ) -> Dataset:
        """Change the global cap and/or the replay switch of a dataset (``accounting``: see
        :func:`_set_account`; None keeps the cap's)."""
        with self._transaction(write=True) as s:
            dataset = found(s.get(Dataset, dataset_id, with_for_update=True), "dataset", dataset_id)
            detail: dict[str, Any] = {}
            if cap is not None:
                accounting = accounting or _accounting_of(s, dataset_id, CAP)
                concentrated = check_account_budget(cap, accounting)
                dataset.cap_epsilon, dataset.cap_delta = _columns(cap)
                _set_account(s, dataset_id, CAP, cap, concentrated=concentrated)
                detail["cap"] = _cost_json(cap, _name(concentrated))
            if replay_enabled is not None:
                dataset.replay_enabled = replay_enabled
                detail["replay_enabled"] = replay_enabled
            s.add(_audit("dataset_updated", by, dataset_id, **detail))
        return dataset

    def set_grant(
        self,
        principal_id: str,
        dataset_id: str,
        budget: Cost,
        *,
        by: str,
        accounting: str | None = None,
    ) -> Grant:
        """Give an analyst access to a dataset with this total budget (ε, (ε, δ) or ρ; spending
        is kept). ``accounting``: see :func:`_set_account` (None: an existing grant's so far; a
        new grant's is concentrated for δ > 0 or ρ, basic for a pure ε)."""
        with self._transaction(write=True) as s:
            principal = s.get(Principal, principal_id)
            if principal is None or principal.role != "analyst":
                raise NotFoundError(f"No analyst with id {principal_id!r}.")
            # The dataset's row first, as every reservation locks it: none runs meanwhile.
            if s.get(Dataset, dataset_id, with_for_update=True) is None:
                raise NotFoundError(f"No dataset with id {dataset_id!r}.")
            grant = s.get(Grant, (principal_id, dataset_id), with_for_update=True)
            if grant is not None:
                accounting = accounting or _accounting_of(s, dataset_id, principal_id)
            concentrated = check_account_budget(budget, accounting)
            if grant is None:
                grant = Grant(
                    principal_id=principal_id,
                    dataset_id=dataset_id,
                    spent_epsilon="0",
                    spent_delta="0",
                )
                s.add(grant)
            grant.budget_epsilon, grant.budget_delta = _columns(budget)
            grant.updated_at = utcnow()
            s.flush()
            _set_account(s, dataset_id, principal_id, budget, concentrated=concentrated)
            s.add(
                _audit(
                    "budget_set",
                    by,
                    dataset_id,
                    analyst=principal_id,
                    budget=_cost_json(budget, _name(concentrated)),
                )
            )
        return grant

    def grant(self, principal_id: str, dataset_id: str) -> Grant | None:
        """The grant of an analyst on a dataset, if any."""
        with self._transaction(write=False) as s:
            return s.get(Grant, (principal_id, dataset_id))

    def grants(self, *, principal_id: str | None = None) -> list[Grant]:
        """Grants, optionally of one analyst."""
        query = select(Grant).order_by(Grant.dataset_id, Grant.principal_id)
        if principal_id is not None:
            query = query.where(Grant.principal_id == principal_id)
        with self._transaction(write=False) as s:
            return list(s.scalars(query))

    def access(self, principal_id: str, dataset_id: str, *, owner: bool) -> Access:
        """The dataset and the caller's budget on it, in one read transaction.

        Raises :class:`NotFoundError` if the dataset is unknown or, for an analyst, not granted
        (an analyst without a grant does not learn that the dataset exists).
        """
        with self._statement(write=False) as conn:
            row = conn.execute(SQL.access, {"p": principal_id, "d": dataset_id}).first()
        if row is None or (not owner and row.grant_budget_epsilon is None):
            raise NotFoundError(f"No dataset with id {dataset_id!r}.")
        *dataset, budget, budget_delta, spent, spent_delta, account = row
        basic = None if owner else budget_view(budget, budget_delta, spent, spent_delta)
        if account is None or owner:
            view: Callable[[], BudgetView | None] = lambda: basic  # noqa: E731
        else:
            view = functools.partial(self.grant_view, principal_id, dataset_id)
        return Access(Dataset(**dict(zip(DATASET_COLUMNS, dataset, strict=True))), view)

    # -- budget views -----------------------------------------------------------------------

    def grant_view(self, principal_id: str, dataset_id: str) -> BudgetView | None:
        """An analyst's budget on a dataset (None without a grant): basic, or replayed."""
        with self._transaction(write=False) as s:
            grant = s.get(Grant, (principal_id, dataset_id))
            if grant is None:
                return None
            return _view(s, dataset_id, principal_id, grant_budget(grant))

    def cap_view(self, dataset_id: str) -> BudgetView:
        """A dataset's global cap: basic, or replayed."""
        with self._transaction(write=False) as s:
            dataset = found(s.get(Dataset, dataset_id), "dataset", dataset_id)
            return _view(s, dataset_id, CAP, dataset_budget(dataset))

    def fits(self, request: ChargeRequest) -> bool:
        """Whether the request's event would be admitted now (nothing is charged or locked)."""
        with self._transaction(write=False) as s:
            return check_fits(s.connection(), request)

    # -- audit ----------------------------------------------------------------------------

    def audit(
        self, action: str, principal_id: str | None, dataset_id: str | None, **detail: Any
    ) -> None:
        """Append an event to the audit log."""
        with self._transaction(write=True) as s:
            s.add(_audit(action, principal_id, dataset_id, **detail))

    def audit_log(self, limit: int = 200) -> list[AuditEvent]:
        """The latest audit events, newest first."""
        with self._transaction(write=False) as s:
            return list(s.scalars(select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit)))


def _cost_json(cost: Cost, accounting: str = "basic") -> dict[str, str]:
    if isinstance(cost, ZCDP):
        return {"rho": str(cost.rho), "accounting": "concentrated"}
    return {"epsilon": str(cost.epsilon), "delta": str(cost.delta), "accounting": accounting}


def _name(concentrated: bool) -> str:
    return "concentrated" if concentrated else "basic"


def _columns(budget: Cost) -> tuple[str, str]:
    """The (ε, δ) columns of a budget: a ρ budget has none (its account holds ρ)."""
    if isinstance(budget, ZCDP):
        return "0", "0"
    return str(budget.epsilon), str(budget.delta)


def _accounting_of(s: OrmSession, dataset_id: str, principal_id: str) -> str:
    """The accounting of a budget so far (``basic`` if it has none yet)."""
    return "basic" if s.get(BudgetAccount, (dataset_id, principal_id)) is None else "concentrated"


def _set_account(
    s: OrmSession, dataset_id: str, principal_id: str, budget: Cost, *, concentrated: bool
) -> None:
    """Make a budget (a grant, or the cap: ``principal_id = ''``) concentrated or basic.

    Concentrated: its events are replayed through a ConcentratedFilter of ``budget`` (see
    :mod:`dpcurator.service.ledger.accounts`); the charges made so far must fit it (else
    ConflictError, nothing changed). Basic: (ε, δ) costs add up (their running totals are kept
    under either accounting).
    """
    account = s.get(BudgetAccount, (dataset_id, principal_id))
    if not concentrated:
        if account is not None:
            s.delete(account)
        return
    if account is None:
        account = BudgetAccount(dataset_id=dataset_id, principal_id=principal_id)
        s.add(account)
    account.rho = str(budget.rho) if isinstance(budget, ZCDP) else None
    account.updated_at = utcnow()
    principal = None if principal_id == CAP else principal_id
    try:
        replayed_history(s.connection(), budget, dataset_id, principal)
    except OverdrawnError:
        raise ConflictError(
            f"The charges made so far on this budget do not fit {budget} under concentrated "
            "accounting; nothing was changed. Give a larger budget."
        ) from None


def _view(s: OrmSession, dataset_id: str, principal_id: str, basic: BudgetView) -> BudgetView:
    """The view of a budget: ``basic`` (its columns), or its events replayed."""
    account = s.get(BudgetAccount, (dataset_id, principal_id))
    if account is None:
        return basic
    assert isinstance(basic.total, ApproxDP)  # the columns
    budget = account_budget(account.rho, str(basic.total.epsilon), str(basic.total.delta))
    principal = None if principal_id == CAP else principal_id
    return account_view(s.connection(), budget, dataset_id, principal)


def _audit(
    action: str, principal_id: str | None, dataset_id: str | None, **detail: Any
) -> AuditEvent:
    return AuditEvent(
        at=utcnow(), principal_id=principal_id, action=action, dataset_id=dataset_id, detail=detail
    )
