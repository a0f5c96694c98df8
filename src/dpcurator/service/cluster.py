"""Datasets on a Spark cluster (``dpcurator serve --engine spark``): which sources an owner may
register, and how the server opens them with its own SparkSession.

The server is one Spark application: a classic driver of a master (``spark://host:port``,
``local[2]``, ``yarn``, ``k8s://...``) or a Spark Connect client (``sc://host:port``), started
on the first dataset opened. Each release runs as Spark jobs on the cluster (see
:mod:`dpcurator.query.backends.spark`); only aggregates come back.

As with files (:mod:`dpcurator.service.data_root`), an owner's token is not a login on the
cluster, so registration reads only what the operator opened to it:

* ``{"path": P}`` with a URI (``s3a://bucket/people.parquet``, ``hdfs://nn/x.csv``): ``P`` must
  lie under one of the server's cluster roots (``serve --cluster-root URI``), compared as text
  after refusing ``.`` and ``..`` segments, queries and fragments; it must end in ``.parquet``
  or ``.csv`` (a file or a directory of part files, as Spark writes them);
* ``{"path": P}`` with a local path: a file or directory with such a suffix under the data root
  (``serve --data-root DIR``, symbolic links resolved), which the executors read at the same path;
* ``{"table": "db.name"}``: a table of the Spark catalog in a database the operator allowed
  (``serve --spark-database db``).

Every refused path reads the same (:data:`OUTSIDE_ROOTS`), and any failure while opening, from
the session's start to the check of the declared types, is logged for the operator and shown as
the one text of :func:`~dpcurator.service.data_root.unreadable` at registration, or
:data:`CANNOT_OPEN` later: Spark's text can quote data values.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dpcurator.errors import BackendError, ParameterError
from dpcurator.query.backends import Backend
from dpcurator.query.schema import Metadata
from dpcurator.service.data_root import data_file

SPARK_SUFFIXES = (".parquet", ".csv")
#: The Spark application name of the server (a classic driver's; the cluster's UI lists it).
APP_NAME = "dpcurator-serve"
OUTSIDE_ROOTS = (
    "The 'source.path' parameter must name a .parquet or .csv file or directory under the "
    "server's data root or one of its cluster roots (a URI without '.' or '..' segments; local "
    "symbolic links are followed and must stay under the data root)."
)
NO_SOURCE = (
    "This server has no data root, cluster root or Spark database, so no dataset can be "
    "registered: start it with 'dpcurator serve --engine spark --cluster-root URI' (or "
    "--data-root DIR, or --spark-database NAME)."
)
SOURCE_SHAPE = (
    "The 'source' parameter must be {'path': LOCATION} or {'table': 'DATABASE.TABLE'} on a "
    "server using the Spark engine."
)
TABLE_REFUSED = (
    "The 'source.table' parameter must be 'DATABASE.TABLE' (letters, digits and '_') with a "
    "database the server allows ('dpcurator serve --spark-database NAME')."
)
CANNOT_OPEN = "The dataset cannot be opened on the cluster; the server log has the details."
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LOG = logging.getLogger("dpcurator.service")


@dataclass(frozen=True)
class SparkSettings:
    """The server's Spark application and what owners may register on it.

    Args:
        url: the master URL or the ``sc://`` Spark Connect endpoint.
        conf: Spark properties of the session (``serve --spark-conf KEY=VALUE``).
        roots: URI prefixes under which paths may be registered (``--cluster-root``).
        databases: catalog databases whose tables may be registered (``--spark-database``).
    """

    url: str
    conf: tuple[tuple[str, str], ...] = ()
    roots: tuple[str, ...] = ()
    databases: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (for a multi-process server's workers)."""
        return {
            "url": self.url,
            "conf": [list(pair) for pair in self.conf],
            "roots": list(self.roots),
            "databases": list(self.databases),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SparkSettings:
        """The inverse of :meth:`to_dict`."""
        conf = tuple((str(key), str(value)) for key, value in data["conf"])
        return cls(str(data["url"]), conf, tuple(data["roots"]), tuple(data["databases"]))


def cluster_source(
    source: Mapping[str, Any], settings: SparkSettings, data_root: Path | None
) -> dict[str, str]:
    """The normalised source (``{"path": ...}`` or ``{"table": ...}``) if owners may register it.

    Raises:
        ParameterError: nothing can be registered, or this source may not be (one text for
            every refused path: no oracle of what exists).
    """
    if data_root is None and not settings.roots and not settings.databases:
        raise ParameterError(NO_SOURCE)
    if set(source) == {"table"}:
        return {"table": _table(source["table"], settings.databases)}
    if set(source) != {"path"}:
        raise ParameterError(SOURCE_SHAPE)
    path = source["path"]
    refused = ParameterError(OUTSIDE_ROOTS)
    if isinstance(path, str) and "://" in path:
        return {"path": _uri(path, settings.roots, refused)}
    if data_root is None:
        raise refused
    local = data_file(path, data_root, suffixes=SPARK_SUFFIXES, refused=refused, directories=True)
    return {"path": str(local)}


def _uri(path: str, roots: tuple[str, ...], refused: ParameterError) -> str:
    """``path`` if it is a clean URI under one of ``roots``."""
    try:
        parts = urlsplit(path)
    except ValueError:
        raise refused from None
    segments = parts.path.split("/")[1:]
    clean = (
        parts.scheme
        and not parts.query
        and not parts.fragment
        and "\\" not in path
        and path.isprintable()
        and all(segment not in ("", ".", "..") for segment in segments)
    )
    if not clean or not path.endswith(SPARK_SUFFIXES):
        raise refused
    if not any(path.startswith(root.rstrip("/") + "/") for root in roots):
        raise refused
    return path


def _table(name: object, databases: tuple[str, ...]) -> str:
    """``name`` if it is ``DATABASE.TABLE`` in an allowed database."""
    if not isinstance(name, str):
        raise ParameterError(TABLE_REFUSED)
    parts = name.split(".")
    if len(parts) != 2 or not all(_IDENTIFIER.fullmatch(part) for part in parts):
        raise ParameterError(TABLE_REFUSED)
    if parts[0] not in databases:
        raise ParameterError(TABLE_REFUSED)
    return name


def open_on_cluster(
    settings: SparkSettings, source: Mapping[str, Any], metadata: Metadata
) -> Backend:
    """Open a registered source with the server's SparkSession (started on first use).

    Raises:
        BackendError: :data:`CANNOT_OPEN`, whatever failed (Spark's text is logged only).
    """
    from dpcurator.query.backends.spark import (  # noqa: PLC0415 (the optional engine)
        SparkBackend,
        cluster_session,
    )

    try:
        spark = cluster_session(settings.url, dict(settings.conf), APP_NAME)
        data = spark.table(source["table"]) if "table" in source else str(source["path"])
        return SparkBackend.from_source(
            data, table=metadata.table, column_types=metadata.column_types(), spark=spark
        )
    except Exception as exc:
        _LOG.warning("opening table %r on Spark failed: %s: %s", metadata.table, type(exc), exc)
        raise BackendError(CANNOT_OPEN) from None
