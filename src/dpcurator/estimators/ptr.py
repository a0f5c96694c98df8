"""Propose-test-release (Dwork & Lei 2009, "DL09"; Dwork & Smith 2009, Section 3.2).

Propose a bound, test privately whether the data are far from violating it, then release with
noise calibrated to the bound or answer NR ("no reply"). The test statistic is a *distance to
instability* D(x): a non-negative integer with |D(x) - D(x')| <= 1 for neighbours (add/remove one
person) such that D(x) >= 1 (resp. >= 2 for a stable cell, see below) whenever the bound holds
at x and at all its neighbours.

**The test** (:func:`ptr_test`, ε-DP): pass iff D + Z > T with Z discrete Laplace of scale 1/ε
and T = ceil(ln(1/δ)/ε), so that P[pass] <= P[Z >= T] <= δ when D <= 1.

**Releases** (both (ε_test + ε_release, δ)-DP by the standard PTR argument: where the bound
holds on x and x' the test bit is ε_test-DP and the noisy value ε_release-DP; where it fails,
passing has probability <= δ):

* :func:`ptr_laplace`: a value of local sensitivity <= B on {D >= 1} plus Laplace(B/ε_release).
* :func:`ptr_stable_cell`: the index of the public cell holding the statistic, with no noise at
  all; D(x) is the smallest k whose "range at distance k" leaves the cell. Neighbours in
  different cells both have D = 1, so passing has probability <= δ.

Composition (DL09): *cascading* (retry with a shifted cell grid on NR) and *subroutine calls*
(the scale from :func:`ptr_iqr` proposes the bound of :func:`ptr_median`) add their costs; the
release's cost is the sum of everything run. *Parallel* runs on the disjoint subsets of a public
partition cost the largest of their costs, not the sum (:func:`ptr_parallel`).

The ranges used by the instances rest on one fact: the order statistic of rank floor(p·n) + 1
of a data set within k add/removes of x lies between x_(r-k) and x_(r+k) (x_(i) padded with the
public bounds), and range_k(x') ⊆ range_{k+1}(x) for neighbours, which makes D 1-Lipschitz.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_positive, check_probability, fail
from dpcurator.core.measures import ApproxDP, PureDP
from dpcurator.core.numbers import float_down, to_fraction
from dpcurator.estimators.release import (
    Cost,
    Covers,
    Estimate,
    FloatArray,
    as_float_array,
    check_bounds,
    clamp_fill,
    no_reply,
    noisy,
)
from dpcurator.mechanisms import Laplace
from dpcurator.random import Rng, default_rng


def ptr_threshold(epsilon: float, delta: float) -> int:
    """T = ceil(ln(1/δ)/ε) + 1: P[Z >= T - 1] <= δ for discrete Laplace noise of scale 1/ε."""
    return math.ceil(math.log(1 / delta) / epsilon) + 1


def ptr_test(distance: int, epsilon: float, delta: float, rng: Rng) -> bool:
    """The DP test: does D + Z exceed T? (ε-DP for a 1-Lipschitz distance D.)"""
    noised = Laplace.for_epsilon(to_fraction(epsilon), 1).release_integers([distance], rng)
    return int(noised[0]) > ptr_threshold(epsilon, delta)


def first_exit(lows: FloatArray, highs: FloatArray, cell_low: float, cell_high: float) -> int:
    """The smallest k with [lows[k], highs[k]] not inside [cell_low, cell_high); len() if none."""
    out = np.flatnonzero((lows < cell_low) | (highs >= cell_high))
    return int(out[0]) if out.size else int(lows.size)


def order_ranges(padded: FloatArray, rank: int, count: int) -> tuple[FloatArray, FloatArray]:
    """x_(rank-k) and x_(rank+k) for k = 0..count-1 from the bound-padded sorted data."""
    k = np.arange(count)
    top = padded.size - 1
    return padded[np.clip(rank - k, 0, top)], padded[np.clip(rank + k, 0, top)]


def ptr_laplace(
    value: float,
    bound: float,
    distance: int,
    *,
    epsilon_test: float,
    epsilon_release: float,
    delta: float,
    alpha: float,
    method: str,
    rng: Rng,
    centre: float = 0.0,
) -> Estimate:
    """Release ``value`` + Laplace(bound/ε_release) if the test on ``distance`` passes, else NR
    (``centre``: a public value near ``value``, see :func:`~dpcurator.estimators.release.noisy`)."""
    cost = ApproxDP(to_fraction(epsilon_test) + to_fraction(epsilon_release), to_fraction(delta))
    if not ptr_test(distance, epsilon_test, delta, rng):
        return no_reply(cost, method, alpha)
    mech = Laplace.for_epsilon_floats(to_fraction(epsilon_release), to_fraction(bound))
    released = noisy(mech, mech.scale, [value], rng, centre)
    half = mech.ci_halfwidth_floats(alpha)
    return Estimate(
        released.reshape(()), released.reshape(()) - half, released.reshape(()) + half,
        Covers.NOISE, alpha, cost, method,
    )  # fmt: skip


def _prepare(
    owner: str, values: object, lower: float, upper: float
) -> tuple[FloatArray, float, float]:
    low, high = check_bounds(owner, lower, upper)
    data = np.sort(clamp_fill(as_float_array(owner, "values", values, ndim=1), low, high, low))
    return np.concatenate(([low], data, [high])), low, high


def ptr_iqr(
    values: object,
    *,
    epsilon: float,
    delta: float,
    lower: float,
    upper: float,
    ratio: float = 1.2,
    floor: float | None = None,
    alpha: float = 0.05,
    rng: Rng | None = None,
) -> Estimate:
    """The Dwork-Lei scale: the interquartile range x_(r3) - x_(r1) (r = floor(p·n) + 1), located
    in a public geometric cell [ζ·ratio^(j+o), ζ·ratio^(j+o+1)) by :func:`ptr_stable_cell`
    reasoning; tried with offset o = 0 and, on NR, o = 1/2 (cascading, ε/2 and δ/2 each).

    (ε, δ)-DP (add/remove one value; NaN counts as ``lower``). On a reply the cell contains the
    data's IQR with certainty, so it is the interval (noise only); the value is the cell's
    geometric midpoint. Cells below ζ (default (upper-lower)·2^-20) merge into one, [0, ζ·ratio^o).
    """
    owner = "ptr_iqr"
    padded, low, high = _prepare(owner, values, lower, upper)
    eps = float(check_positive(owner, "epsilon", epsilon))
    dlt = float(check_probability(owner, "delta", delta, open_low=True, open_high=True))
    base = float(check_positive(owner, "ratio", ratio))
    if base <= 1:
        raise fail(owner, "ratio", "> 1", ratio)
    zeta = float(check_positive(owner, "floor", floor)) if floor else (high - low) * 2.0**-20
    source = rng or default_rng()
    n = padded.size - 2
    lo1, hi1 = order_ranges(padded, n // 4 + 1, n + 2)
    lo3, hi3 = order_ranges(padded, (3 * n) // 4 + 1, n + 2)
    lows, highs = lo3 - hi1, hi3 - lo1
    iqr = float(highs[0])
    cost = ApproxDP(to_fraction(eps), to_fraction(dlt))  # both tries are budgeted: a public cost
    half_eps, half_delta = float_down(Fraction(eps) / 2), dlt / 2
    for offset in (0.0, 0.5):
        if iqr < zeta * base**offset:
            j, cell = -1, (-math.inf, zeta * base**offset)
        else:
            j = math.floor(math.log(iqr / zeta, base) - offset)
            j += int(zeta * base ** (j + 1 + offset) <= iqr)  # float log: fix the edge cases
            j -= int(zeta * base ** (j + offset) > iqr)
            cell = (zeta * base ** (j + offset), zeta * base ** (j + 1 + offset))
        if ptr_test(first_exit(lows, highs, *cell), half_eps, half_delta, source):
            edge_low = max(cell[0], 0.0)
            middle = math.sqrt(edge_low * cell[1]) if j >= 0 else 0.0
            return Estimate(
                np.asarray(middle), np.asarray(edge_low), np.asarray(min(cell[1], high - low)),
                Covers.NOISE, float(alpha), cost, "Dwork-Lei IQR (propose-test-release)",
            )  # fmt: skip
    return no_reply(cost, "Dwork-Lei IQR (propose-test-release)", float(alpha))


def ptr_median(
    values: object,
    *,
    epsilon: float,
    delta: float,
    lower: float,
    upper: float,
    scale: float | None = None,
    alpha: float = 0.05,
    rng: Rng | None = None,
) -> Estimate:
    """The Dwork-Lei location: the median x_(floor(n/2)+1) by :func:`ptr_laplace`.

    The proposed bound is B = scale·6(T + 1)/ñ, the typical gap of T + 1 order statistics around
    the median for data of that scale (ñ a Laplace count, ε/10 of the budget; T the test
    threshold). Without a public ``scale`` it is first estimated by :func:`ptr_iqr` with half of
    (ε, δ) (a subroutine call; its NR is this release's NR). D = min{k : x_(m+k+1) - x_(m-k-1) >
    B}, 1-Lipschitz by the range inclusion of the module docstring. (ε, δ)-DP in total; the
    interval covers the data's (clamped) median against the noise.
    """
    owner = "ptr_median"
    padded, low, high = _prepare(owner, values, lower, upper)
    eps = float(check_positive(owner, "epsilon", epsilon))
    dlt = float(check_probability(owner, "delta", delta, open_low=True, open_high=True))
    level = float(check_probability(owner, "alpha", alpha, open_low=True, open_high=True))
    source = rng or default_rng()
    method = "Dwork-Lei median (propose-test-release)"
    spent = ApproxDP(0, 0)
    if scale is None:
        half = float_down(Fraction(eps) / 2)
        found = ptr_iqr(values, epsilon=half, delta=dlt / 2, lower=low, upper=high, rng=source)
        spent = ApproxDP(to_fraction(half), to_fraction(dlt / 2))  # what ptr_iqr charges
        eps, dlt = float_down(Fraction(eps) - Fraction(half)), dlt / 2
        if found.value is None:
            return no_reply(spent + ApproxDP(to_fraction(eps), to_fraction(dlt)), method, level)
        proposal = max(float(found.value), (high - low) * 2.0**-20)
    else:
        proposal = float(check_positive(owner, "scale", scale))
    eps_count = eps / 10
    eps_test = float_down((Fraction(eps) - Fraction(eps_count)) / 2)
    eps_release = float_down(Fraction(eps) - Fraction(eps_count) - Fraction(eps_test))
    n = padded.size - 2
    counted = Laplace.for_epsilon(to_fraction(eps_count), 1).release_integers([n], source)
    threshold = ptr_threshold(eps_test, dlt)
    bound = min(high - low, proposal * 6 * (threshold + 1) / max(int(counted[0]), 1))
    lows, highs = order_ranges(padded, n // 2 + 1, n + 2)
    widths = highs[1:] - lows[1:]  # x_(m+k+1) - x_(m-k-1), k = 0..n
    distance = first_exit(widths, widths, -math.inf, bound)
    released = ptr_laplace(
        float(padded[n // 2 + 1]), bound, distance, epsilon_test=eps_test,
        epsilon_release=eps_release, delta=dlt, alpha=level, method=method, rng=source,
        centre=(low + high) / 2,
    )  # fmt: skip
    total = spent + ApproxDP(to_fraction(eps), to_fraction(dlt))
    return Estimate(
        released.value, released.ci_low, released.ci_high, released.covers, level, total, method
    )


def parallel_cost(costs: Sequence[Cost]) -> ApproxDP:
    """The cost of releases on disjoint subsets: (max ε, max δ) (parallel composition; McSherry
    2009, DL09). Pure ε counts as (ε, 0); zCDP costs are refused (give (ε, δ) ones)."""
    approx = []
    for cost in costs:
        if not isinstance(cost, PureDP | ApproxDP):
            raise fail("parallel_cost", "costs", "PureDP or ApproxDP costs", cost)
        approx.append(cost.to_approx())
    return ApproxDP(
        max((c.epsilon for c in approx), default=0), max((c.delta for c in approx), default=0)
    )


def ptr_parallel(
    labels: object,
    keys: Sequence[Hashable],
    release: Callable[[Hashable, npt.NDArray[np.bool_]], Estimate],
) -> tuple[dict[Hashable, Estimate], ApproxDP]:
    """Run ``release`` on the rows of each public key (``release(key, mask)``, mask: the rows
    whose label equals the key)
    and return each key's release (NR included) with the parallel cost (:func:`parallel_cost`).

    **Guarantee**: if each release is (ε_g, δ_g)-DP in its subset, the whole is (max ε_g,
    max δ_g)-DP, because adding or removing one person changes one subset only. This holds when
    the partition is public: the ``keys`` are given by the analyst (every key gets a release,
    an empty subset included, so the released keys do not depend on the data; rows with another
    label are dropped) and all rows of one person carry the same label.
    """
    owner = "ptr_parallel"
    groups = list(keys)
    if len(set(groups)) != len(groups):
        raise fail(owner, "keys", "distinct public keys", keys)
    raw = labels.to_numpy() if hasattr(labels, "to_numpy") else labels
    column = np.asarray(raw, dtype=object)
    if column.ndim != 1:
        raise fail(owner, "labels", "one label per row (1-dimensional)", column.shape)
    masks = {key: np.fromiter((v == key for v in column), np.bool_, column.size) for key in groups}
    out = {key: release(key, mask) for key, mask in masks.items()}
    return out, parallel_cost([estimate.cost for estimate in out.values()])
