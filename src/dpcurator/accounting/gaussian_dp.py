"""A fully adaptive Gaussian-DP filter: exact Gaussian conversion for Gaussian-heavy workloads.

:class:`GaussianDPFilter` grants an (ε, δ) budget with δ > 0. From the public budget only it fixes

* δ_E = ``event_delta_share``·δ (1/16 by default) for the total variation H of the events'
  approximations below, at most H_max = δ_E/(1 + e^ε) (e^ε rounded up);
* δ_C = δ − δ_E and the largest μ² = M² (a rational, rounded down) with
  δ_M(ε) = Φ(−ε/M + M/2) − e^ε·Φ(−ε/M − M/2) <= δ_C: the exact (ε, δ) curve of M-GDP
  (Dong, Roth & Su 2022, "Gaussian differential privacy", Corollary 2.13).

Each event is charged (μ_i², η_i), computed from the event alone (:func:`gaussian_dp_charge`),
such that for every pair of neighbouring datasets there are distributions P'_i, Q'_i within
total variation η_i of the event's output distributions P_i, Q_i (given the past) with
T(P'_i, Q'_i) >= G_{μ_i} (μ_i-GDP):

* **Discrete Gaussian** (:class:`~dpcurator.accounting.GaussianEvent`: noise N_Z(0, σ²) on each
  coordinate of an integer-valued statistic of L2 sensitivity Δ). It is NOT exactly
  (Δ/σ)-GDP: at σ = 1, Δ = 1 its δ(ε) exceeds the continuous Gaussian's (see
  :class:`~dpcurator.accounting.PLDAccountant`; Canonne, Kamath & Steinke 2020). It is close
  to a post-processing of a continuous Gaussian of smaller σ. Fix τ = :data:`TAU` < σ and
  σ'² = σ² − τ². Release y = f + N(0, σ'²), then k with probability
  K(k | y) = e^(−(k−y)²/2τ²)/Θ_τ(y), Θ_τ(y) = Σ_j e^(−(j−y)²/2τ²): a kernel (it sums to 1) that
  does not depend on the data, so this release is (Δ/σ')-GDP (DRS22, Theorem 2.7, and
  post-processing, Proposition 2.8). By Poisson summation Θ_τ(y) = √(2π)τ·(1 + r(y)) with
  |r| <= ε_τ = 2·Σ_{m>=1} e^(−2π²τ²m²), so its pmf at k is φ_σ(k − f)/(1 + r) with σ² = σ'² + τ²
  (a Gaussian convolved with a Gaussian), while the discrete Gaussian's is φ_σ(k − f)/(1 + s),
  |s| <= ε_σ <= ε_τ. Their ratio is >= (1 − ε_τ)/(1 + ε_τ), so the total variation of one
  coordinate is at most 2ε_τ <= :data:`COORDINATE_TV` (10^-18 at τ = 3/2). Between two
  neighbours only the coordinates where f changes differ, each by a nonzero integer, so at most
  ⌊Δ²⌋ of them: replace those (the others keep their common law) and η = max(1, ⌊Δ²⌋)·10^-18,
  μ² = Δ²/(σ² − τ²) (exact). σ <= τ is refused.
* **Pure ε** (pure, Laplace events): ε-DP means T >= f_{ε,0}, and f_{ε,0} >= G_μ iff
  μ >= μ(ε) = 2·Φ^-1(e^ε/(1 + e^ε)): f_{ε,0} is the maximum of two lines meeting at
  α* = 1/(1 + e^ε), G_μ is convex with G_μ(0) = 1 and G_μ(α*) <= f_{ε,0}(α*) exactly then (by
  symmetry the same on the other side), and a convex function lies below its chords. η = 0.
  (μ(ε)² ≈ (π/2)·ε² for small ε: pure events cost more here than under zCDP's ε²/2.)
* **(ε, δ)** (approximate events, and concentrated events by their (ε, δ) view): both output
  distributions are mixtures with weight 1 − δ of an ε-DP pair (Kairouz, Oh & Viswanath 2015;
  Murtagh & Vadhan 2016, Lemma 3.2), within total variation δ of it: μ(ε)², η = δ.
* Repeated and composed events add; parallel ones take their worst part (one part differs between
  neighbours). Events with only a ρ (zCDP, or δ-approximate zCDP without an (ε, δ) view) are
  refused: a ρ does not bound a tradeoff function by any Gaussian of the same ρ, and the
  event does not say which noise gave it.

The filter admits an event iff afterwards Σ μ_i² <= M² and Σ η_i <= H_max (exact sums).

Guarantee (fully adaptive: events and their parameters may depend on every earlier release, as
μ_i and η_i are fixed before each release from public inputs): the interaction is (ε, δ)-DP.
Proof. Fix neighbours D, D'. In the hybrid interaction where each release's output law is
replaced by its approximation P'_i (for D) or Q'_i (for D'), each step is μ_i-GDP given the
past with Σ μ_i² <= M², so the hybrid is M-GDP (the GDP filter of Smith & Thakurta 2022, "Fully
adaptive composition for Gaussian differential privacy", Theorem 1.1; also Whitehouse, Ramdas,
Rogers & Wu 2023) and (ε, δ_M(ε))-DP by DRS22 Corollary 2.13. Coupling step by step, the real
and hybrid transcripts differ with probability at most Σ η_i <= H_max. So for every set S,
P(S) <= P_hyb(S) + H <= e^ε·P'_hyb(S) + δ_C + H <= e^ε·P'(S) + δ_C + (1 + e^ε)·H <=
e^ε·P'(S) + δ.

When to use it: on Gaussian releases whose σ is known (GaussianEvent) it admits what the exact
Gaussian conversion admits, up to the σ² − τ² correction (0.09 % of μ² at σ = 50): at
(1, 1e-6), Σ μ²/2 up to about 0.0278 against the concentrated filter's ρ ≈ 0.0229 (its Rényi
route at one order): 1.20x the discrete Gaussian counts of σ = 30, 98 % of what their exact
(non-adaptive) composition allows (``benchmarks/accounting.py``). A session's ``rho=`` query
is charged by its statistics' σ when they are all it releases
(:func:`~dpcurator.query.plan.request.gaussian_statistics_event`). Pure ε and (ε, δ) events
cost more than under :class:`~dpcurator.accounting.ConcentratedFilter`, and ρ-only events are
refused, so it is not the default.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from fractions import Fraction

from scipy.special import expit, ndtr, ndtri

from dpcurator._validation import check_probability, fail
from dpcurator.accounting.budget import Budget
from dpcurator.accounting.events import (
    ApproxEvent,
    ComposedEvent,
    ConcentratedEvent,
    GaussianEvent,
    ParallelEvent,
    PrivacyEvent,
    RepeatedEvent,
)
from dpcurator.accounting.filter import Reservation
from dpcurator.core.display import amount_text
from dpcurator.core.measures import ApproxDP, Measure, readable
from dpcurator.core.numbers import float_up, fraction_down, fraction_up, to_fraction
from dpcurator.errors import BudgetExceededError, ParameterError

#: τ of the continuous-Gaussian approximation of the discrete Gaussian (module docstring).
TAU = Fraction(3, 2)
#: An upper bound on 2ε_τ = 4·Σ_{m>=1} e^(−2π²τ²m²) at τ = :data:`TAU` (about 2.1e-19).
COORDINATE_TV = Fraction(1, 10**18)
#: Default share of δ for the total variation of the events' approximations.
DEFAULT_EVENT_DELTA_SHARE = Fraction(1, 16)
#: Relative safety margin on the float evaluations of Φ (each accurate to about 1e-15).
_MARGIN = 1e-9


def gdp_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of μ-GDP: Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) (DRS22, Corollary 2.13), in floats."""
    if mu <= 0:
        return 0.0
    return max(
        float(ndtr(-epsilon / mu + mu / 2))
        - math.exp(epsilon) * float(ndtr(-epsilon / mu - mu / 2)),
        0.0,
    )


def gdp_epsilon(mu_squared: Fraction, delta: Fraction) -> Fraction:
    """The smallest ε (rounded up) at which μ-GDP is (ε, δ)-DP, by bisection (δ(ε) decreases)."""
    if mu_squared == 0:
        return Fraction(0)
    mu, target = math.sqrt(float(mu_squared)) * (1 + _MARGIN), float(delta) / (1 + _MARGIN)
    low, high = 0.0, 1.0
    while gdp_delta(mu, high) > target:
        low, high = high, 2 * high
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if gdp_delta(mu, middle) > target else (low, middle)
    return fraction_up(high)


def largest_mu_squared(epsilon: Fraction, delta: Fraction) -> Fraction:
    """The largest M² (rounded down) with δ_M(ε) <= δ: bisection in floats, then lowered by a
    relative 1e-9 and checked with a relative margin of 1e-9 on δ."""
    eps, target = float(epsilon), float(delta)
    low, high = 0.0, 1.0
    while gdp_delta(high, eps) <= target:
        low, high = high, 2 * high
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if gdp_delta(middle, eps) <= target else (low, middle)
    squared = fraction_down(low * low * (1 - _MARGIN))
    while squared > 0 and gdp_delta(math.sqrt(float(squared)), eps) * (1 + _MARGIN) > target:
        squared *= 1 - Fraction(1, 2**20)
    return squared


def pure_mu_squared(epsilon: Fraction) -> Fraction:
    """μ(ε)² = (2·Φ^-1(e^ε/(1 + e^ε)))², rounded up: ε-DP implies μ(ε)-GDP (module docstring)."""
    if epsilon == 0:
        return Fraction(0)
    eps = float(epsilon)
    tail = float(expit(-eps))  # 1/(1 + e^ε), accurate in relative terms
    # Φ^-1(1 - p) <= sqrt(2 ln(1/p)) (Φ̄(z) <= e^(-z²/2)/2) and ln(1/p) <= ε + ln 2
    mu = -2 * float(ndtri(tail)) if tail > 0 else 2 * math.sqrt(2 * (eps + 1))
    return fraction_up(mu * (1 + _MARGIN)) ** 2


@dataclass(frozen=True)
class GaussianCharge:
    """What an event adds: ``mu_squared`` (μ_i²) and ``tv`` (η_i, its approximation's total
    variation)."""

    mu_squared: Fraction
    tv: Fraction

    def __add__(self, other: GaussianCharge) -> GaussianCharge:
        return GaussianCharge(self.mu_squared + other.mu_squared, self.tv + other.tv)

    def __sub__(self, other: GaussianCharge) -> GaussianCharge:
        return GaussianCharge(self.mu_squared - other.mu_squared, self.tv - other.tv)


def _refusal(event: PrivacyEvent) -> ParameterError:
    """An event with only a ρ, in the user's words (no class names)."""
    pair = event.approx_zcdp_cost()
    rho = "" if pair is None else f" (ρ{amount_text(pair[0].rho, up=True)})"
    return ParameterError(
        f"This release has only a zCDP cost{rho}, but accounting='gaussian' charges only "
        "releases whose noise it knows (Gaussian noise of a given σ, or a pure ε or (ε, δ) "
        "cost). Give epsilon (and delta) instead of rho, or open the session with "
        "accounting='concentrated'."
    )


def gaussian_dp_charge(event: PrivacyEvent) -> GaussianCharge:
    """(μ², η) of ``event`` (module docstring), or ParameterError for an event it cannot charge."""
    if isinstance(event, GaussianEvent):
        if event.sigma <= TAU:
            raise ParameterError(
                f"Gaussian noise of σ = {readable(event.sigma)} is too small for "
                f"accounting='gaussian' (it needs σ > {readable(TAU)}); ask for a smaller ρ or "
                "use accounting='concentrated'."
            )
        squared = event.l2_sensitivity**2
        coordinates = max(1, math.floor(squared))
        return GaussianCharge(squared / (event.sigma**2 - TAU**2), coordinates * COORDINATE_TV)
    if isinstance(event, RepeatedEvent):
        one = gaussian_dp_charge(event.event)
        return GaussianCharge(event.count * one.mu_squared, event.count * one.tv)
    if isinstance(event, ComposedEvent):
        total = GaussianCharge(Fraction(0), Fraction(0))
        for part in event.events:
            total = total + gaussian_dp_charge(part)
        return total
    if isinstance(event, ParallelEvent):
        parts = [gaussian_dp_charge(part) for part in event.events]
        return GaussianCharge(max(p.mu_squared for p in parts), max(p.tv for p in parts))
    if isinstance(event, (ApproxEvent, ConcentratedEvent)) or event.pure_cost() is not None:
        approx = event.approx_cost()
        if approx is not None:
            return GaussianCharge(pure_mu_squared(approx.epsilon), approx.delta)
    raise _refusal(event)


class GaussianDPFilter:
    """A thread-safe, fully adaptive Gaussian-DP filter (see the module docstring).

    Args:
        budget: a :class:`Budget` or ApproxDP with δ > 0.
        event_delta_share: the share δ_E/δ of δ for the events' total variation (default 1/16).

    Raises:
        ParameterError: a budget without δ > 0, a share outside (0, 1).
    """

    def __init__(
        self, budget: Budget | Measure, *, event_delta_share: object = DEFAULT_EVENT_DELTA_SHARE
    ) -> None:
        owner = "GaussianDPFilter"
        measure = budget.as_measure() if isinstance(budget, Budget) else budget
        if not (isinstance(measure, ApproxDP) and measure.delta > 0 and 0 < measure.epsilon <= 500):
            raise fail(
                "Gaussian-DP accounting (accounting='gaussian')",
                "budget",
                "an (ε, δ) budget with 0 < ε <= 500 and δ > 0",
                budget,
                "Gaussian-DP accounting converts to (ε, δ) at the end; a pure ε budget uses "
                "basic composition and a ρ budget zCDP.",
            )
        check_probability(
            owner, "event_delta_share", event_delta_share, open_low=True, open_high=True
        )
        self.budget: ApproxDP = measure
        self.event_delta = measure.delta * to_fraction(event_delta_share)
        self.conversion_delta = measure.delta - self.event_delta
        self.exp_epsilon = fraction_up(math.exp(float_up(measure.epsilon)))
        self.limits = GaussianCharge(
            largest_mu_squared(measure.epsilon, self.conversion_delta),
            self.event_delta / (1 + self.exp_epsilon),
        )
        self._lock = threading.Lock()
        self._live: list[tuple[Reservation, GaussianCharge]] = []
        self._used = GaussianCharge(Fraction(0), Fraction(0))
        self._numbers = 0

    def copy(self) -> GaussianDPFilter:
        """An independent filter in the same state."""
        with self._lock:
            twin = object.__new__(GaussianDPFilter)
            twin.__dict__.update(self.__dict__)
            twin._lock = threading.Lock()
            twin._live = list(self._live)
            return twin

    def reserve(self, event: PrivacyEvent, *, description: str = "") -> Reservation:
        """Charge ``event`` if Σμ² and Σ η stay within their limits; else BudgetExceededError,
        nothing charged. An event it cannot charge raises ParameterError (free)."""
        if not isinstance(event, PrivacyEvent):
            raise fail("GaussianDPFilter.reserve", "event", "a PrivacyEvent", event)
        charge = gaussian_dp_charge(event)
        with self._lock:
            after = self._used + charge
            if after.mu_squared > self.limits.mu_squared or after.tv > self.limits.tv:
                requested = event.approx_cost()
                raise BudgetExceededError(
                    requested if requested is not None else self._cost(charge),
                    self._remaining_locked(),
                )
            self._numbers += 1
            reservation = Reservation(event, description, self._numbers, self)
            self._live.append((reservation, charge))
            self._used = after
            return reservation

    def _cancel(self, reservation: Reservation) -> None:
        with self._lock:
            for charge in [c for r, c in self._live if r is reservation]:
                self._used = self._used - charge
            self._live = [(r, c) for r, c in self._live if r is not reservation]

    def replay(self, events: list[PrivacyEvent]) -> None:
        """Charge stored events again, in order; each is committed (BudgetExceededError at the
        first that does not fit, those before stay charged)."""
        for event in events:
            self.reserve(event, description="replayed").commit()

    def events(self) -> tuple[PrivacyEvent, ...]:
        """The events of all live reservations, in order."""
        with self._lock:
            return tuple(r.event for r, _ in self._live)

    def spent_native(self) -> GaussianCharge:
        """Σ μ_i² and Σ η_i of the live reservations."""
        with self._lock:
            return self._used

    def _cost(self, used: GaussianCharge) -> ApproxDP:
        """(ε, δ) of ``used`` taken alone: the ε at which its μ converts within δ_C, and
        δ_C + (1 + e^ε)·H (indicative)."""
        if used.mu_squared == 0 and used.tv == 0:
            return ApproxDP(0, 0)
        epsilon = gdp_epsilon(used.mu_squared, self.conversion_delta)
        tv_delta = (1 + self.exp_epsilon) * used.tv
        return ApproxDP(epsilon, min(self.conversion_delta + tv_delta, Fraction(1, 2)))

    def spent(self) -> Measure:
        """The spend as (ε, δ), indicative (the guarantee is the budget's for the whole
        interaction): the ε at which Σ μ_i² converts within δ_C, and δ_C + (1 + e^ε)·Σ η_i."""
        with self._lock:
            return self._cost(self._used)

    def _remaining_locked(self) -> ApproxDP:
        spent = self._cost(self._used)
        left_tv = (self.limits.tv - self._used.tv) * (1 + self.exp_epsilon)
        return ApproxDP(
            max(self.budget.epsilon - spent.epsilon, Fraction(0)),
            max(left_tv, Fraction(0)),
            note=(
                f"δ left is what releases' δ can use: {readable(self.conversion_delta)} of the "
                f"budget's δ = {readable(self.budget.delta)} is kept for converting the whole "
                "interaction from Gaussian DP to (ε, δ)-DP"
            ),
        )

    def remaining(self) -> Measure:
        """Budget minus spent, indicative (an event fits when its μ² and η fit what is left of
        M² and H_max; :attr:`limits` and :meth:`spent_native` give the parts)."""
        with self._lock:
            return self._remaining_locked()

    def __repr__(self) -> str:
        return (
            f"GaussianDPFilter(budget={self.budget}, μ² limit {readable(self.limits.mu_squared)}, "
            f"approximation limit {readable(self.limits.tv)})"
        )
