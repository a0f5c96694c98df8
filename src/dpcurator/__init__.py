"""dpcurator: a trusted curator for differentially private statistics.

The names most users need are exported here; everything else lives in the subpackages
(``mechanisms``, ``accounting``, ``random``, ``query``, ``estimators``, ``service``).
"""

from __future__ import annotations

from dpcurator.core.measures import ZCDP, ApproxDP, PureDP
from dpcurator.errors import (
    BudgetExceededError,
    DPError,
    ParameterError,
    UnsupportedQueryError,
)

__version__ = "0.1.0"

__all__ = [
    "ZCDP",
    "ApproxDP",
    "BudgetExceededError",
    "DPError",
    "ParameterError",
    "PureDP",
    "UnsupportedQueryError",
]
