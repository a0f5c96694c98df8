"""Privacy amounts people can read (issue 28 item 3, command line): ε, δ and ρ are rounded
outward to 4 significant digits, marked ``≤`` (rounded up: a charge or spending) or ``≥``
(rounded down: a budget or what is left), with a note stating the precision; ``--exact``, CSV
and JSON keep the exact values; no raw fraction reaches the default display."""

from __future__ import annotations

import csv
import io
import json
import random
import re
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from dpcurator.cli.format import Amounts, cost_text
from dpcurator.core import display
from tests._service_helpers import new_analyst, run_cli, serve_people

pytestmark = pytest.mark.usefixtures("cli_environment_cleared")

NOTE = "≤ rounded up, ≥ rounded down, to 4 significant digits"
#: The spent ε of the issue's ``admin list-datasets`` (4.3 less about 5e-10).
ISSUE_SPENT = Fraction(96827391977517759, 22517998136852480)
#: A raw fraction as the ledger writes it (``n/d``).
RAW_FRACTION = re.compile(r"\d+/\d+")


def _shown(text: str) -> Fraction:
    """The value a displayed amount states (``≤4.301`` is 4.301)."""
    return Fraction(text.lstrip("=≤≥"))


def _significant_digits(text: str) -> int:
    mantissa = text.lstrip("=≤≥-").split("e")[0].replace(".", "").lstrip("0")
    return len(mantissa.rstrip("0")) or 1


def test_the_issues_amounts_read_as_short_decimals() -> None:
    assert display.amount_text(ISSUE_SPENT, up=True) == "≤4.3"
    assert display.amount_text(ISSUE_SPENT, up=False) == "≥4.299"
    assert display.amount_text(Fraction(1, 100000), up=False) == "=1e-5"
    assert display.amount_text(Fraction(9899, 10**9), up=True) == "=9.899e-6"
    assert display.amount_text("36028797018963965/36028797018963968", up=True) == "≤1"
    assert display.amount_text(0.1, up=True) == "=0.1"  # a float as the decimal it prints as
    assert display.amount_text("0", up=False) == "=0"
    assert display.amount_text(ISSUE_SPENT, up=True, exact=True) == f"={ISSUE_SPENT}"
    assert display.exact_text("1/8") == "0.125"  # a short terminating decimal stays a decimal


@pytest.mark.parametrize("up", [True, False])
def test_rounding_is_outward_within_the_stated_precision(up: bool) -> None:
    """For random exact amounts (seeded) across 16 decades: the shown value is on the safe side
    (≥ the exact value when rounded up, ≤ when down), has at most 4 significant digits, is
    within one unit of the 4th digit, and is marked rounded exactly when it differs."""
    rng = random.Random(20261128)
    for _ in range(2000):
        exponent = rng.randint(-12, 3)
        value = Fraction(rng.randint(1, 10**12), 10**12) * Fraction(10) ** exponent
        if rng.random() < 0.2:  # a short decimal, written exactly
            value = Fraction(rng.randint(1, 9999), 10 ** rng.randint(0, 12))
        text = display.amount_text(value, up=up)
        shown = _shown(text)
        assert (shown >= value) if up else (shown <= value), (value, text)
        assert _significant_digits(text) <= 4, text
        assert abs(shown - value) <= value / 1000, (value, text)
        assert text.startswith("=") == (shown == value), (value, text)
        assert text[0] == ("=" if shown == value else "≤" if up else "≥")


def test_cost_documents_prefer_the_exact_fraction() -> None:
    doc = {
        "epsilon": float(ISSUE_SPENT),
        "delta": 1e-5,
        "epsilon_exact": str(ISSUE_SPENT),
        "delta_exact": "1/100000",
        "rho": None,
        "rho_exact": None,
    }
    assert cost_text(doc, up=True) == "ε≤4.3 δ=1e-5"
    assert cost_text(doc, up=False) == "ε≥4.299 δ=1e-5"
    assert cost_text(doc, up=True, exact=True) == f"ε={ISSUE_SPENT} δ=1e-5"
    assert cost_text({"epsilon": None, "rho": 0.125, "rho_exact": "1/8"}, up=True) == "ρ=0.125"
    amounts = Amounts()
    amounts.cost({"epsilon": 0.5, "delta": 0.0}, up=True)
    assert not amounts.output("x", {}).rounded
    amounts.cost(doc, up=True)
    assert amounts.output("x", {}).rounded


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """A served ``people`` dataset: its URL, the owner's token and the ledger file."""
    root = tmp_path_factory.mktemp("numbers")
    with serve_people(root) as (url, owner):
        yield url, owner, root / "l.sqlite3"


def test_budget_history_and_datasets_round_outward_and_say_so(
    served: tuple[str, str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A query by accuracy costs an ε with ~60 binary digits: the displays round it outward
    against the exact values the server sends, state the precision and show no fraction."""
    url, owner, _ = served
    _, _, token = new_analyst(url, owner, 2.0)
    connect = ["--url", url, "--token", token]
    sql = "SELECT COUNT(*) AS n FROM people"
    code, out, _ = run_cli(
        capsys, "query", *connect, "--dataset", "people", "--accuracy", "n=300", sql
    )
    assert code == 0
    cost = re.search(r"^cost: ε(\S+) δ=0$", out, re.MULTILINE)
    assert cost is not None, out
    assert cost.group(1).startswith("≤"), out
    assert out.rstrip().endswith(f"{NOTE} (exact: --exact or --format json)")

    code, out, _ = run_cli(capsys, "budget", *connect, "--dataset", "people", "--format", "json")
    exact = {p: Fraction(json.loads(out)[p]["epsilon_exact"]) for p in ("spent", "remaining")}
    assert exact["spent"].denominator > 10**9  # the case under test: not a short decimal
    code, out, _ = run_cli(capsys, "budget", *connect, "--dataset", "people")
    lines = out.splitlines()
    assert lines[0] == "total: ε=2 δ=0"
    spent = re.fullmatch(r"spent: ε(≤\S+) δ=0", lines[1])
    left = re.fullmatch(r"remaining: ε(≥\S+) δ=0", lines[2])
    assert spent is not None, out
    assert left is not None, out
    assert exact["spent"] <= _shown(spent.group(1)) <= exact["spent"] * Fraction(1001, 1000)
    assert exact["remaining"] * Fraction(999, 1000) <= _shown(left.group(1)) <= exact["remaining"]
    assert lines[3].startswith(NOTE)
    assert not RAW_FRACTION.search(out)

    code, out, _ = run_cli(capsys, "budget", *connect, "--dataset", "people", "--exact")
    assert f"spent: ε={exact['spent']} δ=0" in out
    assert NOTE not in out
    code, out, _ = run_cli(capsys, "budget", *connect, "--dataset", "people", "--format", "csv")
    rows = {r["part"]: r for r in csv.DictReader(io.StringIO(out))}
    assert float(rows["spent"]["epsilon"]) == float(exact["spent"])

    code, out, _ = run_cli(capsys, "history", *connect)
    header, entry = out.splitlines()[:2]
    assert entry.split()[header.split().index("epsilon")] == spent.group(1)
    assert out.rstrip().splitlines()[-1].startswith(NOTE)
    code, out, _ = run_cli(capsys, "datasets", *connect)
    header, row = out.splitlines()[:2]
    assert row.split()[header.split().index("remaining_epsilon")] == left.group(1)
    assert not RAW_FRACTION.search(out)


def test_admin_lists_show_no_raw_fraction(
    served: tuple[str, str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``admin list-datasets`` / ``list-grants`` printed ``spent ε=96827391977517759/...``: now
    rounded outward with the note, exact with ``--exact``."""
    url, owner, ledger = served
    analyst, _, token = new_analyst(url, owner, 1.0)
    query = ["--url", url, "--token", token, "--dataset", "people", "--accuracy", "n=250"]
    assert run_cli(capsys, "query", *query, "SELECT COUNT(*) AS n FROM people")[0] == 0
    admin = ["admin", "--ledger", f"sqlite:///{ledger}"]
    code, out, _ = run_cli(capsys, *admin, "list-datasets")
    assert code == 0
    line = out.splitlines()[0]
    assert re.fullmatch(r"people  \S+  cap ε=1000 δ=0  spent ε≤\S+ δ=0", line), line
    assert out.splitlines()[-1].startswith(NOTE)
    assert not RAW_FRACTION.search(out)
    code, out, _ = run_cli(capsys, *admin, "list-grants")
    grant = next(g for g in out.splitlines() if g.startswith(analyst))
    assert re.fullmatch(rf"{analyst}  people  budget ε=1 δ=0  spent ε≤\S+ δ=0", grant), grant
    code, out, _ = run_cli(capsys, *admin, "list-grants", "--exact")
    grant = next(g for g in out.splitlines() if g.startswith(analyst))
    assert RAW_FRACTION.search(grant)  # a cost by accuracy has no short decimal
    assert NOTE not in out
