"""Operator commands on the ledger itself (``dpcurator admin``): no server, no token needed.

Whoever can open the ledger (its SQLite file, or its PostgreSQL URL with credentials) controls
the curator anyway; these commands let that operator recover without a running server, e.g.
when the first ``serve`` failed after creating the ledger and its owner token was never printed.
Each command returns the lines to print; new tokens are shown once, as by the server.
"""

from __future__ import annotations

from pathlib import Path

from dpcurator.errors import ParameterError
from dpcurator.service.errors import NotFoundError
from dpcurator.service.models import Principal
from dpcurator.service.operations import CuratorService
from dpcurator.service.server import build_service

#: The principal id written to the audit log for changes made by these commands.
ADMIN_ACTOR = "cli-admin"


def run(
    ledger: str,
    action: str,
    *,
    name: str | None = None,
    token_id: str | None = None,
    expires_in: float | None = None,
) -> list[str]:
    """Run one ``dpcurator admin`` action on the ledger at URL ``ledger``; the lines to print."""
    require_ledger(ledger)
    service = build_service(ledger)
    try:
        if action in ("create-owner", "create-analyst"):
            return create_principal(service, str(name), action.removeprefix("create-"))
        if action == "issue-token":
            return issue_token(service, str(name), expires_in)
        if action == "revoke-token":
            return revoke_token(service, str(token_id))
        if action in ("list-owners", "list-analysts"):
            return list_principals(service, action.removeprefix("list-").removesuffix("s"))
        if action == "list-grants":
            return list_grants(service)
        if action == "list-datasets":
            return list_datasets(service)
        raise ParameterError(f"Unknown admin action {action!r}.")
    finally:
        service.close()


def require_ledger(url: str) -> None:
    """Refuse an SQLite URL whose file does not exist (a typo would create an empty ledger)."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not Path(url.removeprefix(prefix)).is_file():
        raise ParameterError(f"No ledger at --ledger {url}: the file does not exist.")


def create_principal(service: CuratorService, name: str, role: str) -> list[str]:
    """A new owner or analyst and its first token."""
    principal, issued = service.create_principal(name, role)
    return [f"{role} {principal.name} ({principal.id})", f"token: {issued.token}"]


def issue_token(service: CuratorService, name: str, expires_in: float | None) -> list[str]:
    """A new token for an existing owner or analyst, found by name."""
    principal = _named(service, name)
    issued = service.authority.issue(principal.id, expires_in=expires_in)
    expiry = "never expires" if issued.expires_at is None else f"expires {issued.expires_at}"
    return [f"token id {issued.token_id} ({expiry})", f"token: {issued.token}"]


def revoke_token(service: CuratorService, token_id: str) -> list[str]:
    """Revoke a token by its public id (idempotent)."""
    service.authority.revoke(token_id, by=ADMIN_ACTOR)
    return [f"revoked {token_id}"]


def list_principals(service: CuratorService, role: str) -> list[str]:
    """Owners or analysts with their live token ids."""
    lines = []
    for principal in service.ledger.principals(role):
        live = [t.token_id for t in service.ledger.tokens(principal.id) if t.revoked_at is None]
        tokens = ", ".join(live) or "none"
        lines.append(f"{principal.id}  {principal.name}  live tokens: {tokens}")
    return lines


def list_grants(service: CuratorService) -> list[str]:
    """Every grant: analyst, dataset, budget and spent (exact fractions)."""
    return [
        f"{g.principal_id}  {g.dataset_id}  budget ε={g.budget_epsilon} δ={g.budget_delta}  "
        f"spent ε={g.spent_epsilon} δ={g.spent_delta}"
        for g in service.ledger.grants()
    ]


def list_datasets(service: CuratorService) -> list[str]:
    """Every dataset: id, source path, global cap and spent (exact fractions)."""
    return [
        f"{d.id}  {d.source.get('path', '')}  cap ε={d.cap_epsilon} δ={d.cap_delta}  "
        f"spent ε={d.spent_epsilon} δ={d.spent_delta}"
        for d in service.ledger.datasets()
    ]


def _named(service: CuratorService, name: str) -> Principal:
    for principal in service.ledger.principals():
        if principal.name == name:
            return principal
    raise NotFoundError(f"No owner or analyst named {name!r}.")
