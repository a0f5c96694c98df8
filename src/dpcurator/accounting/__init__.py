"""Privacy accounting: events (what was released), accountants (how it composes), budgets,
filters (charge before release) and calibration (noise scale <-> privacy parameters)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dpcurator.accounting.accountants import Accountant, BasicAccountant, ZCDPAccountant
from dpcurator.accounting.accountants_advanced import AdvancedCompositionAccountant
from dpcurator.accounting.budget import Budget
from dpcurator.accounting.calibration import (
    gaussian_delta,
    gaussian_epsilon,
    gaussian_rho,
    gaussian_sigma_for_approx,
    gaussian_sigma_for_rho,
    laplace_epsilon,
    laplace_scale,
)
from dpcurator.accounting.composition import group_privacy, parallel_composition
from dpcurator.accounting.concentrated import ConcentratedFilter
from dpcurator.accounting.events import (
    ApproxEvent,
    ComposedEvent,
    ConcentratedEvent,
    GaussianEvent,
    LaplaceEvent,
    ParallelEvent,
    PrivacyEvent,
    PureEvent,
    RepeatedEvent,
    ZCDPEvent,
)
from dpcurator.accounting.filter import BudgetFilter, PrivacyFilter, PrivacyOdometer, Reservation
from dpcurator.accounting.gaussian_dp import GaussianDPFilter

__all__ = [
    "Accountant",
    "AdvancedCompositionAccountant",
    "ApproxEvent",
    "BasicAccountant",
    "Budget",
    "BudgetFilter",
    "ComposedEvent",
    "ConcentratedEvent",
    "ConcentratedFilter",
    "GaussianDPFilter",
    "GaussianEvent",
    "LaplaceEvent",
    "PLDAccountant",
    "ParallelEvent",
    "PrivacyEvent",
    "PrivacyFilter",
    "PrivacyOdometer",
    "PureEvent",
    "RDPAccountant",
    "RepeatedEvent",
    "Reservation",
    "ZCDPAccountant",
    "ZCDPEvent",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_rho",
    "gaussian_sigma_for_approx",
    "gaussian_sigma_for_rho",
    "group_privacy",
    "laplace_epsilon",
    "laplace_scale",
    "parallel_composition",
]

if TYPE_CHECKING:
    from dpcurator.accounting.accountants_pld import PLDAccountant
    from dpcurator.accounting.accountants_rdp import RDPAccountant


def __getattr__(name: str) -> Any:
    """PLDAccountant and RDPAccountant, imported on first use: they load dp_accounting (about
    2.3 s), which a server worker does not need to start."""
    if name == "PLDAccountant":
        from dpcurator.accounting.accountants_pld import PLDAccountant  # noqa: PLC0415

        return PLDAccountant
    if name == "RDPAccountant":
        from dpcurator.accounting.accountants_rdp import RDPAccountant  # noqa: PLC0415

        return RDPAccountant
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
