"""The public bins of a ``HISTOGRAM(x, lower, upper, bins)`` and their honest labels.

Every engine puts a value in bin ``min(floor((v - lower) / (upper - lower) * bins), bins - 1)``
after clamping it to [lower, upper] (:mod:`dpcurator.query.ir`; the reference is
:func:`~dpcurator.query.backends.grid.bin_index`). Clamping is what keeps the L1 sensitivity of
the whole histogram at r·g (one person moves at most r·g rows, each into exactly one bin), so
out-of-range values are counted, not dropped: values below ``lower`` fall in the first bin and
values at or above the last cut in the last one. The labels say so: the first bin is ``<c1``,
the last ``>=c(b-1)``, the others ``[c(i),c(i+1))`` (one bin: ``all``). NULL and NaN values
are in no bin.

Integer-valued expressions with integer bounds within ±2^53 get integer cuts: c(i) is the
smallest integer the engines put in bin i or later, found with the engines' own formula, so a
label such as ``[34,67)`` names exactly the integers the bin counts (when every bin holds at
least one integer; otherwise the equal-width cuts are shown). The cuts depend only on the query
and the public metadata.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from dpcurator.query import ir
from dpcurator.query.backends.grid import bin_index

#: Integer cuts are used while the bounds stay within ±2^53 (consecutive integers are doubles).
MAX_INTEGER_CUT = 2**53


@dataclass(frozen=True)
class HistogramBin:
    """One released bin: the values it counts are those in [low, high).

    Attributes:
        label: the honest label (``<85``, ``[85,90)``, ``>=90`` or ``all``).
        low: the smallest value counted (-inf for the first bin, which also counts values below
            the histogram's lower bound).
        high: the first value no longer counted (+inf for the last bin, which also counts the
            upper bound and values above it).
    """

    label: str
    low: float
    high: float


def histogram_cuts(aggregate: ir.ExactAggregate, *, integer: bool) -> tuple[float, ...]:
    """The edges of a histogram's bins: ``(lower, c1, ..., c(b-1), upper)``.

    ``c(i)`` is the first value of bin i: the equal-width edge ``lower + i·width``, or, when
    ``integer`` (an integer-valued expression with integer bounds within ±2^53: the planner's
    unit-grid test) and every bin holds an integer, the smallest integer the engines put in
    bin i or later.
    """
    assert aggregate.lower is not None  # a histogram has public bounds
    assert aggregate.upper is not None
    lower, upper, bins = aggregate.lower, aggregate.upper, aggregate.bins
    width = (upper - lower) / bins
    equal = (*(lower + width * i for i in range(bins)), upper)
    if not integer:
        return equal
    cuts = [_first_integer_in(aggregate, i, math.ceil(equal[i])) for i in range(1, bins)]
    edges = (lower, *map(float, cuts), upper)
    if any(a >= b for a, b in itertools.pairwise(edges[:-1])):
        return equal  # some bin holds no integer: its integer label would be empty
    return edges


def _first_integer_in(aggregate: ir.ExactAggregate, index: int, guess: int) -> int:
    """The smallest integer k with ``bin_index(k) >= index`` (bin_index is non-decreasing).

    Starts from ``guess`` (the rounded-up equal-width edge, off by a few at most from float
    rounding) and gallops outwards, then bisects: bounded work whatever the rounding.
    """
    step = 1
    low, high = guess - 1, guess  # invariant sought: bin(low) < index <= bin(high)
    while bin_index(aggregate, float(high)) < index:
        low, high, step = high, high + step, step * 2
    while bin_index(aggregate, float(low)) >= index:
        low, high, step = low - step, low, step * 2
    while high - low > 1:
        middle = (low + high) // 2
        if bin_index(aggregate, float(middle)) >= index:
            high = middle
        else:
            low = middle
    return high


def histogram_bins(edges: Sequence[float]) -> tuple[HistogramBin, ...]:
    """The bins of a histogram with ``edges`` (see :func:`histogram_cuts`), honestly labelled.

    The first bin is open below and the last open above (clamping puts out-of-range values
    there). Numbers are printed with the fewest significant digits (6 at least) that keep
    the labels distinct; bins whose edges coincide in floating point are labelled ``bin i``.
    """
    count = len(edges) - 1
    if count == 1:
        return (HistogramBin("all", -math.inf, math.inf),)
    lows = (-math.inf, *edges[1:-1])
    highs = (*edges[1:-1], math.inf)
    for digits in range(6, 18):
        labels = [_label(low, high, digits) for low, high in zip(lows, highs, strict=True)]
        if len(set(labels)) == count:
            break
    else:
        labels = [f"bin {i}" for i in range(count)]
    return tuple(map(HistogramBin, labels, lows, highs))


def _label(low: float, high: float, digits: int) -> str:
    if low == -math.inf:
        return f"<{_number(high, digits)}"
    if high == math.inf:
        return f">={_number(low, digits)}"
    return f"[{_number(low, digits)},{_number(high, digits)})"


def _number(value: float, digits: int) -> str:
    """Integers as integers (``1000000``, not ``1e+06``), others with ``digits`` digits."""
    if value.is_integer() and abs(value) <= MAX_INTEGER_CUT:
        return str(int(value))
    return f"{value:.{digits}g}"
