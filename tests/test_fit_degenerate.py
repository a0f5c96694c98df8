"""Degenerate data through the query layer's fits (issue 14, "Bad input"): all-equal columns
(singular XᵀX), one label class (the logistic MLE does not converge), fewer rows than blocks, an
empty table and a user estimator that fails on every block. Each fit is charged its planned cost
and then answers NR or a finite release, decided on noisy values; it never raises after the
charge, and what it says besides the noisy numbers (cost, method, what its interval covers, its
level) is the same on a neighbouring table.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.estimators import Estimate
from dpcurator.query.session import Session
from dpcurator.random import SeededRng

DELTA = 1e-6


def _failing(block: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """A user estimator that fails on every block (as a non-convergent fit would)."""
    raise ArithmeticError(f"no fit on {len(block)} rows")


FITS: dict[str, Callable[[Session], Estimate]] = {
    "linear": lambda s: s.fit("linear_regression", y="income", x=["age", "hours"],
                              epsilon=1.0, delta=DELTA),
    "logistic": lambda s: s.fit("logistic_regression", y="employed", x=["age"], epsilon=1.0),
    "logistic blocks": lambda s: s.fit("logistic_regression", y="employed", x=["age"],
                                       method="sample_and_aggregate", blocks=50,
                                       lower=[-5, -5], upper=[5, 5], epsilon=1.0),
    "mle blocks": lambda s: s.fit("mle", y="age", model="gaussian", lower=[0, 1],
                                  upper=[100, 50], blocks=50, epsilon=1.0),
    "poisson": lambda s: s.fit("mle", y="age", model="poisson", lower=[0], upper=[100],
                               epsilon=1.0),
    "user": lambda s: s.fit("sample_and_aggregate", x=["age"], estimator=_failing, lower=0,
                            upper=1, epsilon=1.0),
}  # fmt: skip


def _demo() -> pd.DataFrame:
    return pd.read_csv(dpc.demo_path("people.csv"))


TABLES: dict[str, Callable[[], pd.DataFrame]] = {
    "all equal": lambda: _demo().assign(age=40, hours=20.0, income=1000.0),
    "one class": lambda: _demo().assign(employed=True),
    "fewer rows than blocks": lambda: _demo().head(3),
    "empty": lambda: _demo().head(0),
}


def _fit(name: str, frame: pd.DataFrame) -> tuple[Estimate, object]:
    session = Session.from_data(
        frame,
        metadata=dpc.Metadata.from_yaml(dpc.demo_path("people.yaml")),
        budget=dpc.Budget(100, 1e-3),
        rng=SeededRng(4),
    )
    return FITS[name](session), session.spent()


@pytest.mark.parametrize("table", sorted(TABLES))
@pytest.mark.parametrize("name", sorted(FITS))
def test_degenerate_data_is_nr_or_finite_and_decided_privately(name: str, table: str) -> None:
    frame = TABLES[table]()
    fit, spent = _fit(name, frame)
    other, other_spent = _fit(name, frame[frame["pid"] != frame["pid"].max()])
    assert spent == other_spent
    assert spent.epsilon == 1  # type: ignore[attr-defined]  # the planned charge, whatever the answer
    assert (fit.cost, fit.method, fit.alpha) == (other.cost, other.method, other.alpha)
    if fit.replied and other.replied:  # an NR has no interval to describe
        assert fit.covers == other.covers
    for release in (fit, other):
        if release.value is None:  # NR: the decision to answer was itself DP
            continue
        assert release.ci_low is not None
        assert release.ci_high is not None
        for array in (release.value, release.ci_low, release.ci_high):
            assert np.all(np.isfinite(array))
