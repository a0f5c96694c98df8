"""The ledger's costs as exact values, and budgets as a total with what has been spent of it.

The ledger stores every ε, δ and ρ as the text of a :class:`~fractions.Fraction` (``"1/1000"``),
so costs add exactly; this module reads them back. A budget is accounted in one of two ways:

* ``basic``: (ε, δ) costs add up (basic sequential composition; optimal for pure ε budgets, and
  the accounting of every budget made before accounts existed);
* ``concentrated`` (the default for a new budget with δ > 0, or a ρ): the charges' events are
  replayed through a :class:`~dpcurator.accounting.ConcentratedFilter` (the fully adaptive
  filter across pure, (ε, δ) and zCDP events: a basic route, or a Rényi route; see
  :mod:`dpcurator.service.ledger.accounts`). Its view carries the filter's native parts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction

from dpcurator.accounting.concentrated import Concentrated
from dpcurator.core.measures import ZCDP, ApproxDP
from dpcurator.service.models import Dataset, Grant

#: A budget or a cost as the ledger shows it: (ε, δ), or ρ (zCDP).
Cost = ApproxDP | ZCDP


@functools.lru_cache(maxsize=4096)
def cost_of(epsilon: str, delta: str) -> ApproxDP:
    """An exact cost from the text columns of the ledger (memoised: costs are immutable)."""
    return ApproxDP(Fraction(epsilon), Fraction(delta))


def _remaining(total: Cost, spent: Cost) -> Cost:
    if isinstance(total, ZCDP):
        assert isinstance(spent, ZCDP)  # a view is in one measure
        return ZCDP(max(total.rho - spent.rho, 0))
    assert isinstance(spent, ApproxDP)
    return ApproxDP(max(total.epsilon - spent.epsilon, 0), max(total.delta - spent.delta, 0))


@dataclass(frozen=True)
class NativeView:
    """A concentrated budget in the filter's own terms: its parts (basic-side ε, ρ and the
    approximate events' δ) and what has been charged to each."""

    limits: Concentrated
    spent: Concentrated

    @property
    def remaining(self) -> Concentrated:
        """What is left of each part."""
        return Concentrated(
            self.limits.xi - self.spent.xi,
            self.limits.rho - self.spent.rho,
            self.limits.delta - self.spent.delta,
        )


@dataclass(frozen=True)
class BudgetView:
    """A budget, what has been spent of it, and what remains (never negative).

    For a concentrated budget ``spent`` is the filter's spend converted to the budget's measure
    and ``native`` its parts (None under basic composition).
    """

    total: Cost
    spent: Cost
    native: NativeView | None = None

    @property
    def accounting(self) -> str:
        """``basic`` or ``concentrated``."""
        return "basic" if self.native is None else "concentrated"

    @property
    def remaining(self) -> Cost:
        """``total - spent``, floored at zero in each coordinate."""
        return _remaining(self.total, self.spent)


def budget_view(
    total_epsilon: str, total_delta: str, spent_epsilon: str, spent_delta: str
) -> BasicView:
    """A basic budget from its four text columns (as the ledger's tables store them)."""
    return BasicView(cost_of(total_epsilon, total_delta), cost_of(spent_epsilon, spent_delta))


@dataclass(frozen=True)
class BasicView(BudgetView):
    """A budget under basic composition: (ε, δ) totals that add up."""

    total: ApproxDP
    spent: ApproxDP

    @property
    def remaining(self) -> ApproxDP:
        """``total - spent``, floored at zero in each coordinate."""
        remaining = _remaining(self.total, self.spent)
        assert isinstance(remaining, ApproxDP)
        return remaining


def grant_budget(grant: Grant) -> BasicView:
    """The (ε, δ) columns of a grant as exact costs: its budget under basic composition (for a
    concentrated grant, the sum of its charges' (ε, δ) costs, which the filter does not use)."""
    return budget_view(
        grant.budget_epsilon, grant.budget_delta, grant.spent_epsilon, grant.spent_delta
    )


def dataset_budget(dataset: Dataset) -> BasicView:
    """The (ε, δ) columns of a dataset's global cap as exact costs (see :func:`grant_budget`)."""
    return budget_view(
        dataset.cap_epsilon, dataset.cap_delta, dataset.spent_epsilon, dataset.spent_delta
    )
