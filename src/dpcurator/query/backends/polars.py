"""The Polars backend: the lazy API (Polars SQL has no hash/random windows).

Literals are ``pl.lit`` objects, never SQL text. The bounding hash is
``pl.struct(person, group key...).hash(seed)`` for groups (dense rank of ``(hash, key)`` per
person) and ``pl.struct(person, aggregated values...).hash(seed)`` for rows (ordinal rank per
person and group). Polars' hash is stable within a Polars version, not across versions; which rows
are kept affects utility only. Histograms are computed as extra ``group_by`` frames collected
together with the main aggregates by ``pl.collect_all`` (which shares the common sub-plan).
"""

from __future__ import annotations

import functools
import operator
import os
from collections.abc import Mapping

import polars as pl

from dpcurator.errors import BackendError
from dpcurator.query.backends.base import OPERATORS, engine_failure
from dpcurator.query.backends.block_sample import SECOND_HASH, columns_with_block
from dpcurator.query.backends.grid import grid_scales
from dpcurator.query.backends.plan_checks import check_plan, expr_type
from dpcurator.query.backends.results import (
    bin_counts,
    collect_rows,
    hidden_columns,
    merge_histograms,
)
from dpcurator.query.backends.sources import check_table, file_format, is_path, to_arrow
from dpcurator.query.backends.types import (
    cast_error,
    check_column_types,
    is_fractional,
    needed_casts,
    text_columns,
)
from dpcurator.query.ir import (
    AggregatePlan,
    And,
    Between,
    BinOp,
    BlockSample,
    Case,
    Col,
    Compare,
    ExactAggregate,
    ExactResult,
    Expr,
    Func,
    In,
    IsNull,
    Lit,
    Not,
    Or,
)

_PID = "__dp_pid"
_DECLARED_DTYPES = {"int": pl.Int64, "float": pl.Float64, "string": pl.String, "bool": pl.Boolean}
_NULL = pl.lit(None, dtype=pl.Boolean)
_LITERAL_DTYPES = {bool: pl.Boolean, int: pl.Int64, float: pl.Float64, str: pl.String}


def to_polars(expr: Expr, columns: Mapping[str, str]) -> pl.Expr:  # noqa: PLR0912
    """Translate an IR expression into a Polars expression (the rules of :mod:`dpcurator.query.ir`).

    ``columns`` (column -> Polars dtype name) gives expressions their static types
    (:func:`~.base.expr_type`): integer ``+ - *`` and ``abs`` are computed in Int128, where no
    result of int64 operands overflows, and cast back to Int64 non-strictly (NULL outside int64);
    float arithmetic is on Float64 (±inf, NaN). Polars' own Int64 arithmetic would wrap.
    """

    def to(node: Expr) -> pl.Expr:
        return to_polars(node, columns)

    match expr:
        case Col(name=name):
            return pl.col(name)
        case Lit(value=literal):
            return _literal(literal)
        case BinOp(op="/", left=left, right=right):
            divisor = to(right).cast(pl.Float64, strict=False)
            return pl.when(divisor != 0).then(to(left).cast(pl.Float64, strict=False) / divisor)
        case Compare(left=Lit(value=None)) | Compare(right=Lit(value=None)):
            return _NULL  # Polars would turn "== None" into a null test
        case BinOp(op=op, left=left, right=right):
            operator_ = OPERATORS[op]
            kind = expr_type(expr, columns)
            if kind in ("int", "null"):
                wide = operator_(to(left).cast(pl.Int128), to(right).cast(pl.Int128))
                return wide.cast(pl.Int64, strict=False)  # type: ignore[no-any-return]
            if kind == "float":
                a, b = (to(side).cast(pl.Float64, strict=False) for side in (left, right))
                return operator_(a, b)  # type: ignore[no-any-return]
            return operator_(to(left), to(right))  # type: ignore[no-any-return]
        case Compare(op=op, left=left, right=right):
            return OPERATORS[op](to(left), to(right))  # type: ignore[no-any-return]
        case And(args=args):
            return functools.reduce(operator.and_, map(to, args))
        case Or(args=args):
            return functools.reduce(operator.or_, map(to, args))
        case Not(arg=arg):
            return ~to(arg)
        case IsNull(arg=arg):
            return to(arg).is_null()
        case In(values=()):
            return pl.lit(False)
        case In(arg=arg, values=listed):  # an OR of equalities is exactly SQL IN
            return _in(to(arg), listed)
        case Between(arg=arg, low=low, high=high):
            middle = to(arg)
            return (to(low) <= middle) & (middle <= to(high))
        case Case(whens=whens, default=default):
            chain = pl.lit(None) if default is None else to(default)
            for condition, result in reversed(whens):
                chain = pl.when(to(condition)).then(to(result)).otherwise(chain)
            return chain
        case Func(name="abs", args=(arg,)) if expr_type(arg, columns) == "int":
            return to(arg).cast(pl.Int128).abs().cast(pl.Int64, strict=False)
        case Func(name="round" | "floor" | "ceil", args=(arg,)) if expr_type(arg, columns) == "int":
            return to(arg)
        case Func(name=name, args=args):
            return _function(name, [to(arg) for arg in args])
    raise AssertionError(f"unknown expression {expr!r}")  # pragma: no cover


def _literal(value: object) -> pl.Expr:
    """A literal of its IR type (int64, double...): Polars' "dynamic" int literals of different
    widths in one CASE made its bounding window panic."""
    return pl.lit(value, dtype=_LITERAL_DTYPES.get(type(value)))


def _in(value: pl.Expr, listed: tuple[object, ...]) -> pl.Expr:
    equalities = [value == _literal(v) for v in listed if v is not None]
    matched = functools.reduce(operator.or_, equalities) if equalities else _NULL
    return pl.when(matched).then(True).otherwise(_NULL) if None in listed else matched


def _function(name: str, args: list[pl.Expr]) -> pl.Expr:
    if name == "coalesce":
        return pl.coalesce(args)
    (value,) = args
    if name == "round":
        return value.round(0, mode="half_away_from_zero")
    if name in ("lower", "upper"):
        return value.str.to_lowercase() if name == "lower" else value.str.to_uppercase()
    if name == "length":
        return value.str.len_chars()
    return {"abs": pl.Expr.abs, "floor": pl.Expr.floor, "ceil": pl.Expr.ceil}[name](value)


def _clamped(agg: ExactAggregate, column: str) -> pl.Expr:
    value = pl.col(column).cast(pl.Float64, strict=False)
    fill = pl.lit(None if agg.fill is None else float(agg.fill), dtype=pl.Float64)
    return (
        pl.when(value.is_null() | value.is_nan())
        .then(fill)
        .otherwise(value.clip(float(agg.lower), float(agg.upper)))  # type: ignore[arg-type]
    )


def _aggregate(agg: ExactAggregate, column: str, *, bounded: bool) -> pl.Expr:
    if agg.kind == "count" or (agg.kind == "count_persons" and not bounded):
        return pl.len()
    if agg.kind == "count_persons":
        return pl.col(_PID).n_unique()
    value = _clamped(agg, column)
    if agg.kind == "sum_squares":
        value = value * value
    for factor in grid_scales(agg.grid_exponent):
        value = value * factor
    # Int128: the exact total (collect_rows clamps it)
    grid = value.round(0, mode="half_to_even").cast(pl.Int128, strict=False)
    return (grid - agg.offset).sum() if agg.offset else grid.sum()


def _bin(agg: ExactAggregate, column: str) -> pl.Expr:
    assert agg.lower is not None
    assert agg.upper is not None
    scaled = (_clamped(agg, column) - float(agg.lower)) / float(agg.upper - agg.lower) * agg.bins
    return scaled.floor().cast(pl.Int64, strict=False).clip(upper_bound=agg.bins - 1)


def _typed(
    frame: pl.LazyFrame, declared: Mapping[str, str], table: str, *, materialise: bool
) -> pl.LazyFrame:
    """Convert the declared columns exactly (strict casts; floats to int only if integral)."""
    schema = frame.collect_schema()
    types = {name: str(dtype) for name, dtype in schema.items()}
    casts = needed_casts(declared, types, table=table)
    if not casts and not materialise:
        return frame
    inexact = [
        ~(pl.col(name).is_null() | (pl.col(name) == pl.col(name).floor())).all().alias(name)
        for name, kind in casts.items()
        if kind == "int" and is_fractional(types[name])
    ]  # NaN and infinities are refused by the strict cast that follows
    if inexact:
        for name, refused in frame.select(inexact).collect().row(0, named=True).items():
            if refused:
                raise cast_error("Polars", table, name, casts[name], types[name])
    converted = [pl.col(n).cast(_DECLARED_DTYPES[k], strict=True) for n, k in casts.items()]
    try:
        return frame.with_columns(converted).collect().lazy()
    except (pl.exceptions.InvalidOperationError, pl.exceptions.ComputeError) as exc:
        for name, kind in casts.items():  # find the column that cannot be converted
            try:
                frame.select(pl.col(name).cast(_DECLARED_DTYPES[kind], strict=True)).collect()
            except (pl.exceptions.InvalidOperationError, pl.exceptions.ComputeError):
                raise cast_error("Polars", table, name, kind, types[name]) from exc
        raise


class PolarsBackend:
    """Exact aggregates with the Polars lazy engine.

    Example:
        >>> backend = PolarsBackend.from_source({"x": [1.0, 2.0]}, table="t")
        >>> backend.columns("t")
        {'x': 'Float64'}
    """

    name = "polars"

    def __init__(self, frames: Mapping[str, pl.LazyFrame]) -> None:
        self._frames = dict(frames)

    @classmethod
    def from_source(
        cls, source: object, *, table: str, column_types: Mapping[str, str] | None = None
    ) -> PolarsBackend:
        """Read a CSV once, scan Parquet lazily, wrap a polars frame, or convert through Arrow.

        A CSV is parsed once into memory (types inferred from the whole file; columns declared
        strings read as text). When declared ``column_types`` need conversions the converted frame
        is collected here, so an impossible conversion raises DomainError now.
        """
        declared = check_column_types(column_types)
        try:
            materialise = False
            if is_path(source):
                path = os.fspath(source)  # type: ignore[call-overload]
                if file_format(path) == "csv":
                    materialise = True
                    text = dict.fromkeys(text_columns(declared, list(declared)), pl.String)
                    frame = pl.scan_csv(path, infer_schema_length=None, schema_overrides=text)
                else:
                    frame = pl.scan_parquet(path)
            elif isinstance(source, pl.LazyFrame):
                frame = source
            elif isinstance(source, pl.DataFrame):
                frame = source.lazy()
            else:
                frame = pl.from_arrow(to_arrow(source, table)).lazy()  # type: ignore[union-attr]
            frame = _typed(frame, declared, table, materialise=materialise)
        except pl.exceptions.PolarsError as exc:
            raise BackendError(
                f"Polars could not open the source of table {table!r}: {exc}"
            ) from exc
        return cls({table: frame})

    def tables(self) -> list[str]:
        """Return the table names."""
        return list(self._frames)

    def columns(self, table: str) -> dict[str, str]:
        """Return the column names of ``table`` mapped to Polars dtype names."""
        check_table(self, table)
        try:
            schema = self._frames[table].collect_schema()
        except pl.exceptions.PolarsError as exc:
            raise BackendError(f"Polars could not read the schema of {table!r}: {exc}") from exc
        return {name: str(dtype) for name, dtype in schema.items()}

    def close(self) -> None:
        """Nothing to release (frames are dropped with the backend)."""

    def compute(self, plan: AggregatePlan) -> ExactResult:
        """Run ``plan`` as lazy frames collected together.

        Raises:
            BackendError: the plan names an unknown table or column (checked first), or
                ``ENGINE_FAILURE_MESSAGE`` if anything fails afterwards (details logged).
        """
        columns = self.columns(plan.table)
        check_plan(plan, columns)
        try:
            return self._compute(plan, columns_with_block(plan, columns))
        except (Exception, pl.exceptions.PanicException):  # a Rust panic is a BaseException
            raise engine_failure(self.name, plan) from None

    def _compute(self, plan: AggregatePlan, columns: Mapping[str, str]) -> ExactResult:
        groups, values = hidden_columns(plan)
        frame = self._rows(plan, groups, values, columns)
        bounded = plan.bound.person_column is not None
        main = [
            _aggregate(agg, values.get(agg.name, ""), bounded=bounded).alias(agg.name)
            for agg in plan.aggregates
            if agg.kind != "histogram"
        ]
        frames = [
            frame.group_by(groups).agg(pl.len(), *main) if groups else frame.select(pl.len(), *main)
        ]
        histograms = [agg for agg in plan.aggregates if agg.kind == "histogram"]
        frames += [
            frame.select(*groups, _bin(agg, values[agg.name]).alias("__dp_bin"))
            .drop_nulls("__dp_bin")
            .group_by([*groups, "__dp_bin"])
            .len()
            for agg in histograms
        ]
        main_frame, *histogram_frames = pl.collect_all(frames)
        counts = {
            agg.name: bin_counts(result.iter_rows())
            for agg, result in zip(histograms, histogram_frames, strict=True)
        }
        return collect_rows(plan, merge_histograms(plan, main_frame.iter_rows(), counts))

    def _rows(
        self,
        plan: AggregatePlan,
        groups: list[str],
        values: dict[str, str],
        columns: Mapping[str, str],
    ) -> pl.LazyFrame:
        """Filter, evaluate keys and values, apply public keys and contribution bounds."""
        frame = self._frames[plan.table]
        person = plan.bound.person_column
        if plan.sample is not None and person is not None:
            frame = _sampled(frame, plan.sample, person)
        if plan.where is not None:
            frame = frame.filter(to_polars(plan.where, columns))
        selected = [
            to_polars(g.expr, columns).alias(name)
            for g, name in zip(plan.group_by, groups, strict=True)
        ]
        if person is not None:
            selected.append(pl.col(person).alias(_PID))
        selected += [
            to_polars(agg.expr, columns).alias(values[agg.name])
            for agg in plan.aggregates
            if agg.expr is not None
        ]
        if selected:  # with_columns broadcasts constants to the frame's height (select would not)
            frame = frame.with_columns(selected).select([e.meta.output_name() for e in selected])
        if plan.group_keys is not None:
            frame = frame.join(
                self._keys(plan, frame, groups).lazy(), on=groups, how="semi", nulls_equal=True
            )
        if person is None:
            return frame
        frame = frame.filter(pl.col(_PID).is_not_null())
        seed = plan.bound.seed % 2**64
        row_hash = pl.struct(_PID, *values.values()).hash(seed)
        keep = row_hash.rank("ordinal").over([_PID, *groups]) <= plan.bound.max_rows_per_group
        if groups:
            group_hash = pl.struct(_PID, *groups).hash(seed)
            rank = pl.struct(group_hash, *groups).rank("dense").over(_PID)
            keep = keep & (rank <= plan.bound.max_groups)
        return frame.filter(keep)

    @staticmethod
    def _keys(plan: AggregatePlan, frame: pl.LazyFrame, groups: list[str]) -> pl.DataFrame:
        """The public key set as a frame with the group columns' dtypes."""
        assert plan.group_keys is not None
        schema = frame.collect_schema()
        columns = list(zip(*plan.group_keys, strict=True)) or [() for _ in groups]
        try:
            return pl.DataFrame(
                [
                    pl.Series(name, list(column), dtype=schema[name], strict=True)
                    for name, column in zip(groups, columns, strict=True)
                ]
            )
        except (TypeError, pl.exceptions.PolarsError) as exc:
            raise BackendError(
                f"The public group keys do not have the types of the group columns {dict(schema)}: "
                f"{exc}"
            ) from exc


def _sampled(frame: pl.LazyFrame, sample: BlockSample, person: str) -> pl.LazyFrame:
    """The rows of the persons a :class:`~dpcurator.query.ir.BlockSample` keeps, with their
    block: Polars' struct hash of the person, the first ``per_block`` by a second hash."""
    seed = sample.seed % 2**64
    block = (pl.struct(person).hash(seed) % sample.blocks).cast(pl.Int64).alias(sample.column)
    second = pl.struct(person).hash(seed ^ SECOND_HASH).alias("__dp_sh")
    order = pl.struct(second, pl.col(person))
    kept = order.rank("dense").over(sample.column) <= sample.per_block
    return frame.filter(pl.col(person).is_not_null()).with_columns(block).filter(kept)
