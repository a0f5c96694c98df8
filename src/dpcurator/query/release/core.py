"""Noise and post-processing: a :class:`~dpcurator.query.plan.planner.Plan` + exact result ->
Release.

The only randomness is drawn by :mod:`dpcurator.mechanisms` (discrete Laplace on integer grid
values, or discrete Gaussian for a Gaussian plan (:mod:`dpcurator.query.plan.noise`),
permute-and-flip for quantiles, thresholded Laplace or Gaussian for partition selection); everything
else here is post-processing of noisy values, which costs no privacy.

Confidence intervals (level 1-α, ``alpha`` default 0.05) cover the exact value the engine computed
(after filtering, contribution bounding, clamping and grid rounding):

* counts and sums: the exact discrete Laplace (or Gaussian) interval, value ± t with
  P[|Z| > t] <= α; counts are
  clipped at 0 (post-processing; the truth is >= 0, so coverage is kept). A count that is also
  the partition selection's (``Plan.selection_output``) is released only when it clears the
  threshold, so its interval covers with probability >= 1-α before the selection, not
  conditioned on the group being released: the counts of small released groups are biased
  upwards (every other output's noise is independent of the selection);
* means = centre + noisy centred sum / noisy count (not unbiased; clamped to the bounds),
  variances (sample variance, n-1) from the noisy count, centred sum and sum of squares, and
  standard deviations: the interval inverts the distribution of the ratio's error under the
  public noise at the count's lower confidence bound
  (:mod:`dpcurator.query.release.ratio_interval`), or is the whole range when that bound is below 1
  (2 for a variance);
* quantiles: the noise-only interval of :mod:`dpcurator.query.plan.quantile` (it covers the
  empirical quantile of the counted values; the mechanism record says so and gives the last
  level's rank error bound, :func:`dpcurator.estimators.quantiles.rank_error`).

Histogram bins are labelled by :mod:`dpcurator.query.plan.histogram`: values outside [lower, upper]
are counted in the first and last bins, whose labels are open (``<85``, ``>=85``). A Release
reads as a table (``print(r)``, :meth:`Release.summary`, :meth:`Release.to_pandas`, a Jupyter
table) and plots (:meth:`Release.plot`); the rendering lives in
:mod:`dpcurator.query.release.view`, and every CI shown carries its level.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from html import escape
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcurator.accounting.events import PrivacyEvent
from dpcurator.core.measures import ZCDP, ApproxDP, PureDP
from dpcurator.mechanisms import Gaussian, Laplace
from dpcurator.query import ir
from dpcurator.query.plan.outputs import NoisyStatistic, OutputPlan
from dpcurator.query.plan.planner import Plan, plan_event
from dpcurator.query.plan.quantile import Compute, release_quantiles
from dpcurator.query.release import view as release_view
from dpcurator.query.release.clipping import (
    ClippingReport,
    clipping_columns,
    clipping_lines,
    clipping_reports,
)
from dpcurator.query.release.estimate import (
    Estimate,
    MechanismUse,
    ValueColumn,
    cost_dict,
    halfwidth,
    mechanism_uses,
    output_columns,
)
from dpcurator.query.release.notes import exactness_warning, missing_value_notes
from dpcurator.query.release.ratio_interval import MomentNoise, moment_intervals
from dpcurator.query.schema import Metadata
from dpcurator.random import Rng

if TYPE_CHECKING:
    from matplotlib.axes import Axes

_I64_MAX = 2**63 - 1


def _json_number(value: float) -> float | None:
    """``value``, or None for NaN (strict JSON has no NaN: a fit's p-value where no test
    applies; a PostgreSQL ledger refuses to store it)."""
    return None if isinstance(value, float) and math.isnan(value) else value


def _json_value(value: object) -> object:
    item = getattr(value, "item", None)
    return item() if callable(item) else value


@dataclass(frozen=True)
class Release:
    """The released answer of one query.

    Attributes:
        group_columns: names of the grouping columns.
        value_columns: names of the released statistics (a histogram gives one per bin).
        rows: one ``(group key, estimates)`` pair per released group.
        cost: the privacy cost charged (prints as ``cost: ε = 0.5``).
        mechanisms: every mechanism used, with its noise scale and budget share.
        alpha: the CIs are (1-α) intervals.
        columns: what each value column holds (statistic, kind, histogram bin), what its
            interval covers and whether its values were clamped (:class:`ValueColumn`).
        events: the accounting events charged (for a ledger; ``to_dict`` serialises them).
        noise: why the noise family was chosen (empty for a plain Laplace release).
        neighbouring: the neighbouring relation of the guarantee: ``add_remove`` (one person
            added or removed) or ``replace_one`` (one person replaced; the table size is public).
        clipping: the opt-in clipping report, per clamped expression and released group (empty
            unless asked for; :mod:`dpcurator.query.release.clipping`).
        warnings: public warnings on the release (a public box that bound, noise below the
            values' resolution); printed under the table.
        notes: public notes on how the release treats the data, from the metadata only (how a
            NULL or NaN of a non-nullable column without a fill counts); in ``to_dict``.
        at_bound: per row, whether a public box clamped its value or interval (fits; empty
            when no box applies); ``to_pandas`` shows it as ``at_box_bound``.
    """

    group_columns: tuple[str, ...]
    value_columns: tuple[str, ...]
    rows: tuple[tuple[tuple[ir.ScalarValue, ...], tuple[Estimate, ...]], ...]
    cost: PureDP | ApproxDP | ZCDP
    mechanisms: tuple[MechanismUse, ...]
    alpha: float
    columns: tuple[ValueColumn, ...]
    events: tuple[PrivacyEvent, ...] = ()
    noise: str = ""
    neighbouring: str = "add_remove"
    clipping: tuple[ClippingReport, ...] = ()
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    at_bound: tuple[bool, ...] = ()

    @property
    def ci_level(self) -> float:
        """The level 1-α of the confidence intervals."""
        return 1 - self.alpha

    @property
    def values(self) -> dict[str, Any]:
        """Each value column's released values (the shape every release kind shares): a
        number for an ungrouped release, else a list in the order of ``rows``."""
        return {
            name: self._column(i, lambda e: e.value) for i, name in enumerate(self.value_columns)
        }

    @property
    def intervals(self) -> dict[str, tuple[Any, Any]]:
        """Each value column's (1-α) interval as (low, high), shaped as :attr:`values`."""
        return {
            name: (self._column(i, lambda e: e.ci_low), self._column(i, lambda e: e.ci_high))
            for i, name in enumerate(self.value_columns)
        }

    def _column(self, index: int, part: Any) -> Any:
        found = [part(estimates[index]) for _, estimates in self.rows]
        return found[0] if not self.group_columns and len(found) == 1 else found

    def to_pandas(self, *, long: bool = False) -> pd.DataFrame:
        """The release as a DataFrame; ``attrs`` holds ``ci_level`` and ``cost``.

        Wide (the default): one row per group, the group columns, then each value column with
        its interval as ``<name>``, ``<name>_ci_low``, ``<name>_ci_high``, and with a clipping
        report ``<name>_clipped_below``, ``<name>_clipped_above`` (noisy counts) and
        ``<name>_clamped_share_high`` for each clamped column. Long
        (``long=True``): one row per group and value column (so one per histogram bin), with
        the columns ``statistic``, ``bin``, ``bin_low``, ``bin_high`` (histograms only: the bin
        counts values in [bin_low, bin_high)), ``value``, ``ci_low``, ``ci_high``, ``ci_level``,
        and with a clipping report ``clipped_below``, ``clipped_above``, ``clamped_share_high``
        (empty on the rows of columns that are not clamped).
        """
        if long:
            return release_view.long_frame(self)
        columns = list(self.group_columns)
        for name in self.value_columns:
            columns += [name, f"{name}_ci_low", f"{name}_ci_high"]
        records = []
        for key, estimates in self.rows:
            record: list[object] = [_json_value(k) for k in key]
            for estimate in estimates:
                record += [estimate.value, estimate.ci_low, estimate.ci_high]
            records.append(record)
        frame = pd.DataFrame.from_records(records, columns=columns)
        extra = clipping_columns(self.clipping)
        for name in dict.fromkeys(c for cells in extra.values() for c in cells):
            frame[name] = [extra.get(key, {}).get(name) for key, _ in self.rows]
        if self.at_bound:
            frame["at_box_bound"] = list(self.at_bound)
        frame.attrs.update(release_view.frame_attrs(self))
        return frame

    def summary(self, max_lines: int | None = None) -> str:
        """A text table: one line per group and value, with its CI, under a header giving the
        number of rows, the cost and the CI level (``max_lines``: cut the table there), then
        the clipping report if there is one."""
        lines = clipping_lines(self.clipping, self.group_columns)
        notes = [f"warning: {text}" for text in self.warnings]
        return "\n".join([release_view.summary(self, max_lines), *lines, *notes])

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return self.summary(max_lines=release_view.REPR_LINES)

    def _repr_html_(self) -> str:
        """Jupyter's rendering: an HTML table of values with CIs, the cost and the CI level,
        then the clipping report's table if there is one."""
        notes = "".join(f"<p><b>warning:</b> {escape(text)}</p>" for text in self.warnings)
        return release_view.html_table(self) + notes

    def plot(self, statistic: str | None = None, *, ax: Axes | None = None) -> Axes:
        """Bars of the values with their CIs as error bars (matplotlib, imported here).

        ``statistic`` picks one output (a histogram's name plots its bins), default all. A
        single histogram has its bins along x and one bar per group; otherwise the groups are
        along x and each value column is one bar (ungrouped: one bar per value column).
        Returns the Axes (a new figure's unless ``ax`` is given).
        """
        return release_view.plot(self, statistic, ax)

    def value(self, column: str, key: tuple[ir.ScalarValue, ...] = ()) -> Estimate:
        """The estimate of ``column`` for the group ``key`` (``()`` for ungrouped queries)."""
        index = self.value_columns.index(column)
        for row_key, estimates in self.rows:
            if row_key == key:
                return estimates[index]
        raise KeyError(key)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form: columns, rows (value/ci_low/ci_high; a value with no number,
        NaN in the table, is None), cost, mechanisms, and per value column what its interval
        covers and whether it was clamped (``columns``)."""
        return {
            "group_columns": list(self.group_columns),
            "value_columns": list(self.value_columns),
            "rows": [
                {
                    "group": {
                        c: _json_value(k) for c, k in zip(self.group_columns, key, strict=True)
                    },
                    "values": {
                        c: {
                            "value": _json_number(e.value),
                            "ci_low": e.ci_low,
                            "ci_high": e.ci_high,
                        }
                        for c, e in zip(self.value_columns, estimates, strict=True)
                    },
                    **({"at_box_bound": self.at_bound[i]} if self.at_bound else {}),
                }
                for i, (key, estimates) in enumerate(self.rows)
            ],
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            "cost": cost_dict(self.cost),
            "mechanisms": [m.to_dict() for m in self.mechanisms],
            "columns": [c.to_dict() for c in self.columns],
            "alpha": self.alpha,
            "ci_level": self.ci_level,
            "events": [event.to_dict() for event in self.events],
            "noise": self.noise,
            "neighbouring": self.neighbouring,
            "clipping": [
                {
                    "group": {
                        c: _json_value(k)
                        for c, k in zip(self.group_columns, report.group, strict=True)
                    },
                    **report.to_dict(),
                }
                for report in self.clipping
            ],
        }


# ----------------------------------------------------------------------------------------------
# Release


def _sort_key(value: object) -> tuple[int, str, object]:
    if value is None:
        return (1, "", 0)
    return (0, type(value).__name__, value)


def released_keys(
    plan: Plan, exact: ir.ExactResult, rng: Rng | None
) -> tuple[list[tuple[ir.ScalarValue, ...]], npt.NDArray[np.int64]]:
    """The public keys, or the keys chosen by DP partition selection among those present, with
    the noisy counts that cleared the threshold (empty with public keys)."""
    if plan.keys is not None:
        return list(plan.keys), np.zeros(0, dtype=np.int64)
    assert plan.selection is not None  # plans without keys carry a selection
    present = sorted(exact.groups, key=lambda key: tuple(_sort_key(v) for v in key))
    if not present:
        return [], np.zeros(0, dtype=np.int64)
    counts = _exact_values(exact, present, plan.selection_exact, 0)
    mask, noisy = plan.selection.select(counts, rng)
    return [key for key, keep in zip(present, mask, strict=True) if keep], noisy[mask]


def _exact_int(value: object) -> int:
    """An exact aggregate (in grid units) as an integer, total: None and NaN -> 0, anything
    beyond int64 (±inf included) saturates to ±(2^63 - 1), the S5 range of a group total."""
    if type(value) is int and -_I64_MAX <= value <= _I64_MAX:  # what the engines return
        return value
    if value is None:
        return 0
    if isinstance(value, float | np.floating | Decimal):
        if math.isnan(value):
            return 0
        if math.isinf(value):
            return _I64_MAX if value > 0 else -_I64_MAX
    number: int = int(value)  # type: ignore[call-overload]  # ints, numpy ints, Decimals
    return max(-_I64_MAX, min(_I64_MAX, number))


def _exact_values(
    exact: ir.ExactResult, keys: Sequence[tuple[ir.ScalarValue, ...]], name: str, width: int
) -> npt.NDArray[np.int64]:
    """The exact integers ``name`` of the groups ``keys`` (0 for a group absent from the data):
    one per group, or a row of ``width`` per group (histograms), never raising on a value."""
    values = [exact.groups.get(key, {}).get(name) for key in keys]
    if not width:
        return np.array([_exact_int(value) for value in values], dtype=np.int64)
    rows = [
        [0] * width
        if value is None
        else np.maximum(value, -_I64_MAX)  # int64 histograms (the engines' form)
        if isinstance(value, np.ndarray) and value.dtype == np.int64
        else [_exact_int(v) for v in np.ravel(np.asarray(value, dtype=object))]
        for value in values
    ]
    return np.array(rows, dtype=np.int64).reshape(len(keys), width)


def _noisy(
    part: NoisyStatistic,
    exact: ir.ExactResult,
    keys: Sequence[tuple[ir.ScalarValue, ...]],
    width: int,
    rng: Rng | None,
) -> npt.NDArray[np.int64]:
    return part.mechanism.release_integers(_exact_values(exact, keys, part.exact, width), rng)


def release_plan(
    plan: Plan,
    exact: ir.ExactResult,
    *,
    alpha: float,
    rng: Rng | None = None,
    compute: Compute | None = None,
    metadata: Metadata | None = None,
) -> Release:
    """Add the planned noise to exact aggregates and post-process them into a Release.

    ``compute`` runs the later levels of refined quantiles (one engine pass per level,
    :mod:`dpcurator.query.plan.quantile`); without it quantiles stop at their first level.
    ``metadata`` (public) adds the NULL/NaN notes of :mod:`dpcurator.query.release.notes`."""
    keys, selected = released_keys(plan, exact, rng)
    steps = {o.name: o.quantile for o in plan.outputs if o.quantile is not None}
    quantiles = release_quantiles(
        steps, plan.exact, exact, keys, read=_exact_values, compute=compute, alpha=alpha, rng=rng
    )
    per_output: list[list[list[Estimate]]] = []  # output -> group -> estimates (columns)
    for output in plan.outputs:
        if output.name in quantiles:
            per_output.append([[Estimate(*cell)] for cell in quantiles[output.name]])
            continue
        if output.name == plan.selection_output:  # the selection's own noisy counts
            width = halfwidth(output.parts[0], alpha)
            per_output.append([[e] for e in _estimates(selected, width, floor=0.0)])
            continue
        per_output.append(_release_output(output, exact, keys, alpha, rng))
    cells = per_output[0] if per_output else [[] for _ in keys]  # group -> its estimates
    for more in per_output[1:]:  # concatenated per output, not chained per group (6x faster)
        cells = [have + added for have, added in zip(cells, more, strict=True)]
    rows = [(key, tuple(row)) for key, row in zip(keys, cells, strict=True)]
    columns = tuple(c for output in plan.outputs for c in output_columns(output))
    value_columns = tuple(c.name for c in columns)
    rows = _ordered(rows, plan, value_columns)
    clipped = [
        tuple(
            count.mechanism.release_integers(_exact_values(exact, keys, name, 0), rng)
            for name in count.exact
        )
        for count in plan.clipping
    ]
    return Release(
        plan.group_columns,
        value_columns,
        tuple(rows),
        plan.cost.labelled("cost"),
        mechanism_uses(plan, alpha),
        alpha,
        columns,
        (plan_event(plan),),
        plan.noise,
        plan.neighbouring,
        clipping_reports(plan.clipping, plan.outputs, keys, clipped, alpha),
        warnings=exactness_warning(plan),
        notes=() if metadata is None else missing_value_notes(plan, metadata),
    )


def _ordered(
    rows: list[tuple[tuple[ir.ScalarValue, ...], tuple[Estimate, ...]]],
    plan: Plan,
    value_columns: tuple[str, ...],
) -> list[tuple[tuple[ir.ScalarValue, ...], tuple[Estimate, ...]]]:
    for column, descending in reversed(plan.order_by):
        if column in plan.group_columns:
            position = plan.group_columns.index(column)
            rows.sort(key=lambda row, i=position: _sort_key(row[0][i]), reverse=descending)  # type: ignore[misc]
        else:
            position = value_columns.index(column)
            rows.sort(key=lambda row, i=position: row[1][i].value, reverse=descending)  # type: ignore[misc]
    return rows


def _release_output(
    output: OutputPlan,
    exact: ir.ExactResult,
    keys: Sequence[tuple[ir.ScalarValue, ...]],
    alpha: float,
    rng: Rng | None,
) -> list[list[Estimate]]:
    if output.public_count is not None and output.kind != "mean":  # replace-one: public n
        return [[Estimate(*[float(output.public_count)] * 3)] for _ in keys]
    if output.kind == "histogram":
        part = output.parts[0]
        noisy = _noisy(part, exact, keys, len(output.edges) - 1, rng)
        return [_estimates(row, halfwidth(part, alpha), floor=0.0) for row in noisy]
    if output.kind in ("count", "count_persons"):
        part = output.parts[0]
        noisy = _noisy(part, exact, keys, 0, rng)
        return [[e] for e in _estimates(noisy, halfwidth(part, alpha), floor=0.0)]
    if output.kind == "sum":
        part = output.parts[0]
        unit = math.ldexp(1.0, part.grid_exponent)
        scaled = _noisy(part, exact, keys, 0, rng) * unit
        return [[e] for e in _estimates(scaled, halfwidth(part, alpha))]
    return _release_moments(output, exact, keys, alpha, rng)


def _estimates(
    values: npt.NDArray[Any],
    width: float,
    floor: float | None = None,
) -> list[Estimate]:
    """Estimates ``value ± width`` (counts: each of the three floored at ``floor``)."""
    value = values.astype(np.float64)
    low, high = value - width, value + width
    if floor is not None:
        value, low, high = (np.maximum(a, floor) for a in (value, low, high))
    return list(map(Estimate, value.tolist(), low.tolist(), high.tolist()))


def _release_moments(
    output: OutputPlan,
    exact: ir.ExactResult,
    keys: Sequence[tuple[ir.ScalarValue, ...]],
    alpha: float,
    rng: Rng | None,
) -> list[list[Estimate]]:
    """Means, variances, standard deviations: ratios of the noisy parts, with the intervals of
    :mod:`dpcurator.query.release.ratio_interval`."""
    parts = output.parts
    noisy = [
        _noisy(p, exact, keys, 0, rng).astype(np.float64) * math.ldexp(1.0, p.grid_exponent)
        for p in parts
    ]
    mechanisms: list[Laplace | Gaussian | None] = [p.mechanism for p in parts]
    units = [math.ldexp(1.0, p.grid_exponent) for p in parts]
    if output.public_count is not None:  # replace-one mean: noisy sum over the public n
        noisy.insert(0, np.full(len(keys), float(output.public_count)))
        mechanisms.insert(0, None)
        units.insert(0, 1.0)
    assert output.lower is not None  # planned bounds
    assert output.upper is not None
    noise = MomentNoise(tuple(mechanisms), tuple(units))
    bounds = (output.lower, output.upper)
    cells = moment_intervals(output.kind, noisy, noise, bounds, output.centre, alpha=alpha)
    return [[Estimate(*cell)] for cell in cells]
