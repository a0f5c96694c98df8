"""Design of the Buffered Linear Toeplitz factorizations of :mod:`dpcurator.streams.toeplitz`.

Run ``python benchmarks/streams_blt_design.py > table.txt`` to regenerate ``BLT_TABLE``: for each
design horizon T = 2^e, the d buffers (decay θ_i = exp(-λ_i), weight ω_i) of the lower-triangular
Toeplitz C with c_0 = 1, c_k = Σ_i ω_i θ_i^(k-1), minimising the worst-step variance factor
max_t ‖B_t‖² · max_j ‖C_j‖² of A = B C (A the T × T prefix-sum matrix), as in Dvijotham,
McMahan, Pillutla, Steinke & Thakurta (2024). Both norms are the closed forms of
:mod:`dpcurator.streams.toeplitz` (O(d³ log T) per evaluation), minimised by L-BFGS, Nelder-Mead
and L-BFGS again from a geometric spread of the decays, warm-started from the previous horizon. The
``anytime`` row minimises instead the largest ratio, over t = 2^4, 2^8, ... 2^36, of the
variance factor at t (with the column norm of the whole anytime range) to the square-root
factorization's at t.

The table only chooses parameters: the privacy of a stream rests on the exact sensitivity bound
computed from whatever parameters it is given (``toeplitz.column_norm_squared_bound``).
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy.optimize import minimize

from dpcurator.streams.toeplitz import (
    column_norm_squared,
    row_norm_squared,
    sqrt_factor_norm_squared,
)

ANYTIME_CHECKPOINTS = [2**e for e in range(4, 37, 4)]


def _unpack(p: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray] | None:
    if not np.all(np.isfinite(p)) or np.any(np.abs(p) > 60):
        return None
    return np.exp(p[:d]), np.exp(p[d:])


def _worst(p: np.ndarray, horizon: int, d: int) -> float:
    parts = _unpack(p, d)
    if parts is None:
        return math.inf
    lam, om = parts
    value = column_norm_squared(lam, om, horizon) * row_norm_squared(np.exp(-lam), om, horizon)
    return math.log(value) if np.isfinite(value) and value > 0 else math.inf


def _anytime(p: np.ndarray, limit: int, d: int) -> float:
    parts = _unpack(p, d)
    if parts is None:
        return math.inf
    lam, om = parts
    column = column_norm_squared(lam, om, limit)
    ratios = [
        column * row_norm_squared(np.exp(-lam), om, t) / sqrt_factor_norm_squared(t) ** 2
        for t in ANYTIME_CHECKPOINTS
    ]
    worst = max(ratios)
    return math.log(worst) if np.isfinite(worst) and worst > 0 else math.inf


def _fit(objective, x0: np.ndarray, args: tuple[int, int]) -> np.ndarray:
    x = x0
    for method in ("L-BFGS-B", "Nelder-Mead", "L-BFGS-B"):
        options = (
            {"maxiter": 3000, "xatol": 1e-8, "fatol": 1e-12} if method == "Nelder-Mead" else {}
        )
        result = minimize(objective, x, args=args, method=method, options=options)
        if result.fun <= objective(x, *args):
            x = result.x
    return x


def _start(horizon: int, d: int) -> np.ndarray:
    lam = np.geomspace(2.0 / horizon, 1.0, d)
    return np.concatenate((np.log(lam), np.log(0.5 * np.sqrt(lam))))


def buffers(exponent: int) -> int:
    """Buffers for horizon 2^exponent: one per three doublings, at least 2, at most 8."""
    return min(8, max(2, math.ceil(exponent / 3)))


def _warm(previous: np.ndarray | None, horizon: int, d: int, gap: int) -> np.ndarray:
    """The previous horizon's optimum with its decays scaled to the new horizon (a new slow
    buffer when d grows)."""
    if previous is None:
        return _start(horizon, d)
    old = previous.size // 2
    lam, om = previous[:old] - math.log(2) * gap, previous[old:]
    if d > old:
        lam = np.concatenate(([math.log(1.0 / horizon)], lam))
        om = np.concatenate(([om.min() - math.log(2)], om))
    return np.concatenate((lam, om))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--exponents", type=int, nargs="*", default=list(range(1, 37)))
    parser.add_argument("--no-anytime", action="store_true")
    args = parser.parse_args()
    print("BLT_TABLE: dict[int, tuple[tuple[float, ...], tuple[float, ...]]] = {")
    previous, last = None, 0
    for exponent in args.exponents:
        horizon, d = 2**exponent, buffers(exponent)
        x = _fit(_worst, _warm(previous, horizon, d, exponent - last), (horizon, d))
        previous, last = x, exponent
        lam, om = np.exp(x[:d]), np.exp(x[d:])
        order = np.argsort(lam)
        factor = math.exp(_worst(x, horizon, d))
        print(
            f"    {exponent}: (  # factor {factor:.4f}, "
            f"sqrt {sqrt_factor_norm_squared(horizon) ** 2:.4f}"
        )
        print(f"        {tuple(float(v) for v in lam[order])!r},")
        print(f"        {tuple(float(v) for v in om[order])!r},")
        print("    ),")
    print("}")
    if args.no_anytime:
        return
    limit, d = 2**36, 8
    x = _fit(_anytime, _start(limit, d), (limit, d))
    lam, om = np.exp(x[:d]), np.exp(x[d:])
    order = np.argsort(lam)
    print(f"ANYTIME = (  # worst ratio to sqrt {math.exp(_anytime(x, limit, d)):.4f}")
    print(f"    {tuple(float(v) for v in lam[order])!r},")
    print(f"    {tuple(float(v) for v in om[order])!r},")
    print(")")


if __name__ == "__main__":
    main()
