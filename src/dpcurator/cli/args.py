"""Argument types and shared options of the ``dpcurator`` command line (standard library only,
so that ``dpcurator --help`` answers at once).

Every type checks its text before any request is made and fails as an argparse usage error
naming the option and the value (exit status 2); :class:`CliError` is for errors found later
(exit status 1, one line, no traceback).
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"
#: The environment variables read when ``--url`` / ``--token`` are not given (a token in the
#: environment stays out of the shell history and the process list).
URL_VARIABLE = "DPCURATOR_URL"
TOKEN_VARIABLE = "DPCURATOR_TOKEN"
FORMATS = ("table", "csv", "json")


class CliError(Exception):
    """A user error reported as 'error: ...' with exit status 1 (no traceback)."""


def number(low: float, *, low_inclusive: bool, high: float = math.inf) -> Callable[[str], float]:
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


positive = number(0, low_inclusive=False)
delta = number(0, low_inclusive=True, high=1)
width = number(0, low_inclusive=True)


def target(text: str) -> tuple[str, float | str]:
    """An argparse type: ``NAME=WIDTH``, a (1-α) CI half-width target for one output, or
    ``NAME=P%`` / ``NAME=P% of S`` relative to a public scale (checked by the server)."""
    name, sep, half_width = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=WIDTH (e.g. n=50), got {text!r}")
    if "%" in half_width:
        return name.strip(), half_width.strip()
    return name.strip(), width(half_width)


def token(text: str) -> str:
    """An argparse type: a non-blank API token."""
    stripped = text.strip()
    if not stripped:
        raise argparse.ArgumentTypeError("the token is empty")
    return stripped


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


_SPARK_URL = re.compile(r"(sc|spark|k8s)://[^\s/]\S*|yarn|local(\[(\d+|\*)(,\d+)?\])?")


def spark_url(text: str) -> str:
    """An argparse type: a Spark master URL (``spark://host:port``, ``local[2]``, ``yarn``,
    ``k8s://...``) or a Spark Connect endpoint (``sc://host:port``)."""
    if not _SPARK_URL.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"expected spark://HOST:PORT, sc://HOST:PORT (Spark Connect), local[N], yarn or "
            f"k8s://..., got {text!r}"
        )
    return text


def key_value(text: str) -> tuple[str, str]:
    """An argparse type: ``KEY=VALUE`` (a Spark property)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def add_connection(sub: argparse.ArgumentParser, *, dataset: bool | None) -> None:
    """``--url``, ``--token`` (defaults from the environment) and ``--dataset`` (required if
    ``dataset`` is True, optional if False, absent if None)."""
    url = os.environ.get(URL_VARIABLE) or DEFAULT_URL
    sub.add_argument(
        "--url", default=url, help=f"the curator (default ${URL_VARIABLE}, else {DEFAULT_URL})"
    )
    sub.add_argument(
        "--token",
        type=token,
        default=os.environ.get(TOKEN_VARIABLE) or None,
        help=f"your API token (default ${TOKEN_VARIABLE})",
    )
    if dataset is not None:
        sub.add_argument(
            "--dataset",
            required=dataset,
            help="the dataset id" if dataset else "only this dataset (default: every one visible)",
        )


def add_format(sub: argparse.ArgumentParser) -> None:
    """``--format table|csv|json`` and ``--exact``."""
    sub.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table (default, for people), csv (for spreadsheets; intervals with a ci_level "
        "column) or json (the server's documents; strict JSON: a non-finite number is null)",
    )
    sub.add_argument(
        "--exact",
        action="store_true",
        help="print ε, δ and ρ exactly (a decimal, or the fraction n/d) in table and csv "
        "(default: table rounds them outward to 4 significant digits, marked ≤ or ≥; json "
        "always has the exact *_exact fields)",
    )


def require_token(args: argparse.Namespace) -> str:
    """The token given by ``--token`` or the environment; none is a CliError."""
    found: Any = args.token
    if found is None:
        raise CliError(f"--token is required (or set {TOKEN_VARIABLE})")
    return str(found)
