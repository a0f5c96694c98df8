"""What a synthetic release costs and how it runs, decided from public inputs only.

An owner's request (:class:`SynthSpec`: the kind ``marginals``, ``fourier`` (contingency tables
by Barak et al.'s Fourier method, ρ-zCDP), ``mst``, ``aim`` or ``mwem``,
columns, marginals, the budget, rows to sample) becomes a :class:`SynthPlan` without reading any
data: the synthesizer of :mod:`dpcurator.synth` is run against a session whose budget filter
stops it at its one reservation (:class:`_PlanningFilter`). Every free refusal of the library
(a column without public keys or bounds, a domain or model over its limit, a bad parameter) is
thus raised here, before anything is charged, and the event the synthesizer would reserve is
captured exactly. The library reserves before it touches the data
(:meth:`~dpcurator.query.session.Session.compute_exact`), so planning reads nothing.

**Budget.** The ledger composes (ε, δ). MST and AIM are ρ-zCDP (and the contingency tables when
δ > 0): the owner gives ``rho`` with a δ > 0, or (ε, δ) from which ρ is the largest with
ρ-zCDP ⇒ (ε, δ)-DP (:func:`~dpcurator.accounting.concentrated.largest_rho`); the charge is the
captured event's ρ converted at δ (Canonne, Kamath & Steinke 2020), at most the ε asked for,
recorded as a :class:`~dpcurator.accounting.ConcentratedEvent` carrying both views: a budget
with basic accounting charges that (ε, δ), a concentrated one may charge the ρ instead.
MWEM and contingency tables with δ = 0 are pure ε-DP and charged their exact ε.

The plan then runs once against a session holding exactly that prepaid event
(:meth:`SynthPlan.run`), after the ledger charged it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pandas as pd

from dpcurator.accounting import Budget, PrivacyFilter, ZCDPAccountant
from dpcurator.accounting.concentrated import largest_rho
from dpcurator.accounting.events import ConcentratedEvent, PrivacyEvent, ZCDPEvent
from dpcurator.accounting.filter import Reservation
from dpcurator.core.measures import ZCDP, ApproxDP, Measure
from dpcurator.errors import InternalInvariantError, ParameterError
from dpcurator.mechanisms import Gaussian, Laplace
from dpcurator.query.backends import Backend
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from dpcurator.synth.aim import aim, aim_round_rho
from dpcurator.synth.common import Progress
from dpcurator.synth.domain import SynthDomain
from dpcurator.synth.fourier import FourierPlan, plan_fourier, release_fourier
from dpcurator.synth.marginals import (
    MarginalPlan,
    noise_std,
    plan_marginals,
    release_marginals,
)
from dpcurator.synth.mst import mst, mst_cost
from dpcurator.synth.mwem import mwem, mwem_round_epsilon

#: The kinds of synthetic release.
KINDS = ("marginals", "fourier", "mst", "aim", "mwem")
#: Confidence level of the expected errors (1 - α).
ALPHA = 0.05


@dataclass(frozen=True)
class SynthSpec:
    """An owner's request (public): ``marginals`` lists column tuples (None: every 1- and
    2-way marginal for ``marginals``, every 2-way one as AIM's and MWEM's workload)."""

    kind: str
    epsilon: Fraction | None = None
    delta: Fraction = Fraction(0)
    rho: Fraction | None = None
    columns: list[str] | None = None
    marginals: list[list[str]] | None = None
    rows: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The request as stored with the release (exact numbers as text)."""
        return {
            "kind": self.kind,
            "epsilon": None if self.epsilon is None else str(self.epsilon),
            "delta": str(self.delta),
            "rho": None if self.rho is None else str(self.rho),
            "columns": self.columns,
            "marginals": self.marginals,
            "rows": self.rows,
        }


class _Planned(Exception):  # noqa: N818  # a control-flow signal, not an error
    """Raised by :class:`_PlanningFilter` at the reservation: planning ends here."""

    def __init__(self, event: PrivacyEvent) -> None:
        super().__init__(event)
        self.event = event


class _PlanningFilter:
    """A budget filter that reserves nothing: it stops the synthesizer at its reservation
    (before any data is read) and hands back the event."""

    def reserve(self, event: PrivacyEvent, *, description: str = "") -> Reservation:
        raise _Planned(event)

    def remaining(self) -> Measure:
        return ApproxDP(0, 0)

    def spent(self) -> Measure:
        return ApproxDP(0, 0)

    def events(self) -> tuple[PrivacyEvent, ...]:
        return ()


Runner = Callable[[Session, Progress], pd.DataFrame]


@dataclass(frozen=True)
class SynthPlan:
    """A planned release: its exact event, the ledger charge, the expected errors."""

    spec: SynthSpec
    event: PrivacyEvent
    cost: ApproxDP
    errors: list[dict[str, Any]]
    runner: Runner

    def run(self, backend: Backend, metadata: Metadata, progress: Progress) -> pd.DataFrame:
        """Run the release on a session holding exactly the prepaid event (call this only after
        the ledger charged :attr:`cost`); returns the released frame."""
        if isinstance(self.event, ConcentratedEvent):
            prepaid = PrivacyFilter(ZCDP(self.event.rho), ZCDPAccountant())
        else:
            prepaid = PrivacyFilter(Budget(self.cost.epsilon))
        with_prepaid = Session(backend, metadata, budget_filter=prepaid)
        return self.runner(with_prepaid, progress)


def _zcdp_rho(spec: SynthSpec) -> Fraction:
    """The ρ of a zCDP release: ``rho``, or the largest ρ converting to (ε, δ)."""
    if spec.delta <= 0:
        raise ParameterError(
            f"kind {spec.kind!r} is rho-zCDP and the ledger charges (epsilon, delta): give a "
            f"delta > 0 (got delta = {spec.delta})."
        )
    if spec.rho is not None:
        if spec.epsilon is not None:
            raise ParameterError("Give rho or epsilon, not both.")
        return spec.rho
    if spec.epsilon is None:
        raise ParameterError("Give epsilon (with delta) or rho.")
    return largest_rho(spec.epsilon, spec.delta)


def _pure_epsilon(spec: SynthSpec) -> Fraction:
    """The ε of a pure-DP release (δ must be 0, no ρ)."""
    if spec.rho is not None or spec.delta != 0:
        raise ParameterError(
            f"kind {spec.kind!r} is pure epsilon-DP: give epsilon with delta = 0 and no rho "
            f"(got delta = {spec.delta}, rho = {spec.rho})."
        )
    if spec.epsilon is None:
        raise ParameterError(f"kind {spec.kind!r} needs epsilon.")
    return spec.epsilon


def _tables_plan(spec: SynthSpec, session: Session) -> MarginalPlan:
    """The contingency tables' plan: ρ-zCDP when δ > 0 or ρ is given, else pure ε."""
    cliques = 2 if spec.marginals is None else spec.marginals
    if spec.delta > 0 or spec.rho is not None:
        return plan_marginals(session, cliques, rho=_zcdp_rho(spec), columns=spec.columns)
    return plan_marginals(session, cliques, epsilon=_pure_epsilon(spec), columns=spec.columns)


def _fourier_plan(spec: SynthSpec, session: Session) -> FourierPlan:
    """The Fourier tables' plan (ρ-zCDP; every 1- and 2-way marginal by default)."""
    cliques = 2 if spec.marginals is None else spec.marginals
    return plan_fourier(session, cliques, rho=_zcdp_rho(spec), columns=spec.columns)


def _runner(spec: SynthSpec) -> Runner:
    """The release as a function of a session (the library checks everything else)."""
    cols, work, rows = spec.columns, spec.marginals, spec.rows
    if spec.kind == "marginals":
        if rows is not None:
            raise ParameterError("rows applies to synthetic records, not to kind 'marginals'.")

        def tables(session: Session, progress: Progress) -> pd.DataFrame:
            plan = _tables_plan(spec, session)
            return release_marginals(session, plan, alpha=ALPHA, progress=progress).to_frame()

        return tables
    if spec.kind == "fourier":
        if rows is not None:
            raise ParameterError("rows applies to synthetic records, not to kind 'fourier'.")
        _zcdp_rho(spec)  # refused here (free) when the budget is not zCDP

        def fourier_tables(session: Session, progress: Progress) -> pd.DataFrame:
            plan = _fourier_plan(spec, session)
            return release_fourier(session, plan, alpha=ALPHA, progress=progress).to_frame()

        return fourier_tables
    if spec.kind == "mst":
        if work is not None:
            raise ParameterError("MST chooses its own marginals: leave 'marginals' out.")
        rho = _zcdp_rho(spec)
        return lambda s, p: mst(s, rho=rho, columns=cols, rows=rows, progress=p).frame
    if spec.kind == "aim":
        rho = _zcdp_rho(spec)
        return lambda s, p: (
            aim(s, rho=rho, columns=cols, workload=work, rows=rows, progress=p).frame
        )
    if spec.kind == "mwem":
        eps = _pure_epsilon(spec)
        return lambda s, p: (
            mwem(s, epsilon=eps, columns=cols, workload=work, rows=rows, progress=p).frame
        )
    raise ParameterError(f"kind must be one of {KINDS}; got {spec.kind!r}.")


def _expected_errors(spec: SynthSpec, session: Session) -> list[dict[str, Any]]:
    """Per measured marginal (or kind of marginal): the noise's standard deviation and the
    (1-α) CI half-width of one noisy cell; public (metadata and budget only). AIM's later
    rounds adapt (annealing), so its row is the first round's noise, the largest."""
    if spec.kind in ("marginals", "fourier"):
        tables = _tables_plan if spec.kind == "marginals" else _fourier_plan
        frame = tables(spec, session).expected_error(ALPHA)
        return [{str(k): v for k, v in row.items()} for row in frame.to_dict(orient="records")]
    d = len(SynthDomain.from_metadata(session.metadata, spec.columns).names)
    unit = session.metadata.unit
    if spec.kind == "mst":
        one, two, _, _ = mst_cost(d, _zcdp_rho(spec), unit)
        return [_noise_row("each 1-way", one), _noise_row("each chosen 2-way", two)]
    if spec.kind == "aim":
        first = Gaussian.for_rho(aim_round_rho(_zcdp_rho(spec), d), unit.count_l2())
        return [_noise_row("each marginal of the first rounds", first)]
    laplace = Laplace.for_epsilon(mwem_round_epsilon(_pure_epsilon(spec)), unit.count_l1())
    return [_noise_row("each measured marginal", laplace)]


def _noise_row(what: str, mechanism: Gaussian | Laplace) -> dict[str, Any]:
    return {
        "marginal": what,
        "noise_std": noise_std(mechanism),
        "ci_halfwidth": mechanism.ci_halfwidth(ALPHA),
    }


def plan_release(spec: SynthSpec, backend: Backend, metadata: Metadata) -> SynthPlan:
    """The plan of ``spec`` on a dataset (free: raises every refusal, reads no data)."""
    runner = _runner(spec)
    planning = Session(backend, metadata, budget_filter=_PlanningFilter())
    try:
        runner(planning, lambda _message, _done: None)
    except _Planned as planned:
        event = planned.event
    else:  # pragma: no cover - every synthesizer reserves before it returns
        raise InternalInvariantError("A synthetic release returned without reserving.")
    approx = event.approx_cost()
    if isinstance(event, ZCDPEvent):
        cost = ZCDP(event.rho).to_approx(spec.delta)
        # Both views: a basic ledger charges the conversion, a concentrated one may charge ρ.
        event = ConcentratedEvent(event.rho, epsilon=cost.epsilon, epsilon_delta=cost.delta)
    elif approx is not None:
        cost = approx
    else:  # pragma: no cover - the synthesizers reserve zCDP or pure events only
        raise InternalInvariantError(f"Unexpected event {event!r}.")
    return SynthPlan(spec, event, cost, _expected_errors(spec, planning), runner)
