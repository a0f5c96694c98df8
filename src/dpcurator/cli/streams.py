"""``dpcurator stream``: the curator's running-total streams from the command line.

* ``create`` (owners): a ``count``/``sum`` (binary tree, ε), ``kary_count``/``kary_sum``
  (k-ary tree with consistent estimates, ε) or ``correlated_count``/``correlated_sum`` (ρ-zCDP,
  correlated discrete Gaussian noise) stream; its whole ε or ρ is charged to the dataset's cap
  now (a ρ stream needs a cap with concentrated accounting; a basic cap refuses it, free).
* ``post`` (the owner who created it): a batch of events; prints the release after the batch
  with its 95% interval.
* ``show`` (owners; free): a stream's parameters and latest release.

Registered by :mod:`dpcurator.cli.main`; the HTTP client is imported when a command runs. The
server's refusals are printed as one ``error: ...`` line, as for every client command.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from dpcurator.cli import args as cli_args
from dpcurator.cli import client_commands as cli_client_commands
from dpcurator.cli.args import CliError
from dpcurator.errors import DPError

if TYPE_CHECKING:
    from dpcurator.cli.format import Output

HELP = "owners create running-count streams, post their events and read their releases"
KINDS = (
    "count",
    "sum",
    "kary_count",
    "kary_sum",
    "correlated_count",
    "correlated_sum",
)
_ACTIONS = {
    "create": "owners: create a stream; its ε (or ρ) is charged to the dataset's cap now",
    "post": "the owner who created a stream: ingest a batch of events, print the release",
    "show": "a stream's parameters and latest release with its 95-percent interval (free)",
}
_SHOWN = ["id", "kind", "time", "value", "ci_low", "ci_high"]


def _add_create(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--kind", choices=KINDS, required=True, help="the stream's mechanism")
    cost = sub.add_mutually_exclusive_group(required=True)
    cost.add_argument("--epsilon", type=cli_args.positive, help="ε (> 0): count, sum, kary_*")
    cost.add_argument("--rho", type=cli_args.positive, help="ρ (> 0): correlated_*")
    sub.add_argument(
        "--horizon",
        type=cli_args.positive_int,
        help="the public maximum number of events (optional for correlated_*: unknown)",
    )
    sub.add_argument("--lower", type=float, help="sums: the public lower bound of a value")
    sub.add_argument("--upper", type=float, help="sums: the public upper bound of a value")
    sub.add_argument(
        "--resolution", type=float, help="kary_sum, correlated_sum: a power-of-two grid step"
    )
    sub.add_argument(
        "--branching", type=cli_args.positive_int, help="kary_*: the tree's k (default: best)"
    )
    sub.add_argument(
        "--max-events-per-person",
        type=cli_args.positive_int,
        help="user level: events of one person that count (each event then needs --persons)",
    )


def add_parser(commands: Any) -> None:
    """Register ``stream`` and its actions on the CLI's subcommands."""
    stream = commands.add_parser("stream", help=HELP, description=HELP)
    actions = stream.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in _ACTIONS.items():
        sub = actions.add_parser(action, help=text, description=text)
        cli_args.add_connection(sub, dataset=True if action == "create" else None)
        if action == "create":
            _add_create(sub)
        else:
            sub.add_argument("id", help="the stream's id (str_...)")
        if action != "show":
            sub.add_argument("--idempotency-key", help="a retry with the same key is answered once")
        if action == "post":
            sub.add_argument("values", nargs="+", type=float, help="the batch's events")
            sub.add_argument("--persons", nargs="+", help="user level: each event's person id")
        cli_args.add_format(sub)


def _body(args: argparse.Namespace) -> dict[str, Any]:
    chosen = {
        "kind": args.kind,
        "epsilon": args.epsilon,
        "rho": args.rho,
        "horizon": args.horizon,
        "lower": args.lower,
        "upper": args.upper,
        "resolution": args.resolution,
        "branching": args.branching,
        "max_events_per_person": args.max_events_per_person,
    }
    return {k: v for k, v in chosen.items() if v is not None}


def _one(stream: dict[str, Any], *, exact: bool) -> Output:
    from dpcurator.cli import format as f  # noqa: PLC0415 (deferred)

    amounts = f.Amounts(exact=exact)
    latest = stream.get("latest") or {}
    flat: dict[str, Any] = {"id": stream["id"], "kind": stream["kind"]}
    flat.update({k: latest.get(k) for k in _SHOWN[2:]})
    lines = [f"{k}: {f.cell(v)}" for k, v in flat.items()]
    if "cost" in stream:
        lines.append(f"cost: {amounts.cost(stream['cost'], up=True)}")
    lines.append(f"params: {stream['params']}")
    return amounts.output("\n".join(lines), stream, _SHOWN, [[flat[c] for c in _SHOWN]])


def _headers(args: argparse.Namespace) -> dict[str, str] | None:
    return None if args.idempotency_key is None else {"Idempotency-Key": args.idempotency_key}


def _run(args: argparse.Namespace) -> Output:
    with cli_client_commands._client(args) as client:
        if args.action == "create":
            found = client._call(
                "POST",
                f"/v1/datasets/{args.dataset}/streams",
                json=_body(args),
                headers=_headers(args),
            )
        elif args.action == "post":
            values = [int(v) if v.is_integer() else v for v in args.values]
            body: dict[str, Any] = {"values": values}
            if args.persons is not None:
                body["persons"] = args.persons
            found = client._call(
                "POST", f"/v1/streams/{args.id}/events", json=body, headers=_headers(args)
            )
        else:
            found = client._call("GET", f"/v1/streams/{args.id}")
    return _one(found, exact=args.exact)


def run(args: argparse.Namespace) -> int:
    """Run ``dpcurator stream ACTION``; refusals become one-line CliErrors."""
    from dpcurator.cli.format import show  # noqa: PLC0415 (deferred)

    try:
        output = _run(args)
    except DPError as exc:
        raise CliError(" ".join(str(exc).split())) from None
    show(output, args.format)
    return 0
