"""Data sources shared by the backends: paths and their file formats, Spark DataFrames, the
conversion of a source to Arrow, and the check that a backend serves a table."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pa_parquet

from dpcurator._validation import fail
from dpcurator.errors import (
    BackendError,
    ParameterError,
)
from dpcurator.query.backends.base import Backend


def is_path(source: object) -> bool:
    """Return whether ``source`` names a file (str or os.PathLike)."""
    return isinstance(source, str | os.PathLike)


def file_format(path: str | os.PathLike[str]) -> str:
    """Return ``"csv"`` or ``"parquet"`` from a file name; raise ParameterError otherwise."""
    lowered = os.fspath(path).lower()
    for suffix, kind in ((".csv", "csv"), (".parquet", "parquet"), (".pq", "parquet")):
        if lowered.endswith(suffix):
            return kind
    raise fail("open_backend", "source", "a .csv or .parquet file", os.fspath(path))


def is_spark_dataframe(source: object) -> bool:
    """Return whether ``source`` is a PySpark DataFrame (checked without importing pyspark)."""
    return any(
        cls.__module__.startswith("pyspark.") and cls.__name__ == "DataFrame"
        for cls in type(source).__mro__
    )


def to_arrow(source: object, table: str, text: Iterable[str] = ()) -> pa.Table:
    """Convert any supported non-Spark source to a pyarrow Table.

    pandas missing values (NaN, None, NA) become NULL, as pandas means them; NaN in numpy arrays
    and pyarrow/polars data stays NaN. A CSV file's columns named in ``text`` are read as strings,
    and empty CSV fields are NULL in every column (as DuckDB, Polars and Spark read them).
    """
    if is_path(source):
        path = os.fspath(source)  # type: ignore[call-overload]
        if file_format(path) == "csv":
            options = pa_csv.ConvertOptions(
                column_types=dict.fromkeys(text, pa.string()), strings_can_be_null=True
            )
            return pa_csv.read_csv(path, convert_options=options)
        return pa_parquet.read_table(path)
    if isinstance(source, pa.Table):
        return source
    if isinstance(source, pd.DataFrame):
        return pa.Table.from_pandas(source, preserve_index=False)
    if isinstance(source, pl.LazyFrame):
        return source.collect().to_arrow()
    if isinstance(source, pl.DataFrame):
        return source.to_arrow()
    if isinstance(source, duckdb.DuckDBPyRelation):
        return source.to_arrow_table()
    if isinstance(source, duckdb.DuckDBPyConnection):
        try:
            return source.table(table).to_arrow_table()
        except duckdb.Error as exc:
            raise BackendError(f"The DuckDB connection has no table {table!r}: {exc}") from exc
    if isinstance(source, Mapping):
        if not all(isinstance(key, str) for key in source):
            raise fail("open_backend", "source", "a dict with str keys", list(source))
        try:
            return pa.table({key: np.asarray(value) for key, value in source.items()})
        except (pa.ArrowException, ValueError) as exc:
            raise fail("open_backend", "source", "a dict of equal-length 1-d arrays", exc) from exc
    raise ParameterError(
        "The 'source' parameter of open_backend must be a CSV/Parquet path, a pandas, polars, "
        "pyarrow, DuckDB or Spark table, or a dict of numpy arrays. "
        f"Got an object of type {type(source).__module__}.{type(source).__qualname__}."
    )


def check_table(backend: Backend, table: str) -> None:
    """Raise BackendError if ``table`` is not one of the backend's tables."""
    if table not in backend.tables():
        raise BackendError(
            f"The {backend.name} backend has no table {table!r}. Its tables are {backend.tables()}."
        )
