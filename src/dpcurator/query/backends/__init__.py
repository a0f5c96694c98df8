"""Engines that compute exact aggregates: memory (oracle), DuckDB (default), Polars and Spark.

:func:`open_backend` opens a backend on one table from any supported source. The Spark backend is
imported only when asked for: pyspark is an optional heavy dependency (``dpcurator[spark]``), so it
is the one import done inside a function.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from dpcurator._validation import fail
from dpcurator.errors import BackendError
from dpcurator.query.backends.base import Backend
from dpcurator.query.backends.duckdb import DuckDBBackend
from dpcurator.query.backends.memory import MemoryBackend
from dpcurator.query.backends.polars import PolarsBackend
from dpcurator.query.backends.progress import progress_stream
from dpcurator.query.backends.sources import is_spark_dataframe
from dpcurator.query.ir import PrecomputedColumns

ENGINES = ("duckdb", "memory", "polars", "spark")

__all__ = ["ENGINES", "Backend", "DuckDBBackend", "MemoryBackend", "PolarsBackend", "open_backend"]


def open_backend(
    source: object,
    *,
    table: str,
    engine: str = "duckdb",
    column_types: Mapping[str, str] | None = None,
    precomputed: PrecomputedColumns | None = None,
    threads: int | None = None,
    progress: bool | None = None,
) -> Backend:
    """Open a backend that exposes ``source`` as the table ``table``.

    Args:
        source: a CSV or Parquet path, a pandas DataFrame, a polars DataFrame or LazyFrame, a
            pyarrow Table, a DuckDB connection (holding ``table``) or relation, a Spark DataFrame
            (implies ``engine="spark"``), or a dict of equal-length numpy arrays.
        table: the name plans use for this table.
        engine: ``"duckdb"`` (default), ``"polars"``, ``"spark"`` or ``"memory"`` (reference).
        column_types: the metadata's declared types, column name -> ``"int"``, ``"float"``,
            ``"string"`` or ``"bool"``; the table is exposed with these columns converted to them
            (see :mod:`dpcurator.query.backends.types`).
        precomputed: fixed-point and key-code columns the DuckDB engine computes once at
            opening (see :meth:`DuckDBBackend.from_source`); other engines ignore them.
        threads: DuckDB's worker threads (default: one per core); other engines ignore it.
        progress: draw a progress line per step of the DuckDB engine's open on stderr (default:
            when stderr is a terminal; see :mod:`~dpcurator.query.backends.progress`); other
            engines ignore it. Each step is logged on ``dpcurator.engine`` either way.

    Raises:
        ParameterError: unknown engine, empty table name, bad column_types or unsupported source.
        DomainError: a declared column is missing or cannot be converted to its declared type.
        BackendError: the engine cannot read the source (or pyspark is not installed).

    Example:
        >>> backend = open_backend({"x": [1, 2, 3]}, table="t", engine="memory")
        >>> backend.columns("t")
        {'x': 'int64'}
    """
    if not isinstance(table, str) or not table:
        raise fail("open_backend", "table", "a non-empty str", table)
    if engine not in ENGINES:
        raise fail("open_backend", "engine", f"one of {ENGINES}", engine)
    if is_spark_dataframe(source) and engine != "spark":
        if engine != "duckdb":  # the default: a Spark DataFrame implies the Spark engine
            raise fail("open_backend", "engine", "'spark' for a Spark DataFrame", engine)
        engine = "spark"
    if engine == "spark":
        try:
            from dpcurator.query.backends.spark import SparkBackend  # noqa: PLC0415 (optional)
        except ImportError as exc:
            raise BackendError(
                "The 'spark' engine needs pyspark: pip install 'dpcurator[spark]'."
            ) from exc
        return SparkBackend.from_source(source, table=table, column_types=column_types)
    if engine == "duckdb":
        return DuckDBBackend.from_source(
            source,
            table=table,
            column_types=column_types,
            precomputed=precomputed,
            threads=threads,
            progress=progress_stream(progress),
        )
    openers: dict[str, Callable[..., Backend]] = {
        "memory": MemoryBackend.from_source,
        "polars": PolarsBackend.from_source,
    }
    return openers[engine](source, table=table, column_types=column_types)
