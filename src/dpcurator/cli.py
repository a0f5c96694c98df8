"""The ``dpcurator`` command line: serve the curator, query it, administer its ledger.

Imports are deferred to the command that needs them, so ``dpcurator --help`` answers at once.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcurator import metadata_check_cli
from dpcurator.core.measures import ApproxDP
from dpcurator.errors import DPError

if TYPE_CHECKING:
    from dpcurator.service.client import CuratorClient

DEFAULT_LEDGER = "sqlite:///dpcurator-ledger.sqlite3"
DEFAULT_URL = "http://127.0.0.1:8000"

DESCRIPTION = """\
A trusted curator for differentially private statistics.

  dpcurator serve --demo                       try it: demo data, prints tokens and the URL
  dpcurator serve --data F.csv --metadata M.yaml [--ledger URL]
  dpcurator query --token T --dataset D --epsilon 0.5 "SELECT COUNT(*) AS n FROM t"
  dpcurator query --token T --dataset D --accuracy n=50 "SELECT COUNT(*) AS n FROM t"
  dpcurator budget --token T --dataset D
  dpcurator admin --ledger URL create-owner NAME    (and other ledger commands)
  dpcurator check-metadata --data F.csv --metadata M.yaml   (owner only, NOT DP)

Run 'dpcurator COMMAND --help' for a command's options."""


class CliError(Exception):
    """A user error reported as 'error: ...' with exit status 1 (no traceback)."""


def _number(low: float, *, low_inclusive: bool, high: float = math.inf) -> Callable[[str], float]:
    """An argparse type: a finite float in (low, high) (``low`` included if asked)."""
    bound = f"{'>=' if low_inclusive else '>'} {low:g}" + (
        f" and < {high:g}" if high < math.inf else ""
    )

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        above = value >= low if low_inclusive else value > low
        if not math.isfinite(value) or not above or value >= high:
            raise argparse.ArgumentTypeError(f"expected a finite number {bound}, got {text!r}")
        return value

    return parse


_positive = _number(0, low_inclusive=False)
_delta = _number(0, low_inclusive=True, high=1)
_width = _number(0, low_inclusive=True)


def _target(text: str) -> tuple[str, float]:
    """An argparse type: ``NAME=WIDTH``, a (1-α) CI half-width target for one output."""
    name, sep, width = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=WIDTH (e.g. n=50), got {text!r}")
    return name.strip(), _width(width)


def _token(text: str) -> str:
    token = text.strip()
    if not token:
        raise argparse.ArgumentTypeError("the token is empty")
    return token


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpcurator",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _serve_parser(commands)
    for name, text in (("query", "run a DP query"), ("budget", "show the remaining budget")):
        sub = commands.add_parser(name, help=text, description=text)
        sub.add_argument("--url", default=DEFAULT_URL, help=f"the curator (default {DEFAULT_URL})")
        sub.add_argument("--token", type=_token, required=True, help="your API token")
        sub.add_argument("--dataset", required=True, help="the dataset id")
        if name == "query":
            cost = sub.add_mutually_exclusive_group(required=True)
            cost.add_argument("--epsilon", type=_positive, help="the privacy cost ε (> 0)")
            cost.add_argument(
                "--accuracy",
                type=_target,
                action="append",
                metavar="NAME=WIDTH",
                help="instead of --epsilon: the 95%% CI half-width of output NAME (repeat per "
                "output); the smallest cost meeting every target is charged",
            )
            sub.add_argument(
                "--delta", type=_delta, default=0.0, help="the privacy cost δ in [0, 1) (default 0)"
            )
            sub.add_argument("sql", help='the query, e.g. "SELECT COUNT(*) AS n FROM people"')
    _admin_parser(commands)
    metadata_check_cli.add_parser(commands)
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
        "--cap-epsilon", type=_positive, default=50.0, help="global ε cap of --data (default 50)"
    )
    serve.add_argument(
        "--cap-delta", type=_delta, default=0.0, help="global δ cap of --data (default 0)"
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
    serve.add_argument("--port", type=_positive_int, default=8000, help="port (default 8000)")
    serve.add_argument(
        "--result-cache",
        action="store_true",
        help="keep exact aggregates per query plan (every release is still charged and noised)",
    )
    serve.add_argument(
        "--workers",
        type=_positive_int,
        default=1,
        help="worker processes serving the port (default 1; each opens the datasets itself)",
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
                "--expires-in", type=_positive, help="seconds until it expires (default never)"
            )
        if action == "revoke-token":
            sub.add_argument("token_id", help="the token's public id (dpc_<id>_<secret>)")


def _serve(args: argparse.Namespace) -> int:
    if (args.data is None) != (args.metadata is None):
        raise CliError("--data and --metadata go together")
    # Deferred: the server, its engines and pydantic load only when serving.
    from dpcurator.service.schemas import exact  # noqa: PLC0415
    from dpcurator.service.server import (  # noqa: PLC0415
        DEMO_DIR,
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
        cap=ApproxDP(exact(args.cap_epsilon), exact(args.cap_delta)),
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
        on_ready=lambda: print(url, flush=True),  # once it answers (datasets opened)
    )
    return 0


def _cell(cell: Any) -> str:
    if isinstance(cell, dict) and "value" in cell:
        text = f"{cell['value']:.6g}"
        if cell.get("ci_low") is not None:
            text += f" [{cell['ci_low']:.6g}, {cell['ci_high']:.6g}]"
        return text
    return str(cell)


def format_release(release: dict[str, Any]) -> str:
    """A release as an aligned text table (values with their confidence intervals)."""
    groups, values = release.get("group_columns", []), release.get("value_columns", [])
    header = [*groups, *values]
    lines = [
        [*(_cell(row["group"][c]) for c in groups), *(_cell(row["values"][c]) for c in values)]
        for row in release.get("rows", [])
    ]
    widths = [max(len(str(x)) for x in column) for column in zip(header, *lines, strict=True)]
    render = [
        "  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)).rstrip()
        for line in [header, *lines]
    ]
    return "\n".join(render)


@contextmanager
def _client(args: argparse.Namespace) -> Iterator[CuratorClient]:
    """A client of ``--url``; an unreachable server becomes a CliError."""
    import httpx  # noqa: PLC0415 (deferred: only client commands need it)

    from dpcurator.service.client import CuratorClient  # noqa: PLC0415 (deferred)

    try:
        with CuratorClient(args.url, args.token) as client:
            yield client
    except httpx.HTTPError as exc:
        raise CliError(f"cannot reach the curator at {args.url}: {exc}") from None


def _query(args: argparse.Namespace) -> int:
    with _client(args) as client:
        accuracy = None if args.accuracy is None else dict(args.accuracy)
        answer = client.query(
            args.dataset, args.sql, epsilon=args.epsilon, delta=args.delta, accuracy=accuracy
        )
    print(format_release(answer["release"]))
    cost = answer["cost"]
    print(f"cost: ε={cost['epsilon']:.6g} δ={cost['delta']:.3g}")
    if answer.get("remaining"):
        left = answer["remaining"]["remaining"]
        print(f"remaining: ε={left['epsilon']:.6g} δ={left['delta']:.3g}")
    return 0


def _budget(args: argparse.Namespace) -> int:
    with _client(args) as client:
        budget = client.budget(args.dataset)
    for part in ("total", "spent", "remaining"):
        print(f"{part}: ε={budget[part]['epsilon']:.6g} δ={budget[part]['delta']:.3g}")
    return 0


def _admin(args: argparse.Namespace) -> int:
    from dpcurator.service import admin  # noqa: PLC0415 (deferred: loads the service)

    lines = admin.run(
        args.ledger,
        args.action,
        name=getattr(args, "name", None),
        token_id=getattr(args, "token_id", None),
        expires_in=getattr(args, "expires_in", None),
    )
    print("\n".join(lines) if lines else "(none)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpcurator`` console script: 0 on success, 1 on an error (printed
    as 'error: ...', no traceback), 2 on bad arguments."""
    args = _parser().parse_args(argv)
    commands = {"serve": _serve, "query": _query, "budget": _budget, "admin": _admin}
    commands["check-metadata"] = metadata_check_cli.run
    try:
        return commands[args.command](args)
    except (DPError, CliError, OSError) as exc:  # OSError: a file given is missing/unreadable
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
