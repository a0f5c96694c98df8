"""Accounting benchmark: mean (1-α) CI half-width per answer of k real queries at a total
(ε = 1, δ = 1e-6), basic composition against the default (concentrated) accounting.

Workload: k ``Session.sql`` queries on the UCI adult table (one row per person), alternating
``SELECT COUNT(*) AS n FROM adult`` and ``SELECT AVG(age) AS a FROM adult`` (age in [17, 90]),
each released through the whole query layer (plan, reserve, DuckDB, noise). Accountings of the
same total budget:

* basic: ``Session(budget=Budget(1, 1e-6), accounting="basic")``, each query at ε = 1/k with
  discrete Laplace (``noise="laplace"``; basic composition spends exactly the budget);
* default: ``Session(budget=Budget(1, 1e-6))`` (a
  :class:`~dpcurator.accounting.ConcentratedFilter`), each query at ρ = ρ_R/k with discrete
  Gaussian noise (``rho=``), ρ_R the filter's Rényi route (its bound at α* over α*);
* the former default split (a quarter of ε kept for basic composition, the rest converted from
  zCDP): each query at ρ_old/k, ρ_old = ``largest_rho(3/4 - ln(1/(1 - δ/2)), δ/2)``, the zCDP
  part that split left (released through the default session: it fits).

Half-widths are the released intervals' (counts: the discrete mechanisms' exact (1-α)
half-widths; means: half the conservative ratio interval, which follows the noisy count). The
planning overhead is the time of ``Session.plan`` per query as the workload runs (the plan cache
answers repeated queries) and, separately, of one cold plan (cache cleared), split into parsing,
the Laplace plan and the Gaussian conversion; and the time of one filter reservation.

Gaussian-heavy workloads (:func:`gaussian_heavy`): how many answers each accounting admits at
the same total guarantee (ε, δ), the concentrated filter (default) against the Gaussian-DP filter
(``accounting="gaussian"``): event streams of discrete Gaussian counts (σ = 30, Δ = 1) mixed
with pure ε = 0.02 queries in a seeded random order (the share of Gaussians given), filled until
the first refusal of each kind; the exact non-adaptive ceiling of the Gaussian-only stream (the
most such releases whose composition, by dp_accounting's PLD of the discrete pmf, is within the
budget); and ``Session.sql`` COUNT(*) queries on adult at ρ = 1/2000 each.

Run: ``.venv/bin/python benchmarks/accounting.py [max_queries]`` (0: the Gaussian-heavy table
only)
"""

from __future__ import annotations

import random
import sys
import time
from fractions import Fraction
from pathlib import Path

import pandas as pd

import dpcurator as dpc
from dpcurator.accounting import (
    ConcentratedFilter,
    GaussianDPFilter,
    GaussianEvent,
    PLDAccountant,
    PrivacyEvent,
    PureEvent,
    RepeatedEvent,
    ZCDPEvent,
)
from dpcurator.accounting.concentrated import conditioning_epsilon, largest_rho
from dpcurator.errors import BudgetExceededError
from dpcurator.query.frontend.sql import parse_sql
from dpcurator.query.plan.noise import plan_with_noise
from dpcurator.query.plan.planner import plan_query
from dpcurator.random import SeededRng

ADULT = Path("/work/shared/data/adult_uci/adult.data")
ALPHA = 0.05
BUDGET = dpc.Budget(1, Fraction(1, 10**6))
QUERIES = ("SELECT COUNT(*) AS n FROM adult", "SELECT AVG(age) AS a FROM adult")
METADATA = dpc.Metadata.from_dict(
    {
        "table": "adult",
        "max_rows_per_person": 1,
        "columns": {"age": {"type": "int", "lower": 17, "upper": 90}},
    }
)


def _frame() -> pd.DataFrame:
    return pd.read_csv(ADULT, header=None, usecols=[0], names=["age"])


def _halfwidth(release: dpc.Release) -> float:
    (estimate,) = release.rows[0][1]
    assert estimate.ci_low is not None  # counts and means have intervals
    assert estimate.ci_high is not None
    return (estimate.ci_high - estimate.ci_low) / 2


def _run(session: dpc.Session, k: int, cost: dict[str, object]) -> tuple[float, float]:
    """Mean half-width per answer and mean seconds of ``Session.plan`` per query."""
    widths, planning = [], 0.0
    for i in range(k):
        sql = QUERIES[i % 2]
        start = time.perf_counter()
        session.plan(sql, **cost)  # type: ignore[arg-type]
        planning += time.perf_counter() - start
        widths.append(_halfwidth(session.sql(sql, alpha=ALPHA, **cost)))  # type: ignore[arg-type]
    return sum(widths) / k, planning / k


def _cold_plan() -> dict[str, float]:
    """Seconds of one cold plan of the mean query at ρ, by step (parse, Laplace, Gaussian)."""
    sql, repeats = QUERIES[1], 50
    start = time.perf_counter()
    for _ in range(repeats):
        query = parse_sql(sql, METADATA)
    parse = (time.perf_counter() - start) / repeats
    start = time.perf_counter()
    for _ in range(repeats):
        plan_query(query, METADATA, epsilon=1)
    laplace = (time.perf_counter() - start) / repeats
    start = time.perf_counter()
    for i in range(repeats):
        plan_with_noise(query, METADATA, rho=Fraction(1, 10**4 + i))
    gaussian = (time.perf_counter() - start) / repeats
    return {"parse": parse, "Laplace plan": laplace, "Gaussian plan (incl. Laplace)": gaussian}


def _old_split_rho() -> Fraction:
    """The zCDP part the former default split of (1, 1e-6) left (see the module docstring)."""
    half = BUDGET.delta / 2
    return largest_rho(Fraction(3, 4) - conditioning_epsilon(half), half)


def _reservation_seconds(repeats: int = 2_000) -> float:
    """Seconds of one reservation on a default filter already holding ``repeats`` events."""
    account = ConcentratedFilter(BUDGET)
    event = ZCDPEvent(account.limits.rho / (4 * repeats))
    start = time.perf_counter()
    for _ in range(repeats):
        account.reserve(event).commit()
    return (time.perf_counter() - start) / repeats


def _answers(account: ConcentratedFilter | GaussianDPFilter, stream: list[PrivacyEvent]) -> int:
    """Events of ``stream`` admitted, in order, until the first refusal of a Gaussian."""
    answered = 0
    for event in stream:
        try:
            account.reserve(event).commit()
        except BudgetExceededError:
            if isinstance(event, GaussianEvent):
                break
            continue
        answered += 1
    return answered


def _pld_ceiling(event: GaussianEvent, budget: dpc.Budget, start: int) -> int:
    """The most repetitions of ``event`` whose exact composition (PLD of the discrete pmf,
    pessimistic, discretisation 2e-5) is within ``budget``, searched from ``start``."""
    pld = PLDAccountant(Fraction(1, 50_000))

    def fits(count: int) -> bool:
        return pld.total([RepeatedEvent(event, count)], budget.delta).epsilon <= budget.epsilon

    step = max(1, start // 100)
    low, high = (start, start + step) if fits(start) else (start - step, start)
    while fits(high):
        low, high = high, high + step
    while not fits(low):
        low, high = low - step, low
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def _session_answers(frame: pd.DataFrame, budget: dpc.Budget, accounting: str) -> int:
    session = dpc.Session.from_data(
        frame, metadata=METADATA, budget=budget, accounting=accounting, rng=SeededRng(1)
    )
    answered = 0
    while True:
        try:
            session.sql(QUERIES[0], rho=Fraction(1, 2_000))
        except BudgetExceededError:
            return answered
        answered += 1


def gaussian_heavy(frame: pd.DataFrame) -> None:
    """The Gaussian-heavy table (module docstring)."""
    gaussian, pure = GaussianEvent(30, 1), PureEvent(Fraction(1, 50))
    print("answers at equal guarantee: concentrated (default) vs accounting='gaussian'")
    print(f"{'budget':>14} {'workload':>26} {'concentrated':>13} {'gaussian':>9} {'ratio':>6}")
    after_all = 0
    for budget in (BUDGET, dpc.Budget(1, Fraction(1, 10**5)), dpc.Budget(4, Fraction(1, 10**6))):
        label = f"({budget.epsilon}, {float(budget.delta):.0e})"
        for share in (1.0, 0.9, 0.5):
            rng = random.Random(1)
            stream: list[PrivacyEvent] = [
                gaussian if rng.random() < share else pure for _ in range(200_000)
            ]
            before = _answers(ConcentratedFilter(budget), stream)
            after = _answers(GaussianDPFilter(budget), stream)
            after_all = after if share == 1.0 else after_all
            name = f"{share:.0%} Gaussian σ=30 events"
            print(f"{label:>14} {name:>26} {before:>13} {after:>9} {after / before:>6.2f}")
        ceiling = _pld_ceiling(gaussian, budget, after_all)
        print(f"{label:>14} {'exact PLD ceiling, 100%':>26} {'':>13} {ceiling:>9}")
    before = _session_answers(frame, BUDGET, "concentrated")
    after = _session_answers(frame, BUDGET, "gaussian")
    name = "adult COUNT(*) at ρ=1/2000"
    print(f"{'(1, 1e-06)':>14} {name:>26} {before:>13} {after:>9} {after / before:>6.2f}")


def main() -> None:
    largest = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000
    gaussian_heavy(_frame())
    if largest == 0:
        return
    frame = _frame()
    old = _old_split_rho()
    print(f"adult: n = {len(frame)}, total budget (ε = 1, δ = 1e-6), {1 - ALPHA:.0%} CIs")
    print(
        f"{'queries':>8} {'basic CI':>10} {'default CI':>11} {'ratio':>6} "
        f"{'old split CI':>13} {'ratio':>6} {'plan ms/q':>10}"
    )
    for k in (10, 100, 1_000):
        if k > largest:
            break
        basic = dpc.Session.from_data(
            frame, metadata=METADATA, budget=BUDGET, accounting="basic", rng=SeededRng(1)
        )
        default = dpc.Session.from_data(frame, metadata=METADATA, budget=BUDGET, rng=SeededRng(1))
        former = dpc.Session.from_data(frame, metadata=METADATA, budget=BUDGET, rng=SeededRng(1))
        rho = default._filter.limits.rho  # type: ignore[attr-defined]
        b, _ = _run(basic, k, {"epsilon": BUDGET.epsilon / k, "noise": "laplace"})
        c, seconds = _run(default, k, {"rho": rho / k})
        w, _ = _run(former, k, {"rho": old / k})
        print(
            f"{k:>8} {b:>10.4g} {c:>11.4g} {b / c:>6.2f} {w:>13.4g} {b / w:>6.2f} "
            f"{seconds * 1e3:>10.3f}"
        )
    cold = _cold_plan()
    print(
        "one cold plan (no cache), ms: " + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in cold.items())
    )
    print(f"one reservation (2,000 events held), ms: {_reservation_seconds() * 1e3:.3f}")


if __name__ == "__main__":
    main()
