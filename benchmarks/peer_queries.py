"""Time peer DP libraries on the query benchmark's data (runs inside ``.bench-venv``).

Usage: peer_queries.py DATA.parquet REPEATS — prints one JSON object mapping
"library|query" to the best wall time in seconds (or to an error string).

* OpenDP's Polars plugin (Context API, opendp 0.16): every query on the same Parquet file.
* diffprivlib (IBM): count, sum, mean, median on numpy arrays (no grouping or user-level API).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

import numpy as np
import opendp.prelude as dp
import polars as pl
from diffprivlib import tools as dpl_tools

LOWER, UPPER = 0.0, 100.0
GROUPS = 1000
MAX_GROUPS, MAX_ROWS = 5, 2  # user-level bounds, as in benchmarks/query.py


def best_time(run: Callable[[], object], repeats: int) -> float | str:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        try:
            run()
        except Exception as exc:  # report the peer's refusal instead of crashing the table
            return f"error: {str(exc).strip().splitlines()[0][:120]}"
        best = min(best, time.perf_counter() - start)
    return best


def opendp_queries(path: str) -> dict[str, Callable[[], object]]:
    dp.enable_features("contrib")
    data = pl.scan_parquet(path)
    n = data.select(pl.len()).collect().item()
    keys = pl.LazyFrame({"g": np.arange(GROUPS, dtype=np.int64)})

    def context(identifier: str | None = None) -> dp.Context:
        if identifier is None:
            unit = dp.unit_of(
                contributions=[
                    dp.polars.Bound(per_group=1),
                    dp.polars.Bound(by=["g"], num_groups=1),
                ]
            )
        else:
            unit = dp.unit_of(contributions=1, identifier=identifier)
        return dp.Context.compositor(
            data=data,
            privacy_unit=unit,
            privacy_loss=dp.loss_of(epsilon=1.0),
            split_evenly_over=1,
            margins=[
                dp.polars.Margin(by=[], max_length=n),
                dp.polars.Margin(by=["g"], invariant="keys", max_length=n, max_groups=GROUPS),
            ],
        )

    value = pl.col("value").fill_null(0.0)
    candidates = list(np.linspace(LOWER, UPPER, 1025))

    def bounded(query: dp.polars.LazyFrameQuery) -> dp.polars.LazyFrameQuery:
        return query.filter(pl.int_range(pl.len()).over("uid", "g") < MAX_ROWS).filter(
            pl.col("g").rank("dense").over("uid") <= MAX_GROUPS
        )

    return {
        "count": lambda: context().query().select(dp.len()).release().collect(),
        "sum": lambda: context().query().select(value.dp.sum((LOWER, UPPER))).release().collect(),
        "mean": lambda: context().query().select(value.dp.mean((LOWER, UPPER))).release().collect(),
        "median": lambda: (
            context().query().select(value.dp.median(candidates=candidates)).release().collect()
        ),
        "grouped count": lambda: (
            context()
            .query()
            .group_by("g")
            .agg(dp.len())
            .join(keys, on="g", how="right")
            .release()
            .collect()
        ),
        "grouped sum": lambda: (
            context()
            .query()
            .group_by("g")
            .agg(value.dp.sum((LOWER, UPPER)))
            .join(keys, on="g", how="right")
            .release()
            .collect()
        ),
        "bounded grouped sum": lambda: (
            bounded(context("uid").query())
            .group_by("g")
            .agg(value.dp.sum((LOWER, UPPER)))
            .join(keys, on="g", how="right")
            .release()
            .collect()
        ),
    }


def diffprivlib_queries(path: str) -> dict[str, Callable[[], object]]:
    def column() -> np.ndarray:
        return pl.read_parquet(path, columns=["value"])["value"].to_numpy()

    bounds = (LOWER, UPPER)
    return {
        "count": lambda: dpl_tools.count_nonzero(np.ones(column().size), epsilon=1.0),
        "sum": lambda: dpl_tools.sum(column(), epsilon=1.0, bounds=bounds),
        "mean": lambda: dpl_tools.mean(column(), epsilon=1.0, bounds=bounds),
        "median": lambda: dpl_tools.median(column(), epsilon=1.0, bounds=bounds),
    }


def main() -> None:
    path, repeats = sys.argv[1], int(sys.argv[2])
    results: dict[str, float | str] = {}
    for library, queries in (
        ("OpenDP Polars", opendp_queries(path)),
        ("diffprivlib", diffprivlib_queries(path)),
    ):
        for name, run in queries.items():
            results[f"{library}|{name}"] = best_time(run, repeats)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
