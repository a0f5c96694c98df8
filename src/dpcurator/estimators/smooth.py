"""Smooth sensitivity (Nissim, Raskhodnikova & Smith 2007, "NRS07"): noise scaled to the data.

A function S is a *β-smooth upper bound* on the local sensitivity LS_f if S(x) >= LS_f(x) and
S(x) <= e^β S(x') for all neighbours x, x'. The smooth sensitivity S*(x) = max_k e^{-kβ} A_k(x),
with A_k the largest local sensitivity within distance k of x, is the smallest one; any A'_k with
A'_k(x) >= A_k(x) and A'_k(x) <= A'_{k+1}(x') also gives one (NRS07, Lemma 3.x / Claim 3.2).

**Privacy guarantee** of :func:`smooth_sensitivity_release` (f clamped to public [lower, upper],
S floored at a public S_min, released on a PUBLIC grid g = 2^k chosen from (ε, lower, upper,
S_min), with integer noise of data-dependent scale t = S(x) / (a·g)):

* For neighbours x, x' with noise Z at x, the output round(f(x)/g) + Z has, at each point, the
  ratio P_t(z)/P_t'(z + m) = [P_t(z)/P_t'(z)]·[P_t'(z)/P_t'(z + m)] ("dilate, then slide"), with
  |m| <= (|f(x) - f(x')| + g)/g and |f(x) - f(x')| <= LS(x') <= S(x').
* Pure ε (:mod:`dpcurator.mechanisms.heavy_tailed`, P ∝ 1/(1 + (z/t)^4)): the slide costs
  4|m|/t' <= 4a(1 + g/S_min) = ε/2 and the dilation 8|ln(t/t')| <= 8β = ε/2.
* (ε, δ) (discrete Laplace, :class:`~dpcurator.mechanisms.Laplace`): the slide costs
  |m|/t' <= a(1 + g/S_min) = ε/2; the dilation costs |λ| + (|z|/t)|λ|e^{|λ|} with |λ| <= β, which
  is <= ε/2 except when |z| > t·ln(2/δ), an event of probability < δ under x.
* β and a are reduced by 2^-40 and 2^-61 relative slack to absorb the float evaluation of S and
  the dyadic rounding of t. Total: ε-DP, or (ε, δ)-DP.

The confidence interval must not reveal S(x) (a CI width is observable): ln S has global
sensitivity β, so a share of ε releases ln S with Laplace noise, and its (1 - α/2) upper bound
sets the noise half-width at level α/2 — a (1-α) interval for the clamped f(x) (noise only).

:func:`smooth_median` instantiates it for the median, with the O(n log n) smooth sensitivity of
NRS07 Section 3.1 for replace-one neighbours (n public) and, for add/remove neighbours, the bound
A'_k = x_(m+k+1) - x_(m-k-1) (the median of any data set within k+1 add/removes lies between
those order statistics). :func:`trimmed_mean` instantiates it for the mean of the values
between the floor(trim·n)-th smallest and largest: for replace-one neighbours (n public) with
the same O(n log n) search (:func:`trimmed_mean_smooth_sensitivity`), and for add/remove
neighbours (n private, so the trim count moves too) by A'_k = U_{k+1} - L_{k+1}, the range of the
trimmed means within k + 1 add/removes, each end found by removing the smallest (largest) values
and adding ``upper`` (``lower``) copies (:func:`trimmed_mean_smooth_sensitivity_add_remove`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from dpcurator._validation import check_nonnegative, check_positive, check_probability, fail
from dpcurator.core.measures import ApproxDP, PureDP
from dpcurator.core.numbers import dyadic_up, float_down, to_fraction
from dpcurator.estimators.release import (
    Covers,
    Estimate,
    FloatArray,
    as_float_array,
    check_bounds,
    clamp_fill,
    noisy,
)
from dpcurator.mechanisms import Laplace
from dpcurator.mechanisms._grid import GRID_BITS
from dpcurator.mechanisms.heavy_tailed import heavy_tailed_halfwidth, heavy_tailed_integers
from dpcurator.random import Rng, default_rng

#: Absolute slack subtracted from β for the float evaluation of S (relative error << 2^-40).
_BETA_SLACK = 2.0**-40

#: Default floor of S as a fraction of the public range (upper - lower).
DEFAULT_FLOOR_SHARE = 2.0**-20


def smoothing_parameters(epsilon: float, delta: float) -> tuple[float, float]:
    """(a, β): the noise is S/a and S must be β-smooth (see the module docstring)."""
    if delta == 0:
        return epsilon / 8, epsilon / 16 - _BETA_SLACK
    tail = math.log(2 / delta)
    return epsilon / 2, min(1.0, epsilon / (2 * (1 + math.e * tail))) - _BETA_SLACK


def smooth_sensitivity_release(
    value: float,
    smooth_bound: Callable[[float], float],
    *,
    epsilon: float,
    lower: float,
    upper: float,
    delta: float = 0.0,
    floor: float | None = None,
    alpha: float = 0.05,
    ci_share: float = 0.25,
    method: str = "smooth sensitivity (NRS07)",
    rng: Rng | None = None,
) -> Estimate:
    """Release a statistic ``value`` in [lower, upper] with noise scaled to ``smooth_bound(β)``.

    ``smooth_bound(beta)`` must return a β-smooth upper bound on the local sensitivity of the
    statistic at the data (the caller's obligation; :func:`smooth_median` gives one). Every
    parameter is public and checked first; after that the release is total. ``epsilon`` is the
    total cost, of which ``ci_share`` pays for the confidence interval (0: no interval).
    """
    owner = "smooth_sensitivity_release"
    low, high = check_bounds(owner, lower, upper)
    eps = float(check_positive(owner, "epsilon", epsilon))
    dlt = float(check_probability(owner, "delta", delta, open_high=True))
    share = float(check_probability(owner, "ci_share", ci_share, open_high=True))
    level = float(check_probability(owner, "alpha", alpha, open_low=True, open_high=True))
    s_max = high - low
    s_min = float(check_positive(owner, "floor", floor)) if floor else s_max * DEFAULT_FLOOR_SHARE
    eps_ci = eps * share
    eps_value = float_down(Fraction(eps) - Fraction(eps_ci))
    a0, beta = smoothing_parameters(eps_value, dlt)
    if beta <= _BETA_SLACK:
        raise fail(owner, "epsilon", "large enough for a positive smoothing β", epsilon)
    # Public grid: fine relative to S_min, coarse enough that t = S/(a g) <= 2^52 for S <= S_max.
    k = max(math.floor(math.log2(s_min)) - GRID_BITS, math.ceil(math.log2(4 * s_max / a0)) - 52)
    g = math.ldexp(1.0, k)
    if g > s_min:
        raise fail(owner, "floor", f">= {g} (the noise grid) for this epsilon and range", s_min)
    a = a0 / (1 + g / s_min) * (1 - 2.0**-52)  # the slide pays for rounding f to the grid
    source = rng or default_rng()
    s = max(s_min, float(smooth_bound(beta)))
    if not math.isfinite(s):
        s = s_max  # a bound on every local sensitivity of a statistic clamped to the range
    t = dyadic_up(Fraction(s) / (to_fraction(a) * Fraction(g)), bits=62)
    centre = round((float(np.clip(value, low, high)) - low) / g) if math.isfinite(value) else 0
    if dlt == 0:
        draw = int(heavy_tailed_integers(source, t, 1)[0])
        cost: PureDP | ApproxDP = PureDP(to_fraction(eps))
    else:
        draw = int(Laplace(t).release_integers(np.zeros(1, np.int64), source)[0])
        cost = ApproxDP(to_fraction(eps), to_fraction(dlt))
    top = round(s_max / g)
    units = min(max(centre + draw, 0), top)
    released = min(high, low + units * g)
    if share == 0:
        return Estimate(np.asarray(released), None, None, None, level, cost, method)
    scale_mech = Laplace.for_epsilon_floats(eps_ci, beta + _BETA_SLACK)
    log_s = float(noisy(scale_mech, scale_mech.scale, [math.log(s)], source)[0])
    s_up = math.exp(min(log_s + scale_mech.ci_halfwidth_floats(level / 2), math.log(s_max)))
    t_up = max(s_up, s_min) / (a * g)
    if dlt == 0:
        half_units = heavy_tailed_halfwidth(dyadic_up(Fraction(t_up), bits=62), level / 2)
    else:
        half_units = Laplace(dyadic_up(Fraction(t_up), bits=62)).ci_halfwidth(level / 2)
    half = (half_units + 1) * g  # + one grid step for rounding f(x)
    return Estimate(
        np.asarray(released),
        np.asarray(max(low, released - half)),
        np.asarray(min(high, released + half)),
        Covers.NOISE,
        level,
        cost,
        method,
    )


def _max_decayed_gap(padded: FloatArray, beta: float, last_i: int, first_j: int, gap: int) -> float:
    """max e^{-β(j-i-gap)} (p_j - p_i) over 0 <= i <= last_i, max(first_j, i + gap) <= j <= n+1
    (``padded`` = p_0..p_{n+1} sorted), in O(n log n); needs last_i + gap <= n + 1.

    The best j for each i is monotone in i (NRS07, Section 3.1), so a divide and conquer scans
    j for the middle i of a node and splits the j range at its best j; one recursion level is
    done at a time for all nodes (vectorised), the first maximiser breaking ties.
    """
    last = padded.size - 1
    nodes = np.array([[0, last_i, first_j, last]], dtype=np.int64)
    best = 0.0
    while nodes.size:
        i = (nodes[:, 0] + nodes[:, 1]) // 2
        start = np.maximum(nodes[:, 2], i + gap)
        lengths = nodes[:, 3] - start + 1
        owner = np.repeat(np.arange(len(nodes)), lengths)
        first = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        js = np.arange(int(lengths.sum())) - first[owner] + start[owner]
        scores = np.exp(-beta * (js - i[owner] - gap)) * (padded[js] - padded[i[owner]])
        top = np.maximum.reduceat(scores, first)
        best = max(best, float(top.max()))
        hits = np.flatnonzero(scores == top[owner])
        _, where = np.unique(owner[hits], return_index=True)
        j_star = js[hits[where]]
        left = np.stack([nodes[:, 0], i - 1, nodes[:, 2], j_star], axis=1)
        right = np.stack([i + 1, nodes[:, 1], j_star, nodes[:, 3]], axis=1)
        nodes = np.concatenate([left, right])
        nodes = nodes[nodes[:, 0] <= nodes[:, 1]]
    return best


def median_smooth_sensitivity(
    sorted_values: FloatArray,
    beta: float,
    lower: float,
    upper: float,
    neighbours: Literal["add_remove", "replace"] = "add_remove",
) -> float:
    """A β-smooth upper bound on the local sensitivity of the median x_(m), m = floor(n/2) + 1.

    ``sorted_values`` must be sorted and clamped to [lower, upper]; x_(i) is ``lower`` for i < 1
    and ``upper`` for i > n. For ``"replace"`` this is NRS07's smooth sensitivity
    max_{i <= m <= j, i < j} e^{-β(j-i-1)} (x_(j) - x_(i)), found in O(n log n) by divide and
    conquer over the monotone best j for each i; for ``"add_remove"``, max_k e^{-kβ}
    (x_(m+k+1) - x_(m-k-1)) in O(n).
    """
    n = sorted_values.size
    padded = np.concatenate(([lower], sorted_values, [upper]))
    m = n // 2 + 1
    if neighbours == "add_remove":
        k = np.arange(n + 1)
        gaps = padded[np.minimum(m + k + 1, n + 1)] - padded[np.maximum(m - k - 1, 0)]
        return float(np.max(np.exp(-beta * k) * gaps))
    if n == 0:
        return upper - lower
    return _max_decayed_gap(padded, beta, m, m, 1)


def smooth_median(
    values: object,
    *,
    epsilon: float,
    lower: float,
    upper: float,
    delta: float = 0.0,
    neighbours: Literal["add_remove", "replace"] = "add_remove",
    floor: float | None = None,
    alpha: float = 0.05,
    ci_share: float = 0.25,
    rng: Rng | None = None,
) -> Estimate:
    """The median of ``values`` (one per person, clamped to [lower, upper]; NaN -> the midpoint)
    with smooth-sensitivity noise: ε-DP (heavy-tailed noise) when ``delta`` is 0, else (ε, δ)-DP
    (Laplace), for the chosen ``neighbours`` (``"replace"`` treats n as public).

    >>> from dpcurator.random import SeededRng
    >>> data = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    >>> release = smooth_median(data, epsilon=1e6, lower=0, upper=10, rng=SeededRng(1))
    >>> round(float(release.value), 3)
    4.0
    """
    owner = "smooth_median"
    low, high = check_bounds(owner, lower, upper)
    if neighbours not in ("add_remove", "replace"):
        raise fail(owner, "neighbours", "'add_remove' or 'replace'", neighbours)
    check_nonnegative(owner, "epsilon", epsilon)
    return _release_sorted(
        owner, values, (low, high),
        lambda data: float(data[data.size // 2]) if data.size else (low + high) / 2,
        lambda data, beta: median_smooth_sensitivity(data, beta, low, high, neighbours),
        method=f"smooth-sensitivity median ({neighbours}; NRS07)",
        options={"epsilon": epsilon, "delta": delta, "floor": floor, "alpha": alpha,
                 "ci_share": ci_share, "rng": rng},
    )  # fmt: skip


def _release_sorted(
    owner: str,
    values: object,
    bounds: tuple[float, float],
    statistic: Callable[[FloatArray], float],
    bound: Callable[[FloatArray, float], float],
    *,
    method: str,
    options: dict[str, Any],
) -> Estimate:
    """:func:`smooth_sensitivity_release` of ``statistic`` of the sorted values (clamped to the
    public ``bounds``, NaN -> their midpoint), with the β-smooth bound ``bound(data, β)``."""
    low, high = bounds
    raw = as_float_array(owner, "values", values, ndim=1)
    data = np.sort(clamp_fill(raw, low, high, (low + high) / 2))
    return smooth_sensitivity_release(
        statistic(data), lambda beta: bound(data, beta), lower=low, upper=high, method=method,
        **options,
    )  # fmt: skip


def trimmed_count(n: int, trim: float) -> int:
    """The number t = floor(trim·n) of values trimmed from each side (n and trim public)."""
    return math.floor(trim * n)


def trimmed_mean_smooth_sensitivity(
    sorted_values: FloatArray, beta: float, lower: float, upper: float, trim: float
) -> float:
    """NRS07's β-smooth sensitivity of the trimmed mean for replace-one neighbours (n public).

    With t = floor(trim·n) values trimmed from each side, m = n - 2t, and x_(i) = ``lower`` for
    i < 1 and ``upper`` for i > n: one replacement moves the kept sum by at most
    max(x_(n-t+1) - x_(t+1), x_(n-t) - x_(t)), and k replacements move an order statistic by at
    most k ranks, so A_k = max_{t-k <= i <= t+1} (x_(i+m+k) - x_(i)) / m and
    S* = max_k e^{-kβ} A_k = max_{i <= t+1, j >= max(n-t, i+m)} e^{-β(j-i-m)} (x_(j) - x_(i)) / m,
    found in O(n log n) by the median's divide and conquer.
    """
    n = sorted_values.size
    if n == 0:
        return upper - lower
    t = trimmed_count(n, trim)
    kept = n - 2 * t
    padded = np.concatenate(([lower], sorted_values, [upper]))
    return _max_decayed_gap(padded, beta, t + 1, n - t, kept) / kept


def trimmed_mean(
    values: object,
    *,
    epsilon: float,
    bounds: tuple[float, float],
    trim: float,
    delta: float = 0.0,
    neighbours: Literal["add_remove", "replace"] = "add_remove",
    floor: float | None = None,
    alpha: float = 0.05,
    ci_share: float = 0.25,
    rng: Rng | None = None,
) -> Estimate:
    """The mean of ``values`` (one per person, clamped to the public ``bounds`` = (lower, upper),
    NaN -> their midpoint) after dropping floor(trim·n) values from each side, released with
    smooth-sensitivity noise (:func:`trimmed_mean_smooth_sensitivity`; NRS07): ε-DP with
    heavy-tailed noise when ``delta`` is 0, else (ε, δ)-DP (Laplace), with a (1-α) noise-only
    interval paid by ``ci_share`` of ε. ``neighbours``: ``"add_remove"`` (the default; n is
    private, :func:`trimmed_mean_smooth_sensitivity_add_remove`) or ``"replace"`` (one person's
    value replaced, n public: :func:`trimmed_mean_smooth_sensitivity`).

    >>> from dpcurator.random import SeededRng
    >>> data = [0.0, 2.0, 3.0, 4.0, 100.0]
    >>> release = trimmed_mean(data, epsilon=1e6, bounds=(0, 10), trim=0.2, rng=SeededRng(1))
    >>> round(float(release.value), 3)
    3.0
    """
    owner = "trimmed_mean"
    if not isinstance(bounds, tuple) or len(bounds) != 2:
        raise fail(owner, "bounds", "a (lower, upper) pair", bounds)
    low, high = check_bounds(owner, *bounds)
    share = float(check_probability(owner, "trim", trim, open_high=True))
    if share >= 0.5:
        raise fail(owner, "trim", "in [0, 0.5)", trim)
    if neighbours not in ("add_remove", "replace"):
        raise fail(owner, "neighbours", "'add_remove' or 'replace'", neighbours)
    check_nonnegative(owner, "epsilon", epsilon)
    smooth = (
        trimmed_mean_smooth_sensitivity
        if neighbours == "replace"
        else trimmed_mean_smooth_sensitivity_add_remove
    )
    return _release_sorted(
        owner, values, (low, high), lambda data: _trimmed(data, share, (low + high) / 2),
        lambda data, beta: smooth(data, beta, low, high, share),
        method=f"smooth-sensitivity {share:g}-trimmed mean ({neighbours}; NRS07)",
        options={"epsilon": epsilon, "delta": delta, "floor": floor, "alpha": alpha,
                 "ci_share": ci_share, "rng": rng},
    )  # fmt: skip


def _trimmed(data: FloatArray, trim: float, empty: float) -> float:
    """The mean of sorted ``data`` without floor(trim·n) values per side (``empty`` if n = 0)."""
    t = trimmed_count(data.size, trim)
    kept = data[t : data.size - t]
    return float(np.mean(kept)) if kept.size else empty


#: One side of the add/remove search: sorted data, its cumulative sums from 0, the largest
#: value a data set may hold, and the statistic of the empty data set.
_Side = tuple[FloatArray, FloatArray, float, float]


def _side(data: FloatArray, top: float, empty: float) -> _Side:
    return data, np.concatenate(([0.0], np.cumsum(data))), top, empty


def _largest_trimmed_mean(side: _Side, trim: float, reach: int) -> float:
    """The largest trimmed mean over data sets at add/remove distance exactly ``reach`` from the
    side's sorted data: the trimmed mean is non-decreasing in each value, so the extreme removes
    the r smallest values and adds a = reach - r values at the top (O(reach) with the prefix
    sums)."""
    data, prefix, top, empty = side
    n = data.size
    removed = np.arange(min(reach, n) + 1)
    size = n - removed + (reach - removed)
    cut = np.floor(trim * size).astype(np.int64)
    last = np.minimum(size - cut, n - removed)  # the kept values of data: positions cut+1..last
    start = np.minimum(removed + cut, n)
    sums = np.where(last > cut, prefix[np.maximum(removed + last, start)] - prefix[start], 0.0)
    tops = np.maximum(0, size - cut - np.maximum(n - removed, cut))
    kept = np.maximum(size - 2 * cut, 1)
    means = np.where(size > 0, (sums + tops * top) / kept, empty)
    return float(means.max())


def trimmed_mean_smooth_sensitivity_add_remove(
    sorted_values: FloatArray, beta: float, lower: float, upper: float, trim: float
) -> float:
    """A β-smooth upper bound on the local sensitivity of the trimmed mean (floor(trim·n) values
    dropped on each side, n private) for add/remove neighbours.

    With U_j (L_j) the largest (smallest) trimmed mean of any data set within j add/removes of
    x, A'_k = U_{k+1} - L_{k+1} bounds the local sensitivity at every point within k of x (both
    ends of a neighbouring pair lie within k + 1), and A'_k(x) <= A'_{k+1}(x') for neighbours
    (a ball of radius k + 1 around x lies in the ball of radius k + 2 around x'), so
    max_k e^{-kβ} A'_k is β-smooth (NRS07, Lemma 3.x, as for the median's add/remove bound).
    U_j is found in O(j) (:func:`_largest_trimmed_mean`), L_j likewise on the reflected data;
    the search stops when e^{-kβ}(upper - lower) cannot beat the maximum, at the latest at
    k = n + 1, where U = upper and L = lower.
    """
    middle = (lower + upper) / 2
    ups = _side(sorted_values, upper, middle)
    downs = _side(-sorted_values[::-1], -lower, -middle)  # L_j = -U_j of the reflected data
    high = low = _trimmed(sorted_values, trim, middle)
    best = 0.0
    for k in range(sorted_values.size + 2):
        decay = math.exp(-beta * k)
        if decay * (upper - lower) <= best:
            break
        high = max(high, _largest_trimmed_mean(ups, trim, k + 1))
        low = min(low, -_largest_trimmed_mean(downs, trim, k + 1))
        best = max(best, decay * (high - low))
    return best
