"""The released clipping report (:mod:`dpcurator.query.plan.clipping`): post-processing of the
noisy counts of rows below, within and above the bounds of each clamped expression, per group.

Each count gets its own (1-α) interval (the exact discrete Laplace one, floored at 0). The
plain-language bounds hold simultaneously with probability >= 1-α: they use the three counts'
(1-α/3) intervals (union bound), b ∈ [b⁻, b⁺], w ∈ [w⁻, w⁺], a ∈ [a⁻, a⁺], and report the worst
case over that box:

* the share of rows clamped, (b + a)/(b + w + a), is at most (b⁺ + a⁺)/(b⁺ + w⁻ + a⁺): what a
  mean, sum, variance or standard deviation may have been moved by (the values beyond the bounds
  are unknown, so the share is the bound);
* the empirical p-quantile of the clamped values is that of the unclamped ones when fewer than
  p·n rows lie below L and fewer than (1-p)·n above U; over the box that is
  (1-p)·b⁺ < p·(w⁻ + a⁻) and p·a⁺ < (1-p)·(w⁻ + b⁻), and then the report says the quantile is
  unaffected by clamping.

Everything here is a function of the noisy counts and the plan (public), so it costs nothing.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcurator.query import ir
from dpcurator.query.plan.outputs import ClippingCount, OutputPlan

#: A noisy count with its interval: (value, ci_low, ci_high).
Interval = tuple[float, float, float]
#: Per clamped output column and group: the noisy counts of rows below and above its bounds and
#: the upper end of the clamped share's interval (the frames' column names).
CLIPPING_FIELDS = ("clipped_below", "clipped_above", "clamped_share_high")


@dataclass(frozen=True)
class ClippingReport:
    """How much clamping could have moved the statistics of one clamped expression in one group.

    Attributes:
        columns: the output columns computed on the expression clamped to [lower, upper].
        group: the released group's key (``()`` ungrouped).
        lower, upper: the public bounds.
        below, above: the noisy counts of rows below ``lower`` / above ``upper``, each with its
            (1-α) interval.
        clamped_share_high: the upper end of a (1-α) interval of the share of rows clamped.
        notes: one plain-language line per output column (module docstring).
    """

    columns: tuple[str, ...]
    group: tuple[ir.ScalarValue, ...]
    lower: float
    upper: float
    below: Interval
    above: Interval
    clamped_share_high: float
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form, without the group (the release names its columns)."""
        return {
            "columns": list(self.columns),
            "lower": self.lower,
            "upper": self.upper,
            "below": dict(zip(("value", "ci_low", "ci_high"), self.below, strict=True)),
            "above": dict(zip(("value", "ci_low", "ci_high"), self.above, strict=True)),
            "clamped_share_high": self.clamped_share_high,
            "notes": list(self.notes),
        }


def clipping_reports(
    counts: Sequence[ClippingCount],
    outputs: Sequence[OutputPlan],
    keys: Sequence[tuple[ir.ScalarValue, ...]],
    noisy: Sequence[tuple[npt.NDArray[np.int64], ...]],
    alpha: float,
) -> tuple[ClippingReport, ...]:
    """The reports of every clamped expression (``noisy``: its noisy (below, within, above)
    counts, one per released group in ``keys``), expression by expression."""
    kinds = {o.name: o for o in outputs}
    reports = []
    for count, (below, within, above) in zip(counts, noisy, strict=True):
        width = count.mechanism.ci_halfwidth(alpha)
        joint = count.mechanism.ci_halfwidth(alpha / 3)
        level = f"{1 - alpha:.0%}"
        for i, key in enumerate(keys):
            b, w, a = float(below[i]), float(within[i]), float(above[i])
            b_high, a_high = b + joint, a + joint
            b_low, w_low, a_low = (max(v - joint, 0.0) for v in (b, w, a))
            clamped = b_high + a_high
            share = min(clamped / (clamped + w_low), 1.0)
            notes = tuple(
                _note(kinds[c], share, (b_low, w_low, a_low), (b_high, a_high), level)
                for c in count.outputs
            )
            reports.append(
                ClippingReport(
                    count.outputs,
                    key,
                    count.lower,
                    count.upper,
                    _interval(b, width),
                    _interval(a, width),
                    share,
                    notes,
                )
            )
    return tuple(reports)


def _interval(value: float, width: float) -> Interval:
    return (max(value, 0.0), max(value - width, 0.0), max(value + width, 0.0))


def _note(
    output: OutputPlan,
    share: float,
    low: tuple[float, float, float],
    high: tuple[float, float],
    level: str,
) -> str:
    """The plain-language bound for one output (module docstring)."""
    if output.quantile is None:
        return f"{output.name}: at most {share:.1%} of its rows were clamped ({level} bound)"
    p = output.quantile.p
    (b_low, w_low, a_low), (b_high, a_high) = low, high
    if (1 - p) * b_high < p * (w_low + a_low) and p * a_high < (1 - p) * (w_low + b_low):
        return f"{output.name}: unaffected by clamping ({level})"
    return (
        f"{output.name}: may be moved by clamping: at most {share:.1%} of its rows were "
        f"clamped ({level} bound)"
    )


def clipping_lines(reports: Sequence[ClippingReport], group_columns: Sequence[str]) -> list[str]:
    """The report as text, one line per expression and group (under a release's table)."""
    if not reports:
        return []
    lines = ["clipping report (rows outside the bounds, CIs as above):"]
    for report in reports:
        group = ", ".join(f"{c}={k}" for c, k in zip(group_columns, report.group, strict=True))
        where = f" [{group}]" if group else ""
        lines.append(
            f"  {', '.join(report.columns)}{where}: below {report.lower:g}: "
            f"{_count(report.below)}; above {report.upper:g}: {_count(report.above)}"
        )
        lines.extend(f"    {note}" for note in report.notes)
    return lines


def clipping_html(
    reports: Sequence[ClippingReport], group_columns: Sequence[str], max_rows: int
) -> str:
    """The report as an HTML table (under a release's table; every text escaped), one row per
    expression and group: its group keys, columns, the counts below and above the bounds with
    their intervals, and the notes; the first ``max_rows`` rows; ``""`` without a report."""
    if not reports:
        return ""
    titles = [*group_columns, "columns", "rows below", "rows above", "notes"]
    head = "".join(f"<th>{html.escape(t)}</th>" for t in titles)
    body = []
    for report in reports[:max_rows]:
        cells = ["NULL" if k is None else str(k) for k in report.group]
        cells += [
            ", ".join(report.columns),
            f"{_count(report.below)} (< {report.lower:g})",
            f"{_count(report.above)} (> {report.upper:g})",
        ]
        notes = "<br>".join(html.escape(note) for note in report.notes)
        row = "".join(f"<td>{html.escape(cell)}</td>" for cell in cells)
        body.append(f"<tr>{row}<td>{notes}</td></tr>")
    hidden = len(reports) - max_rows
    if hidden > 0:
        body.append(
            f'<tr><td colspan="{len(titles)}">… {hidden} more rows: to_pandas() has them all'
            "</td></tr>"
        )
    caption = "clipping report (rows outside the bounds, CIs as above)"
    return (
        f'<table class="dpcurator-clipping"><caption>{caption}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def _count(interval: Interval) -> str:
    value, low, high = interval
    return f"{value:,.0f} [{low:,.0f}, {high:,.0f}]"


def clipping_cells(
    reports: Sequence[ClippingReport],
) -> dict[tuple[tuple[ir.ScalarValue, ...], str], tuple[float, float, float]]:
    """Per (group, clamped output column), the values of CLIPPING_FIELDS."""
    return {
        (report.group, column): (report.below[0], report.above[0], report.clamped_share_high)
        for report in reports
        for column in report.columns
    }


def clipping_columns(
    reports: Sequence[ClippingReport],
) -> dict[tuple[ir.ScalarValue, ...], dict[str, float]]:
    """Per group, the wide frame's extra columns: ``<output>_clipped_below``, ``..._above``
    (noisy counts) and ``<output>_clamped_share_high``."""
    extra: dict[tuple[ir.ScalarValue, ...], dict[str, float]] = {}
    for (group, column), values in clipping_cells(reports).items():
        cells = extra.setdefault(group, {})
        cells.update(
            (f"{column}_{field}", v) for field, v in zip(CLIPPING_FIELDS, values, strict=True)
        )
    return extra
