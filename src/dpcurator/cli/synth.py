"""``dpcurator synthetic``: synthetic data and contingency tables published by the curator.

* ``estimate`` (owners, free): the charge and the expected error of each measured marginal.
* ``publish`` (owners): charge the dataset's global cap once and compute the release on the
  server; waits with a progress line on stderr unless ``--no-wait``.
* ``list`` / ``show`` (anyone who sees the dataset; free): the releases with their cost.
* ``download`` (free: post-processing): the released table as CSV, Parquet or JSON, written
  to a file byte for byte as the server sends it. A public release needs no token.

Registered by :mod:`dpcurator.cli.main`; the HTTP client is imported when a command runs, so
``dpcurator --help`` stays fast. The server's refusals (a column without public keys or
bounds, a domain over its limit, a budget in the wrong measure) are free and printed as one
``error: ...`` line, as for every client command.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcurator.cli import args as cli_args
from dpcurator.cli import client_commands as cli_client_commands
from dpcurator.cli.args import CliError
from dpcurator.errors import DPError

if TYPE_CHECKING:
    from dpcurator.cli.format import Amounts, Output

HELP = "owners publish synthetic data or contingency tables; anyone allowed lists and downloads"
KINDS = ("marginals", "fourier", "mst", "aim", "mwem")
DATA_FORMATS = ("csv", "parquet", "json")
_ACTIONS = {
    "estimate": "owners: the charge and expected per-marginal errors of a release (free)",
    "publish": "owners: charge the dataset's cap once and compute the release on the server",
    "list": "a dataset's synthetic releases with their cost (free)",
    "show": "one synthetic release: its request, cost, status and progress (free)",
    "download": "write a finished release's table to a file (free; public ones need no token)",
}


def _marginal(text: str) -> list[str]:
    """An argparse type: ``a,b`` (the columns of one marginal)."""
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected COLUMN[,COLUMN...], got {text!r}")
    return names


def _add_release(sub: argparse.ArgumentParser) -> None:
    """The options defining a release (estimate and publish)."""
    sub.add_argument("--kind", choices=KINDS, required=True, help="what to release: " + (
        "marginals (consistent noisy contingency tables, mbi), fourier (the same by Barak et "
        "al.'s Fourier method, rho-zCDP), mst, aim (rho-zCDP synthetic "
        "records) or mwem (pure epsilon-DP synthetic records)"
    ))  # fmt: skip
    cost = sub.add_mutually_exclusive_group(required=True)
    cost.add_argument(
        "--epsilon",
        type=cli_args.positive,
        help="the charge ε (> 0); mst and aim take the largest ρ whose (ε, δ) it is",
    )
    cost.add_argument(
        "--rho", type=cli_args.positive, help="instead of --epsilon: a zCDP ρ (> 0; needs --delta)"
    )
    sub.add_argument(
        "--delta",
        type=cli_args.delta,
        default=0.0,
        help="δ in [0, 1) (default 0; > 0 for mst and aim, 0 for mwem)",
    )
    sub.add_argument(
        "--columns", nargs="+", metavar="COLUMN", help="the columns (default: every column)"
    )
    sub.add_argument(
        "--marginal",
        dest="marginals",
        type=_marginal,
        action="append",
        metavar="A,B",
        help="one marginal, repeat per marginal: the tables of kind marginals (default every "
        "1- and 2-way one) or the workload of aim and mwem (default every 2-way one)",
    )
    sub.add_argument(
        "--rows",
        type=cli_args.positive_int,
        help="synthetic records to sample (default: the noisy total)",
    )


def add_parser(commands: Any) -> None:
    """Register ``synthetic`` and its actions on the CLI's subcommands."""
    synthetic = commands.add_parser("synthetic", help=HELP, description=HELP)
    actions = synthetic.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in _ACTIONS.items():
        sub = actions.add_parser(action, help=text, description=text)
        cli_args.add_connection(sub, dataset=True if action not in ("show", "download") else None)
        if action in ("estimate", "publish"):
            _add_release(sub)
        if action == "publish":
            sub.add_argument(
                "--public",
                action="store_true",
                help="anyone may read the release, without a token (default: whoever sees the "
                "dataset)",
            )
            sub.add_argument(
                "--no-wait",
                dest="wait",
                action="store_false",
                help="print the started job and return (poll it with 'dpcurator synthetic show')",
            )
        if action in ("show", "download"):
            sub.add_argument("id", help="the release's id (syn_...)")
        if action == "download":
            sub.add_argument("--output", "-o", type=Path, required=True, help="the file to write")
            sub.add_argument(
                "--as",
                dest="data_format",
                choices=DATA_FORMATS,
                help="the file's format (default: from --output's extension, else csv)",
            )
        else:
            cli_args.add_format(sub)


def _release_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": args.kind, "delta": args.delta}
    chosen = {
        "epsilon": args.epsilon,
        "rho": args.rho,
        "columns": args.columns,
        "marginals": args.marginals,
        "rows": args.rows,
    }
    body.update({k: v for k, v in chosen.items() if v is not None})
    return body


def _estimate(args: argparse.Namespace) -> Output:
    from dpcurator.cli import format as f  # noqa: PLC0415 (deferred)

    with cli_client_commands._client(args) as client:
        found = client.estimate_synthetic(args.dataset, **_release_body(args))
    errors: list[dict[str, Any]] = found["expected_errors"]
    header = list(errors[0]) if errors else []
    rows = [[e.get(c) for c in header] for e in errors]
    fits = "fits" if found["fits_cap"] else "does NOT fit"
    amounts = f.Amounts(exact=args.exact)
    lines = [
        f"{found['kind']}: cost {amounts.cost(found['cost'], up=True)} (an estimate: nothing "
        f"was charged); {fits} the dataset's cap",
        "expected error of one noisy cell (ci_halfwidth: 95% CI half-width, in records):",
        f.aligned(header, rows),
    ]
    return amounts.output("\n".join(lines), found, header, rows)


def _summary(release: dict[str, Any], amounts: Amounts) -> dict[str, Any]:
    progress = release["progress"]
    return {
        "id": release["id"],
        "kind": release["kind"],
        "status": release["status"],
        "progress": f"{100 * progress.get('done', 0):.0f}% {progress.get('message', '')}".strip(),
        "rows": release["rows"],
        "public": release["public"],
        "cost": amounts.cost(release["cost"], up=True),
        "created_at": release["created_at"],
    }


_SUMMARY = ["id", "kind", "status", "progress", "rows", "public", "cost", "created_at"]


def _one(release: dict[str, Any], *, exact: bool) -> Output:
    from dpcurator.cli import format as f  # noqa: PLC0415 (deferred)

    amounts = f.Amounts(exact=exact)
    flat = _summary(release, amounts)
    text = "\n".join(f"{k}: {f.cell(v)}" for k, v in flat.items())
    return amounts.output(text, release, _SUMMARY, [[flat[c] for c in _SUMMARY]])


def _publish(args: argparse.Namespace) -> Output:
    with cli_client_commands._client(args) as client:
        job = client.publish_synthetic(args.dataset, public=args.public, **_release_body(args))
        shown = ""
        while args.wait and job["status"] == "running":
            progress = job["progress"]
            line = f"{job['id']}: {100 * progress['done']:.0f}% {progress['message']}"
            if line != shown:
                print(line, file=sys.stderr, flush=True)
                shown = line
            time.sleep(1.0)
            job = client.synthetic(job["id"])
    if args.wait and job["status"] != "done":
        from dpcurator.cli.format import cost_text  # noqa: PLC0415 (deferred)

        raise CliError(
            f"synthetic release {job['id']} is {job['status']}; its charge stands "
            f"({cost_text(job['cost'], up=True)})"
        )
    return _one(job, exact=args.exact)


def _list(args: argparse.Namespace) -> Output:
    from dpcurator.cli import format as f  # noqa: PLC0415 (deferred)

    with cli_client_commands._client(args) as client:
        found = client.synthetic_releases(args.dataset)
    amounts = f.Amounts(exact=args.exact)
    flat = [_summary(r, amounts) for r in found]
    return f.records(flat, _SUMMARY, empty="(no synthetic release)", doc=found, amounts=amounts)


def _show(args: argparse.Namespace) -> Output:
    with cli_client_commands._client(args) as client:
        return _one(client.synthetic(args.id), exact=args.exact)


def _download(args: argparse.Namespace) -> int:
    """Fetch the data in the chosen format and write the server's bytes to ``--output``."""
    suffix = args.output.suffix.lower().lstrip(".")
    fmt = args.data_format or (suffix if suffix in DATA_FORMATS else "csv")
    with cli_client_commands._client(args, anonymous=True) as client:
        data = client.synthetic_file(args.id, fmt)
    args.output.write_bytes(data)
    print(f"wrote {len(data)} bytes ({fmt}) to {args.output}", file=sys.stderr)
    return 0


_COMMANDS = {"estimate": _estimate, "publish": _publish, "list": _list, "show": _show}


def run(args: argparse.Namespace) -> int:
    """Run ``dpcurator synthetic ACTION``; refusals become one-line CliErrors."""
    from dpcurator.cli.format import show  # noqa: PLC0415 (deferred)

    try:
        if args.action == "download":
            return _download(args)
        output = _COMMANDS[args.action](args)
    except DPError as exc:
        raise CliError(" ".join(str(exc).split())) from None
    show(output, args.format)
    return 0
