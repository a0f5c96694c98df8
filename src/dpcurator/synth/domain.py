"""The public, finite domain of a non-interactive release: one code per column value or bin.

Every column of a release must have a public finite domain taken from the metadata, never from
the data (Ganev et al. 2025: a domain read from the data lets a membership attack reach AUC 0.8
on MST):

* a column with public ``keys`` (or a bool column) has one code per key, in the declared order;
  rows whose value is not a key (NULL included) are in no cell;
* a numeric column without keys is cut into public bins by its public bounds ``[lower, upper]``:
  an int column whose bounds span at most ``max_bins`` integers gets one bin per integer,
  otherwise ``max_bins`` equal-width bins (integer cuts for int columns, as
  :func:`~dpcurator.query.plan.histogram.histogram_cuts`). Values are clamped first, so values below
  ``lower`` are in the first bin and values at or above the last cut in the last one; NULL is in
  the bin of the column's public ``fill`` (the first bin when it has none); NaN sorts above every
  number (:mod:`dpcurator.query.ir`), so it is in the last bin;
* any other column (a string without keys, a number without bounds) is refused by name before
  any charge, with the fix.

A numeric column may declare public ``point_masses`` (metadata, e.g. ``[0]`` for capital-gain,
0 in 92 % of Adult's rows): each declared value v gets a bin of its own, ``[v, v + 1)`` for int
columns and ``[v, nextafter(v))`` for float ones, cut out of the bin that held it (the bins around
it keep their other values; an empty remainder is dropped). The cuts depend only on the metadata.

Decoding (synthetic data back to the input's schema), the documented public rule: a key code is
its key; a point-mass bin is exactly its declared value; any other bin is a value drawn uniformly
over the bin, ``[low, high)`` (the last bin ``[low, upper]``), for an int column uniformly over
the integers the bin holds (so a one-integer bin decodes exactly). Bin midpoints would put every
synthetic row of a bin on one value (e.g. capital-gain 0 became 1562, a wide bin's midpoint).
The draws come from the release's seeded :class:`~dpcurator.random.Rng`, after sampling: decoding
is post-processing of the released codes, it reads no data and costs nothing.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcurator._validation import check_int, fail
from dpcurator.errors import UnsupportedQueryError
from dpcurator.query import ir
from dpcurator.query.columns import ColumnMeta
from dpcurator.query.plan.histogram import histogram_cuts
from dpcurator.query.plan.limits import MAX_PUBLIC_GROUPS
from dpcurator.query.schema import Metadata
from dpcurator.random import Rng, default_rng

#: Default number of bins of a bounded numeric column (AIM's benchmark data uses 32).
DEFAULT_MAX_BINS = 32

Clique = tuple[str, ...]


@dataclass(frozen=True)
class ColumnDomain:
    """The public codes of one column.

    Attributes:
        name: the column.
        type: its declared type (the output keeps it).
        keys: the key of each code (key columns), or None (binned columns).
        edges: the bin edges ``(lower, c1, ..., upper)`` of a binned column, else ().
        integer: whether the binned column is int (integer cuts, integer decoding).
        fill_code: the bin of NULL in a binned column.
        top: the largest value of the last bin (the public upper bound) of a binned column.
        masses: per bin, its declared point mass (decoded exactly), or None; () without any.
    """

    name: str
    type: str
    keys: tuple[ir.ScalarValue, ...] | None
    edges: tuple[float, ...] = ()
    integer: bool = False
    fill_code: int = 0
    top: float = math.nan
    masses: tuple[float | None, ...] = ()

    @property
    def size(self) -> int:
        """How many codes the column has."""
        return len(self.keys) if self.keys is not None else len(self.edges) - 1

    def group_column(self) -> ir.GroupColumn:
        """The engine expression of the code's group value: the column itself for key columns
        (its group values are the keys), the bin index (an int) for binned columns."""
        column = ir.Col(self.name)
        if self.keys is not None:
            return ir.GroupColumn(self.name, column)
        whens: list[tuple[ir.Expr, ir.Expr]] = [(ir.IsNull(column), ir.Lit(self.fill_code))]
        cuts = self.edges[1:-1]
        for index, cut in enumerate(cuts):
            bound: ir.ScalarValue = int(cut) if self.integer else float(cut)
            whens.append((ir.Compare("<", column, ir.Lit(bound)), ir.Lit(index)))
        return ir.GroupColumn(self.name, ir.Case(tuple(whens), ir.Lit(self.size - 1)))

    def group_values(self) -> tuple[ir.ScalarValue, ...]:
        """The engine group value of each code, in code order."""
        return self.keys if self.keys is not None else tuple(range(self.size))

    def decode(self, codes: npt.NDArray[np.integer], rng: Rng | None = None) -> pd.Series:
        """Values of the input's type for ``codes`` (see the module docstring's rule); ``rng``
        draws the values within bins."""
        codes = np.asarray(codes, dtype=np.int64)
        if self.keys is not None:
            values = np.asarray(self.keys, dtype=object)[codes]
            return pd.Series(values, name=self.name, dtype=_numpy_dtype(self.type))
        low, high, exact = self._ranges()
        u = _uniform(codes.size, rng) if codes.size and np.any(low[codes] < high[codes]) else 0.0
        lo, hi = low[codes], high[codes]
        if self.type == "int":
            values = (lo + np.floor(u * (hi - lo + 1))).astype(np.int64)
            values = np.minimum(values, hi.astype(np.int64))
        else:
            values = np.where(exact[codes], lo, np.minimum(lo + u * (hi - lo), hi))
        return pd.Series(values, name=self.name)

    def _ranges(self) -> tuple[npt.NDArray[np.float64], ...]:
        """Per bin: the smallest and largest value decoding may give (integers of the bin for
        an int column) and whether the bin is a declared point mass."""
        low = np.asarray(self.edges[:-1], dtype=np.float64)
        high = np.asarray(self.edges[1:], dtype=np.float64).copy()
        top = self.top if not math.isnan(self.top) else high[-1]
        exact = np.asarray([m is not None for m in self.masses] or [False] * low.size)
        if self.type == "int":  # bin i holds the integers low .. high - 1 (last: top)
            low, high = np.ceil(low), np.ceil(high) - 1
            high[-1] = math.floor(top)
            high = np.maximum(high, low)  # a bin with no integer (clamping only): its low
        else:
            high = np.nextafter(high, -np.inf)  # bins are [low, high)
            high[-1] = max(top, low[-1])
        masses = np.asarray([np.nan if m is None else m for m in self.masses] or [np.nan])
        if exact.any():
            low = np.where(exact, masses, low)
            high = np.where(exact, masses, high)
        return low, high, exact

    def encode(self, values: pd.Series) -> npt.NDArray[np.int64]:
        """The code of each value, -1 for a value in no cell: the engine's rule, except that a
        missing number (pandas does not tell NULL from NaN) is in the fill's bin. For data the
        owner holds (the utility report, benchmarks), never for a release."""
        if self.keys is not None:
            lookup = {key: code for code, key in enumerate(self.keys)}
            return np.asarray([lookup.get(v, -1) for v in values.tolist()], dtype=np.int64)
        numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)
        codes = np.searchsorted(np.asarray(self.edges[1:-1]), numbers, side="right")
        return np.where(np.isnan(numbers), self.fill_code, codes).astype(np.int64)


def _uniform(size: int, rng: Rng | None) -> npt.NDArray[np.float64]:
    """``size`` uniform draws in [0, 1) with 53 random bits each."""
    bits = (rng if rng is not None else default_rng()).uint64(size) >> np.uint64(11)
    return np.asarray(bits.astype(np.float64) * 2.0**-53, dtype=np.float64)


def _numpy_dtype(column_type: str) -> np.dtype[np.generic]:
    names = {"int": "int64", "float": "float64", "bool": "bool", "string": "object"}
    return np.dtype(names[column_type])


def column_domain(column: ColumnMeta, max_bins: int = DEFAULT_MAX_BINS) -> ColumnDomain:
    """The public codes of ``column``; UnsupportedQueryError (free) when it has none."""
    keys = column.public_keys
    if keys is not None:
        return ColumnDomain(column.name, column.type, tuple(keys))
    if column.is_numeric and column.lower is not None and column.upper is not None:
        lower, upper = float(column.lower), float(column.upper)
        integer = column.type == "int" and lower.is_integer() and upper.is_integer()
        if integer and upper - lower + 1 <= max_bins:
            # one bin [v, v + 1) per integer; the last edge is upper + 1
            edges: tuple[float, ...] = tuple(float(v) for v in range(int(lower), int(upper) + 2))
        else:
            histogram = ir.ExactAggregate("x", "histogram", lower=lower, upper=upper, bins=max_bins)
            edges = histogram_cuts(histogram, integer=integer)
        masses: tuple[float | None, ...] = ()
        if column.point_masses:
            edges, masses = _with_point_masses(edges, column.point_masses, integer, upper)
        fill_code = 0
        if column.fill is not None:
            cuts = np.asarray(edges[1:-1])
            fill_code = int(np.searchsorted(cuts, float(column.fill), side="right"))
        return ColumnDomain(
            column.name, column.type, None, edges, integer, fill_code, upper, masses
        )
    raise UnsupportedQueryError(
        f"The column {column.name!r} ({column.type}) has no public domain: a synthetic-data or "
        "contingency-table release needs public keys or public bounds for every column, never "
        f"values read from the data. Declare 'keys: [...]' for {column.name!r} in the metadata"
        + (" or 'lower'/'upper' bounds" if column.is_numeric else "")
        + ", or leave the column out of the release."
    )


def _with_point_masses(
    edges: tuple[float, ...], points: Sequence[float], integer: bool, upper: float
) -> tuple[tuple[float, ...], tuple[float | None, ...]]:
    """``edges`` with a bin of its own for each declared value (the module docstring's rule)
    and, per bin, its point mass or None. Uses only the metadata."""
    lower, last = edges[0], edges[-1]
    cuts = set(edges[1:-1])
    after: dict[float, float] = {}
    for value in map(float, points):
        following = value + 1 if integer else float(np.nextafter(value, np.inf))
        after[value] = following
        if value > lower:
            cuts.add(value)
        if following <= upper and following < last:
            cuts.add(following)
    ordered = sorted(cuts)
    new_edges = (lower, *ordered, last)
    masses: list[float | None] = []
    for i in range(len(new_edges) - 1):
        low, high = new_edges[i], new_edges[i + 1]
        is_last = i == len(new_edges) - 2
        alone = low in after and (high == after[low] or (is_last and low == upper))
        masses.append(low if alone else None)
    return new_edges, tuple(masses)


@dataclass(frozen=True)
class SynthDomain:
    """The public domain of a release: its columns, in order, each with its codes."""

    columns: tuple[ColumnDomain, ...]

    @classmethod
    def from_metadata(
        cls,
        metadata: Metadata,
        columns: Sequence[str] | None = None,
        *,
        max_bins: int = DEFAULT_MAX_BINS,
    ) -> SynthDomain:
        """The domain of ``columns`` (default: every column but the person column).

        Raises UnsupportedQueryError naming a column without public keys or bounds, and
        ParameterError for an unknown or repeated column or the person column (all free).
        """
        check_int("SynthDomain", "max_bins", max_bins, minimum=2)
        person = metadata.person_column
        if columns is None:
            names = [c.name for c in metadata.columns if c.name != person]
        else:
            names = [metadata.column(name).name for name in columns]
        if len(set(names)) != len(names) or not names:
            raise fail("SynthDomain", "columns", "distinct column names, at least one", columns)
        if person is not None and metadata.column(person).name in names:
            raise fail(
                "SynthDomain",
                "columns",
                f"without the person column {person!r}",
                columns,
                "Releasing person identifiers is never private.",
            )
        return cls(tuple(column_domain(metadata.column(n), max_bins) for n in names))

    @property
    def names(self) -> tuple[str, ...]:
        """The column names, in order."""
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> ColumnDomain:
        """The domain of column ``name``."""
        for column in self.columns:
            if column.name == name:
                return column
        raise fail("SynthDomain.column", "name", f"one of {list(self.names)}", name)

    def shape(self, clique: Clique) -> tuple[int, ...]:
        """The number of codes of each column of ``clique``."""
        return tuple(self.column(name).size for name in clique)

    def cells(self, clique: Clique) -> int:
        """How many cells the marginal over ``clique`` has."""
        return math.prod(self.shape(clique))

    def config(self) -> dict[str, int]:
        """``{column: size}`` (mbi's domain configuration)."""
        return {c.name: c.size for c in self.columns}

    def check_marginal(self, clique: Clique, limit: int = MAX_PUBLIC_GROUPS) -> None:
        """Refuse (free, DomainTooLarge as UnsupportedQueryError) a marginal over ``limit``."""
        cells = self.cells(clique)
        if cells > limit:
            raise UnsupportedQueryError(
                f"The marginal over {list(clique)} has {cells:,} cells, over the limit "
                f"{limit:,}: use fewer columns or fewer bins (max_bins)."
            )

    def group_keys(self, clique: Clique) -> tuple[tuple[ir.ScalarValue, ...], ...]:
        """Every cell's group values, in row-major (C) order of the codes."""
        return tuple(itertools.product(*(self.column(n).group_values() for n in clique)))

    def decode(
        self, codes: Mapping[str, npt.NDArray[np.int64]], rng: Rng | None = None
    ) -> pd.DataFrame:
        """A frame with the input's columns and types from per-column codes (``rng``: the
        draws within bins, post-processing)."""
        source = rng if rng is not None else default_rng()
        return pd.DataFrame({c.name: c.decode(codes[c.name], source) for c in self.columns})

    def encode(self, frame: pd.DataFrame) -> dict[str, npt.NDArray[np.int64]]:
        """Per-column codes of a frame (-1: in no cell), with the engine's rule."""
        return {c.name: c.encode(frame[c.name]) for c in self.columns}
