"""How the command line prints what the curator answered: ``--format table|csv|json``.

Each command builds an :class:`Output` holding the same answer three ways: ``text`` for people
(aligned columns; numbers as :func:`~dpcurator.core.display.number` writes them, a missing
value as ``—``, and the confidence level named wherever intervals appear), ``table`` for CSV
(header and rows; full float precision, a missing value as an empty field) and ``doc`` for JSON
(the server's documents, strict JSON: a non-finite number becomes ``null``, as the server itself
writes it).

Privacy amounts (ε, δ, ρ) go through :class:`Amounts` only: in text they are rounded outward to
4 significant digits (:func:`~dpcurator.core.display.amount_text`: ``≤`` what was charged or
spent, ``≥`` what is left) with a note stating the precision under the output; ``--exact``
writes them exactly (text and CSV), and JSON always carries the server's exact ``*_exact``
fractions.

Everything here is post-processing of released values (no privacy cost). Standard library and
:mod:`dpcurator.core.display` only (no engine, numpy or pandas), so that a client command
answers in a fraction of a second.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, TextIO

from dpcurator.core.display import (
    amount_text,
    exact_amount,
    exact_text,
    key_text,
    level_text,
    number,
    rounded_amount,
    rounding_note,
)

Row = list[Any]


#: Where the exact amounts are, for the note under a text output with a rounded amount.
EXACT_HINT = "exact: --exact or --format json"
#: The symbol of each part of a cost document.
SYMBOLS = {"epsilon": "ε", "delta": "δ", "rho": "ρ"}


@dataclass(frozen=True)
class Output:
    """One answer, ready for each ``--format`` (``rounded``: its text shows an amount rounded
    outward, and gets the note stating the precision)."""

    text: str
    doc: Any
    header: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    rounded: bool = False


@dataclass(frozen=True)
class Amount:
    """An ε, δ or ρ of the server's answer, exact; shown rounded outward (``up``: a charge or
    spending, else what is left) unless ``exact``."""

    value: Fraction
    up: bool
    exact: bool = False

    @property
    def rounded(self) -> bool:
        """Whether the text shows it rounded (``≤``/``≥``)."""
        return not self.exact and rounded_amount(self.value, up=self.up)[1]

    def assigned(self) -> str:
        """``=0.5``, ``≤4.301`` or ``≥0.6999``, to follow its symbol."""
        return amount_text(self.value, up=self.up, exact=self.exact)

    def text(self) -> str:
        """For a table cell: ``0.5``, ``≤4.301``, ``≥0.6999``."""
        return self.assigned().removeprefix("=")

    def csv(self) -> float | str:
        """For a CSV cell: the nearest float, or the exact value with ``--exact``."""
        return exact_text(self.value) if self.exact else float(self.value)


class Amounts:
    """Reads the amounts of the server's cost documents (``{"epsilon": .., "epsilon_exact":
    "n/d", ...}``) and writes them for people, remembering whether any was rounded."""

    def __init__(self, *, exact: bool = False) -> None:
        self.exact = exact
        self.rounded = False

    def of(self, doc: dict[str, Any] | None, part: str, *, up: bool) -> Amount | None:
        """Part ``epsilon``, ``delta`` or ``rho`` of ``doc`` (its ``<part>_exact`` fraction,
        else its float), rounded ``up`` or down for people; None if ``doc`` has no such part."""
        if doc is None:
            return None
        found = doc.get(f"{part}_exact")
        if found is None:
            found = doc.get(part)
        return None if found is None else self.amount(found, up=up)

    def amount(self, value: Fraction | int | float | str, *, up: bool) -> Amount:
        """An exact amount (a float as the decimal it prints as), for a cell."""
        shown = Amount(exact_amount(value), up=up, exact=self.exact)
        self.rounded = self.rounded or shown.rounded
        return shown

    def cost(self, doc: dict[str, Any], *, up: bool) -> str:
        """``ε=0.5 δ=0``, or ``ρ=0.1`` for a zCDP cost; rounded outward (``up``: a charge or
        spending, else a budget or what is left) to a stated precision."""
        parts = ["rho"] if doc.get("epsilon") is None and doc.get("rho") is not None else []
        parts = parts or ["epsilon", "delta"]
        shown = [(SYMBOLS[p], self.of(doc, p, up=up)) for p in parts]
        return " ".join(f"{symbol}{a.assigned()}" for symbol, a in shown if a is not None)

    def output(
        self, text: str, doc: Any, header: list[str] | None = None, rows: list[Row] | None = None
    ) -> Output:
        """An :class:`Output` whose text gets the precision note if an amount was rounded."""
        rows = rows or []
        rounded = self.rounded or any(isinstance(c, Amount) and c.rounded for r in rows for c in r)
        return Output(text=text, doc=doc, header=header or [], rows=rows, rounded=rounded)


def strict(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (JSON has no NaN or infinity),
    and every :class:`Amount` as its CSV value."""
    if isinstance(value, Amount):
        return value.csv()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict(v) for v in value]
    return value


def show(output: Output, fmt: str, out: TextIO | None = None) -> None:
    """Print ``output`` as ``fmt`` (table, csv or json) on ``out`` (default stdout)."""
    out = sys.stdout if out is None else out
    if fmt == "json":
        out.write(json.dumps(strict(output.doc), indent=2, ensure_ascii=False, allow_nan=False))
        out.write("\n")
    elif fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(output.header)
        writer.writerows([["" if c is None else c for c in strict(row)] for row in output.rows])
    else:
        out.write(output.text + "\n")
        if output.rounded:
            out.write(rounding_note(EXACT_HINT) + "\n")


def _number(value: float | None) -> str:
    """``number`` for a JSON number, which may arrive as an int."""
    return number(None if value is None else float(value))


def cell(value: Any) -> str:
    """A value for people: numbers via ``number``, amounts rounded outward, None as ``—``,
    text on one line."""
    if isinstance(value, Amount):
        return value.text()
    if value is None or isinstance(value, float):
        return _number(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return " ".join(str(value).split())


def aligned(header: list[str], rows: list[Row]) -> str:
    """Left-aligned columns separated by two spaces (``cell`` renders each value)."""
    lines = [header, *([cell(c) for c in row] for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def records(
    flat: list[dict[str, Any]], columns: list[str], *, empty: str, doc: Any, amounts: Amounts
) -> Output:
    """Flat records (``columns`` of each) as text and CSV, or ``empty`` in text when there is
    none; ``doc`` (the server's documents they summarise) as JSON."""
    rows = [[d.get(c) for c in columns] for d in flat]
    text = aligned(columns, rows) if rows else empty
    return amounts.output(text, doc, columns, rows)


def cost_text(cost: dict[str, Any], *, up: bool = True, exact: bool = False) -> str:
    """``ε=0.5 δ=0``, or ``ρ=0.1`` for a zCDP cost, rounded outward (``up``: a charge, else
    what is left) unless ``exact`` (a one-off: :meth:`Amounts.cost` also remembers rounding)."""
    return Amounts(exact=exact).cost(cost, up=up)


def total_cost(costs: list[dict[str, Any]]) -> dict[str, str]:
    """The exact sum of (ε, δ) costs (their ``epsilon_exact``/``delta_exact`` fractions), as a
    cost document."""
    epsilon = sum((Fraction(c["epsilon_exact"]) for c in costs), Fraction(0))
    delta = sum((Fraction(c["delta_exact"]) for c in costs), Fraction(0))
    return {"epsilon_exact": str(epsilon), "delta_exact": str(delta)}


def ci_level(release: dict[str, Any]) -> float:
    """The level 1-α of a release's confidence intervals."""
    return float(release.get("ci_level", 1 - release.get("alpha", 0.05)))


def _interval(estimate: dict[str, Any]) -> str:
    if estimate.get("ci_low") is None or estimate.get("ci_high") is None:
        return "—"
    return f"[{_number(estimate['ci_low'])}, {_number(estimate['ci_high'])}]"


def test_text(test: dict[str, Any]) -> str:
    """A hypothesis test's release (``SELECT TTEST(...)``): the test and H0, the statistic and
    its noise-aware p-value, the estimate, the released noisy statistics and the method."""
    simulations = test.get("simulations")
    lines = [
        f"{test['name']} (differentially private)",
        f"  H0: {test['null']}",
        f"  statistic = {_number(test['statistic'])}, p-value = {_number(test['p_value'])} "
        f"(Monte Carlo, M = {simulations})",
    ]
    if test.get("estimate") is not None:
        lines.append(f"  estimate = {_number(test['estimate'])}")
    lines += [f"  {name} = {_number(value)}" for name, value in test.get("extra", {}).items()]
    lines.append("  released (noisy) statistics:")
    noise = test.get("noise", {})
    for name, values in test.get("released", {}).items():
        scale = f"  (noise scale {_number(noise[name])})" if name in noise else ""
        lines.append(f"    {name}: {', '.join(_number(v) for v in values)}{scale}")
    lines.append(f"  method: {test['method']}")
    return "\n".join(lines)


def release_text(release: dict[str, Any]) -> str:
    """A release as aligned columns: each value with its interval, then the CI level (a
    hypothesis test's release: its report, :func:`test_text`)."""
    if release.get("test"):
        return test_text(release["test"])
    groups, values = release.get("group_columns", []), release.get("value_columns", [])
    rows: list[Row] = [
        [
            *(key_text(row["group"][c]) for c in groups),
            *(
                f"{_number(row['values'][c]['value'])} {_interval(row['values'][c])}"
                for c in values
            ),
        ]
        for row in release.get("rows", [])
    ]
    if not rows:
        return "(no group released)"
    level = level_text(1 - ci_level(release))
    lines = [f"{aligned([*groups, *values], rows)}\n[low, high]: {level} confidence intervals"]
    for report in release.get("clipping", []):  # the opt-in clipping report (--clipping)
        group = ", ".join(f"{c}={key_text(k)}" for c, k in report["group"].items())
        lines.append(f"clipping{f' [{group}]' if group else ''}: {'; '.join(report['notes'])}")
    return "\n".join(lines)


def release_wide(release: dict[str, Any]) -> tuple[list[str], list[Row]]:
    """One CSV row per group: the group columns, each value column with ``<name>_ci_low`` and
    ``<name>_ci_high``, then ``ci_level`` (as ``Release.to_pandas()`` and its ``attrs``)."""
    groups, values = release.get("group_columns", []), release.get("value_columns", [])
    header = [*groups, *(f"{v}{s}" for v in values for s in ("", "_ci_low", "_ci_high"))]
    level = ci_level(release)
    rows = []
    for row in release.get("rows", []):
        line: Row = [row["group"][c] for c in groups]
        for v in values:
            estimate = row["values"][v]
            line += [estimate["value"], estimate.get("ci_low"), estimate.get("ci_high")]
        rows.append([*line, level])
    return [*header, "ci_level"], rows


def releases_long(results: list[dict[str, Any]]) -> tuple[list[str], list[Row]]:
    """The releases of several queries in one CSV: one row per query, group and value column
    (``query`` numbers them from 1; a query without a group column leaves it empty)."""
    groups: list[str] = []
    for result in results:
        groups += [g for g in result["release"].get("group_columns", []) if g not in groups]
    header = ["query", *groups, "statistic", "value", "ci_low", "ci_high", "ci_level"]
    rows = []
    for number_, result in enumerate(results, 1):
        release = result["release"]
        level = ci_level(release)
        for row in release.get("rows", []):
            keys = [row["group"].get(g) for g in groups]
            for name in release.get("value_columns", []):
                estimate = row["values"][name]
                low, high = estimate.get("ci_low"), estimate.get("ci_high")
                rows.append([number_, *keys, name, estimate["value"], low, high, level])
    return header, rows


def results_text(results: list[dict[str, Any]]) -> str:
    """The releases of several queries for people: each query's SQL, then its table."""
    return "\n\n".join(
        f"query {i}: {cell(r['sql'])}\n{release_text(r['release'])}"
        for i, r in enumerate(results, 1)
    )
