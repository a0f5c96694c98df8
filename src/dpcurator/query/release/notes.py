"""Public warnings attached to a release (issue 28): decided from the plan and the metadata only.

* **Effectively exact**: when every noise a release adds has a scale below half the values'
  resolution (one grid unit: 1 for counts, 2^k for a sum on the grid 2^k), most released values
  equal the exact ones. The release is still ε-DP for the ε charged, but such an ε protects
  almost nothing; the warning says so. The scales are the plan's, fixed by ε (or ρ), the
  metadata's bounds and the grid, so the warning is a function of public inputs.
* **NULL and NaN**: the engines skip a NULL or NaN value in an aggregate without a fill
  (:mod:`dpcurator.query.backends.base`: it adds nothing to a sum or a histogram; a mean or a
  variance still counts the row, in its centred sum as 0, i.e. as the centre of the column's
  bounds). For a column the metadata declares non-nullable without a ``fill``, that would be
  silent, so the release says how such rows are treated. The note depends on the metadata and
  the query only, never on whether the data holds NULL or NaN (that would be a data-dependent,
  noiseless bit).
"""

from __future__ import annotations

from fractions import Fraction

from dpcurator.mechanisms import Gaussian, Laplace
from dpcurator.query import ir
from dpcurator.query.plan.planner import Plan
from dpcurator.query.schema import Metadata

#: A noise scale (in grid units) below this makes the release effectively exact.
EXACT_SCALE = Fraction(1, 2)

#: The aggregates that read a value (a count of rows does not).
_VALUE_KINDS = ("sum", "sum_squares", "histogram")


def _scale(mechanism: Laplace | Gaussian) -> Fraction:
    """The noise's scale in grid units (Laplace's b, Gaussian's σ)."""
    return mechanism.sigma if isinstance(mechanism, Gaussian) else mechanism.scale


def exactness_warning(plan: Plan) -> tuple[str, ...]:
    """The warning when every noise of ``plan`` is below half a grid unit (module docstring).

    Quantiles (exponential mechanism) and partition selection are not grid noise: a plan with
    a quantile gets no warning (it cannot be called exact by this rule)."""
    if any(output.quantile is not None for output in plan.outputs):
        return ()
    scales = [_scale(part.mechanism) for output in plan.outputs for part in output.parts]
    scales += [_scale(count.mechanism) for count in plan.clipping]
    if not scales or max(scales) >= EXACT_SCALE:
        return ()
    return (
        "the budget is so large that every noise scale is below half the values' resolution "
        "(one unit of a count): most released values equal the exact ones, so this release "
        "protects almost nothing; use a smaller epsilon (or rho) for a meaningful guarantee",
    )


def _columns(node: ir.Expr) -> set[str]:
    """The names of the columns an expression reads."""
    if isinstance(node, ir.Col):
        return {node.name}
    names: set[str] = set()
    for child in ir.children(node):
        names |= _columns(child)
    return names


def missing_value_notes(plan: Plan, metadata: Metadata) -> tuple[str, ...]:
    """One note per non-nullable column without a fill that an aggregate of ``plan`` reads."""
    names: dict[str, None] = {}
    declared = {column.name for column in metadata.columns}
    for aggregate in plan.exact.aggregates:
        if aggregate.kind not in _VALUE_KINDS or aggregate.expr is None:
            continue
        if aggregate.fill is not None:
            continue
        for name in sorted(_columns(aggregate.expr)):
            if name in declared and not metadata.column(name).nullable:
                names[name] = None
    return tuple(
        f"rows whose {name} is NULL or NaN add nothing to sums and histograms of {name}, and "
        f"count in its means and variances as the centre of its public bounds: the metadata "
        f"declares {name} non-nullable and gives no fill (declare a fill to count such rows "
        "as that value)"
        for name in names
    )


__all__ = ["EXACT_SCALE", "exactness_warning", "missing_value_notes"]
