"""How a :class:`~dpcurator.query.release.core.Release` reads: text, long frame, HTML and a plot.

The functions here read a release through :class:`ReleaseTable`, the fields they show, so this
module does not import the Release it renders (the Release's methods call into it).

Everything here is post-processing of released values (no privacy cost), and every rendering
that shows confidence intervals names their level (``95% CI``). Numbers print as integers when
they are whole (counts), else with 6 significant digits; a missing interval (quantiles: see the
mechanism's rank error) prints as ``—``. HTML escapes every text it shows (group keys and column
names are analyst or data-owner text).
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd

from dpcurator._validation import fail
from dpcurator.core.display import MISSING, key_text, level_text, number
from dpcurator.query.release.clipping import CLIPPING_FIELDS, clipping_cells, clipping_html

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from dpcurator.core.measures import Measure
    from dpcurator.query import ir
    from dpcurator.query.release.clipping import ClippingReport
    from dpcurator.query.release.estimate import Estimate, ValueColumn

#: Lines of the table ``repr(release)`` shows (``release.summary()`` shows them all).
REPR_LINES = 40
#: Rows of the HTML table shown in a notebook.
HTML_ROWS = 100


class ReleaseTable(Protocol):
    """What the views read of a :class:`~dpcurator.query.release.core.Release`."""

    @property
    def group_columns(self) -> tuple[str, ...]: ...
    @property
    def value_columns(self) -> tuple[str, ...]: ...
    @property
    def rows(self) -> tuple[tuple[tuple[ir.ScalarValue, ...], tuple[Estimate, ...]], ...]: ...
    @property
    def cost(self) -> Measure: ...
    @property
    def alpha(self) -> float: ...
    @property
    def ci_level(self) -> float: ...
    @property
    def columns(self) -> tuple[ValueColumn, ...]: ...
    @property
    def neighbouring(self) -> str: ...
    @property
    def clipping(self) -> tuple[ClippingReport, ...]: ...


def interval(estimate: Estimate) -> str:
    """``[low, high]``, or ``—`` when the estimate has no interval."""
    if estimate.ci_low is None or estimate.ci_high is None:
        return MISSING
    return f"[{number(estimate.ci_low)}, {number(estimate.ci_high)}]"


def _rows_text(count: int) -> str:
    return f"{count} row" if count == 1 else f"{count} rows"


def header(release: ReleaseTable) -> str:
    """``2 rows · cost: ε = 0.5 · 95% CI``."""
    relation = " · replace-one neighbours" if release.neighbouring == "replace_one" else ""
    return (
        f"{_rows_text(len(release.rows))} · {release.cost}{relation} · "
        f"{level_text(release.alpha)} CI"
    )


def frame_attrs(release: ReleaseTable) -> dict[str, Any]:
    """The ``attrs`` of the release's DataFrames: the CI level and the cost."""
    return {"ci_level": release.ci_level, "cost": str(release.cost)}


# ----------------------------------------------------------------------------------------------
# Text


def _lines(release: ReleaseTable) -> Iterator[list[str]]:
    for key, estimates in release.rows:
        for column, estimate in zip(release.value_columns, estimates, strict=True):
            yield [*map(key_text, key), column, number(estimate.value), interval(estimate)]


def summary(release: ReleaseTable, max_lines: int | None) -> str:
    """The text table of :meth:`Release.summary`: a header, then one line per group and value
    column (group keys, ``statistic``, ``value``, the CI), cut after ``max_lines`` lines."""
    titles = [*release.group_columns, "statistic", "value", f"{level_text(release.alpha)} CI"]
    body = list(_lines(release))
    hidden = 0
    if max_lines is not None and len(body) > max_lines:
        hidden, body = len(body) - max_lines, body[:max_lines]
    table = [titles, *body]
    widths = [max(len(row[i]) for row in table) for i in range(len(titles))]
    value_at = len(titles) - 2  # numbers align right, text left
    lines = [header(release)]
    for row in table:
        cells = [
            cell.rjust(width) if i == value_at else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    if not release.rows:
        lines.append("(no group released)")
    if hidden:
        lines.append(f"… {hidden} more lines: summary() shows them all")
    if any(e.ci_low is None for _, estimates in release.rows for e in estimates):
        lines.append(f"{MISSING}: no interval (the estimator gives none)")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Long frame


def long_frame(release: ReleaseTable) -> pd.DataFrame:
    """One row per group and value column (see :meth:`Release.to_pandas`), with a clipping
    report's CLIPPING_FIELDS on the rows of its clamped columns (None on the others)."""
    binned = any(c.bin is not None for c in release.columns)
    bin_titles = ["bin", "bin_low", "bin_high"] if binned else []
    clipped = clipping_cells(release.clipping)
    clip_titles = list(CLIPPING_FIELDS) if release.clipping else []
    titles = [
        *release.group_columns,
        "statistic",
        *bin_titles,
        "value",
        "ci_low",
        "ci_high",
        "ci_level",
        *clip_titles,
    ]
    records = []
    for key, estimates in release.rows:
        for column, estimate in zip(release.columns, estimates, strict=True):
            record: list[object] = [_plain(k) for k in key]
            record.append(column.statistic)
            if binned:
                b = column.bin
                record += [None, None, None] if b is None else [b.label, b.low, b.high]
            record += [estimate.value, estimate.ci_low, estimate.ci_high, release.ci_level]
            if clip_titles:
                record += clipped.get((key, column.statistic), (None, None, None))
            records.append(record)
    frame = pd.DataFrame.from_records(records, columns=titles)
    frame.attrs.update(frame_attrs(release))
    return frame


def _plain(value: object) -> object:
    item = getattr(value, "item", None)
    return item() if callable(item) else value


# ----------------------------------------------------------------------------------------------
# HTML (Jupyter)


def html_table(release: ReleaseTable) -> str:
    """An HTML table: group columns, then each value column as ``value [low, high]``; then
    the clipping report's table if there is one."""
    titles = [*release.group_columns, *release.value_columns]
    head = "".join(f"<th>{html.escape(t)}</th>" for t in titles)
    body = []
    for key, estimates in release.rows[:HTML_ROWS]:
        cells = [f"<th>{html.escape(key_text(k))}</th>" for k in key]
        cells += [
            f"<td>{html.escape(number(e.value))} <small>{html.escape(interval(e))}</small></td>"
            for e in estimates
        ]
        body.append(f"<tr>{''.join(cells)}</tr>")
    hidden = len(release.rows) - HTML_ROWS
    if hidden > 0:
        body.append(
            f'<tr><td colspan="{len(titles)}">… {hidden} more rows: to_pandas() has them all'
            "</td></tr>"
        )
    caption = html.escape(header(release))
    return (
        f'<table class="dpcurator-release"><caption>{caption}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        f"{clipping_html(release.clipping, release.group_columns, HTML_ROWS)}"
    )


# ----------------------------------------------------------------------------------------------
# Plot


def _group_label(key: tuple[ir.ScalarValue, ...]) -> str:
    return ", ".join(map(key_text, key))


def plot(release: ReleaseTable, statistic: str | None, ax: Axes | None) -> Axes:
    """The bar chart of :meth:`Release.plot`."""
    import matplotlib.pyplot as plt  # noqa: PLC0415  # optional, slow: imported to plot only

    picked = [i for i, c in enumerate(release.columns) if statistic in (None, c.statistic)]
    if not picked:
        names = sorted({c.statistic for c in release.columns})
        raise fail("Release.plot", "statistic", f"one of {names}", statistic)
    columns = [release.columns[i] for i in picked]
    estimates = [[row[1][i] for i in picked] for row in release.rows]  # group -> column
    groups = [_group_label(key) for key, _ in release.rows]
    histogram = len({c.statistic for c in columns}) == 1 and columns[0].bin is not None
    if not release.group_columns:  # one series: the value columns along x
        categories = [_column_label(c, histogram) for c in columns]
        series, cells = [""], [estimates[0]] if estimates else [[]]
    elif histogram:  # bins along x, one series per group
        categories = [_column_label(c, histogram) for c in columns]
        series, cells = groups, estimates
    else:  # groups along x, one series per value column
        categories = groups
        series = [c.name for c in columns]
        cells = [[row[j] for row in estimates] for j in range(len(columns))]
    if ax is None:
        _, ax = plt.subplots()
    _bars(ax, categories, series, cells)
    level = level_text(release.alpha)
    ax.set_ylabel(f"{columns[0].statistic if histogram else 'value'} ({level} CI)")
    ax.set_title(f"{release.cost} · error bars: {level} CI")
    if histogram:
        ax.set_xlabel(columns[0].statistic)
    elif release.group_columns:
        ax.set_xlabel(", ".join(release.group_columns))
    if len(series) > 1:
        ax.legend(title=", ".join(release.group_columns) if histogram else None)
    return ax


def _column_label(column: ValueColumn, histogram: bool) -> str:
    return column.bin.label if histogram and column.bin is not None else column.name


def _bars(
    ax: Axes,
    categories: Sequence[str],
    series: Sequence[str],
    cells: Sequence[Sequence[Estimate]],
) -> None:
    """One bar per (series, category), its CI as an asymmetric error bar where it has one."""
    positions = np.arange(len(categories), dtype=np.float64)
    width = 0.8 / max(len(series), 1)
    for j, (name, row) in enumerate(zip(series, cells, strict=True)):
        values = np.array([e.value for e in row], dtype=np.float64)
        low = np.array([_or_nan(e.ci_low) for e in row], dtype=np.float64)
        high = np.array([_or_nan(e.ci_high) for e in row], dtype=np.float64)
        offset = (j - (len(series) - 1) / 2) * width
        has_ci = bool(row) and not np.isnan(low).all()
        error = np.vstack([values - low, high - values]) if has_ci else None
        ax.bar(positions + offset, values, width, yerr=error, capsize=3, label=name or None)
    ax.set_xticks(positions, list(categories))


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value
