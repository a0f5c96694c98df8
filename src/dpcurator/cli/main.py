"""The ``dpcurator`` command line: serve the curator, query it, administer its ledger.

Imports are deferred to the command that needs them, so ``dpcurator --help`` answers at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dpcurator.cli import client_commands as cli_client_commands
from dpcurator.cli import fit as cli_fit
from dpcurator.cli import metadata_check as metadata_check_cli
from dpcurator.cli import streams as cli_streams
from dpcurator.cli import synth as cli_synth
from dpcurator.cli.args import CliError, delta, key_value, positive, positive_int, spark_url
from dpcurator.errors import DPError

DEFAULT_LEDGER = "sqlite:///dpcurator-ledger.sqlite3"

DESCRIPTION = """\
A trusted curator for differentially private statistics.

  dpcurator serve --demo                       try it: demo data, prints tokens and the URL
  dpcurator serve --data F.csv --metadata M.yaml [--ledger URL]
  dpcurator datasets --token T                 what you can query, and your budget left
  dpcurator estimate --token T --dataset D --epsilon 0.5 "SQL"     free: cost and CI widths
  dpcurator query --token T --dataset D --epsilon 0.5 "SELECT COUNT(*) AS n FROM t"
  dpcurator query --token T --dataset D --accuracy n=50 "SELECT COUNT(*) AS n FROM t"
  dpcurator budget --token T --dataset D
  dpcurator history --token T [--dataset D]
  dpcurator publish --token OWNER --dataset D --name N --epsilon E "SQL" ["SQL" ...]
  dpcurator releases --token T --dataset D     (or --id R to print one release)
  dpcurator admin --ledger URL create-owner NAME    (and other ledger commands)
  dpcurator fit --token T --dataset D --epsilon 1 --delta 1e-6 --model linear y x1 x2
  dpcurator synthetic publish --token OWNER --dataset D --kind mst --epsilon 1 --delta 1e-9
  dpcurator stream create --token OWNER --dataset D --kind kary_count --epsilon 1 --horizon 1000
  dpcurator check-metadata --data F.csv --metadata M.yaml   (owner only, NOT DP)

Commands that print results take --format table|csv|json; --url and --token default to
$DPCURATOR_URL and $DPCURATOR_TOKEN. Run 'dpcurator COMMAND --help' for a command's options."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpcurator",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _serve_parser(commands)
    cli_client_commands.add_parsers(commands)
    _admin_parser(commands)
    metadata_check_cli.add_parser(commands)
    cli_fit.add_parser(commands)
    cli_synth.add_parser(commands)
    cli_streams.add_parser(commands)
    return parser


def _serve_parser(commands: Any) -> None:
    text = "run the HTTP curator and web console"
    serve = commands.add_parser("serve", help=text, description=text)
    serve.add_argument(
        "--demo",
        action="store_true",
        help="serve the built-in demo dataset and print owner and demo-analyst tokens "
        "(a restart revokes the earlier ones)",
    )
    serve.add_argument(
        "--data",
        help="a CSV, Parquet or DuckDB file to serve (with --engine spark: a .csv or .parquet "
        "path the cluster reads, local or a URI such as s3a://bucket/people.parquet)",
    )
    serve.add_argument("--metadata", type=Path, help="its public metadata (YAML or JSON)")
    serve.add_argument("--dataset-id", help="the id of --data (default: the file name)")
    serve.add_argument(
        "--cap-epsilon", type=positive, default=50.0, help="global ε cap of --data (default 50)"
    )
    serve.add_argument(
        "--cap-delta",
        type=delta,
        default=None,
        help="global δ cap of --data (default 0: releases and grants with δ > 0 are refused; "
        "with --demo 1e-5)",
    )
    serve.add_argument(
        "--data-root",
        type=Path,
        metavar="DIR",
        help="owners may register only files under this directory (symbolic links resolved; "
        "default: the directory of --data, the demo directory with --demo, else none: no "
        "dataset can be registered through the API)",
    )
    serve.add_argument(
        "--ledger",
        help=f"SQLAlchemy URL of the ledger (default {DEFAULT_LEDGER}; a fresh temporary "
        "file with --demo), e.g. postgresql+psycopg://user@host/db",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    serve.add_argument("--port", type=positive_int, default=8000, help="port (default 8000)")
    serve.add_argument(
        "--result-cache",
        action="store_true",
        help="keep exact aggregates per query plan (every release is still charged and noised)",
    )
    serve.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="worker processes serving the port (default 1; each opens the datasets itself)",
    )
    serve.add_argument(
        "--worker-healthcheck-timeout",
        type=positive_int,
        default=None,
        metavar="SECONDS",
        help="with --workers > 1: seconds a worker may leave its supervisor's health-check ping "
        "unanswered before it is replaced (default 60; a busy or CPU-starved worker answers "
        "late, so keep it well above the longest stall you expect)",
    )
    serve.add_argument(
        "--forwarded-allow-ips",
        metavar="ADDRESSES",
        help="comma-separated addresses of reverse proxies whose X-Forwarded-For header names "
        "the client (default: none; the client is the TCP peer)",
    )
    serve.add_argument(
        "--no-precompute",
        dest="precompute",
        action="store_false",
        help="query files where they are instead of loading them into memory with fixed-point "
        "columns (for data larger than memory; slower sums and means)",
    )
    _spark_options(serve)


def _spark_options(serve: argparse.ArgumentParser) -> None:
    spark = serve.add_argument_group("Spark cluster (docs/deployment-spark.md)")
    spark.add_argument(
        "--engine",
        choices=("duckdb", "spark"),
        default="duckdb",
        help="the query engine (default duckdb); spark runs every release as jobs on the cluster "
        "of --spark-master",
    )
    spark.add_argument(
        "--spark-master",
        type=spark_url,
        metavar="URL",
        help="with --engine spark: a master (spark://HOST:PORT, local[2], yarn, k8s://...) or a "
        "Spark Connect endpoint (sc://HOST:PORT)",
    )
    spark.add_argument(
        "--spark-conf",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark property of the server's session (repeatable)",
    )
    spark.add_argument(
        "--cluster-root",
        action="append",
        default=[],
        metavar="URI",
        help="owners may register paths under this URI prefix, e.g. s3a://bucket/datasets "
        "(repeatable; default: the directory of a --data URI)",
    )
    spark.add_argument(
        "--spark-database",
        action="append",
        default=[],
        metavar="NAME",
        help="owners may register tables of this Spark catalog database (repeatable; default: "
        "the database of --data-table)",
    )
    spark.add_argument(
        "--data-table",
        metavar="DATABASE.TABLE",
        help="with --engine spark: a catalog table to serve instead of --data",
    )


_ADMIN_ACTIONS = {
    "create-owner": "create an owner and print its token",
    "create-analyst": "create an analyst and print its token",
    "issue-token": "print a new token for an existing owner or analyst",
    "revoke-token": "revoke a token by its id",
    "list-owners": "list owners and their live token ids",
    "list-analysts": "list analysts and their live token ids",
    "list-grants": "list every analyst's budget and spending per dataset",
    "list-datasets": "list datasets with their caps and spending",
}


def _admin_parser(commands: Any) -> None:
    text = "administer the ledger directly (no server; e.g. to recover a lost owner token)"
    admin = commands.add_parser("admin", help=text, description=text)
    admin.add_argument(
        "--ledger",
        default=DEFAULT_LEDGER,
        help=f"SQLAlchemy URL of the ledger (default {DEFAULT_LEDGER})",
    )
    actions = admin.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, help_text in _ADMIN_ACTIONS.items():
        sub = actions.add_parser(action, help=help_text, description=help_text)
        if action in ("create-owner", "create-analyst", "issue-token"):
            sub.add_argument("name", help="the owner's or analyst's name")
        if action == "issue-token":
            sub.add_argument(
                "--expires-in", type=positive, help="seconds until it expires (default never)"
            )
        if action == "revoke-token":
            sub.add_argument("token_id", help="the token's public id (dpc_<id>_<secret>)")
        if action in ("list-grants", "list-datasets"):
            sub.add_argument(
                "--exact",
                action="store_true",
                help="print ε and δ exactly (a decimal, or the fraction n/d; default: rounded "
                "outward to 4 significant digits, marked ≤ or ≥)",
            )


_SPARK_ONLY = ("spark_master", "spark_conf", "cluster_root", "spark_database", "data_table")


def _check_engine(args: argparse.Namespace) -> None:
    """The Spark options go with ``--engine spark``, which needs ``--spark-master``."""
    given = [name for name in _SPARK_ONLY if getattr(args, name)]
    if args.engine != "spark" and given:
        option = "--" + given[0].replace("_", "-")
        raise CliError(f"{option} needs --engine spark")
    if args.engine == "spark" and args.spark_master is None:
        raise CliError(
            "--engine spark needs --spark-master URL (spark://HOST:PORT or sc://HOST:PORT)"
        )
    if args.data is not None and args.data_table is not None:
        raise CliError("give --data or --data-table, not both")
    if (args.data is None and args.data_table is None) != (args.metadata is None):
        raise CliError("--data (or --data-table) and --metadata go together")


def _cluster_source(args: argparse.Namespace) -> tuple[dict[str, str] | None, str | None]:
    """The source of ``--data URI`` or ``--data-table`` on a cluster, and its default id."""
    from pathlib import PurePosixPath  # noqa: PLC0415
    from urllib.parse import urlsplit  # noqa: PLC0415

    if args.data_table is not None:
        return {"table": args.data_table}, args.dataset_id or args.data_table.split(".")[-1]
    if args.data is not None and "://" in args.data:
        stem = PurePosixPath(urlsplit(args.data).path).stem
        return {"path": args.data}, args.dataset_id or stem
    return None, args.dataset_id


def _serve(args: argparse.Namespace) -> int:
    _check_engine(args)
    # Deferred: the server, its engines and pydantic load only when serving.
    from dpcurator.core.measures import ApproxDP  # noqa: PLC0415
    from dpcurator.service.cluster import SparkSettings  # noqa: PLC0415
    from dpcurator.service.schemas import exact  # noqa: PLC0415
    from dpcurator.service.server import (  # noqa: PLC0415
        DEMO_CAP,
        DEMO_DIR,
        WORKER_HEALTHCHECK_TIMEOUT,
        bootstrap,
        build_service,
        require_free_port,
        serve,
    )

    require_free_port(args.host, args.port)  # before a ledger or token is made
    # Opening a large dataset takes seconds to minutes: print each step and its time.
    import logging  # noqa: PLC0415

    progress = logging.getLogger("dpcurator.engine")
    progress.setLevel(logging.INFO)
    progress.addHandler(logging.StreamHandler(sys.stderr))
    ledger_url = args.ledger
    if ledger_url is None:
        import tempfile  # noqa: PLC0415

        ledger_url = (
            f"sqlite:///{tempfile.mkdtemp(prefix='dpcurator-demo-')}/ledger.sqlite3"
            if args.demo
            else DEFAULT_LEDGER
        )
    source, dataset_id = _cluster_source(args)
    data = Path(args.data) if args.data is not None and source is None else None
    data_root = args.data_root
    if data_root is None and args.demo:
        data_root = DEMO_DIR
    elif data_root is None and data is not None:
        data_root = data.resolve().parent
    spark = None
    if args.engine == "spark":
        roots = args.cluster_root or (
            [args.data.rsplit("/", 1)[0]] if "path" in (source or {}) else []
        )
        databases = args.spark_database or (
            [args.data_table.split(".")[0]] if args.data_table else []
        )
        spark = SparkSettings(
            args.spark_master, tuple(args.spark_conf), tuple(roots), tuple(databases)
        )
    # The demo's cap has a δ, so that its analyst's δ (and the documented linear fit) is usable.
    cap_delta = (
        exact(args.cap_delta)
        if args.cap_delta is not None
        else (DEMO_CAP.delta if args.demo else exact(0.0))
    )
    service = build_service(
        ledger_url,
        result_cache=args.result_cache,
        precompute=args.precompute,
        data_root=data_root,
        spark=spark,
    )
    started = bootstrap(
        service,
        demo=args.demo,
        data=data,
        metadata=args.metadata,
        dataset_id=dataset_id,
        cap=ApproxDP(exact(args.cap_epsilon), cap_delta),
        source=source,
    )
    if started.analyst_token is not None:
        print(f"analyst token: {started.analyst_token}")
    if started.owner_token is not None:
        print(f"owner token: {started.owner_token}")
    sys.stdout.flush()
    url = f"url: http://{args.host}:{args.port}/console/"
    serve(
        service,
        host=args.host,
        port=args.port,
        workers=args.workers,
        forwarded_allow_ips=args.forwarded_allow_ips,
        worker_healthcheck_timeout=args.worker_healthcheck_timeout or WORKER_HEALTHCHECK_TIMEOUT,
        on_ready=lambda: print(url, flush=True),  # once it answers (datasets opened)
    )
    return 0


def _admin(args: argparse.Namespace) -> int:
    from dpcurator.service import admin  # noqa: PLC0415 (deferred: loads the service)

    lines = admin.run(
        args.ledger,
        args.action,
        name=getattr(args, "name", None),
        token_id=getattr(args, "token_id", None),
        expires_in=getattr(args, "expires_in", None),
        exact=getattr(args, "exact", False),
    )
    print("\n".join(lines) if lines else "(none)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpcurator`` console script: 0 on success, 1 on an error (printed
    as 'error: ...', no traceback), 2 on bad arguments."""
    args = _parser().parse_args(argv)
    commands = {"serve": _serve, "admin": _admin, "check-metadata": metadata_check_cli.run}
    commands.update(dict.fromkeys(cli_client_commands.COMMANDS, cli_client_commands.run))
    commands["fit"] = cli_fit.run
    commands["synthetic"] = cli_synth.run
    commands["stream"] = cli_streams.run
    try:
        return commands[args.command](args)
    except (DPError, CliError, OSError) as exc:  # OSError: a file given is missing/unreadable
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
