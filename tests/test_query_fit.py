"""Session.fit: estimators on the session's table, charged and user-level bounded (issue 14)."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.accounting import Budget, PureEvent
from dpcurator.core.measures import ApproxDP, PureDP
from dpcurator.errors import DPError
from dpcurator.estimators import Estimate, dp_mle, linear_regression
from dpcurator.estimators.sample_aggregate import EngineBlocks
from dpcurator.query.fit.core import plan_fit
from dpcurator.query.fit.linear import zcdp_for
from dpcurator.query.fit.rows import seeded
from dpcurator.query.session import Session
from dpcurator.random import SeededRng

VICTIM = 4322
#: ε = 50 at δ = 1e-6 keeps the noise far below the coefficients and the Gram entries (up to
#: n = 5,000) inside the noise grid's exact range.
EPSILON, DELTA = 50.0, 1e-6


def _meta() -> dpc.Metadata:
    return dpc.Metadata.from_yaml(dpc.demo_path("people.yaml"))


def _frame() -> pd.DataFrame:
    return pd.read_csv(dpc.demo_path("people.csv"))


def _session(frame: pd.DataFrame, seed: int = 1, engine: str = "duckdb") -> Session:
    return Session.from_data(
        frame, metadata=_meta(), budget=Budget(1e6, 1e-3), rng=SeededRng(seed), engine=engine
    )


@pytest.mark.parametrize("engine", ["duckdb", "memory"])
def test_linear_regression_matches_the_library_and_lstsq(engine: str) -> None:
    frame = _frame()
    session = _session(frame, engine=engine)
    fit = session.fit("linear_regression", y="income", x=["age", "hours"], epsilon=EPSILON,
                      delta=DELTA)  # fmt: skip
    X, y = frame[["age", "hours"]].to_numpy(), frame["income"].to_numpy()
    library = linear_regression(
        X, y, rho=float(zcdp_for(Fraction(EPSILON), DELTA)), x_lower=[18, 0], x_upper=[90, 80],
        y_lower=0, y_upper=400_000, rng=SeededRng(1),
    )  # fmt: skip
    assert fit.value is not None
    assert library.value is not None
    np.testing.assert_allclose(fit.value, library.value, rtol=1e-6)
    design = np.column_stack([np.ones(len(y)), np.where(np.isnan(X), 40.0, X)])  # NULL -> mid
    exact = np.linalg.lstsq(design, y, rcond=None)[0]
    assert fit.ci_low is not None
    assert fit.ci_high is not None
    # the data's own least squares lies within the noise + sampling interval's half-width of the
    # release (one seeded draw; a fixed relative tolerance failed whenever a coefficient was
    # small next to its noise, as hours' is: about 20 against a half-width of about 45)
    assert np.all(np.abs(fit.value - exact) <= (fit.ci_high - fit.ci_low) / 2)
    assert np.all(fit.ci_low <= fit.value)
    assert np.all(fit.value <= fit.ci_high)
    assert fit.cost == ApproxDP(EPSILON, DELTA)
    assert session.spent() == ApproxDP(EPSILON, DELTA)


def test_the_gram_matrix_is_one_engine_aggregate_plan() -> None:
    """The sufficient statistics are SUMs the engine computes: no row leaves it."""

    plan = plan_fit(_meta(), "linear_regression", y="income", x=["age", "hours"], epsilon=1.0,
                    delta=DELTA)  # fmt: skip
    kinds = sorted(agg.kind for agg in plan.exact.aggregates)
    assert kinds == ["count"] + ["sum"] * 9  # n and the 9 other entries of the 4x4 Gram
    assert not plan.exact.group_by
    assert plan.exact.bound.person_column == "pid"


def test_sample_and_aggregate_fits_match_the_library() -> None:
    frame = _frame()
    session = _session(frame)
    fit = session.fit("mle", y="age", model="gaussian", lower=[0, 0.1], upper=[100, 50],
                      epsilon=100.0, blocks=20)  # fmt: skip
    # the library on the same bounded rows and the engine's blocks (the fit's seed is the
    # first 8 bytes of its rng), in fit's order ((block, person, values) keys by repr)
    plan = plan_fit(_meta(), "mle", y="age", model="gaussian", lower=[0, 0.1], upper=[100, 50],
                    epsilon=100.0, blocks=20)  # fmt: skip
    rng = SeededRng(1)
    exact = seeded(plan.exact, rng)
    (result,) = _session(frame).compute_exact([exact], PureEvent(1), description="blocks")
    keys = sorted(result.groups, key=repr)
    person = EngineBlocks(tuple(k[1] for k in keys), np.array([k[0] for k in keys]), 20)
    library = dp_mle("gaussian", [k[2] for k in keys], epsilon=100.0, lower=[0, 0.1],
                     upper=[100, 50], blocks=20, person=person, rng=rng)  # fmt: skip
    assert fit.value is not None
    assert library.value is not None
    np.testing.assert_allclose(fit.value, library.value, rtol=1e-9)
    assert session.spent() == ApproxDP(100, 0)
    assert fit.cost == PureDP(100)
    mean = session.fit("sample_and_aggregate", x=["age"], estimator=lambda b: b.mean(),
                       lower=18, upper=90, epsilon=1e4)  # fmt: skip
    assert mean.value is not None
    assert abs(float(mean.value[0]) - frame["age"].mean()) < 0.5
    logit = session.fit("logistic_regression", x=["age"], y="employed", lower=-10, upper=10,
                        epsilon=1e4)  # fmt: skip
    assert logit.value is not None
    assert logit.value.shape == (2,)


REFUSALS: dict[str, Callable[[Session], object]] = {
    "unknown column": lambda s: s.fit("linear_regression", y="income", x=["nope"],
                                      epsilon=1.0, delta=DELTA),
    "string column": lambda s: s.fit("linear_regression", y="income", x=["sex"], epsilon=1.0,
                                     delta=DELTA),
    "no bounds": lambda s: s.fit("linear_regression", y="income", x=["pid"], epsilon=1.0,
                                 delta=DELTA),
    "too many features": lambda s: s.fit("linear_regression", y="income", x=["age"] * 17,
                                         epsilon=1.0, delta=DELTA),
    "no delta": lambda s: s.fit("linear_regression", y="income", x=["age"], epsilon=1.0),
    "delta for mle": lambda s: s.fit("mle", y="age", model="gaussian", lower=[0, 1],
                                     upper=[100, 50], epsilon=1.0, delta=DELTA),
    "bad box": lambda s: s.fit("mle", y="age", model="gaussian", lower=[0, 1, 2],
                               upper=[100, 50, 3], epsilon=1.0),
    "no estimator": lambda s: s.fit("sample_and_aggregate", x=["age"], lower=0, upper=1,
                                    epsilon=1.0),
    "unknown kind": lambda s: s.fit("ridge", y="income", x=["age"], epsilon=1.0),
}  # fmt: skip


def _error(call: Callable[[Session], object], frame: pd.DataFrame) -> tuple[str, str, object]:
    session = _session(frame)
    with pytest.raises(DPError) as info:
        call(session)
    return type(info.value).__name__, str(info.value), session.spent()


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusals_charge_nothing_and_do_not_depend_on_the_data(name: str) -> None:
    frame = _frame()
    neighbour = frame[frame["pid"] != VICTIM]
    kind, text, spent = _error(REFUSALS[name], frame)
    assert spent == _session(frame).spent()  # nothing charged
    assert (kind, text, spent) == _error(REFUSALS[name], neighbour)


FITS: dict[str, Callable[[Session], Estimate]] = {
    "linear": lambda s: s.fit("linear_regression", y="income", x=["age", "hours"],
                              epsilon=1.0, delta=DELTA),
    "mle": lambda s: s.fit("mle", y="age", model="gaussian", lower=[0, 1], upper=[100, 50],
                           epsilon=1.0),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(FITS))
def test_neighbours_differ_only_in_noisy_values(name: str) -> None:
    frame = _frame()
    releases = []
    for data in (frame, frame[frame["pid"] != VICTIM]):
        session = _session(data)
        fit = FITS[name](session)
        releases.append((fit, session.spent()))
    (a, spent_a), (b, spent_b) = releases
    assert spent_a == spent_b
    assert (a.cost, a.method, a.covers, a.alpha) == (b.cost, b.method, b.covers, b.alpha)
    assert a.value is not None
    assert b.value is not None
    assert a.value.shape == b.value.shape


def test_degenerate_data_never_raises_after_the_charge() -> None:
    """All-equal features (singular XᵀX): the ridge answers, the charge stands."""
    frame = _frame().assign(age=40)
    session = _session(frame)
    fit = session.fit("linear_regression", y="income", x=["age"], epsilon=1.0, delta=DELTA)
    assert fit.value is not None
    assert np.all(np.isfinite(fit.value))
    assert session.spent() == ApproxDP(1.0, DELTA)
