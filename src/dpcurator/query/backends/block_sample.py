"""The engine-side cap of sample-and-aggregate fits (:class:`~dpcurator.query.ir.BlockSample`).

What every backend shares: the plan's check (public inputs only, before any engine work), the
block column's type, the in-memory oracle and DuckDB's SQL. Polars and Spark build the same two
hashes and rank with their own expressions (:mod:`.polars`, :mod:`.spark`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence

from dpcurator._validation import fail
from dpcurator.query.ir import AggregatePlan, BlockSample

#: The engine type of the block column (an int in every backend's type names).
BLOCK_TYPE = "int64"
#: XORed into the seed of the second hash, which orders a block's persons (the first hash, with
#: the seed itself, chooses the block).
SECOND_HASH = 0x5BD1E995


def columns_with_block(plan: AggregatePlan, columns: Mapping[str, str]) -> dict[str, str]:
    """The table's columns as the plan reads them: with the block column when it samples."""
    found = dict(columns)
    if plan.sample is not None:
        found[plan.sample.column] = BLOCK_TYPE
    return found


def check_sample(plan: AggregatePlan, columns: Mapping[str, str]) -> None:
    """Refuse a malformed sample (free, before any engine work): a sample needs persons,
    positive integer sizes and a block column that is not one of the table's."""
    sample = plan.sample
    if sample is None:
        return
    owner = "BlockSample"
    if plan.bound.person_column is None:
        raise fail(owner, "bound", "a person column (blocks are formed by person)", None)
    for name in ("blocks", "per_block"):
        value = getattr(sample, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise fail(owner, name, "an integer >= 1", value)
    if isinstance(sample.seed, bool) or not isinstance(sample.seed, int):
        raise fail(owner, "seed", "an integer", sample.seed)
    if sample.column in columns:
        raise fail(owner, "column", "a name that is not a column of the table", sample.column)


def _hash(seed: int, salt: str, person: object) -> int:
    digest = hashlib.sha256(repr((seed, salt, person)).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def sample_rows(
    rows: Sequence[Mapping[str, object]], sample: BlockSample, person: str
) -> list[dict[str, object]]:
    """The in-memory oracle: the rows of the kept persons, each with its block column."""
    block_of: dict[object, int] = {}
    members: dict[int, list[object]] = {}
    for row in rows:
        pid = row[person]
        if pid is None or pid in block_of:
            continue
        block_of[pid] = _hash(sample.seed, "block", pid) % sample.blocks
        members.setdefault(block_of[pid], []).append(pid)
    kept: set[object] = set()
    for persons in members.values():
        ranked = sorted(persons, key=lambda pid: (_hash(sample.seed, "rank", pid), repr(pid)))
        kept.update(ranked[: sample.per_block])
    return [
        {**row, sample.column: block_of[row[person]]}
        for row in rows
        if row[person] is not None and row[person] in kept
    ]


def duckdb_sample(
    sample: BlockSample, person: str, table: str, literal: Callable[[int], str]
) -> str:
    """DuckDB's sampled relation of ``table`` (quoted) as a parenthesised subquery.

    ``literal`` binds a value as a query parameter (``SqlBuilder.literal``); ``person`` and the
    block column are quoted here.
    """
    pid = '"' + person.replace('"', '""') + '"'
    block = '"' + sample.column.replace('"', '""') + '"'
    seed, blocks = literal(sample.seed), literal(sample.blocks)
    rank_seed = literal(sample.seed ^ SECOND_HASH)
    hashed = (
        f"SELECT *, CAST(hash({pid}, {seed}) % {blocks} AS BIGINT) AS {block},"
        f" hash({pid}, {rank_seed}) AS __dp_sh FROM {table} WHERE {pid} IS NOT NULL"
    )
    window = f"PARTITION BY {block} ORDER BY __dp_sh, {pid}"
    return (
        f"(SELECT * EXCLUDE (__dp_sh) FROM ({hashed})"
        f" QUALIFY DENSE_RANK() OVER ({window}) <= {literal(sample.per_block)})"
    )
