"""Helpers shared by the accounting and ledger tests."""

from __future__ import annotations

from dpcurator.accounting.events import PrivacyEvent
from dpcurator.accounting.filter import BudgetFilter
from dpcurator.errors import BudgetExceededError


def admitted_until_refused(account: BudgetFilter, event: PrivacyEvent) -> int:
    """How many copies of ``event`` a privacy filter admits, one reservation committed at a time,
    before it refuses one."""
    admitted = 0
    while True:
        try:
            account.reserve(event).commit()
        except BudgetExceededError:
            return admitted
        admitted += 1
