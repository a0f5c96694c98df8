"""``dpcurator check-metadata``: the owner's metadata check on the command line (NOT DP).

Kept apart from :mod:`dpcurator.cli.main`, which only registers the subcommand and dispatches here;
the check's engine is imported when the command runs, so ``dpcurator --help`` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dpcurator.errors import DomainError

HELP = "owner only, NOT differentially private: shares of values the metadata clips or drops"


def add_parser(commands: Any) -> None:
    """Register ``check-metadata`` on the CLI's subcommands."""
    sub = commands.add_parser(
        "check-metadata",
        help=HELP,
        description=(
            "Print, per declared column, the exact shares of rows below/above the declared "
            "bounds, outside the declared keys, missing, or not of the declared type, and the "
            "rows contribution bounding drops. The output is NOT differentially private: it is "
            "for the data owner, never for analysts."
        ),
    )
    sub.add_argument("--data", type=Path, required=True, help="a CSV or Parquet file")
    sub.add_argument("--metadata", type=Path, required=True, help="its metadata (YAML or JSON)")
    sub.add_argument(
        "--table", help="the table to check in a SmartNoise metadata file of several tables"
    )


def run(args: argparse.Namespace) -> int:
    """Run the check and print its report; bad files raise DPError or OSError (reported by
    :func:`dpcurator.cli.main` as 'error: ...')."""
    import yaml  # noqa: PLC0415 (deferred, as every command's dependencies)

    from dpcurator.query.metadata_check import check_metadata  # noqa: PLC0415
    from dpcurator.query.schema import Metadata  # noqa: PLC0415

    try:
        metadata = Metadata.from_yaml(args.metadata, table=args.table)  # YAML reads JSON too
    except yaml.YAMLError as exc:
        raise DomainError(
            f"The metadata file {args.metadata} is not valid YAML/JSON: {exc}"
        ) from None
    print(check_metadata(args.data, metadata).format())
    return 0
