"""The commands that ask a running curator: ``query``, ``estimate``, ``budget``, ``datasets``,
``history``, ``publish`` and ``releases`` (each with ``--format table|csv|json``).

:mod:`dpcurator.cli.main` registers them with :func:`add_parsers` and runs them from
:data:`COMMANDS`. The HTTP client and the printing code are imported when a command runs, so
``dpcurator --help`` stays fast. Every failure is one line (``error: ...``, exit status 1): an
unreachable server, an answer that is not the curator's, a refused token (named ``--token``), or
the server's problem text (which names the dataset, column or value).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from dpcurator.cli import args as cli_args
from dpcurator.cli.args import CliError
from dpcurator.errors import AuthError, DPError

if TYPE_CHECKING:
    from dpcurator.cli.format import Output
    from dpcurator.service.client import CuratorClient

#: Each command's help, and whether it needs ``--dataset`` (True), may take it (False) or has
#: its own choice of dataset or release (None).
_COMMANDS: dict[str, tuple[str, bool | None]] = {
    "query": ("run a DP query (charged to your budget)", True),
    "estimate": ("the cost and expected CI half-widths of a query (free: nothing runs)", True),
    "budget": ("show your total, spent and remaining budget on a dataset", True),
    "datasets": ("list the datasets you can see, with your remaining budget", None),
    "history": ("your past queries (owners: everyone's, with the analyst)", False),
    "publish": ("owners: run queries once against the global cap and publish the release", True),
    "releases": ("list a dataset's published releases, or print one (free)", None),
}


def _add_cost(sub: argparse.ArgumentParser) -> None:
    cost = sub.add_mutually_exclusive_group(required=True)
    cost.add_argument("--epsilon", type=cli_args.positive, help="the privacy cost ε (> 0)")
    cost.add_argument(
        "--accuracy",
        type=cli_args.target,
        action="append",
        metavar="NAME=WIDTH",
        help="instead of --epsilon: the 95%% CI half-width of output NAME (repeat per output); "
        "the smallest cost meeting every target is used",
    )
    cost.add_argument(
        "--rho",
        type=cli_args.positive,
        help="instead of --epsilon: a zCDP cost ρ (> 0; discrete Gaussian noise; needs a budget "
        "with concentrated accounting)",
    )
    sub.add_argument(
        "--noise",
        choices=("laplace", "gaussian"),
        help="the noise family (default: the server's choice, Gaussian where δ > 0 makes it "
        "narrower)",
    )
    sub.add_argument(
        "--delta", type=cli_args.delta, default=0.0, help="the privacy cost δ in [0, 1) (default 0)"
    )
    sub.add_argument(
        "--clipping",
        type=cli_args.number(0, low_inclusive=False, high=1),
        help="with --epsilon: the share of ε (in (0, 1)) spent on a report of the rows outside "
        "the bounds of SUM, AVG, VARIANCE, STDDEV and quantiles",
    )
    sub.add_argument("sql", help='the query, e.g. "SELECT COUNT(*) AS n FROM people"')


def add_parsers(commands: Any) -> None:
    """Register the client commands on the CLI's subcommands."""
    for name, (text, dataset) in _COMMANDS.items():
        sub = commands.add_parser(name, help=text, description=text)
        cli_args.add_connection(sub, dataset=dataset)
        if name in ("query", "estimate"):
            _add_cost(sub)
        elif name == "history":
            sub.add_argument(
                "--limit",
                type=cli_args.positive_int,
                default=100,
                help="at most this many entries, newest first (default 100, at most 1000)",
            )
        elif name == "publish":
            sub.add_argument("--name", required=True, help="the release's name")
            sub.add_argument(
                "--epsilon",
                type=cli_args.positive,
                required=True,
                help="the ε of EACH query (the release costs their sum)",
            )
            sub.add_argument(
                "--delta",
                type=cli_args.delta,
                default=0.0,
                help="the δ of each query, in [0, 1) (default 0)",
            )
            sub.add_argument("sql", nargs="+", help="the queries, each one argument")
        elif name == "releases":
            which = sub.add_mutually_exclusive_group(required=True)
            which.add_argument("--dataset", help="list this dataset's releases")
            which.add_argument("--id", help="print this release (e.g. rel_...) in full")
        cli_args.add_format(sub)


@contextmanager
def _client(args: argparse.Namespace, *, anonymous: bool = False) -> Iterator[CuratorClient]:
    """A client of ``--url`` with ``--token`` (``anonymous``: the token may be missing);
    transport failures, answers that are not JSON and refused tokens become one-line
    CliErrors."""
    import json  # noqa: PLC0415 (deferred, as every command's dependencies)

    from dpcurator.service.client import CuratorClient  # noqa: PLC0415
    from dpcurator.service.http_transport import TransportError  # noqa: PLC0415

    token = args.token if anonymous else cli_args.require_token(args)
    try:
        with CuratorClient(args.url, token) as client:
            yield client
    except TransportError as exc:
        raise CliError(f"cannot reach the curator at --url {args.url}: {exc}") from None
    except json.JSONDecodeError:
        raise CliError(f"--url {args.url} did not answer as a dpcurator curator") from None
    except AuthError as exc:
        raise CliError(f"--token: {exc}") from None


def _cost_options(args: argparse.Namespace) -> dict[str, Any]:
    """The cost a query or estimate asks for: ε/δ, ρ or accuracy targets, and the noise family."""
    accuracy = None if args.accuracy is None else dict(args.accuracy)
    return {
        "epsilon": args.epsilon,
        "delta": args.delta,
        "accuracy": accuracy,
        "noise": args.noise,
        "rho": args.rho,
        "clipping": args.clipping,
    }


def _query(args: argparse.Namespace) -> Output:
    from dpcurator.cli import format as f  # noqa: PLC0415

    with _client(args) as client:
        answer = client.query(args.dataset, args.sql, **_cost_options(args))
    amounts = f.Amounts(exact=args.exact)
    lines = [f.release_text(answer["release"]), f"cost: {amounts.cost(answer['cost'], up=True)}"]
    if answer.get("remaining"):
        lines.append(f"remaining: {amounts.cost(answer['remaining']['remaining'], up=False)}")
    header, rows = f.release_wide(answer["release"])
    return amounts.output("\n".join(lines), answer, header, rows)


def _estimate(args: argparse.Namespace) -> Output:
    from dpcurator.cli import format as f  # noqa: PLC0415
    from dpcurator.core.display import level_text  # noqa: PLC0415

    with _client(args) as client:
        found = client.estimate(args.dataset, args.sql, **_cost_options(args))
    details = found["estimate"]
    alpha = details.get("alpha", 0.05)
    cost = found["cost"]
    amounts = f.Amounts(exact=args.exact)
    epsilon, delta = amounts.of(cost, "epsilon", up=True), amounts.of(cost, "delta", up=True)
    rows = [
        [name, width, 1 - alpha, epsilon, delta, found["fits"]]
        for name, width in details.get("ci_halfwidths", {}).items()
    ]
    title = f"{level_text(alpha)} CI half-width"
    lines = [
        f.aligned(["column", title], [[r[0], r[1]] for r in rows]),
        f"cost: {amounts.cost(cost, up=True)} (an estimate: nothing was charged)",
    ]
    if found.get("remaining"):
        left = amounts.cost(found["remaining"]["remaining"], up=False)
        lines.append(f"fits the remaining budget ({left}): {f.cell(found['fits'])}")
    header = ["column", "ci_halfwidth", "ci_level", "epsilon", "delta", "fits"]
    return amounts.output("\n".join(lines), found, header, rows)


def _budget(args: argparse.Namespace) -> Output:
    from dpcurator.cli import format as f  # noqa: PLC0415

    with _client(args) as client:
        budget = client.budget(args.dataset)
    amounts = f.Amounts(exact=args.exact)
    #: Outward: what was spent rounds up; the total and what is left round down.
    parts = {"total": False, "spent": True, "remaining": False}
    rows: list[list[Any]] = [
        [p, *(amounts.of(budget[p], part, up=up) for part in ("epsilon", "delta", "rho"))]
        for p, up in parts.items()
    ]
    text = "\n".join(f"{p}: {amounts.cost(budget[p], up=up)}" for p, up in parts.items())
    return amounts.output(text, budget, ["part", "epsilon", "delta", "rho"], rows)


def _datasets(args: argparse.Namespace) -> Output:
    from dpcurator.cli import format as f  # noqa: PLC0415

    with _client(args) as client:
        found = client.datasets()
    amounts = f.Amounts(exact=args.exact)
    listed = []
    for d in found:
        kind, view = ("grant", d.get("budget")) if d.get("budget") else ("global cap", d.get("cap"))
        left, total = (view["remaining"], view["total"]) if view else (None, None)
        listed.append(
            {
                "id": d["id"],
                "name": d["name"],
                "budget": kind if view else None,
                "remaining_epsilon": amounts.of(left, "epsilon", up=False),
                "remaining_delta": amounts.of(left, "delta", up=False),
                "total_epsilon": amounts.of(total, "epsilon", up=False),
            }
        )
    columns = ["id", "name", "budget", "remaining_epsilon", "remaining_delta", "total_epsilon"]
    return f.records(listed, columns, empty="(no dataset)", doc=found, amounts=amounts)


def _history(args: argparse.Namespace) -> Output:
    from dpcurator.cli import format as f  # noqa: PLC0415

    with _client(args) as client:
        owner = client.me()["role"] == "owner"
        names = {a["id"]: a["name"] for a in client.analysts()} if owner else {}
        datasets = [args.dataset] if args.dataset else [d["id"] for d in client.datasets()]
        entries = [e for d in datasets for e in client.history(d, limit=min(args.limit, 1000))]
    entries = sorted(entries, key=lambda e: e["id"], reverse=True)[: args.limit]
    columns = ["id", "created_at", "dataset_id", "kind", "status", "epsilon", "delta", "sql"]
    if owner:
        columns[3:3] = ["analyst_id", "analyst"]
    if any(e["cost"].get("rho") is not None for e in entries):  # zCDP charges show their ρ
        columns.insert(columns.index("sql"), "rho")
    amounts = f.Amounts(exact=args.exact)
    flat = [
        {
            **e,
            "analyst_id": e["principal_id"],
            "analyst": names.get(e["principal_id"]),
            **{part: amounts.of(e["cost"], part, up=True) for part in ("epsilon", "delta", "rho")},
        }
        for e in entries
    ]
    return f.records(flat, columns, empty="(no query yet)", doc=entries, amounts=amounts)


def _publish(args: argparse.Namespace) -> Output:
    queries = [{"sql": q, "epsilon": args.epsilon, "delta": args.delta} for q in args.sql]
    with _client(args) as client:
        release = client.publish(args.dataset, args.name, queries)
    return _release_output(release, exact=args.exact)


def _release_output(release: dict[str, Any], *, exact: bool) -> Output:
    from dpcurator.cli import format as f  # noqa: PLC0415

    results = release["results"]
    total = f.total_cost([r["release"]["cost"] for r in results])
    amounts = f.Amounts(exact=exact)
    title = (
        f"release {release['id']} {release['name']!r} on {release['dataset_id']}, "
        f"published {release['created_at']}, cost {amounts.cost(total, up=True)}"
    )
    header, rows = f.releases_long(results)
    text = f"{title}\n\n{f.results_text(results)}"
    return amounts.output(text, release, header, rows)


def _releases(args: argparse.Namespace) -> Output:
    from dpcurator.cli import format as f  # noqa: PLC0415

    with _client(args) as client:
        if args.id is not None:
            return _release_output(client.release(args.id), exact=args.exact)
        found = client.releases(args.dataset)
    amounts = f.Amounts(exact=args.exact)
    listed = []
    for r in found:
        total = f.total_cost([q["release"]["cost"] for q in r["results"]])
        listed.append(
            {
                "id": r["id"],
                "name": r["name"],
                "created_at": r["created_at"],
                "queries": len(r["results"]),
                "epsilon": amounts.of(total, "epsilon", up=True),
                "delta": amounts.of(total, "delta", up=True),
            }
        )
    columns = ["id", "name", "created_at", "queries", "epsilon", "delta"]
    return f.records(listed, columns, empty="(no release published)", doc=found, amounts=amounts)


def run(args: argparse.Namespace) -> int:
    """Run the client command ``args.command`` and print its answer in ``--format``; the
    server's refusal becomes a one-line CliError (its text, whitespace collapsed)."""
    from dpcurator.cli.format import show  # noqa: PLC0415

    try:
        output = COMMANDS[args.command](args)
    except DPError as exc:
        raise CliError(" ".join(str(exc).split())) from None
    show(output, args.format)
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], Output]] = {
    "query": _query,
    "estimate": _estimate,
    "budget": _budget,
    "datasets": _datasets,
    "history": _history,
    "publish": _publish,
    "releases": _releases,
}
