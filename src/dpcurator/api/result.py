"""The release object of the Session verbs beyond SQL: the shape every release kind shares.

A :class:`Result` has what a SQL :class:`~dpcurator.query.release.core.Release` has: ``values``
(the released numbers, by name), ``intervals`` (by name, where the kind gives intervals),
``cost`` (what the session's filter was charged, as one measure) and ``events`` (each charge),
``summary()`` and ``to_pandas()``; ``detail`` keeps the algorithm's own object (a fitted model,
a :class:`~dpcurator.synth.common.SyntheticData`, a
:class:`~dpcurator.estimators.hypothesis.HypothesisTestResult`, an interactive curator). Everything
in it is a DP release or post-processing of one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dpcurator.accounting.events import PrivacyEvent
from dpcurator.core.measures import Measure


@dataclass(frozen=True, eq=False)  # values hold arrays: compare their fields, not releases
class Result:
    """One release of a Session verb.

    Attributes:
        kind: the release kind (``synthetic data (MST)``, ``k-means``, ``chi-square
            independence``, ...).
        values: the released values, by name (numbers, arrays, or a frame of records).
        cost: the total charged to the session's filter (prints as ``cost: ε = 0.5``).
        events: the accounting events charged, in order.
        intervals: (low, high) per value name, where the kind gives intervals (else empty).
        alpha: the intervals are (1-α) intervals (None without intervals).
        detail: the algorithm's own object (model, synthetic data, test result, curator).
        frame: how :meth:`to_pandas` lays the release out (a function of the release).
    """

    kind: str
    values: Mapping[str, Any]
    cost: Measure
    events: tuple[PrivacyEvent, ...]
    intervals: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    alpha: float | None = None
    detail: Any = None
    frame: Callable[[Result], pd.DataFrame] | None = field(default=None, repr=False)

    def to_pandas(self) -> pd.DataFrame:
        """The release as a DataFrame (records for synthetic data, one row per component or
        cluster for a model, one row for a test); ``attrs`` holds the kind and the cost."""
        frame = self.frame(self) if self.frame is not None else _default_frame(self)
        frame.attrs.update(kind=self.kind, cost=str(self.cost))
        if self.alpha is not None:
            frame.attrs["ci_level"] = 1 - self.alpha
        return frame

    def summary(self) -> str:
        """A text report: the kind and cost, then each value (and interval) by name."""
        lines = [f"{self.kind} ({self.cost.labelled('cost')})"]
        for name, value in self.values.items():
            shown = _shown(value)
            interval = self.intervals.get(name)
            if interval is not None and self.alpha is not None:
                level = round(100 * (1 - self.alpha), 6)
                shown += f"  {level}% CI [{_shown(interval[0])}, {_shown(interval[1])}]"
            lines.append(f"  {name}: {shown}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _shown(value: Any) -> str:
    if isinstance(value, pd.DataFrame):
        return f"{len(value)} records of {list(value.columns)}"
    if isinstance(value, float | np.floating):
        return f"{float(value):.6g}"
    if isinstance(value, np.ndarray):
        return np.array2string(value, precision=4, suppress_small=True, max_line_width=88)
    return str(value)


def _default_frame(result: Result) -> pd.DataFrame:
    """One row: each scalar value (and its interval ends) as a column."""
    row: dict[str, Any] = {}
    for name, value in result.values.items():
        row[name] = value
        if name in result.intervals:
            row[f"{name}_ci_low"], row[f"{name}_ci_high"] = result.intervals[name]
    return pd.DataFrame([row])


__all__ = ["Result"]
