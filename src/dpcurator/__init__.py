"""dpcurator: a trusted curator for differentially private statistics.

The names most users need are exported here; everything else lives in the subpackages
(``mechanisms``, ``accounting``, ``random``, ``query``, ``estimators``, ``service``).

>>> import dpcurator as dpc, pandas as pd
>>> from dpcurator.random import SeededRng  # reproducible docs only: releases use SecureRng
>>> meta = dpc.Metadata.from_dict({"table": "t", "columns": {
...     "x": {"type": "int", "lower": 0, "upper": 10},
...     "g": {"type": "string", "keys": ["a", "b"]}}})
>>> frame = pd.DataFrame({"x": [1, 5, 9, 3], "g": ["a", "a", "b", "c"]})
>>> s = dpc.Session.from_data(frame, metadata=meta, budget=dpc.Budget(1.0), rng=SeededRng(0))
>>> r = s.sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g", epsilon=0.5)
>>> list(r.to_pandas()["g"]), str(s.remaining())
(['a', 'b'], 'remaining: ε = 0.5')
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpcurator.accounting import Budget
    from dpcurator.api.session import Session
    from dpcurator.core.measures import ZCDP, ApproxDP, PureDP
    from dpcurator.demo import demo_path
    from dpcurator.errors import (
        BudgetExceededError,
        DPError,
        ParameterError,
        UnsupportedQueryError,
    )
    from dpcurator.query.columns import ColumnMeta
    from dpcurator.query.frontend.builder import (
        count,
        count_persons,
        histogram,
        max_,
        mean,
        median,
        min_,
        quantile,
        stddev,
        sum_,
        variance,
    )
    from dpcurator.query.frontend.row_expressions import col, lit, when
    from dpcurator.query.release.core import Release
    from dpcurator.query.schema import Metadata

    sum = sum_  # ``dpc.sum("income")`` reads like SQL; the builtin stays in builtins

#: Where each exported name lives. They are imported on first use (PEP 562), so that importing a
#: light submodule (e.g. the command line, ``dpcurator.cli``) does not load the query engines.
_EXPORTS = {
    "Budget": "dpcurator.accounting",
    **dict.fromkeys(["ZCDP", "ApproxDP", "PureDP"], "dpcurator.core.measures"),
    "demo_path": "dpcurator.demo",
    **dict.fromkeys(
        ["BudgetExceededError", "DPError", "ParameterError", "UnsupportedQueryError"],
        "dpcurator.errors",
    ),
    **dict.fromkeys(
        [
            "count",
            "count_persons",
            "histogram",
            "max_",
            "mean",
            "median",
            "min_",
            "quantile",
            "stddev",
            "sum_",
            "variance",
        ],
        "dpcurator.query.frontend.builder",
    ),
    **dict.fromkeys(["col", "lit", "when"], "dpcurator.query.frontend.row_expressions"),
    "Release": "dpcurator.query.release.core",
    "ColumnMeta": "dpcurator.query.columns",
    "Metadata": "dpcurator.query.schema",
    "Session": "dpcurator.api.session",
}


def __getattr__(name: str) -> Any:
    """Import an exported name on first use (``sum`` is ``sum_``)."""
    source = "sum_" if name == "sum" else name
    if source not in _EXPORTS:
        raise AttributeError(f"module 'dpcurator' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[source]), source)
    globals()[name] = value
    return value


__version__ = "0.1.0"

__all__ = [
    "ZCDP",
    "ApproxDP",
    "Budget",
    "BudgetExceededError",
    "ColumnMeta",
    "DPError",
    "Metadata",
    "ParameterError",
    "PureDP",
    "Release",
    "Session",
    "UnsupportedQueryError",
    "col",
    "count",
    "count_persons",
    "demo_path",
    "histogram",
    "lit",
    "max_",
    "mean",
    "median",
    "min_",
    "quantile",
    "stddev",
    "sum",
    "sum_",
    "variance",
    "when",
]
