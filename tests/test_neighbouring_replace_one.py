"""Tight replace-one sensitivities (dpcurator.query.privacy_unit; issue 18 §2).

Ungrouped counts have L1 sensitivity m (rows per person), ungrouped sums m·max(U − L, |L|, |U|);
grouped outputs and histograms keep twice the add/remove value. Each case is checked at plan time
(the noise scale) and against the exact aggregates of every pair of replace-one neighbours over
a small domain (the worst pair attains the stated sensitivity, no pair exceeds it).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.mechanisms import Laplace
from dpcurator.query.backends import open_backend
from dpcurator.query.frontend.sql import parse_sql
from dpcurator.query.plan.noise import plan_with_noise
from dpcurator.query.plan.planner import Plan

M = 2  # rows per person
#: x in [L, U]; ``flag`` decides the WHERE; the replaced person is pid 9.
OTHERS = [(1, 3.0, True), (2, 5.0, False), (2, 7.0, True), (3, None, True)]
#: A row of the replaced person: a value at a bound or inside, outside the WHERE, or NULL.
ROW_KINDS = ("low", "high", "inside", "outside", "null")


def _metadata(lower: float, upper: float) -> dpc.Metadata:
    return dpc.Metadata.from_dict(
        {
            "table": "t",
            "person_column": "pid",
            "max_rows_per_person": M,
            "neighbouring": "replace_one",
            "public_size": 4,
            "columns": {
                "pid": {"type": "int"},
                "x": {"type": "int", "lower": lower, "upper": upper, "nullable": True},
                "flag": {"type": "bool"},
                "g": {"type": "string", "keys": ["a", "b"]},
            },
        }
    )


def _row(kind: str, lower: int, upper: int) -> tuple[int | None, bool]:
    value = {"low": lower, "high": upper, "inside": (lower + upper) // 2}
    return (value.get(kind, upper) if kind != "null" else None), kind != "outside"


def _tables(lower: int, upper: int) -> Iterator[pd.DataFrame]:
    """The table for every choice of the replaced person's 1..M rows (and groups)."""
    for size in range(1, M + 1):
        for kinds in itertools.combinations_with_replacement(ROW_KINDS, size):
            for groups in itertools.product("ab", repeat=size):
                rows = [(pid, x, flag, "a") for pid, x, flag in OTHERS]
                for kind, group in zip(kinds, groups, strict=True):
                    rows.append((9, *_row(kind, lower, upper), group))
                yield pd.DataFrame(rows, columns=["pid", "x", "flag", "g"])


def _plan(sql: str, metadata: dpc.Metadata) -> Plan:
    return plan_with_noise(parse_sql(sql, metadata), metadata, epsilon=1, noise="laplace")


def _largest_change(
    plan: Plan, metadata: dpc.Metadata, lower: int, upper: int, power: int = 1
) -> int:
    """The largest L1 change (``power`` 2: squared L2 change) of the plan's one noisy statistic
    over all pairs of neighbours, computed exactly by the reference engine."""
    ((part,),) = [o.parts for o in plan.outputs]
    keys = plan.exact.group_keys or [()]
    vectors: list[list[int]] = []
    for frame in _tables(lower, upper):
        backend = open_backend(
            frame, table="t", engine="memory", column_types=metadata.column_types()
        )
        groups = backend.compute(plan.exact).groups
        vectors.append([int(groups.get(k, {}).get(part.exact, 0)) for k in keys])  # type: ignore[call-overload]
    return max(
        sum(int(abs(a - b) ** power) for a, b in zip(u, v, strict=True))
        for u, v in itertools.combinations(vectors, 2)
    )


CASES = (
    # (query, lower, upper, stated sensitivity): m, m·max(U-L, |L|, |U|), grouped 2x
    ("SELECT COUNT(*) AS c FROM t WHERE flag", 0, 10, M),
    ("SELECT COUNT(x) AS c FROM t", 0, 10, M),
    ("SELECT COUNT(DISTINCT pid) AS c FROM t WHERE flag", 0, 10, 1),
    ("SELECT SUM(x) AS s FROM t WHERE flag", -3, 10, M * 13),  # 0 inside: U - L
    ("SELECT SUM(x) AS s FROM t WHERE flag", 10, 12, M * 12),  # 0 outside: max(|L|, |U|)
    ("SELECT SUM(x) AS s FROM t", -10, -4, M * 10),
    ("SELECT g, COUNT(*) AS c FROM t GROUP BY g", 0, 10, 2 * M),
    ("SELECT g, SUM(x) AS s FROM t GROUP BY g", -3, 10, 2 * M * 10),
)


@pytest.mark.parametrize(("sql", "lower", "upper", "stated"), CASES)
def test_the_stated_sensitivity_is_the_largest_change_over_neighbours(
    sql: str, lower: int, upper: int, stated: int
) -> None:
    metadata = _metadata(lower, upper)
    plan = _plan(sql, metadata)
    ((part,),) = [o.parts for o in plan.outputs]
    assert part.sensitivity == stated
    assert isinstance(part.mechanism, Laplace)
    assert part.mechanism.scale == stated  # discrete Laplace at ε = 1: scale Δ/ε
    assert _largest_change(plan, metadata, lower, upper) == stated


def test_centred_moments_halve_under_replace_one() -> None:
    """VARIANCE's count, centred sum (centre 5) and sum of squares without GROUP BY: m,
    m·(U - L) and m·25; grouped, twice the add/remove values: 2m, 2m·5 and 2m·25."""
    metadata = _metadata(0, 10)
    (output,) = _plan("SELECT VARIANCE(x) AS v FROM t WHERE flag", metadata).outputs
    count, total, squares = (p.sensitivity for p in output.parts)
    assert (count, total) == (M, M * 10)
    grouped = _plan("SELECT g, VARIANCE(x) AS v FROM t WHERE flag GROUP BY g", metadata)
    assert [p.sensitivity for p in grouped.outputs[0].parts] == [2 * M, 2 * M * 5, 2 * squares]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT g, COUNT(*) AS c FROM t GROUP BY g",
        "SELECT g, COUNT(x) AS c FROM t WHERE flag GROUP BY g",
        "SELECT g, COUNT(DISTINCT pid) AS c FROM t GROUP BY g",
    ],
)
def test_grouped_gaussian_counts_have_half_the_doubled_squared_l2(sql: str) -> None:
    """Grouped counts under replace-one: the L1 sensitivity doubles (2·r·g) but the squared L2
    only doubles too (2·g·r², not (2r)²·g): the stated one is the largest squared L2 change of
    the count vector over every pair of neighbours."""
    metadata = _metadata(0, 10)
    plan = plan_with_noise(
        parse_sql(sql, metadata), metadata, epsilon=1, delta=1e-6, noise="gaussian"
    )
    ((part,),) = [o.parts for o in plan.outputs]
    per_group = part.sensitivity // 2  # r rows (1 person) per group, one group per person
    assert part.l2_squared == 2 * per_group**2
    assert _largest_change(plan, metadata, 0, 10, power=2) == part.l2_squared
