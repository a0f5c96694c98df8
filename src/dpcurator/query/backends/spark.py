"""The Spark backend: the PySpark DataFrame API (optional: ``pip install 'dpcurator[spark]'``).

Literals are ``sf.lit`` objects and column names are back-quoted, so no SQL text is built. Spark
specifics handled here: division uses ``try_divide`` (NULL on zero, no ANSI error); grid values use
``bround`` (half-to-even) and histogram bins an explicit ``floor`` because ``CAST`` truncates on
Spark; the row limit is written ``rn <= k`` so Spark plans a WindowGroupLimit. The bounding hash is
``xxhash64(person, group key..., seed)`` for groups and ``xxhash64(person, values..., seed)`` for
rows.

Evaluation is total, whatever ``spark.sql.ansi.enabled`` says (the session may be the owner's):
narrow integer columns become BIGINT, float and decimal ones DOUBLE, and integer literals BIGINT,
so the int64 and double rules apply; ``+ - *`` are ``try_add``/``try_subtract``/``try_multiply``
(NULL when the exact integer leaves int64; IEEE on doubles); ``abs`` is ``0 - x`` for ``x <= 0``
by ``try_subtract`` (NULL for -2**63); ``floor``/``ceil`` apply only where ``|x| < 2**52`` (beyond,
a double is already an integer, and Spark's BIGINT result would overflow); sums add the grid
values exactly in DECIMAL(38,0) (:func:`~dpcurator.query.backends.results.collect_rows` clamps each
total to ``[-(2**63-1), 2**63-1]``). Whatever Spark raises anyway during
:meth:`SparkBackend.compute` becomes ``BackendError(ENGINE_FAILURE_MESSAGE)``; Spark's own text,
which can quote data values, goes to the logger ``dpcurator.engine`` only.

Local mode is what the tests use; to run on a cluster, build the session first and pass a
DataFrame (or a path the cluster can read)::

    from pyspark.sql import SparkSession
    spark = SparkSession.builder.master("spark://head-node:7077").appName("dpcurator").getOrCreate()
    backend = open_backend(spark.read.parquet("s3a://bucket/people/"), table="people")

Without an active session, :meth:`SparkBackend.from_source` starts (or reuses) the default one.
"""

from __future__ import annotations

import functools
import operator
import os
from collections.abc import Callable, Mapping

from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as sf
from pyspark.sql import types as st

from dpcurator.errors import BackendError, DPError
from dpcurator.query.backends.base import COMPARISONS, engine_failure
from dpcurator.query.backends.block_sample import SECOND_HASH
from dpcurator.query.backends.grid import grid_scales
from dpcurator.query.backends.plan_checks import check_plan
from dpcurator.query.backends.results import (
    bin_counts,
    collect_rows,
    hidden_columns,
    merge_histograms,
)
from dpcurator.query.backends.sources import (
    check_table,
    file_format,
    is_path,
    is_spark_dataframe,
    to_arrow,
)
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

_ENGINE_ERRORS = (PySparkException, Py4JError)
_PID = "__dp_pid"
_DECLARED_TYPES = {"int": "long", "float": "double", "string": "string", "bool": "boolean"}
_WIDENED = {"tinyint": "long", "smallint": "long", "int": "long", "float": "double"}
_EXACT = "decimal(38,0)"  # sums of grid values: exact up to 10**38 (rows * 2**63 stays below)
_ARITHMETIC = {"+": sf.try_add, "-": sf.try_subtract, "*": sf.try_multiply, "/": sf.try_divide}
_INTEGRAL_DOUBLE = 2.0**52  # every double at least this large in magnitude is an integer


def _abs(value: Column) -> Column:
    """``|x|``: NULL for -2**63, whose absolute value leaves int64 (``0 - x`` for ``x <= 0``)."""
    return sf.when(value <= 0, sf.try_subtract(_literal(0), value)).otherwise(value)


def _integral(rounding: Callable[[Column], Column]) -> Callable[[Column], Column]:
    """``floor``/``ceil`` keeping the argument's type. Spark's returns BIGINT for a DOUBLE, which
    raises (ANSI) or saturates beyond int64 and maps NaN to 0; a double with ``|x| >= 2**52``,
    NaN or an infinity is its own floor and ceiling (as in the in-memory oracle), and so is every
    integer."""

    def apply(value: Column) -> Column:
        inside = (value > sf.lit(-_INTEGRAL_DOUBLE)) & (value < sf.lit(_INTEGRAL_DOUBLE))
        return sf.when(inside, rounding(value)).otherwise(value)

    return apply


_FUNCTIONS: dict[str, Callable[[Column], Column]] = {
    "abs": _abs,
    "round": lambda value: sf.round(value, 0),  # HALF_UP: half away from zero; never raises
    "floor": _integral(sf.floor),
    "ceil": _integral(sf.ceil),
    "lower": sf.lower,
    "upper": sf.upper,
    "length": lambda value: sf.length(value).cast("long"),  # INT: int32 arithmetic would overflow
}


def _literal(value: object) -> Column:
    """An engine literal; integers are BIGINT (Spark types small ones INT, whose arithmetic
    overflows at 2**31)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return sf.lit(value).cast("long")
    return sf.lit(value)


def column(name: str) -> Column:
    """Reference a column by name, back-quoted so dots and back-quotes are taken literally."""
    return sf.col("`" + name.replace("`", "``") + "`")


def to_spark(expr: Expr) -> Column:  # noqa: PLR0912 (one branch per IR node)
    """Translate an IR expression into a Spark Column (SQL NULL semantics, total: see the module
    docstring; the columns must have been widened by :func:`_widened`)."""
    match expr:
        case Col(name=name):
            return column(name)
        case Lit(value=literal):
            return _literal(literal)
        case BinOp(op=op, left=left, right=right):
            return _ARITHMETIC[op](to_spark(left), to_spark(right))
        case Compare(op=op, left=left, right=right):
            return COMPARISONS[op](to_spark(left), to_spark(right))  # type: ignore[no-any-return]
        case And(args=args):
            return functools.reduce(operator.and_, map(to_spark, args))
        case Or(args=args):
            return functools.reduce(operator.or_, map(to_spark, args))
        case Not(arg=arg):
            return ~to_spark(arg)
        case IsNull(arg=arg):
            return to_spark(arg).isNull()
        case In(values=()):
            return sf.lit(False)
        case In(arg=arg, values=listed):  # an OR of equalities is exactly SQL IN
            element = to_spark(arg)
            return functools.reduce(operator.or_, (element == _literal(v) for v in listed))
        case Between(arg=arg, low=low, high=high):
            middle = to_spark(arg)
            return (to_spark(low) <= middle) & (middle <= to_spark(high))
        case Case(whens=whens, default=default):
            chain = sf.lit(None) if default is None else to_spark(default)
            for condition, result in reversed(whens):
                chain = sf.when(to_spark(condition), to_spark(result)).otherwise(chain)
            return chain
        case Func(name="coalesce", args=args):
            return sf.coalesce(*map(to_spark, args))
        case Func(name=name, args=(arg,)):
            return _FUNCTIONS[name](to_spark(arg))
    raise AssertionError(f"unknown expression {expr!r}")  # pragma: no cover


def _clamped(agg: ExactAggregate, name: str) -> Column:
    value = column(name).cast("double")
    fill = sf.lit(None if agg.fill is None else float(agg.fill)).cast("double")
    bounded = sf.least(sf.greatest(value, sf.lit(float(agg.lower))), sf.lit(float(agg.upper)))  # type: ignore[arg-type]
    return sf.when(value.isNull() | sf.isnan(value), fill).otherwise(bounded)


def _aggregate(agg: ExactAggregate, name: str, *, bounded: bool) -> Column:
    if agg.kind == "count" or (agg.kind == "count_persons" and not bounded):
        return sf.count(sf.lit(1))
    if agg.kind == "count_persons":
        return sf.count_distinct(column(_PID))
    value = _clamped(agg, name)
    if agg.kind == "sum_squares":
        value = value * value
    for factor in grid_scales(agg.grid_exponent):  # the oracle's exact scaling by 2**-k
        value = value * sf.lit(factor)
    # check_plan keeps the rounded value within int64, so BIGINT holds it exactly (a DOUBLE would
    # become a DECIMAL through its shortest decimal text); collect_rows clamps the exact total
    grid = sf.bround(value, 0).cast("long").cast(_EXACT)
    if agg.offset:
        grid = grid - sf.lit(agg.offset).cast(_EXACT)
    return sf.sum(grid)


def _bin(agg: ExactAggregate, name: str) -> Column:
    assert agg.lower is not None
    assert agg.upper is not None
    scaled = (_clamped(agg, name) - sf.lit(float(agg.lower))) / sf.lit(float(agg.upper - agg.lower))
    index = sf.floor(scaled * sf.lit(agg.bins))
    last = sf.lit(agg.bins - 1)
    return sf.when(index > last, last).otherwise(index).cast("long")  # least() would skip NULL


def _widened(frame: DataFrame) -> DataFrame:
    """The frame with its TINYINT/SMALLINT/INT columns as BIGINT and FLOAT and DECIMAL columns as
    DOUBLE, so that arithmetic follows the int64 and double rules of every backend (a DECIMAL is
    a float there, see :func:`~dpcurator.query.backends.plan_checks.expr_type`; Spark's own DECIMAL
    arithmetic raises or makes NULL beyond 38 digits)."""
    wider = {
        name: column(name).cast("double" if kind.startswith("decimal") else _WIDENED[kind])
        for name, kind in frame.dtypes
        if kind in _WIDENED or kind.startswith("decimal")
    }
    return frame.withColumns(wider) if wider else frame


def cluster_session(url: str, conf: Mapping[str, str], app_name: str) -> SparkSession:
    """The SparkSession of ``url`` (an existing one is reused): a Spark Connect client for
    ``sc://host:port``, else a classic driver of that master (``spark://host:port``,
    ``local[2]``, ``yarn``, ``k8s://...``), with the Spark properties ``conf``."""
    if url.startswith("sc://"):
        builder = SparkSession.builder.remote(url)
    else:
        builder = SparkSession.builder.master(url).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _read(
    source: object, table: str, declared: Mapping[str, str], spark: SparkSession | None
) -> DataFrame:
    """Read a path (CSV: inferred types, declared strings as text) or load a source via Arrow,
    with ``spark`` (default: the active session, else the default one)."""
    spark = spark or SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    if not is_path(source):
        return spark.createDataFrame(to_arrow(source, table))
    path = os.fspath(source)  # type: ignore[call-overload]
    if file_format(path) != "csv":
        return spark.read.parquet(path)
    inferred = spark.read.csv(path, header=True, inferSchema=True)
    text = set(text_columns(declared, inferred.columns))
    if not text:
        return inferred
    schema = st.StructType(
        [
            st.StructField(field.name, st.StringType(), True) if field.name in text else field
            for field in inferred.schema.fields
        ]
    )
    return spark.read.csv(path, header=True, schema=schema)


def _typed(frame: DataFrame, declared: Mapping[str, str], table: str) -> DataFrame:
    """Convert the declared columns exactly (lazily), checking every value once now."""
    types = dict(frame.dtypes)
    casts = needed_casts(declared, types, table=table)
    if not casts:
        return frame
    converted = {name: _cast(name, kind, types[name]) for name, kind in casts.items()}
    try:
        frame.select(*(sf.count(value) for value in converted.values())).collect()
    except _ENGINE_ERRORS as exc:
        for name, value in converted.items():  # find the column that cannot be converted
            try:
                frame.select(sf.count(value)).collect()
            except _ENGINE_ERRORS:
                raise cast_error("Spark", table, name, casts[name], types[name]) from exc
        raise
    return frame.withColumns(converted)


def _cast(name: str, declared: str, engine_type: str) -> Column:
    """Convert a column to its declared type, raising an error for an inexact conversion.

    ``try_cast`` (NULL for an invalid text or a value out of range) and an explicit check, not
    ANSI mode, which the owner's session may have turned off (a plain cast then truncates "1.5"
    and makes "x" NULL).
    """
    value = column(name)
    converted = value.try_cast(_DECLARED_TYPES[declared])
    lost = value.isNotNull() & converted.isNull()
    if declared == "int" and is_fractional(engine_type):
        lost = lost | (converted.cast("double") != value)  # a fraction was dropped
    return sf.when(lost, sf.raise_error(sf.lit("inexact"))).otherwise(converted)


class SparkBackend:
    """Exact aggregates on Spark DataFrames (local mode or a cluster)."""

    name = "spark"

    def __init__(self, frames: Mapping[str, DataFrame]) -> None:
        self._frames = dict(frames)

    @classmethod
    def from_source(
        cls,
        source: object,
        *,
        table: str,
        column_types: Mapping[str, str] | None = None,
        spark: SparkSession | None = None,
    ) -> SparkBackend:
        """Wrap a Spark DataFrame, read a CSV/Parquet path, or load another source via Arrow
        (paths and other sources with ``spark``, default: the active or default session).

        Declared ``column_types`` are applied lazily (frames stay distributed); one job at open
        evaluates every conversion, so an impossible one raises DomainError here. CSV columns
        declared strings are read as text.
        """
        declared = check_column_types(column_types)
        try:
            if is_spark_dataframe(source):
                frame: DataFrame = source  # type: ignore[assignment]
            else:
                frame = _read(source, table, declared, spark)
            frame = _typed(frame, declared, table)
        except _ENGINE_ERRORS as exc:
            raise BackendError(
                f"Spark could not open the source of table {table!r}: {exc}"
            ) from exc
        return cls({table: frame})

    def tables(self) -> list[str]:
        """Return the table names."""
        return list(self._frames)

    def columns(self, table: str) -> dict[str, str]:
        """Return the column names of ``table`` mapped to Spark type names."""
        check_table(self, table)
        return dict(self._frames[table].dtypes)

    def close(self) -> None:
        """Drop the frames; the SparkSession is shared and is not stopped."""
        self._frames.clear()

    def compute(self, plan: AggregatePlan) -> ExactResult:
        """Run ``plan`` as Spark jobs (one, plus one per histogram).

        Raises:
            BackendError: before any engine work, for a plan refused from public inputs (its
                columns, bounds, group keys); after it, ``ENGINE_FAILURE_MESSAGE`` and nothing
                else for whatever the engine raised (details on the logger ``dpcurator.engine``).
        """
        check_plan(plan, self.columns(plan.table))
        groups, values = hidden_columns(plan)
        bounded = plan.bound.person_column is not None
        try:
            frame = self._rows(plan, groups, values)
            main = [
                _aggregate(agg, values.get(agg.name, ""), bounded=bounded).alias(agg.name)
                for agg in plan.aggregates
                if agg.kind != "histogram"
            ]
            rows = frame.groupBy(*groups).agg(sf.count(sf.lit(1)), *main).collect()
            counts: dict[str, dict[tuple[object, ...], dict[int, int]]] = {}
            for agg in plan.aggregates:
                if agg.kind != "histogram":
                    continue
                binned = frame.select(*groups, _bin(agg, values[agg.name]).alias("__dp_bin"))
                result = binned.dropna(subset=["__dp_bin"]).groupBy(*groups, "__dp_bin").count()
                counts[agg.name] = bin_counts(result.collect())
            return collect_rows(plan, merge_histograms(plan, rows, counts))
        except DPError:  # the public group keys' types (see _key_filter)
            raise
        except Exception:
            raise engine_failure(self.name, plan) from None

    def _rows(self, plan: AggregatePlan, groups: list[str], values: dict[str, str]) -> DataFrame:
        """Filter, evaluate keys and values, apply public keys and contribution bounds."""
        frame = _widened(self._frames[plan.table])
        person = plan.bound.person_column
        if plan.sample is not None and person is not None:
            frame = _sampled(frame, plan.sample, person)
        if plan.where is not None:
            frame = frame.where(to_spark(plan.where))
        selected = [to_spark(g.expr).alias(n) for g, n in zip(plan.group_by, groups, strict=True)]
        if person is not None:
            selected.append(column(person).alias(_PID))
        selected += [
            to_spark(agg.expr).alias(values[agg.name])
            for agg in plan.aggregates
            if agg.expr is not None
        ]
        if selected:  # a plan of counts only keeps the rows as they are
            frame = frame.select(*selected)
        if plan.group_keys is not None:
            frame = self._key_filter(plan, frame, groups)
        if person is None:
            return frame
        seed = sf.lit(plan.bound.seed).cast("long")
        frame = frame.where(column(_PID).isNotNull()).withColumn(
            "__dp_rh", sf.xxhash64(column(_PID), *map(column, values.values()), seed)
        )
        rows = Window.partitionBy(column(_PID), *map(column, groups)).orderBy("__dp_rh")
        frame = frame.withColumn("__dp_rn", sf.row_number().over(rows))
        keep = sf.col("__dp_rn") <= plan.bound.max_rows_per_group
        if groups:
            group_hash = sf.xxhash64(column(_PID), *map(column, groups), seed)
            ranking = Window.partitionBy(column(_PID)).orderBy("__dp_gh", *groups)
            frame = frame.withColumn("__dp_gh", group_hash).withColumn(
                "__dp_gr", sf.dense_rank().over(ranking)
            )
            keep = keep & (sf.col("__dp_gr") <= plan.bound.max_groups)
        return frame.where(keep)

    @staticmethod
    def _key_filter(plan: AggregatePlan, frame: DataFrame, groups: list[str]) -> DataFrame:
        """Keep the rows whose group key is in the public key set (NULL-safe match)."""
        assert plan.group_keys is not None
        types = {field.name: field.dataType for field in frame.schema.fields}
        fields = [st.StructField(f"__dp_k{i}", types[g], True) for i, g in enumerate(groups)]
        fractional = [isinstance(field.dataType, st.FractionalType) for field in fields]
        rows = [
            tuple(
                float(v) if is_float and isinstance(v, int) and not isinstance(v, bool) else v
                for v, is_float in zip(key, fractional, strict=True)
            )
            for key in plan.group_keys
        ]
        try:
            keys = frame.sparkSession.createDataFrame(rows, st.StructType(fields))
        except (TypeError, ValueError, *_ENGINE_ERRORS) as exc:
            raise BackendError(
                f"The public group keys do not have the types of the group columns: {exc}"
            ) from exc
        condition = functools.reduce(
            operator.and_,
            (column(g).eqNullSafe(sf.col(f.name)) for g, f in zip(groups, fields, strict=True)),
        )
        return frame.join(sf.broadcast(keys), condition, "left_semi")


def _sampled(frame: DataFrame, sample: BlockSample, person: str) -> DataFrame:
    """The rows of the persons a :class:`~dpcurator.query.ir.BlockSample` keeps, with their
    block: ``xxhash64`` of the person, the first ``per_block`` by a second hash."""
    pid = column(person)
    block = sf.pmod(sf.xxhash64(pid, sf.lit(sample.seed).cast("long")), sf.lit(sample.blocks))
    order = sf.xxhash64(pid, sf.lit(sample.seed ^ SECOND_HASH).cast("long"))
    frame = frame.where(pid.isNotNull()).withColumns(
        {sample.column: block.cast("long"), "__dp_sh": order}
    )
    ranking = Window.partitionBy(column(sample.column)).orderBy("__dp_sh", pid)
    frame = frame.withColumn("__dp_sr", sf.dense_rank().over(ranking))
    return frame.where(sf.col("__dp_sr") <= sample.per_block).drop("__dp_sh", "__dp_sr")
