"""Grouped quantile releases are the same, for the same seed, as those of the per-group code they
replaced (issue 26 item 1: the per-group Python work of selection and interval vectorized over
groups, each group's noise still drawn in the same order from the seeded stream).

The expected releases (tests/data/quantile_grouped_golden.json) were recorded with the per-group
code (commit 2afb832) by ``python tests/test_quantile_grouped_golden.py``: continuous and integer
columns (unit bins and two refined levels), groups of 0, 1, a few and many rows, NULL values,
values at the bounds, p in {0, 1/4, 1/2, 0.9, 1}, a large and a small ε, both engines. They were
re-recorded (the vectorized code, after it had matched them) when permute-and-flip's coins moved
to one uniform word each (:meth:`dpcurator.mechanisms.PermuteAndFlip.coins`): the same exact law
(tests/test_mechanisms_statistical.py checks the seeded selection frequencies against it) from
other draws of the stream, so other releases for the same seed. The DuckDB engine's per-bin
counting (GROUP BY group, bin) was checked against the file before that, unchanged. Re-recorded
again when the interval's shells became sized from their counts and tested against walk
thresholds, and the interval's share of ε went from a half to two thirds (issue 28 item 1): the
grouped path runs the same per-group interval code (``RefinedQuantile.finish``); and when the
interval's first shells became sized from a noisy number of values (issue 28 item 1, one more
draw per group), and when the walk thresholds weighted the early tests (the same values, other
interval ends).
"""

from __future__ import annotations

import json
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import dpcurator as dpc
from dpcurator.estimators.quantile_refine import edge_scores
from dpcurator.estimators.quantiles import quantile_scores
from dpcurator.random import SeededRng

GOLDEN = Path(__file__).parent / "data" / "quantile_grouped_golden.json"

#: Groups and their sizes: 0 rows (a declared key without data), 1, a few, many.
SIZES = {0: 0, 1: 1, 2: 3, 3: 7, 4: 40, 5: 400}

QUERIES = {
    "float": "SELECT g, MEDIAN(x) AS a, QUANTILE(x, 0.25) AS b, QUANTILE(x, 0.9) AS c "
    "FROM t GROUP BY g",
    "extremes": "SELECT g, MIN(x) AS a, MAX(x) AS b FROM t GROUP BY g",
    "unit": "SELECT g, MEDIAN(age) AS a, QUANTILE(age, 0.9) AS b FROM t GROUP BY g",
    "wide int": "SELECT g, MEDIAN(big) AS a FROM t GROUP BY g",
}
EPSILONS = (30.0, 0.2)
ENGINES = ("memory", "duckdb")


def _table() -> pa.Table:
    rng = np.random.default_rng(26)
    groups = np.concatenate([np.full(size, key) for key, size in SIZES.items()])
    n = groups.size
    x = np.clip(rng.normal(50.0, 25.0, n), -10.0, 110.0)  # beyond the bounds: clamped
    x[::11] = 0.0  # at the bounds
    x[5::13] = 100.0
    age = rng.integers(0, 121, n).astype(float)
    age[3::9] = 120.0
    big = rng.integers(0, 1_000_000, n).astype(float)
    x_mask = np.zeros(n, dtype=bool)
    x_mask[2::17] = True  # NULLs
    return pa.table(
        {
            "g": pa.array(groups, pa.int64()),
            "x": pa.array(x, mask=x_mask),
            "age": pa.array(age.astype(np.int64), mask=x_mask[::-1].copy()),
            "big": pa.array(big.astype(np.int64)),
        }
    )


def _metadata() -> dpc.Metadata:
    return dpc.Metadata.from_dict(
        {
            "table": "t",
            "columns": {
                "g": {"type": "int", "keys": list(SIZES)},
                "x": {"type": "float", "lower": 0.0, "upper": 100.0, "nullable": True},
                "age": {"type": "int", "lower": 0, "upper": 120, "nullable": True},
                "big": {"type": "int", "lower": 0, "upper": 1_000_000},
            },
        }
    )


def _releases(engine: str, query: str, epsilon: float) -> list[list[float | None]]:
    session = dpc.Session.from_data(
        _table(),
        metadata=_metadata(),
        budget=dpc.Budget(epsilon=1e9),
        engine=engine,
        rng=SeededRng(2026),
    )
    release = session.sql(QUERIES[query], epsilon=epsilon)
    rows = []
    for key in SIZES:
        for column in ("a", "b", "c"):
            if f" AS {column}" in QUERIES[query]:
                estimate = release.value(column, (key,))
                rows.append([float(estimate.value), estimate.ci_low, estimate.ci_high])
    session.close()
    return rows


def _cases() -> list[tuple[str, str, float]]:
    return [(e, q, eps) for e in ENGINES for q in QUERIES for eps in EPSILONS]


@pytest.mark.parametrize(("engine", "query", "epsilon"), _cases())
def test_grouped_quantiles_release_the_recorded_releases(
    engine: str, query: str, epsilon: float
) -> None:
    expected = json.loads(GOLDEN.read_text())[f"{engine} {query} {epsilon}"]
    assert _releases(engine, query, epsilon) == expected


def _edge_reference(counts: list[int], num: int, den: int) -> list[int]:
    """The per-group scores in Python integers (the code before vectorizing)."""
    below = [sum(counts[:i]) for i in range(len(counts) + 1)]
    target = 2 * num * (below[-1] - 1) + den
    return [-min(abs(2 * den * b - target), 2**62) for b in below]


def _centre_reference(counts: list[int], num: int, den: int) -> list[int]:
    target, scores = num * (sum(counts) - 1), []
    for j in range(len(counts)):
        left, right = sum(counts[:j]), sum(counts[: j + 1])
        scores.append(-min(max(den * left - target, target - den * (right - 1), 0), 2**62))
    return scores


def test_scores_of_all_groups_at_once_are_the_exact_integer_scores() -> None:
    """Rows of int64 counts, from empty to totals near 2^63 (where 2·den·L overflows int64),
    scored at once, equal the Python-integer scores of each row alone."""
    rng = np.random.default_rng(5)
    rows = [
        [0, 0, 0, 0, 0],
        [1, 0, 0, 0, 0],
        [0, 0, 0, 0, 1],
        [3, 1, 4, 1, 5],
        [2**40, 7, 2**50, 0, 2**33 + 5],
        [2**61, 2**60, 3, 2**60 - 9, 2**59],
        [2**62 - 1, 0, 2**62 - 1, 0, 1],
        *rng.integers(0, 2**58, (4, 5)).tolist(),
        *rng.integers(0, 50, (4, 5)).tolist(),
    ]
    for num, den in [(1, 2), (1, 4), (9, 10), (0, 1), (1, 1), (1234, 9999)]:
        p = Fraction(num, den)
        edges, _ = edge_scores(np.array(rows, dtype=np.int64), p)
        centres, _ = quantile_scores(np.array(rows, dtype=np.int64), p)
        assert edges.tolist() == [_edge_reference(row, num, den) for row in rows]
        assert centres.tolist() == [_centre_reference(row, num, den) for row in rows]


if __name__ == "__main__":  # record the expected releases
    recorded = {f"{e} {q} {eps}": _releases(e, q, eps) for e, q, eps in _cases()}
    GOLDEN.parent.mkdir(exist_ok=True)
    lines = [f"{json.dumps(name)}: {json.dumps(rows)}" for name, rows in recorded.items()]
    GOLDEN.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    sys.exit(0)
