"""The budget split of one query: shares that minimise the total relative variance.

Every statistic of a query gets discrete Laplace noise of scale Δ/ε_j, whose variance is about
2Δ²/ε_j². A query's released values are functions of several noisy statistics, so (first order,
the delta method) the variance of each released value v_i is Σ_j c_ij / ε_j² for public
coefficients c_ij, and minimising Σ_j c_j / ε_j² subject to Σ_j ε_j = ε gives ε_j ∝ c_j^(1/3)
(Lagrange multipliers). The coefficients below are normalised by the squared public scale of each
value, so the rule minimises the total RELATIVE variance; n (the table or group size) is a common
factor 1/n² of every coefficient at first order and drops out, so no size need be assumed.

* A count, a sum (relative to n·max(|L|, |U|)), a histogram bin and a quantile (no variance: it
  counts as one count) have coefficient (r·g)²: weight 1.
* A distinct-person count has sensitivity g instead of r·g: weight (g / r·g)^(2/3).
* A mean c + S/N of values centred at c, in [l, u] = [L - c, U - c], h = max(|l|, |u|):
  Var ≈ (2/N²)(Δ_S²/ε_S² + m²·Δ_N²/ε_N²) with the unknown centred mean m. Its public stand-in is
  m² = q·h², q = (l² + l·u + u²) / (3h²), the mean square of m uniform over [l, u] (q = 1/3 for
  symmetric bounds). Relative to h: coefficients 1 (sum) and q (count), so the sum gets
  1 / (1 + q^(1/3)) of the share (59% for symmetric bounds, instead of 50%), and the mean's weight
  is 1 + q^(1/3).
* A variance V = SS/N - S²/N² (relative to h²): coefficients 1 (SS), 4q (S: 2m/N) and (1 - 2q)²
  (N: (2m² - m₂)/N with the stand-ins m² = q·h², m₂ = h², the widest case); a standard deviation
  divides by 4V with V = m₂ - m² = (1 - q)h². Shares below 1% of the largest are raised to it.

Weights are rounded to 4 decimals (exact Fractions), so shares are exact and sum to ε exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

#: Inner weights below this fraction of the largest are raised to it (no statistic gets ~0).
MIN_RELATIVE_WEIGHT = 0.01


def _rational(weight: float) -> Fraction:
    return Fraction(max(round(weight * 10_000), 1), 10_000)


def reference_ratio(lower: float, upper: float, centre: float) -> float:
    """q = m² / h²: the mean square of a centred mean uniform over [L - c, U - c] over the
    squared largest centred bound (1/3 when the bounds are symmetric about the centre)."""
    low, high = lower - centre, upper - centre
    largest = max(abs(low), abs(high))
    if not largest > 0 or not math.isfinite(largest):
        return 1 / 3
    low, high = low / largest, high / largest
    return (low * low + low * high + high * high) / 3


def _floored(weights: Sequence[float]) -> tuple[float, ...]:
    largest = max(weights)
    return tuple(max(w, MIN_RELATIVE_WEIGHT * largest) for w in weights)


def moment_weights(kind: str, q: float) -> tuple[Fraction, ...]:
    """The inner weights of a mean (count, sum) or a variance/stddev (count, sum, sum of
    squares): the cube roots of their relative variance coefficients (module docstring)."""
    if kind == "mean":
        raw: tuple[float, ...] = (q ** (1 / 3), 1.0)
    else:
        raw = (abs(1 - 2 * q) ** (2 / 3), (4 * q) ** (1 / 3), 1.0)
    return tuple(_rational(w) for w in _floored(raw))


def output_weight(kind: str, q: float, persons_ratio: float) -> Fraction:
    """The weight of one output among the query's aggregates: the cube root of its relative
    variance coefficient at its optimal inner split (``persons_ratio`` = g / r·g)."""
    if kind in ("mean", "variance", "stddev"):
        inner = moment_weights(kind, q)
        total = float(sum(inner, Fraction(0))) / float(inner[-1])
        if kind == "stddev":
            total /= (4 * max(1 - q, MIN_RELATIVE_WEIGHT)) ** (1 / 3)
        return _rational(total)
    if kind == "count_persons":
        return _rational(persons_ratio ** (2 / 3))
    return Fraction(1)


def split(epsilon: Fraction, weights: Sequence[Fraction]) -> list[Fraction]:
    """``epsilon`` divided in proportion to ``weights`` (exact; the shares sum to ``epsilon``)."""
    total = sum(weights, Fraction(0))
    return [epsilon * w / total for w in weights]
