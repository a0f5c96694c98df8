"""What a plan releases and costs, without touching data: the value columns a
:class:`~dpcurator.query.plan.planner.Plan` produces, the mechanisms it applies (scales and
sensitivities in natural units) and its :class:`CostEstimate` (the charge and the (1-α) CI
half-widths that depend on public inputs only; data-dependent ones are None); and the value type
of one released number, :class:`Estimate`, which the release and its views share.

Everything here is a function of the plan (public inputs); :mod:`dpcurator.query.release.core` adds
the noisy values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpcurator.core.measures import ZCDP, ApproxDP, PureDP
from dpcurator.mechanisms import Laplace, PartitionSelection
from dpcurator.query.plan.histogram import HistogramBin, histogram_bins
from dpcurator.query.plan.outputs import NoisyStatistic, OutputKind, OutputPlan
from dpcurator.query.plan.planner import Plan


@dataclass(frozen=True)
class Estimate:
    """One released number with its (1-α) confidence interval (None when not available)."""

    value: float
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True)
class ValueColumn:
    """What one released value column holds.

    Attributes:
        name: the column's name (``n``; for a histogram's bins ``age<85``, ``age[85,90)``).
        statistic: the query's output it belongs to (``age`` for every bin of ``... AS age``).
        kind: the statistic (``count``, ``sum``, ``mean``, ..., ``histogram``).
        bin: the histogram bin, or None.
        covers: what the (1-α) interval accounts for: ``noise`` (the privacy noise only: it covers
            the exact statistic of this table, after contribution bounding and clamping; every
            query statistic) or ``noise+sampling`` (also the sampling: it covers the population
            parameter of a model; fits whose estimator says so), None when there is no interval
            (a fit's NR).
        clamped: whether the statistic is computed on values clamped to public bounds (sums,
            means, variances, standard deviations, quantiles: the output's lower and upper;
            fits: each column's bounds). The interval does not include the clipping bias: if
            values lie outside the bounds the statistic is moved by clamping, unseen by the
            interval. Counts and histograms (open end bins) clamp nothing.
    """

    name: str
    statistic: str
    kind: OutputKind
    bin: HistogramBin | None = None
    covers: str | None = "noise"
    clamped: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable description (the bin is in the name)."""
        return {
            "name": self.name,
            "statistic": self.statistic,
            "kind": self.kind,
            "covers": self.covers,
            "clamped": self.clamped,
        }


@dataclass(frozen=True)
class MechanismUse:
    """One mechanism applied by a release.

    Attributes:
        column: the output column it serves.
        statistic: what was perturbed (``count``, ``sum``, ``sum_squares``, ``histogram``,
            ``quantile``, ``partition selection``).
        mechanism: the mechanism's name.
        scale: the noise scale in the units of the statistic (None for selection mechanisms;
            σ for the discrete Gaussian).
        sensitivity: the sensitivity in the units of the statistic (L2 for the Gaussian).
        epsilon, delta: the budget share it spends (0 for a Gaussian: see ``rho``).
        rank_error: for quantiles, ranks within which the answer lies with probability 1-α.
        rho: the zCDP ρ a discrete Gaussian spends (0 otherwise).
    """

    column: str
    statistic: str
    mechanism: str
    scale: float | None
    sensitivity: float
    epsilon: Fraction
    delta: Fraction = Fraction(0)
    rank_error: float | None = None
    rho: Fraction = Fraction(0)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable description (ε, δ and ρ as floats and exact strings)."""
        return {
            "column": self.column,
            "statistic": self.statistic,
            "mechanism": self.mechanism,
            "scale": self.scale,
            "sensitivity": self.sensitivity,
            "epsilon": float(self.epsilon),
            "epsilon_exact": str(self.epsilon),
            "delta": float(self.delta),
            "rank_error": self.rank_error,
            "rho": float(self.rho),
            "rho_exact": str(self.rho),
        }


def cost_dict(cost: PureDP | ApproxDP | ZCDP) -> dict[str, Any]:
    if isinstance(cost, ZCDP):
        return {"rho": float(cost.rho), "rho_exact": str(cost.rho)}
    delta = cost.delta if isinstance(cost, ApproxDP) else Fraction(0)
    return {
        "epsilon": float(cost.epsilon),
        "delta": float(delta),
        "epsilon_exact": str(cost.epsilon),
        "delta_exact": str(delta),
    }


@dataclass(frozen=True)
class CostEstimate:
    """What a query would cost and how accurate it would be, computed without touching data.

    Attributes:
        cost: the privacy cost that would be charged.
        mechanisms: the mechanisms that would be used.
        ci_halfwidths: per output column, the half-width of the (1-α) interval in the units of the
            value (counts, sums, histogram bins), or None where it depends on the data (means,
            variances: the half-width shrinks with the group size; quantiles: see rank_error).
        alpha: the level of the intervals.
        noise: why the noise family was chosen (empty for a plain Laplace plan).
    """

    cost: PureDP | ApproxDP | ZCDP
    mechanisms: tuple[MechanismUse, ...]
    ci_halfwidths: dict[str, float | None]
    alpha: float
    noise: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form."""
        return {
            "cost": cost_dict(self.cost),
            "mechanisms": [m.to_dict() for m in self.mechanisms],
            "ci_halfwidths": dict(self.ci_halfwidths),
            "alpha": self.alpha,
            "noise": self.noise,
        }


# ----------------------------------------------------------------------------------------------
# Description of a plan (no data)


#: The output kinds computed on values clamped to the output's public bounds.
CLAMPED_KINDS = ("sum", "mean", "variance", "stddev", "quantile")


def output_columns(output: OutputPlan) -> list[ValueColumn]:
    if output.kind != "histogram":
        clamped = output.kind in CLAMPED_KINDS and output.lower is not None
        return [ValueColumn(output.name, output.name, output.kind, clamped=clamped)]
    return [
        ValueColumn(_bin_column(output.name, b), output.name, "histogram", b)
        for b in histogram_bins(output.edges)
    ]


def _bin_column(name: str, bin_: HistogramBin) -> str:
    """``h<34``, ``h[34,67)``, ``h>=67`` (``h[all]`` for one bin, ``h[bin 3]`` when edges
    coincide in floating point)."""
    if bin_.label[0] in "[<>":
        return f"{name}{bin_.label}"
    return f"{name}[{bin_.label}]"


def mechanism_uses(plan: Plan, alpha: float) -> tuple[MechanismUse, ...]:
    """The mechanisms a plan applies, with scales and sensitivities in natural units."""
    uses = []
    for output in plan.outputs:
        for part in output.parts:
            uses.append(_part_use(output.name, part))
        if output.quantile is not None:
            step = output.quantile
            uses.append(
                MechanismUse(
                    output.name,
                    "quantile",
                    step.describe(),
                    None,
                    float(step.rows_per_person),
                    output.epsilon,
                    rank_error=step.rank_error(alpha),
                )
            )
    for clip in plan.clipping:  # the opt-in clipping report (dpcurator.query.plan.clipping)
        uses.append(
            MechanismUse(
                ",".join(clip.outputs),
                "clipping counts (below, within, above)",
                "discrete Laplace",
                float(clip.mechanism.scale),
                float(clip.sensitivity),
                clip.epsilon,
            )
        )
    selection = plan.selection
    if isinstance(selection, PartitionSelection):
        uses.append(
            MechanismUse(
                ",".join(plan.group_columns),
                "partition selection",
                f"discrete Laplace + threshold {selection.threshold}",
                float(selection.laplace.scale),
                float(plan.exact.bound.max_groups),
                selection.epsilon,
                selection.delta,
            )
        )
    elif selection is not None:  # Gaussian thresholding (dpcurator.mechanisms.gaussian_threshold)
        uses.append(
            MechanismUse(
                ",".join(plan.group_columns),
                "partition selection",
                f"discrete Gaussian + threshold {selection.threshold}",
                float(selection.gaussian.sigma),
                math.sqrt(plan.exact.bound.max_groups),
                selection.epsilon,
                selection.delta,
                rho=Fraction(0) if plan.selection_output else selection.rho,
            )
        )
    return tuple(uses)


def _part_use(column: str, part: NoisyStatistic) -> MechanismUse:
    unit = math.ldexp(1.0, part.grid_exponent)
    mechanism = part.mechanism
    if isinstance(mechanism, Laplace):
        scale = float(mechanism.scale) * unit
        return MechanismUse(
            column, part.role, "discrete Laplace", scale, part.sensitivity * unit, part.epsilon
        )
    sigma = float(mechanism.sigma) * unit
    l2 = math.sqrt(part.l2_squared) * unit
    return MechanismUse(
        column, part.role, "discrete Gaussian", sigma, l2, Fraction(0), rho=part.rho
    )


def estimate_plan(plan: Plan, alpha: float) -> CostEstimate:
    """The cost and expected accuracy of a plan, without touching data."""
    halfwidths: dict[str, float | None] = {}
    for output in plan.outputs:
        width: float | None = None
        if output.public_count is not None and output.kind != "mean":
            width = 0.0  # replace-one: the public table size, exact
        elif output.kind in ("count", "count_persons", "sum", "histogram"):
            part = output.parts[0]
            width = halfwidth(part, alpha)
        for column in output_columns(output):
            halfwidths[column.name] = width
    return CostEstimate(
        plan.cost.labelled("cost"), mechanism_uses(plan, alpha), halfwidths, alpha, plan.noise
    )


def halfwidth(part: NoisyStatistic, alpha: float) -> float:
    """The exact (1-α) half-width of the part's discrete noise, in the units of the value."""
    return part.mechanism.ci_halfwidth(alpha) * math.ldexp(1.0, part.grid_exponent)
