"""The neighbouring relation of a table's guarantee, and what replace-one changes in a plan.

Metadata declare ``neighbouring: add_remove`` (the default: neighbouring tables differ by adding
or removing one person, unbounded DP) or ``replace_one`` with the public table size
``public_size`` = n (neighbouring tables have the same n and differ in one person's rows, bounded
DP; Dwork & Roth 2014 §2.3, Vadhan 2017 §1.6). Decided from the metadata at plan time:

* Replacing one person is removing them and adding another, so every sensitivity under
  replace-one is at most twice its add/remove value (:func:`sensitivity_factor`): a grouped count
  has L1 sensitivity 2 (one row leaves a group, one joins another), a sum 2·max(|L|, |U|) per row.
* The count of the whole table (no WHERE, no GROUP BY) is the public n: released exactly and free
  (:func:`public_count`). It is ``COUNT(*)`` on a table where each person keeps one row (row-level
  with ``max_rows_per_person`` 1, or user-level bounded to one row), ``COUNT(DISTINCT person)``
  on a user-level table.
* The mean of the whole table divides a noisy sum by the public n, so it spends all its share on
  the sum; the sum is centred at the middle of the bounds, where replacing one value x by x'
  changes it by x' − x: sensitivity (U − L) per row, not 2·max(|L|, |U|) (the planner's centred
  sum at twice its add/remove sensitivity is exactly this, up to grid rounding).

Partition selection is refused under replace-one (declare public keys): its guarantee is stated
for adding or removing one person.

The public n is never checked against the data by a query (that would make the answer depend on
the data): ``dpcurator metadata-check`` reports a mismatch to the owner
(:mod:`dpcurator.query.metadata_check`).
"""

from __future__ import annotations

from dpcurator.errors import UnsupportedQueryError
from dpcurator.query.builder import Aggregate
from dpcurator.query.schema import Metadata


def sensitivity_factor(metadata: Metadata) -> int:
    """2 under replace-one (remove one person, add one), else 1."""
    return 2 if metadata.replace_one else 1


def public_count(aggregate: Aggregate, metadata: Metadata, whole_table: bool) -> int | None:
    """The public n when ``aggregate`` counts the whole table under replace-one (free, exact),
    else None. ``whole_table``: the query has no WHERE and no GROUP BY."""
    if not metadata.replace_one or not whole_table or metadata.public_size is None:
        return None
    if aggregate.kind == "count_persons":
        return metadata.public_size
    if aggregate.kind in ("count", "mean") and metadata.max_rows_per_person == 1:
        if aggregate.kind == "count" and aggregate.expr is not None:
            return None  # COUNT(x) skips NULLs: not the table size
        return metadata.public_size
    return None


def check_selection(metadata: Metadata, group_names: list[str]) -> None:
    """Refuse DP partition selection under replace-one (free, at plan time)."""
    if metadata.replace_one:
        raise UnsupportedQueryError(
            f"GROUP BY {', '.join(group_names)} needs public keys on a table declared "
            "neighbouring: replace_one (DP partition selection is stated for adding or removing "
            "one person): declare 'keys' for these columns."
        )
