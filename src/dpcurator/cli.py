"""The ``dpcurator`` command line.

* ``dpcurator serve [--demo] [--data FILE --metadata FILE] [--ledger URL] [--host H] [--port P]``
  starts the HTTP curator and web console. ``--demo`` registers the built-in demo dataset, creates
  an owner and a demo analyst and prints ``analyst token: ...``, ``owner token: ...`` and the URL.
* ``dpcurator query --url URL --token T --dataset D [--epsilon E] [--delta D] "SELECT ..."``
  prints the released table with confidence intervals.
* ``dpcurator budget --url URL --token T --dataset D`` prints the remaining budget.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dpcurator.core.measures import ApproxDP
from dpcurator.errors import DPError
from dpcurator.service.client import CuratorClient
from dpcurator.service.schemas import exact
from dpcurator.service.server import (
    DEMO_DIR,
    bootstrap,
    build_service,
    require_free_port,
    serve,
)

DEFAULT_LEDGER = "sqlite:///dpcurator-ledger.sqlite3"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpcurator", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP curator and web console")
    serve.add_argument("--demo", action="store_true", help="load the built-in demo dataset")
    serve.add_argument("--data", type=Path, help="a CSV, Parquet or DuckDB file to serve")
    serve.add_argument("--metadata", type=Path, help="its public metadata (YAML or JSON)")
    serve.add_argument("--dataset-id", help="the id of --data (default: the file name)")
    serve.add_argument(
        "--data-root",
        type=Path,
        metavar="DIR",
        help="owners may register only files under this directory (symbolic links resolved; "
        "default: the directory of --data, the demo directory with --demo, else none: no "
        "dataset can be registered through the API)",
    )
    serve.add_argument("--cap-epsilon", type=float, default=50.0, help="global ε cap of --data")
    serve.add_argument("--cap-delta", type=float, default=0.0, help="global δ cap of --data")
    serve.add_argument(
        "--ledger",
        help=f"SQLAlchemy URL of the ledger (default {DEFAULT_LEDGER}; a fresh temporary "
        "file with --demo), e.g. postgresql+psycopg://user@host/db",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
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

    for name, text in (("query", "run a DP query"), ("budget", "show the remaining budget")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--url", default="http://127.0.0.1:8000")
        sub.add_argument("--token", required=True)
        sub.add_argument("--dataset", required=True)
        if name == "query":
            sub.add_argument("--epsilon", type=float, default=0.5)
            sub.add_argument("--delta", type=float, default=0.0)
            sub.add_argument("sql")
    return parser


def _serve(args: argparse.Namespace) -> int:
    if (args.data is None) != (args.metadata is None):
        print("error: --data and --metadata go together", file=sys.stderr)
        return 2
    require_free_port(args.host, args.port)  # before a ledger or token is made
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


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


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


def _query(args: argparse.Namespace) -> int:
    with CuratorClient(args.url, args.token) as client:
        answer = client.query(args.dataset, args.sql, epsilon=args.epsilon, delta=args.delta)
    print(format_release(answer["release"]))
    cost = answer["cost"]
    print(f"cost: ε={cost['epsilon']:.6g} δ={cost['delta']:.3g}")
    if answer.get("remaining"):
        left = answer["remaining"]["remaining"]
        print(f"remaining: ε={left['epsilon']:.6g} δ={left['delta']:.3g}")
    return 0


def _budget(args: argparse.Namespace) -> int:
    with CuratorClient(args.url, args.token) as client:
        budget = client.budget(args.dataset)
    for part in ("total", "spent", "remaining"):
        print(f"{part}: ε={budget[part]['epsilon']:.6g} δ={budget[part]['delta']:.3g}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpcurator`` console script."""
    args = _parser().parse_args(argv)
    commands = {"serve": _serve, "query": _query, "budget": _budget}
    try:
        return commands[args.command](args)
    except DPError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
