"""Every fit parameter combination is decided before the charge (issue 14, the privacy rule).

A fit that is refused must be refused by :func:`~dpcurator.query.fit.core.plan_fit`, free, with a
clear error naming the parameter; once charged, a fit must answer (a value or NR), never raise.
The walk below crosses the kind, ``method``, ``blocks``, ``δ``, a person column or none, a tiny
or a plain ε, a narrow or a vast parameter box, and the fetch cap ``max_rows``, and asserts for
each cell: an error changes nothing that was spent, and is not the post-charge engine failure.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.accounting import Budget
from dpcurator.errors import BackendError, DPError
from dpcurator.query.plan.limits import MAX_FIT_BLOCKS
from dpcurator.query.session import Session
from dpcurator.random import SeededRng

#: Base arguments of each kind (the walk adds method, blocks, delta, epsilon and the box).
KINDS: dict[str, dict[str, Any]] = {
    "linear_regression": {"y": "income", "x": ["age", "hours"]},
    "logistic_regression": {"y": "employed", "x": ["age", "hours"]},
    "mle": {"y": "age", "model": "gaussian"},
    "sample_and_aggregate": {"x": ["age"], "estimator": lambda block: block.mean(axis=0)},
    "ptr_regression": {"y": "income", "x": ["age", "hours"]},
}
#: The box of each kind's parameters: a narrow one, and one whose width overflows a double.
BOXES = {
    "narrow": {"lower": -50.0, "upper": 100.0},
    "vast": {"lower": -1e308, "upper": 1e308},
}
METHODS = (None, "objective_perturbation", "sample_and_aggregate", "l1", "newton")
#: The cap of the fetched rows: the default, and one too small for 30 blocks of one person.
MAX_ROWS = (None, 20)


def _session(person: bool) -> Session:
    metadata = dpc.Metadata.from_yaml(dpc.demo_path("people.yaml"))
    metadata = (
        replace(metadata, max_rows_per_person=2)
        if person
        else replace(metadata, person_column=None)
    )
    frame = pd.read_csv(dpc.demo_path("people.csv")).head(400)
    return Session.from_data(
        frame, metadata=metadata, budget=Budget(1e9, 0.5), rng=SeededRng(3), engine="memory"
    )


def _cells() -> list[tuple[Any, ...]]:
    grid = itertools.product(
        KINDS, METHODS, (None, 1, 30), (0.0, 1e-6), (True, False), (1e-9, 1.0), BOXES, MAX_ROWS
    )
    return list(grid)


@pytest.mark.parametrize("person", [True, False], ids=["person", "rows"])
def test_no_fit_parameter_combination_fails_after_the_charge(person: bool) -> None:
    session = _session(person)
    answered: set[str] = set()
    failures: list[str] = []
    for kind, method, blocks, delta, with_person, epsilon, box, max_rows in _cells():
        if with_person != person:
            continue
        options: dict[str, Any] = {**KINDS[kind], **BOXES[box]}
        if kind == "linear_regression":
            options = dict(KINDS[kind])
        if method is not None:
            options["method"] = method
        if blocks is not None:
            options["blocks"] = blocks
        if max_rows is not None:
            options["max_rows"] = max_rows
        spent = session.spent()
        cell = (
            f"{kind} method={method} blocks={blocks} delta={delta} eps={epsilon} box={box} "
            f"max_rows={max_rows}"
        )
        try:
            fit = session.fit(kind, epsilon=epsilon, delta=delta, **options)
        except BackendError:
            failures.append(f"{cell}: failed after the charge")
        except DPError as exc:
            if session.spent() != spent:
                failures.append(f"{cell}: charged, then refused ({exc})")
        except Exception as exc:  # not a clear refusal naming a parameter
            failures.append(f"{cell}: {type(exc).__name__}: {exc}")
        else:
            answered.add(kind)
            assert fit.cost is not None, cell
    assert not failures, "\n".join(failures)
    assert answered == set(KINDS)  # the walk reaches every estimator, not only refusals


def test_the_logistic_fit_takes_method_blocks_and_delta_by_name() -> None:
    session = _session(person=True)
    spent = session.spent()
    with pytest.raises(DPError, match="blocks"):
        session.fit("logistic_regression", epsilon=1.0, blocks=10, **KINDS["logistic_regression"])
    with pytest.raises(DPError, match="delta"):
        session.fit(
            "logistic_regression", epsilon=1.0, delta=1e-6, method="sample_and_aggregate",
            lower=-50, upper=50, **KINDS["logistic_regression"],
        )  # fmt: skip
    with pytest.raises(DPError, match="blocks"):
        session.fit("mle", epsilon=1.0, blocks=MAX_FIT_BLOCKS + 1, lower=[0, 1], upper=[100, 50],
                    **KINDS["mle"])  # fmt: skip
    assert session.spent() == spent
    fit = session.fit(
        "logistic_regression", epsilon=1.0, delta=1e-6, lower=-50, upper=50,
        **KINDS["logistic_regression"],
    )  # fmt: skip
    assert fit.cost is not None
    assert float(fit.cost.delta) == pytest.approx(1e-6)  # type: ignore[union-attr]
