"""How the command line prints what the curator answered: ``--format table|csv|json``.

Each command builds an :class:`Output` holding the same answer three ways: ``text`` for people
(aligned columns; numbers as :func:`~dpcurator.query.release.view.number` writes them, a missing
value as ``—``, and the confidence level named wherever intervals appear), ``table`` for CSV
(header and rows; full float precision, a missing value as an empty field) and ``doc`` for JSON
(the server's documents, strict JSON: a non-finite number becomes ``null``, as the server itself
writes it).

Everything here is post-processing of released values (no privacy cost). Loaded only by the
commands that print results, so ``dpcurator --help`` stays fast.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, TextIO

from dpcurator.query.release.view import key_text, level_text, number

Row = list[Any]


@dataclass(frozen=True)
class Output:
    """One answer, ready for each ``--format``."""

    text: str
    doc: Any
    header: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)


def strict(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (JSON has no NaN or infinity)."""
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


def _number(value: float | None) -> str:
    """``number`` for a JSON number, which may arrive as an int."""
    return number(None if value is None else float(value))


def cell(value: Any) -> str:
    """A value for people: numbers via ``number``, None as ``—``, text on one line."""
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


def records(flat: list[dict[str, Any]], columns: list[str], *, empty: str, doc: Any) -> Output:
    """Flat records (``columns`` of each) as text and CSV, or ``empty`` in text when there is
    none; ``doc`` (the server's documents they summarise) as JSON."""
    rows = [[d.get(c) for c in columns] for d in flat]
    text = aligned(columns, rows) if rows else empty
    return Output(text=text, doc=doc, header=columns, rows=rows)


def cost_text(cost: dict[str, Any]) -> str:
    """``ε=0.5 δ=0``, or ``ρ=0.1`` for a zCDP cost."""
    if cost.get("epsilon") is None and cost.get("rho") is not None:
        return f"ρ={_number(cost['rho'])}"
    return f"ε={_number(cost['epsilon'])} δ={_number(cost['delta'])}"


def total_cost(costs: list[dict[str, Any]]) -> dict[str, float]:
    """The exact sum of costs (their ``epsilon_exact``/``delta_exact`` fractions)."""
    epsilon = sum((Fraction(c["epsilon_exact"]) for c in costs), Fraction(0))
    delta = sum((Fraction(c["delta_exact"]) for c in costs), Fraction(0))
    return {"epsilon": float(epsilon), "delta": float(delta)}


def ci_level(release: dict[str, Any]) -> float:
    """The level 1-α of a release's confidence intervals."""
    return float(release.get("ci_level", 1 - release.get("alpha", 0.05)))


def _interval(estimate: dict[str, Any]) -> str:
    if estimate.get("ci_low") is None or estimate.get("ci_high") is None:
        return "—"
    return f"[{_number(estimate['ci_low'])}, {_number(estimate['ci_high'])}]"


def release_text(release: dict[str, Any]) -> str:
    """A release as aligned columns: each value with its interval, then the CI level."""
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
