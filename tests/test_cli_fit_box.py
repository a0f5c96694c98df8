"""``dpcurator fit`` marks the terms the public coefficient box clamped (issue 28 item 1).

Seen failing before the mark: the clamped intercept printed like any other term."""

from __future__ import annotations

from typing import Any

from dpcurator.cli.fit import fit_text


def _answer(at_box_bound: dict[str, bool] | None) -> dict[str, Any]:
    rows = [
        {
            "group": {"term": term},
            "values": {"coefficient": {"value": v, "ci_low": lo, "ci_high": hi}},
        }
        for term, v, lo, hi in [("intercept", 1.0, 1.0, 1.0), ("age", -0.0588, -0.0632, -0.0558)]
    ]
    fit = {
        "ci_level": 0.95, "method": "objective perturbation", "replied": True,
        "covers": "noise+sampling", "rows": rows, "at_box_bound": at_box_bound,
    }  # fmt: skip
    return {"request": "logistic employed ~ age", "cost": {"epsilon": 1, "delta": 0}, "fit": fit}


def test_a_clamped_term_is_marked_and_explained() -> None:
    text = fit_text(_answer({"intercept": True, "age": False}))
    lines = text.splitlines()
    assert any(line.startswith("intercept*") for line in lines)
    assert any(line.startswith("age ") for line in lines)
    assert lines[-1].startswith("* clamped to the public coefficient box")


def test_no_mark_without_a_box_or_when_nothing_binds() -> None:
    for flags in (None, {"intercept": False, "age": False}):
        text = fit_text(_answer(flags))
        assert "*" not in text
