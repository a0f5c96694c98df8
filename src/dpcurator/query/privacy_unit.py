"""The privacy unit: the one place that says how far one neighbour can move a statistic.

A table's guarantee is stated for a *unit* (a person) and a *neighbouring relation*; the metadata
declare both, and :class:`PrivacyUnit` (built once from them, :attr:`Metadata.unit
<dpcurator.query.schema.Metadata.unit>`) is the only object any release path asks for a
sensitivity. No other module reads ``max_rows_per_person``, ``max_groups_per_person`` or
``neighbouring`` (``tests/test_layering.py`` enforces it), so a new release kind cannot forget
replace-one or r > 1.

* **Relation.** ``add_remove`` (the default): neighbouring tables differ by adding or removing one
  person (unbounded DP). ``replace_one`` with the public table size ``public_size`` = n:
  neighbouring tables have the same n and differ in one person's rows (bounded DP; Dwork & Roth
  2014 §2.3, Vadhan 2017 §1.6). Replacing P by P' is removing P and adding P': two *sides*.
* **Unit.** With a person column (user-level privacy) the engines bound each person to r =
  ``max_rows_per_person`` rows in each of at most g = ``max_groups_per_person`` groups. Without
  one (row-level), each row is a person unless r > 1 declares that a person may own up to r rows
  without an id: nothing is bounded and every sensitivity is scaled by r (group privacy). Either
  way one person's rows are at most r per group and g groups, and an estimator that treats each
  *row* as its unit (no ids) sees one person as r of its units.

The general rule every method applies: a statistic that is a sum over rows of a per-row
contribution moves, between neighbours, by at most (sides) × (rows one person owns in the
statistic's cells) × (one row's largest contribution); the tighter rules below are proved for
the cases the planner uses.

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
* *Grouped counts with Gaussian noise* (squared L2, :func:`dpcurator.query.plan.noise.l2_squared`):
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

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from dpcurator.core.numbers import fraction_up
from dpcurator.errors import UnsupportedQueryError
from dpcurator.query.frontend.builder import Aggregate

Relation = Literal["add_remove", "replace_one"]


@dataclass(frozen=True)
class PrivacyUnit:
    """How far one neighbour can move a statistic, from the declared relation and unit alone.

    Attributes:
        relation: ``add_remove`` or ``replace_one``.
        person_column: the column identifying a person, or None (row-level privacy).
        rows: r, the rows one person may own in one group (one cell, one bin).
        groups: g, the groups one person may contribute to.
        public_size: the public n under replace-one (rows, or persons with a person column).
    """

    relation: Relation = "add_remove"
    person_column: str | None = None
    rows: int = 1
    groups: int = 1
    public_size: int | None = None

    # ------------------------------------------------------------------------------------------
    # The declared facts

    @property
    def replace_one(self) -> bool:
        """Whether neighbouring tables differ by replacing one person (bounded DP)."""
        return self.relation == "replace_one"

    @property
    def user_level(self) -> bool:
        """Whether a person column identifies the unit (the engines bound its rows)."""
        return self.person_column is not None

    @property
    def one_sided(self) -> bool:
        """Whether neighbouring tables differ by rows added only, or removed only (add/remove):
        a score that moves one way with each added row is then monotone between neighbours."""
        return not self.replace_one

    @property
    def sides(self) -> int:
        """The persons whose rows differ between neighbours: 1 (added or removed) or 2 (one
        removed and one added, under replace-one)."""
        return 2 if self.replace_one else 1

    # ------------------------------------------------------------------------------------------
    # Contributions

    def groups_touched(self, cells: int | None = None) -> int:
        """g' = min(g, ``cells``): the cells one person's rows can fall in (None: g)."""
        return self.groups if cells is None else min(self.groups, max(cells, 1))

    def groups_per_person(self, grouped: bool, keys: Sequence[object] | None) -> int:
        """The groups a person may contribute to in a query: 1 without GROUP BY, else g, but at
        most the number of public keys when there are keys."""
        if not grouped:
            return 1
        return self.groups if keys is None else self.groups_touched(len(keys))

    @property
    def rows_changed(self) -> int:
        """The rows (of one group) in which neighbouring tables differ: r added or removed, or
        r removed and r added under replace-one. The k of an estimator whose sensitivity is
        per row (objective perturbation, AdaSSP's Gram matrix)."""
        return self.sides * self.rows

    def estimator_steps(self, *, keyed_by_person: bool) -> int:
        """How many add/remove steps of an estimator's own unit one neighbour amounts to: an
        estimator that sees person ids (blocks keyed by person) counts persons, 1 a side; one
        that treats each row as its unit sees a person as r units (group privacy). A pure
        ε-DP estimator of its unit run at ε/steps is ε-DP for this unit (Dwork & Roth 2014,
        Theorem 2.2)."""
        per_side = 1 if keyed_by_person and self.person_column is not None else self.rows
        return self.sides * per_side

    # ------------------------------------------------------------------------------------------
    # Sensitivities of counts

    def count_l1(self, cells: int | None = None) -> int:
        """L1 sensitivity of a count vector (groups, bins, marginal cells): sides·r·g'."""
        return self.sides * self.rows * self.groups_touched(cells)

    def scalar_count(self) -> int:
        """Sensitivity of one ungrouped count: r (replace-one: a difference of two counts in
        [0, r], see above)."""
        return self.rows

    def persons_count(self, grouped: bool, groups: int = 1) -> int:
        """L1 sensitivity of a distinct-person count over ``groups`` groups (1 a group a side;
        an ungrouped one changes by at most 1 under either relation)."""
        return self.sides * groups if grouped else 1

    def count_l2_squared(self, cells: int | None = None) -> int:
        """Squared L2 sensitivity of a non-negative count vector: sides·g'·r² (replace-one:
        ‖c' − c‖² <= ‖c‖² + ‖c'‖², see above)."""
        return self.sides * self.groups_touched(cells) * self.rows**2

    def count_l2(self, cells: int | None = None) -> Fraction:
        """L2 sensitivity of a non-negative count vector: √:meth:`count_l2_squared`, exact when
        the root is, else rounded up."""
        return l2_of_squared(self.count_l2_squared(cells))

    def merged_count_l2(self, cells: int, largest_merge: int) -> Fraction:
        """√:meth:`merged_count_l2_squared`, exact when the root is, else rounded up."""
        return l2_of_squared(self.merged_count_l2_squared(cells, largest_merge))

    def merged_count_l2_squared(self, cells: int, largest_merge: int) -> int:
        """Squared L2 sensitivity of a count vector over ``cells`` cells, measured after merging
        cells of a public (or released-count-derived) partition whose largest part has
        ``largest_merge`` original cells: one person's g' = min(g, cells) original cells may
        fall in as few merged cells as the merge allows, so per side the worst vector puts
        m = min(largest_merge, g') cells in each of ⌊g'/m⌋ merged cells and the rest in one:
        r²·(⌊g'/m⌋·m² + (g' mod m)²) (sum of squares is largest for the most concentrated
        allocation). Merging never raises the L1 sensitivity (:meth:`count_l1`)."""
        spread = self.groups_touched(cells)
        merge = max(1, min(largest_merge, spread))
        per_side = (spread // merge) * merge**2 + (spread % merge) ** 2
        return self.sides * per_side * self.rows**2

    def interaction_l2_squared(self, sizes: Sequence[int]) -> Fraction:
        """Squared L2 sensitivity of a count vector over the product of columns of ``sizes``
        values (n_j >= 2), projected onto its pure-interaction subspace P = ⊗_j (I − J/n_j)
        (the part orthogonal to every function of fewer columns: the span of a Fourier support's
        orthonormal Helmert vectors, :mod:`dpcurator.synth.fourier`).

        Exact when a person touches one cell (g' = 1); else the count vector's own bound
        (:meth:`count_l2_squared`: P is a projection, so it never lengthens a vector). Proof for
        g' = 1. ⟨P e_x, P e_y⟩ = Π_j (1[x_j = y_j] − 1/n_j) =: k(x, y). Add/remove: the change
        is t·e_x, t <= r, of squared norm t²·k(x, x) = t²·Π_j (1 − 1/n_j), largest at t = r for
        every x. Replace-one: the change is t'·e_y − t·e_x with t, t' in [0, r]; the squared
        norm is a convex quadratic in (t, t'), so it is largest at a vertex: one side alone gives
        r²·Π_j (1 − 1/n_j), both give r²·(2·Π_j (1 − 1/n_j) − 2·k(x, y)), and k(x, y) depends
        only on the set D of columns where x and y differ: Π_{j ∈ D} (−1/n_j)·Π_{j ∉ D}
        (1 − 1/n_j). The bound is the largest over the 2^|S| sets D (every D is realised, as
        n_j >= 2); with |S| >= 1 a single-column D makes k < 0, so both sides beat one. Rows of
        one person spread over several cells (r > 1 without a person column) move it no more:
        |k(x, y)| <= k(x, x) (Cauchy–Schwarz; the diagonal is constant), so r rows add at most
        r²·Π_j (1 − 1/n_j) per side and their cross terms at most −2r²·min_D k."""
        cells = math.prod(sizes)
        if self.groups_touched(cells) > 1:
            return Fraction(self.count_l2_squared(cells))
        keep = [1 - Fraction(1, n) for n in sizes]
        alone = math.prod(keep, start=Fraction(1))
        if not self.replace_one:
            return self.rows**2 * alone
        lowest = min(
            math.prod(
                (
                    -Fraction(1, n) if differs else k
                    for n, k, differs in zip(sizes, keep, pattern, strict=True)
                ),
                start=Fraction(1),
            )
            for pattern in itertools.product((False, True), repeat=len(sizes))
        )
        return self.rows**2 * max(alone, 2 * alone - 2 * lowest)

    def total_count_l2_squared(self, cells: int) -> int:
        """Squared sensitivity of the total of a bounded count vector over ``cells`` cells:
        (r·g')² under either relation (add/remove: one person's total is in [0, r·g']; replace-one:
        a difference of two such totals)."""
        return (self.rows * self.groups_touched(cells)) ** 2

    # ------------------------------------------------------------------------------------------
    # Sensitivities of sums

    def tight_sums(self, grouped: bool) -> bool:
        """Whether a sum gets :meth:`replace_one_row_change` (ungrouped, replace-one)."""
        return self.replace_one and not grouped

    def sum_l1(self, low: int, high: int, *, grouped: bool, groups: int = 1) -> int:
        """L1 sensitivity (grid units) of a sum of row values in [``low``, ``high``] over
        ``groups`` groups: r·max(U − L, |L|, |U|) for an ungrouped replace-one sum, else
        sides·r·g·max(|L|, |U|) (at least 1 a row)."""
        if self.tight_sums(grouped):
            return self.rows * replace_one_row_change(low, high)
        return self.sides * self.rows * groups * max(abs(low), abs(high), 1)

    # ------------------------------------------------------------------------------------------
    # Public counts and refusals

    def public_count(self, aggregate: Aggregate, whole_table: bool) -> int | None:
        """The public n when ``aggregate`` counts the whole table under replace-one (free,
        exact), else None. ``whole_table``: the query has no WHERE and no GROUP BY."""
        if not self.replace_one or not whole_table or self.public_size is None:
            return None
        if aggregate.kind == "count_persons":
            return self.public_size
        if aggregate.kind in ("count", "mean") and self.rows == 1:
            if aggregate.kind == "count" and aggregate.expr is not None:
                return None  # COUNT(x) skips NULLs: not the table size
            return self.public_size
        return None

    def check_selection(self, group_names: Sequence[str], *, delta_positive: bool) -> None:
        """Refuse DP partition selection of the groups ``group_names`` (no public keys) where it
        cannot run (free, at plan time): under replace-one (its guarantee is stated for adding
        or removing one person), at δ = 0, and for r > 1 rows a person without a person column
        (the selection's threshold counts one person once)."""
        names = ", ".join(group_names)
        if self.replace_one:
            raise UnsupportedQueryError(
                f"GROUP BY {names} needs public keys on a table declared neighbouring: "
                "replace_one (DP partition selection is stated for adding or removing one "
                "person): declare 'keys' for these columns."
            )
        if not delta_positive:
            raise UnsupportedQueryError(
                f"GROUP BY {names} needs public keys: declare 'keys' for these columns in the "
                "metadata, or pass delta > 0 to select groups with DP partition selection."
            )
        if self.person_column is None and self.rows > 1:
            raise UnsupportedQueryError(
                "DP partition selection needs a person column when a person may own several "
                f"rows; declare public keys for {names} instead."
            )


def replace_one_row_change(low: int, high: int) -> int:
    """The most one pair of rows (one of P, one of P') changes an ungrouped sum of values in
    [``low``, ``high``] grid units under replace-one: max(U − L, |L|, |U|) (module docstring;
    at least 1, like the add/remove rule)."""
    return max(high - low, abs(low), abs(high), 1)


def grouped_l2_squared(per_group: int, groups: int, *, paired_counts: bool) -> int:
    """Squared L2 sensitivity of a statistic over ``groups`` groups, each moved by at most
    ``per_group`` (L1 Δ₁ = g·per_group): g·per_group², halved for grouped non-negative counts
    under replace-one (``paired_counts``: per_group is then 2r and the bound 2g·r², see
    above)."""
    squared = groups * per_group * per_group
    return squared // 2 if paired_counts else squared


def l2_of_squared(squared: int) -> Fraction:
    """√``squared`` exactly when it is a perfect square, else rounded up to a fraction."""
    root = math.isqrt(squared)
    if root * root == squared:
        return Fraction(root)
    return fraction_up(math.sqrt(squared))
