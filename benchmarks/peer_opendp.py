"""What the peer scripts (``peer_estimators.py``, ``peer_quantiles.py``; run inside
``.bench-venv``) share: running a peer over every data set of a file, and one OpenDP 0.16
(Polars plugin) statistic of a column over 1,025 candidates evenly spaced between its bounds."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import opendp.prelude as dp
import polars as pl

#: The candidates OpenDP's median and quantile choose among, evenly spaced between the bounds.
CANDIDATES = 1025


def collect(run: Callable[[int], object], reps: int) -> object:
    """``run`` on each data set index, or the peer's refusal as an ``error: ...`` string."""
    try:
        return [run(i) for i in range(reps)]
    except Exception as exc:  # report the peer's refusal instead of crashing the table
        return f"error: {str(exc).strip().splitlines()[0][:120]}"


def opendp_statistic(
    x: np.ndarray, epsilon: float, bounds: tuple[float, float], name: str, *args: float
) -> float:
    """One ε-DP release of OpenDP's ``name`` (``median``, or ``quantile`` with its level in
    ``args``) of the values ``x``, one row per person."""
    dp.enable_features("contrib")
    context = dp.Context.compositor(
        data=pl.LazyFrame({"x": x}),
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=epsilon),
        split_evenly_over=1,
        margins=[dp.polars.Margin(by=[], max_length=x.size)],
    )
    candidates = list(np.linspace(bounds[0], bounds[1], CANDIDATES))
    statistic = getattr(pl.col("x").dp, name)(*args, candidates=candidates)
    query = context.query().select(statistic)
    return float(query.release().collect().item())
