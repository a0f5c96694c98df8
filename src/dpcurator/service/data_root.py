"""Which files an owner may register: regular data files under the server's data root.

An owner's token is not a login on the server's machine. Without a bound, registration would
open any file the server process can read (``/tmp/x.csv`` linked to ``/etc/passwd``) and its
errors would show what the file holds (e.g. the header line, as "its columns"). So:

* a dataset's path, with every symbolic link resolved, must name a regular file with a data
  suffix inside the data root (``serve --data-root``); a link inside the root that leads out of
  it is refused like any outside path;
* every refusal reads the same (:data:`OUTSIDE_ROOT`), whether the file is missing, outside the
  root, a directory or a device: registration is no oracle for what exists on the machine;
* an error while reading the file with the declared metadata becomes :func:`unreadable`'s text,
  which names only what the owner sent (the table and declared columns), never the file's
  contents; the engine's own text goes to the operator's log (logger ``dpcurator.service``).
"""

from __future__ import annotations

import logging
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dpcurator.errors import DomainError, ParameterError
from dpcurator.query.schema import Metadata

SOURCE_SUFFIXES = (".parquet", ".csv", ".duckdb")
OUTSIDE_ROOT = (
    "The 'source.path' parameter must name an existing {suffixes} file under the server's data "
    "root (symbolic links are followed and must stay under it)."
)
NO_ROOT = (
    "This server has no data root, so no dataset can be registered: start it with "
    "'dpcurator serve --data-root DIR'."
)
_LOG = logging.getLogger("dpcurator.service")


def data_file(
    path: object,
    root: Path | None,
    *,
    suffixes: tuple[str, ...] = SOURCE_SUFFIXES,
    refused: ParameterError | None = None,
    directories: bool = False,
) -> Path:
    """The file ``path`` names, fully resolved, if it is a regular data file under ``root``
    (or, with ``directories``, a directory with a data suffix, as Spark writes Parquet).

    Raises:
        ParameterError: no root, or the path is not such a file (one text for every case:
            ``refused`` if given, else :data:`OUTSIDE_ROOT`).
    """
    if root is None:
        raise ParameterError(NO_ROOT)
    refused = refused or ParameterError(OUTSIDE_ROOT.format(suffixes=", ".join(suffixes)))
    if not isinstance(path, str) or not path:
        raise refused
    try:
        resolved = Path(path).resolve(strict=True)
        mode = resolved.stat().st_mode
    except (OSError, RuntimeError, ValueError):  # missing, unreadable, a link loop, a NUL byte
        raise refused from None
    kind_ok = stat.S_ISREG(mode) or (directories and stat.S_ISDIR(mode))
    if not kind_ok or not resolved.is_relative_to(root.resolve()):
        raise refused
    if resolved.suffix not in suffixes or not path.endswith(suffixes):
        raise refused
    return resolved


@contextmanager
def unreadable(metadata: Metadata) -> Iterator[None]:
    """Turn any error raised while opening a data file into a DomainError that shows nothing
    of the file (the original is logged for the operator)."""
    try:
        yield
    except Exception as exc:
        _LOG.warning("registration of table %r failed: %s: %s", metadata.table, type(exc), exc)
        columns = sorted(column.name for column in metadata.columns)
        raise DomainError(
            f"The data file cannot be read as the metadata declares table {metadata.table!r} "
            f"with columns {columns}: check the file's format, its header (the column names) "
            "and that every value fits its declared type. The server log has the details."
        ) from None
