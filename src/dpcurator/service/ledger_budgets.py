"""The ledger's costs as exact values, and budgets as a total with what has been spent of it.

The ledger stores every ε and δ as the text of a :class:`~fractions.Fraction` (``"1/1000"``), so
costs add exactly (basic sequential composition); this module reads them back.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction

from dpcurator.core.measures import ApproxDP
from dpcurator.service.models import Dataset, Grant


@functools.lru_cache(maxsize=4096)
def cost_of(epsilon: str, delta: str) -> ApproxDP:
    """An exact cost from the text columns of the ledger (memoised: costs are immutable)."""
    return ApproxDP(Fraction(epsilon), Fraction(delta))


def _remaining(total: ApproxDP, spent: ApproxDP) -> ApproxDP:
    return ApproxDP(max(total.epsilon - spent.epsilon, 0), max(total.delta - spent.delta, 0))


@dataclass(frozen=True)
class BudgetView:
    """A budget, what has been spent of it, and what remains (never negative)."""

    total: ApproxDP
    spent: ApproxDP

    @property
    def remaining(self) -> ApproxDP:
        """``total - spent``, floored at zero in each coordinate."""
        return _remaining(self.total, self.spent)


def grant_budget(grant: Grant) -> BudgetView:
    """The budget of a grant as exact costs."""
    return BudgetView(
        cost_of(grant.budget_epsilon, grant.budget_delta),
        cost_of(grant.spent_epsilon, grant.spent_delta),
    )


def dataset_budget(dataset: Dataset) -> BudgetView:
    """The global cap of a dataset as exact costs."""
    return BudgetView(
        cost_of(dataset.cap_epsilon, dataset.cap_delta),
        cost_of(dataset.spent_epsilon, dataset.spent_delta),
    )


def budget_view(
    total_epsilon: str, total_delta: str, spent_epsilon: str, spent_delta: str
) -> BudgetView:
    """A budget from its four text columns (as the ledger's tables store them)."""
    return BudgetView(cost_of(total_epsilon, total_delta), cost_of(spent_epsilon, spent_delta))
