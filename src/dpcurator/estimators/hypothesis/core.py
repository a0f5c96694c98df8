"""What every DP hypothesis test shares: the privacy setup, the result, the simulated null.

Each test releases noisy *sufficient statistics* once (counts of public cells, sums of values
clamped to public bounds) with exact discrete Laplace noise at a declared ε (pure DP), or exact
discrete Gaussian noise at a declared ρ (ρ-zCDP; Canonne, Kamath & Steinke 2020), then computes its
statistic and its p-value from those noisy numbers and public inputs only: post-processing, free and
safe to publish. The p-value is *valid under the privacy noise* because the null distribution is
simulated for the noisy statistic itself — the sampling of the data under H0 (a parametric bootstrap
at nuisance parameters estimated from the release) AND a fresh draw of the public noise law — rather
than read from the classical table, which ignores the noise and over-rejects at small n or ε
(Gaboardi, Lim, Rogers & Vadhan 2016; Ferrando, Wang & Sheldon 2022, "Parametric bootstrap for
differentially private confidence intervals"; Kazan, Shi, Groce & Bray 2023, "The test of tests").
The Monte Carlo p-value is (1 + #{T* >= T}) / (1 + M) over M simulated statistics T*.

**Where the sensitivity comes from.** The tests take arrays; the neighbouring relation and unit
come from a :class:`~dpcurator.query.privacy_unit.PrivacyUnit` (default: add or remove one row),
and every sensitivity is asked of it: under ε, :meth:`~PrivacyUnit.count_l1` — how many per-row
contributions one neighbour can change over the test's cells (sides·r·min(g, cells)) — so a
statistic whose per-row contribution has magnitude at most ``c`` has L1 sensitivity
``count_l1(cells)·c`` (the general rule of :mod:`dpcurator.query.privacy_unit`); under ρ, a
count vector's Δ₂² is :meth:`~PrivacyUnit.count_l2_squared` and a vector of sums' Δ₂ is
√g'·``rows_changed``·c (:meth:`Setup.sums`). Arrays carry no
person ids, so a user-level unit (a person column) is refused before any data is read: its
contribution bounds are enforced by a session's engines, not here.

**Simulation randomness.** The simulated null is drawn from :class:`~dpcurator.random.Rng`
(ChaCha20) with plain float arithmetic (Box–Muller normals, geometric differences for the
discrete Laplace law, normal approximations of binomials whose rarer outcome is expected more
than :data:`EXACT_MEAN` times): it post-processes a release and never adds
privacy noise.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, check_positive, fail
from dpcurator.core.measures import ZCDP, PureDP
from dpcurator.core.numbers import fraction_up, to_fraction
from dpcurator.errors import UnsupportedQueryError
from dpcurator.estimators.regression import gaussian_for_floats
from dpcurator.mechanisms import Gaussian, Laplace
from dpcurator.mechanisms._grid import grid_exponent
from dpcurator.query.privacy_unit import PrivacyUnit
from dpcurator.random import Rng, default_rng

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Default number M of Monte Carlo draws of the null distribution.
SIMULATIONS = 999

#: Binomials are drawn exactly when the rarer outcome is expected at most this many times, and
#: by their rounded normal approximation above it (n·min(p, 1 − p) > 30: the approximation
#: error is far below the Monte Carlo error of the p-value).
EXACT_MEAN = 30.0


# ----------------------------------------------------------------------------------------------
# The result


@dataclass(frozen=True)
class HypothesisTestResult:
    """The outcome of a DP test: everything in it is a DP release or post-processing of one.

    Attributes:
        test: the test's name (``one-sample t``, ``chi-square independence``, ...).
        statistic: the test statistic computed from the noisy release.
        p_value: the Monte Carlo p-value under the noise-aware null distribution.
        cost: the privacy cost of the release (pure ε, or ρ-zCDP; exact).
        method: the null's construction and its paper.
        null: the null hypothesis, in words.
        released: the noisy sufficient statistics, by name (safe to publish).
        noise: the public noise scale of each released statistic (the Laplace b, or the
            Gaussian σ).
        estimate: the effect the test is about (a mean, a difference, ...), from the release.
        simulations: the number M of draws of the null distribution.
        extra: further figures (a standard error, the classical F), by name.
    """

    test: str
    statistic: float
    p_value: float
    cost: PureDP | ZCDP
    method: str
    null: str
    released: Mapping[str, tuple[float, ...]]
    noise: Mapping[str, float]
    estimate: float | None = None
    simulations: int = SIMULATIONS
    extra: Mapping[str, float] = field(default_factory=dict)

    def rejects(self, alpha: float) -> bool:
        """True when the p-value is at most ``alpha`` (the test's declared level)."""
        return self.p_value <= alpha

    def summary(self) -> str:
        """A plain-text report: the test, H0, the statistic and p-value, the cost and the
        released statistics with their noise scales."""
        lines = [
            f"{self.test} (differentially private, {self.cost})",
            f"  H0: {self.null}",
            f"  statistic = {self.statistic:.6g}, p-value = {self.p_value:.4g} "
            f"(Monte Carlo, M = {self.simulations}; resolution {1 / (1 + self.simulations):.2g})",
        ]
        if self.estimate is not None:
            lines.append(f"  estimate = {self.estimate:.6g}")
        lines.extend(f"  {name} = {value:.6g}" for name, value in self.extra.items())
        lines.append("  released (noisy) statistics:")
        for name, values in self.released.items():
            shown = ", ".join(f"{v:.6g}" for v in values)
            scale = self.noise.get(name)
            noise = "" if scale is None else f"  (noise scale {scale:.4g})"
            lines.append(f"    {name}: [{shown}]{noise}")
        lines.append(f"  method: {self.method}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


# ----------------------------------------------------------------------------------------------
# The privacy setup


Mechanism = Laplace | Gaussian


@dataclass(frozen=True)
class Noise:
    """The public law of one released statistic's noise: discrete Laplace (``kind``
    ``laplace``, scale b) or discrete Gaussian (``gaussian``, σ) on the grid ``grid`` (1 for
    counts, 2^k for floats)."""

    scale: float
    grid: float
    kind: str = "laplace"

    @classmethod
    def of(cls, mechanism: Mechanism, *, floats: bool) -> Noise:
        kind = "gaussian" if isinstance(mechanism, Gaussian) else "laplace"
        scale = scale_of(mechanism)
        grid = math.ldexp(1.0, grid_exponent(scale)) if floats else 1.0
        return cls(float(scale), grid, kind)

    @property
    def variance(self) -> float:
        """Var of the noise: 2q/(1 − q)² grid² with q = exp(−grid/b) (Laplace); σ² (Gaussian:
        the discrete Gaussian's variance is at most σ², and within 10^-8 of it for σ >= 1)."""
        if self.kind == "gaussian":
            return self.scale**2
        q = math.exp(-self.grid / self.scale)
        return 2 * q / (1 - q) ** 2 * self.grid**2


def scale_of(mechanism: Mechanism) -> Fraction:
    """The noise scale: b (Laplace) or σ (Gaussian)."""
    return mechanism.sigma if isinstance(mechanism, Gaussian) else mechanism.scale


@dataclass(frozen=True)
class Setup:
    """The checked public inputs of a test: ε or ρ (exact), the unit, M and the randomness."""

    budget: Fraction
    concentrated: bool
    unit: PrivacyUnit
    simulations: int
    rng: Rng

    @property
    def cost(self) -> PureDP | ZCDP:
        """The release's cost: ε (pure DP) or ρ (zCDP), exact."""
        return ZCDP(self.budget) if self.concentrated else PureDP(self.budget)

    def rows_moved(self, cells: int) -> int:
        """Per-row contributions one neighbour changes over ``cells`` cells (asked of the
        unit: sides·r·min(g, cells)): the L1 sensitivity of a count vector."""
        return self.unit.count_l1(cells)

    def counts(self, weight: Fraction, cells: int) -> Mechanism:
        """The mechanism of a count vector over ``cells`` cells at ``weight`` of the budget:
        discrete Laplace with Δ₁ = ``count_l1(cells)``, or discrete Gaussian with
        Δ₂² = ``count_l2_squared(cells)`` (non-negative counts; asked of the unit)."""
        share = self.budget * weight
        if self.concentrated:
            return Gaussian.for_rho_squared(share, self.unit.count_l2_squared(cells))
        return Laplace.for_epsilon(share, self.rows_moved(cells))

    def sums(self, weight: Fraction, cells: int, per_row: float) -> Mechanism:
        """The mechanism of ``cells`` sums of per-row contributions in [−per_row, per_row]:
        Δ₁ = ``count_l1(cells)``·per_row, or Δ₂ = √g'·(sides·r)·per_row (a person's rows,
        at most r a cell in g' = ``groups_touched(cells)`` cells, on each side)."""
        share = self.budget * weight
        if self.concentrated:
            l2 = math.sqrt(self.unit.groups_touched(cells)) * self.unit.rows_changed * per_row
            return gaussian_for_floats(share, fraction_up(l2), cells)
        sensitivity = to_fraction(self.rows_moved(cells)) * to_fraction(per_row)
        return Laplace.for_epsilon_floats(share, sensitivity, cells)


def release_counts(plan: Setup, counts: IntArray) -> tuple[FloatArray, Noise]:
    """A count vector (any shape; its cells are disjoint, one per row) released at the whole
    budget of ``plan`` (:meth:`Setup.counts`), and its noise law."""
    mechanism = plan.counts(Fraction(1), counts.size)
    released = mechanism.release_integers(counts, plan.rng).astype(np.float64)
    return released, Noise.of(mechanism, floats=False)


def codes(owner: str, names: tuple[str, str], data: object, cats: list[object]) -> IntArray:
    """Each row's index in the public categories ``cats`` (-1 outside them: in no cell)."""
    name, _ = names
    raw = data.to_numpy() if hasattr(data, "to_numpy") else data
    values = np.asarray(raw, dtype=object)
    if values.ndim != 1:
        raise fail(owner, name, "1-dimensional", values.shape)
    index = {value: code for code, value in enumerate(cats)}
    found = [index.get(v.item() if hasattr(v, "item") else v, -1) for v in values]
    return np.asarray(found, np.int64).reshape(-1)


def setup(  # noqa: PLR0917 (the public inputs every test shares)
    owner: str,
    epsilon: object,
    rho: object,
    unit: PrivacyUnit | None,
    simulations: object,
    rng: Rng | None,
) -> Setup:
    """Check the public inputs (free refusals, before any data is read): exactly one of
    ``epsilon`` (pure DP, discrete Laplace) and ``rho`` (ρ-zCDP, discrete Gaussian)."""
    if (epsilon is None) == (rho is None):
        raise fail(owner, "epsilon", "exactly one of epsilon and rho", (epsilon, rho))
    name, value = ("epsilon", epsilon) if rho is None else ("rho", rho)
    budget = to_fraction(check_positive(owner, name, value))
    draws = check_int(owner, "simulations", simulations, minimum=1)
    chosen = PrivacyUnit() if unit is None else unit
    if not isinstance(chosen, PrivacyUnit):
        raise fail(owner, "unit", "a PrivacyUnit (e.g. metadata.unit)", unit)
    if chosen.user_level:
        raise UnsupportedQueryError(
            f"{owner}: the privacy unit is a person column ({chosen.person_column!r}), but "
            "arrays carry no person ids to bound each person's rows: pass a row-level unit "
            "(declare max_rows_per_person for persons owning several rows) or release the "
            "statistics through a session."
        )
    return Setup(budget, rho is not None, chosen, draws, rng or default_rng())


def shares(*weights: int) -> tuple[Fraction, ...]:
    """Public shares of ε proportional to ``weights`` (exact: they sum to 1)."""
    total = sum(weights)
    return tuple(Fraction(w, total) for w in weights)


# ----------------------------------------------------------------------------------------------
# Data checks


def column(owner: str, name: str, data: object) -> FloatArray:
    """A 1-D float column (numpy, pandas, Polars or a sequence)."""
    raw = data.to_numpy() if hasattr(data, "to_numpy") else data
    try:
        values = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise fail(owner, name, "numbers", type(data).__name__) from None
    if values.ndim != 1:
        raise fail(owner, name, "1-dimensional", values.shape)
    return values


def bounds(owner: str, lower: object, upper: object) -> tuple[float, float]:
    """Public bounds lower < upper, both finite."""
    _difference(owner, lower, upper)
    return float(lower), float(upper)  # type: ignore[arg-type]


def _difference(owner: str, lower: object, upper: object) -> float:
    try:
        low, high = float(lower), float(upper)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise fail(owner, "lower", "numbers (lower < upper)", (lower, upper)) from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise fail(owner, "lower", "finite public bounds with lower < upper", (lower, upper))
    return high - low


def clamped(values: FloatArray, lower: float, upper: float) -> FloatArray:
    """Values clamped to [lower, upper]; NaN becomes the midpoint (a public fill)."""
    filled = np.where(np.isnan(values), (lower + upper) / 2, values)
    return np.clip(filled, lower, upper)


def clamped_columns(
    owner: str, named: Iterable[tuple[str, object]], lower: float, upper: float
) -> list[FloatArray]:
    """Each (name, data) as a 1-D float column (:func:`column`) clamped to [lower, upper]
    (:func:`clamped`), checked in order."""
    return [clamped(column(owner, name, data), lower, upper) for name, data in named]


def check_categories(owner: str, name: str, values: object) -> list[object]:
    cats: list[object] = list(values)  # type: ignore[call-overload]
    if len(cats) < 2 or len(set(cats)) != len(cats):
        raise fail(owner, name, "at least 2 distinct public values", values)
    return cats


# ----------------------------------------------------------------------------------------------
# Simulation (post-processing only)


def uniforms(rng: Rng, size: int) -> FloatArray:
    """Uniform floats on (0, 1] with 53 random bits."""
    return ((rng.uint64(size) >> np.uint64(11)).astype(np.float64) + 1.0) * 2.0**-53


def normals(rng: Rng, size: int) -> FloatArray:
    """Standard normal draws (Box–Muller)."""
    half = (size + 1) // 2
    radius = np.sqrt(-2.0 * np.log(uniforms(rng, half)))
    angle = 2.0 * np.pi * uniforms(rng, half)
    return np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])[:size]


def noise_draws(rng: Rng, noise: Noise, shape: tuple[int, ...]) -> FloatArray:
    """Draws of the law of ``noise``: discrete Laplace exactly (a difference of two
    geometrics), discrete Gaussian as the normal of σ rounded to the grid."""
    size = math.prod(shape)
    if noise.kind == "gaussian":
        steps = np.rint(noise.scale / noise.grid * normals(rng, size))
        return np.asarray((steps * noise.grid).reshape(shape), np.float64)
    units = noise.scale / noise.grid
    first = np.floor(-units * np.log(uniforms(rng, size)))
    second = np.floor(-units * np.log(uniforms(rng, size)))
    return np.asarray(((first - second) * noise.grid).reshape(shape), np.float64)


def clipped_cells(table: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(cells, n): noisy counts clipped at 0, and their sum over the last axis, at least 1."""
    cells = np.maximum(table, 0.0)
    return cells, np.maximum(cells.sum(axis=-1), 1.0)


def binomial_rows(rng: Rng, trials: FloatArray, q: float) -> FloatArray:
    """One binomial(trials[i], q) draw per entry: exact (geometric gaps between successes of
    the rarer outcome) when the rarer outcome is expected at most :data:`EXACT_MEAN` times,
    else the rounded normal approximation, clipped to [0, trials]."""
    trials = np.maximum(np.asarray(trials, np.float64), 0.0)
    rare = min(q, 1.0 - q)
    if rare <= 0.0 or trials.size == 0:
        return trials * (1.0 if q >= 1.0 else 0.0)
    top = float(trials.max())
    mean = top * rare
    if mean > EXACT_MEAN:
        sd = np.sqrt(trials * q * (1 - q))
        drawn = np.rint(trials * q + sd * normals(rng, trials.size))
        return np.asarray(np.clip(drawn, 0.0, trials), np.float64)
    slots = int(mean + 12 * math.sqrt(mean) + 30)
    gaps = np.floor(np.log(uniforms(rng, trials.size * slots)) / math.log1p(-rare)) + 1
    positions = np.cumsum(gaps.reshape(trials.size, slots), axis=1)
    count = np.count_nonzero(positions <= trials[:, None], axis=1).astype(np.float64)
    return np.asarray(count if q <= 0.5 else trials - count, np.float64)


def binomial(rng: Rng, n: npt.ArrayLike, p: npt.ArrayLike, draws: int) -> FloatArray:
    """``draws`` × shape(n) binomial(n, p) draws (:func:`binomial_rows`)."""
    trials = np.asarray(n, np.float64)
    prob = np.clip(np.broadcast_to(np.asarray(p, np.float64), trials.shape), 0.0, 1.0)
    out = np.zeros((draws, *trials.shape))
    for index in np.ndindex(trials.shape):
        column = np.full(draws, float(trials[index]))
        out[(slice(None), *index)] = binomial_rows(rng, column, float(prob[index]))
    return out


def multinomial(rng: Rng, n: int, probabilities: FloatArray, draws: int) -> FloatArray:
    """``draws`` × k multinomial(n, p) counts, by conditional binomials."""
    p = np.maximum(np.asarray(probabilities, np.float64), 0.0)
    p = p / p.sum() if p.sum() > 0 else np.full(p.size, 1.0 / p.size)
    out = np.zeros((draws, p.size))
    left = np.full(draws, float(n))
    mass = 1.0
    for j in range(p.size - 1):
        q = 0.0 if mass <= 0 else min(1.0, float(p[j]) / mass)
        drawn = binomial_rows(rng, left, q)
        out[:, j] = drawn
        left = left - drawn
        mass -= float(p[j])
    out[:, -1] = left
    return out


def chi_square_sample(rng: Rng, dof: npt.ArrayLike, draws: int) -> FloatArray:
    """χ²(dof) draws by the Wilson–Hilferty cube approximation (dof >= 1), never negative."""
    k = np.maximum(np.asarray(dof, np.float64), 1.0)
    z = normals(rng, draws * k.size).reshape(draws, *k.shape)
    c = 2.0 / (9.0 * k)
    return np.asarray(k * np.maximum(1 - c + z * np.sqrt(c), 0.0) ** 3)


def p_value(observed: float, simulated: FloatArray) -> float:
    """(1 + #{T* >= T}) / (1 + M): the Monte Carlo p-value (valid at every M)."""
    finite = np.nan_to_num(simulated, nan=-np.inf)
    return float((1 + np.count_nonzero(finite >= observed)) / (1 + simulated.size))


def as_tuple(values: npt.ArrayLike) -> tuple[float, ...]:
    return tuple(float(v) for v in np.asarray(values, np.float64).reshape(-1))


def names_of(prefix: str, labels: Sequence[object]) -> list[str]:
    return [f"{prefix}[{label}]" for label in labels]


__all__ = [
    "SIMULATIONS",
    "HypothesisTestResult",
    "Noise",
    "Setup",
    "binomial",
    "multinomial",
    "p_value",
    "setup",
]
