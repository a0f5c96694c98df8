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
from dpcurator.cli.args import CliError, delta, positive, positive_int
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
    serve.add_argument("--data", type=Path, help="a CSV, Parquet or DuckDB file to serve")
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


def _serve(args: argparse.Namespace) -> int:
    if (args.data is None) != (args.metadata is None):
        raise CliError("--data and --metadata go together")
    # Deferred: the server, its engines and pydantic load only when serving.
    from dpcurator.core.measures import ApproxDP  # noqa: PLC0415
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
    data_root = args.data_root
    if data_root is None and args.demo:
        data_root = DEMO_DIR
    elif data_root is None and args.data is not None:
        data_root = args.data.resolve().parent
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
    )
    started = bootstrap(
        service,
        demo=args.demo,
        data=args.data,
        metadata=args.metadata,
        dataset_id=args.dataset_id,
        cap=ApproxDP(exact(args.cap_epsilon), cap_delta),
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
