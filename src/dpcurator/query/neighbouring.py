"""The neighbouring relation of a table's guarantee, and what replace-one changes in a plan.

Metadata declare ``neighbouring: add_remove`` (the default: neighbouring tables differ by adding
or removing one person, unbounded DP) or ``replace_one`` with the public table size
``public_size`` = n (neighbouring tables have the same n and differ in one person's rows, bounded
DP; Dwork & Roth 2014 §2.3, Vadhan 2017 §1.6). Decided from the metadata at plan time.

**Sensitivities under replace-one.** One person P, with at most m = ``max_rows_per_person`` rows
(after contribution bounding, which acts on each person's rows alone), is replaced by a person P'
with at most m rows; every other row is the same in both tables. Write each row's contribution to
a statistic as a function of that row alone, and pair P's rows with P''s (padding the shorter
list with absent rows, which contribute nothing).

* *Ungrouped count* (COUNT(*), COUNT(x), with any WHERE): the change is (rows of P' that count)
  − (rows of P that count), a difference of two integers in [0, m]: |c − c'| <= m. Attained by
  m counted rows replaced by none counted (a row outside the WHERE, or a NULL x).
  A distinct-person count likewise changes by at most 1 (:func:`count_factor` is 1).
* *Ungrouped sum* of values clamped to [L, U] (in grid units: rounding is monotone, so a row's
  value lies in [round(L), round(U)]): each pair contributes x' − x. When both rows count, the
  difference is at most U − L; when one counts (the other is absent, outside the WHERE or NULL
  without a fill) it is at most max(|L|, |U|); when neither counts, 0. So
  |S − S'| <= m·max(U − L, |L|, |U|) (:func:`replace_one_row_change`), attained by m pairs of the
  worst kind: L against U when 0 lies in [L, U] (then U − L >= max(|L|, |U|)), else the bound of
  larger magnitude against an absent row. A centred sum (values x − c, c in [L, U], as means and
  variances sum) is the same with [L − c, U − c]; the sum of squares of centred values with
  [0, max((L − c)², (U − c)²)]. This is at most the 2m·max(|L|, |U|) of removing P and adding
  P' (equal only when L = −U), and half of it for the centred sums (U − L against 2(U − L)).
* *Grouped outputs and histograms* (vectors): P may leave groups (bins) and P' enter others, so
  the L1 change over the groups is at most the removal's plus the addition's: twice the
  add/remove sensitivity (:func:`sensitivity_factor`), and this is attained (disjoint groups).
  Quantiles, which select from a histogram, keep the factor too.
* *Grouped counts with Gaussian noise* (squared L2, :func:`dpcurator.query.noise.l2_squared`):
  write c and c' for the count vectors of P's and P''s rows over the groups; the table's
  vector changes by v = c' − c. Counts are non-negative, so in each group
  v_k² <= max(c_k, c'_k)² <= c_k² + c'_k², and ‖v‖² <= ‖c‖² + ‖c'‖² <= 2·g·r², where g·r² bounds
  the squared L2 norm of one person's count vector (at most g groups, at most r in each, as
  under add/remove). Doubling the L1 sensitivity and squaring per group would give 4·g·r²; the
  bound 2·g·r² is attained (P's r rows in each of g groups, P''s in g others, given 2g
  groups). A sum's rows may have either sign (v_k can be r(U − L), where c_k² + c'_k² is only
  2r²U² for L = −U), so sums keep the doubled per-group value.

The count of the whole table (no WHERE, no GROUP BY) is the public n: released exactly and free
(:func:`public_count`). It is ``COUNT(*)`` on a table where each person keeps one row (row-level
with ``max_rows_per_person`` 1, or user-level bounded to one row), ``COUNT(DISTINCT person)`` on
a user-level table. The mean of the whole table divides a noisy sum by the public n, so it spends
all its share on the sum; the sum is centred at the middle of the bounds, where replacing one
value x by x' changes it by x' − x: sensitivity m·(U − L) by the rule above.

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
    """The factor of a grouped output's or a histogram's sensitivity: 2 under replace-one
    (P leaves some groups, P' joins others), else 1."""
    return 2 if metadata.replace_one else 1


def count_factor(metadata: Metadata, grouped: bool) -> int:
    """The factor of a count's sensitivity: :func:`sensitivity_factor` for a grouped count, 1
    for an ungrouped one (under replace-one its change is at most m: module docstring)."""
    return sensitivity_factor(metadata) if grouped else 1


def tight_sums(metadata: Metadata, grouped: bool) -> bool:
    """Whether the sums of the query get :func:`replace_one_row_change` (ungrouped, replace-one)."""
    return metadata.replace_one and not grouped


def replace_one_row_change(low: int, high: int) -> int:
    """The most one pair of rows (one of P, one of P') changes an ungrouped sum of values in
    [``low``, ``high``] grid units under replace-one: max(U − L, |L|, |U|) (module docstring;
    at least 1, like the add/remove rule)."""
    return max(high - low, abs(low), abs(high), 1)


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
