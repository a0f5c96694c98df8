"""``dpcurator fit``: fit a model on a curator's dataset and print its coefficients with CIs.

``dpcurator fit --token T --dataset D --epsilon E [--delta X] --model linear y x1 x2 ...``
posts to ``/v1/datasets/{D}/fits`` (charged to the caller's budget, like a query); with
``--estimate`` to ``fits:estimate`` (free: the cost, and whether it fits). A long fit runs as a
server job (``--background`` asks for one): its progress is shown on stderr while it is
polled. Registered by :mod:`dpcurator.cli.main`; the HTTP client is imported when the
command runs, so ``dpcurator --help`` stays fast. Errors are the server's problem text
(naming the column or value), printed by :func:`dpcurator.cli.main` as one ``error: ...`` line.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dpcurator.cli.args import add_connection, require_token
from dpcurator.cli.format import cost_text

HELP = "fit a model (linear or logistic regression): coefficients with CIs (charged)"


def add_parser(commands: Any) -> None:
    """Register ``fit`` on the CLI's subcommands."""
    sub = commands.add_parser("fit", help=HELP, description=HELP)
    add_connection(sub, dataset=True)
    sub.add_argument(
        "--model",
        choices=("linear", "logistic"),
        default="linear",
        help="linear (default) or logistic regression (a 0/1 response)",
    )
    sub.add_argument("--epsilon", type=float, required=True, help="the privacy cost ε (> 0)")
    sub.add_argument("--delta", type=float, default=0.0, help="the privacy cost δ (> 0 for linear)")
    sub.add_argument("--alpha", type=float, default=0.05, help="1 - the CI level (0.05)")
    sub.add_argument(
        "--coef-bound",
        type=float,
        help="logistic, or linear with --method l1: every coefficient in [-b, b] (logistic"
        " default: 10 in standardised units; required with l1)",
    )
    sub.add_argument(
        "--method",
        choices=("objective_perturbation", "sample_and_aggregate", "l1"),
        help="logistic: the route (default objective_perturbation); linear: l1 for the robust"
        " PTR L1 regression (needs --delta and --coef-bound; may answer NR)",
    )
    sub.add_argument("--blocks", type=int, help="logistic sample_and_aggregate: the blocks")
    sub.add_argument("--estimate", action="store_true", help="only the cost (free)")
    sub.add_argument(
        "--background",
        action="store_true",
        help="run as a server job even if short (long fits always do); progress on stderr",
    )
    sub.add_argument("response", help="the response column")
    sub.add_argument("predictors", nargs="+", help="the predictor columns")


def run(args: argparse.Namespace) -> int:
    """Fit (or estimate) and print the result as a table."""
    from dpcurator.service.client import CuratorClient  # noqa: PLC0415 (deferred)

    token = require_token(args)
    chosen = {"coef_bound": args.coef_bound, "method": args.method, "blocks": args.blocks}
    options = {name: value for name, value in chosen.items() if value is not None}
    with CuratorClient(args.url, token) as client:
        answer = client.fit(
            args.dataset, args.model, args.response, args.predictors, epsilon=args.epsilon,
            delta=args.delta, alpha=args.alpha, estimate=args.estimate,
            background=args.background, progress=show_progress, **options,
        )  # fmt: skip
    print(estimate_text(answer) if args.estimate else fit_text(answer))
    return 0


def show_progress(job: dict[str, Any]) -> None:
    """One status line of a server job on stderr, rewritten at each poll (a bar of 20)."""
    done = float(job["progress"]["done"])
    bar = "#" * round(20 * done)
    line = f"\r{job['id']} [{bar:<20}] {100 * done:3.0f}% {job['progress']['message']}"
    end = "\n" if job["status"] in ("done", "failed") else ""
    print(f"{line:<78}", end=end, file=sys.stderr, flush=True)


def _cost(cost: dict[str, Any]) -> str:
    """The charge, rounded up (the CLI's one rule for privacy amounts, :mod:`.format`)."""
    return cost_text(cost, up=True)


def estimate_text(answer: dict[str, Any]) -> str:
    """The free estimate: the request, its cost and whether it fits the budgets."""
    fits = "fits your budget" if answer["fits"] else "does NOT fit your budget"
    return f"{answer['request']}\ncost: {_cost(answer['cost'])} ({fits})"


def fit_text(answer: dict[str, Any]) -> str:
    """The released coefficients, one line per term with its CI and the Wald p-value of H0:
    coefficient = 0 (``-`` where no test applies), under the request and cost."""
    fit = answer["fit"]
    level = f"{100 * fit['ci_level']:g}% CI"
    head = [answer["request"], f"cost: {_cost(answer['cost'])} · {fit['method']}"]
    if not fit["replied"]:
        return "\n".join([*head, "NR (no reply): the DP test declined to answer; the cost stands"])
    table = [["term", "coefficient", level, "Wald p (H0: 0)"]]
    bound = fit.get("at_box_bound") or {}
    wald = fit.get("wald") or {}
    for row in fit["rows"]:
        value = row["values"]["coefficient"]
        interval = (
            "-" if value["ci_low"] is None else f"[{value['ci_low']:.6g}, {value['ci_high']:.6g}]"
        )
        term = row["group"]["term"]
        test = wald.get(term)
        p = "-" if test is None else f"{test['p_value']:.4g}"
        table.append(
            [term + ("*" if bound.get(term) else ""), f"{value['value']:.6g}", interval, p]
        )
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    if any(bound.values()):
        lines.append(
            "* clamped to the public coefficient box: the estimate may lie outside it "
            "(a wider --coef-bound shows where)"
        )
    return "\n".join([*head, f"intervals cover: {fit['covers']}", *lines])
