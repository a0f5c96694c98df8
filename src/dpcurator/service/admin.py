"""Operator commands on the ledger itself (``dpcurator admin``): no server, no token needed.

Whoever can open the ledger (its SQLite file, or its PostgreSQL URL with credentials) controls
the curator anyway; these commands let that operator recover without a running server, e.g.
when the first ``serve`` failed after creating the ledger and its owner token was never printed.
Each command returns the lines to print; new tokens are shown once, as by the server.
"""

from __future__ import annotations

from pathlib import Path

from dpcurator.core.display import amount_text, rounding_note
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
    exact: bool = False,
) -> list[str]:
    """Run one ``dpcurator admin`` action on the ledger at URL ``ledger``; the lines to print
    (``exact``: budgets and spending exactly, else rounded outward with a note)."""
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
            return list_grants(service, exact=exact)
        if action == "list-datasets":
            return list_datasets(service, exact=exact)
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


class _Amounts:
    """Writes a ledger's exact ε and δ (text fractions) rounded outward, unless ``exact``, and
    remembers whether any was rounded (for the note stating the precision)."""

    def __init__(self, *, exact: bool) -> None:
        self.exact = exact
        self.rounded = False

    def pair(self, label: str, epsilon: str, delta: str, *, up: bool) -> str:
        """``budget ε=1 δ=1e-5`` (``up``: spending, else a budget or cap)."""
        shown = [amount_text(v, up=up, exact=self.exact) for v in (epsilon, delta)]
        self.rounded = self.rounded or any(t[0] != "=" for t in shown)
        return f"{label} ε{shown[0]} δ{shown[1]}"

    def noted(self, lines: list[str]) -> list[str]:
        """``lines``, then the note stating the precision if an amount was rounded."""
        return [*lines, rounding_note("exact: --exact")] if self.rounded else lines


def list_grants(service: CuratorService, *, exact: bool = False) -> list[str]:
    """Every grant: analyst, dataset, budget and spent (rounded outward, or ``exact``)."""
    amounts = _Amounts(exact=exact)
    lines = [
        f"{g.principal_id}  {g.dataset_id}  "
        f"{amounts.pair('budget', g.budget_epsilon, g.budget_delta, up=False)}  "
        f"{amounts.pair('spent', g.spent_epsilon, g.spent_delta, up=True)}"
        for g in service.ledger.grants()
    ]
    return amounts.noted(lines)


def list_datasets(service: CuratorService, *, exact: bool = False) -> list[str]:
    """Every dataset: id, source path, global cap and spent (rounded outward, or ``exact``)."""
    amounts = _Amounts(exact=exact)
    lines = [
        f"{d.id}  {d.source.get('path', '')}  "
        f"{amounts.pair('cap', d.cap_epsilon, d.cap_delta, up=False)}  "
        f"{amounts.pair('spent', d.spent_epsilon, d.spent_delta, up=True)}"
        for d in service.ledger.datasets()
    ]
    return amounts.noted(lines)


def _named(service: CuratorService, name: str) -> Principal:
    for principal in service.ledger.principals():
        if principal.name == name:
            return principal
    raise NotFoundError(f"No owner or analyst named {name!r}.")
