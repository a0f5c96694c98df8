"""Objective-perturbation logistic regression (issue 29, item 4): the lattice attack, the public
output grid, and the solver's gradient certificate (approximate minima perturbation)."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
from scipy import optimize

from dpcurator.core.measures import ApproxDP, PureDP
from dpcurator.estimators import logistic_regression
from dpcurator.estimators.certified_solver import gradient_bound, hessian_sum, solve
from dpcurator.estimators.objective_perturbation import Perturbation, release_coefficients
from dpcurator.mechanisms._grid import grid_exponent
from dpcurator.random import SeededRng
from tests.stat_tools import clopper_pearson

#: Declared false-failure probability of the privacy audit (simultaneous Clopper-Pearson bounds).
AUDIT_ALPHA = 0.05
#: Releases per dataset in the audit.
RELEASES = 50
#: A noise vector "lies on the lattice" when every coordinate is within this many lattice steps
#: of an integer multiple (the old solver's tolerance 1e-9 is below 0.07 steps here).
TOLERANCE = 0.1

EPSILON, DELTA = 1.0, 1e-6
SHARE = Fraction(1, 4)

# D: 20 rows of one feature on [-1, 1] (bounds ±1, so scaled and data units coincide);
# D' = D plus one row.
FEATURE = np.linspace(-1, 1, 20)
LABEL = (np.arange(20) % 3 == 0).astype(float)
FEATURE_2 = np.append(FEATURE, 0.3)
LABEL_2 = np.append(LABEL, 1.0)


def plan(delta: float = DELTA, steps: int | None = None) -> Perturbation:
    if steps is None:
        return Perturbation.of(
            Fraction(EPSILON),
            delta,
            2,
            rows_per_person=1,
            jacobian_share=SHARE,
            hessian_share=SHARE,
        )
    return Perturbation.of(
        Fraction(EPSILON), delta, 2, rows_per_person=1, jacobian_share=SHARE, hessian_share=SHARE,
        solver_steps=steps,
    )  # fmt: skip


def rows(feature: np.ndarray) -> np.ndarray:
    return np.column_stack([np.ones(feature.size), feature])


def exact_gradient(
    theta: np.ndarray, z: np.ndarray, label: np.ndarray, ridge: float
) -> list[Decimal]:
    """∇L_D(θ) + Λθ in 40-digit decimal arithmetic (exact inputs, correctly rounded exp)."""
    with localcontext() as ctx:
        ctx.prec = 40
        out = []
        t = [Decimal(float(v)) for v in theta]
        for j in range(z.shape[1]):
            total = Decimal(float(ridge)) * t[j]
            for row, y in zip(z, label, strict=True):
                eta = sum((Decimal(float(a)) * b for a, b in zip(row, t, strict=True)), Decimal(0))
                total += (1 / (1 + (-eta).exp()) - Decimal(float(y))) * Decimal(float(row[j]))
            out.append(total)
        return out


def on_lattice(theta: np.ndarray, perturbation: Perturbation) -> bool:
    """The distinguisher: does b = -∇L_D(θ) - Λθ (D the smaller dataset) lie on the noise's
    lattice s·Z^p, to :data:`TOLERANCE` steps?"""
    step = Decimal(2.0 ** grid_exponent(Fraction(perturbation.noise.sigma)))  # type: ignore[union-attr]
    gradient = exact_gradient(theta, rows(FEATURE), LABEL, perturbation.ridge)
    with localcontext() as ctx:
        ctx.prec = 40
        units = [-g / step for g in gradient]
        return all(abs(u - u.to_integral_value()) <= Decimal(TOLERANCE) for u in units)


def epsilon_lower_bound(hits_d: int, hits_neighbour: int, trials: int) -> float:
    """A (1 - AUDIT_ALPHA) lower bound on ε from the hit counts of the two datasets: both
    directions and both events (hit, miss), ε >= ln((P_low - δ)/P_high), with two-sided
    Clopper-Pearson intervals at AUDIT_ALPHA/2 for each rate (simultaneous by a union bound)."""
    low_d, high_d = clopper_pearson(hits_d, trials, AUDIT_ALPHA / 2)
    low_n, high_n = clopper_pearson(hits_neighbour, trials, AUDIT_ALPHA / 2)
    pairs = [(low_d, high_n), (low_n, high_d), (1 - high_d, 1 - low_n), (1 - high_n, 1 - low_d)]
    return max(
        (math.log((big - DELTA) / small) if big > DELTA else -math.inf) for big, small in pairs
    )


def test_the_lattice_distinguisher_is_within_epsilon() -> None:
    """The released coefficients (public API, seeded) give the lattice test no advantage beyond ε;
    power: the same test flags the release with its output noise removed (θ_a), which is the
    old mechanism's exact lattice release up to the solver's tolerance."""
    perturbation = plan()

    def hits(feature: np.ndarray, label: np.ndarray, seed: int) -> int:
        count = 0
        for rep in range(RELEASES):
            out = logistic_regression(
                feature[:, None], label, epsilon=EPSILON, delta=DELTA, x_lower=-1, x_upper=1,
                rng=SeededRng(seed + rep),
            )  # fmt: skip
            count += on_lattice(np.asarray(out.value), perturbation)
        return count

    released = epsilon_lower_bound(
        hits(FEATURE, LABEL, 0), hits(FEATURE_2, LABEL_2, 10_000), RELEASES
    )
    assert released <= EPSILON

    def broken_hits(feature: np.ndarray, label: np.ndarray, seed: int) -> int:
        z = rows(feature)
        return sum(
            on_lattice(
                release_coefficients(z, label, perturbation, SeededRng(seed + rep))[1], perturbation
            )
            for rep in range(RELEASES)
        )

    broken = epsilon_lower_bound(
        broken_hits(FEATURE, LABEL, 0), broken_hits(FEATURE_2, LABEL_2, 10_000), RELEASES
    )
    assert broken > EPSILON


def test_released_coefficients_lie_on_the_public_grid() -> None:
    """Every released coefficient is an integer multiple of the documented grid step h (bounds
    ±1: the data units are the scaled units), for δ > 0 and pure ε."""
    for delta in (DELTA, 0.0):
        step = plan(delta).grid
        assert step == 2.0 ** round(math.log2(step))
        for seed in range(5):
            out = logistic_regression(
                FEATURE_2[:, None], LABEL_2, epsilon=EPSILON, delta=delta, x_lower=-1, x_upper=1,
                rng=SeededRng(seed),
            )  # fmt: skip
            units = np.asarray(out.value) / step
            assert np.array_equal(units, np.round(units))
            assert np.all(np.asarray(out.ci_low) <= out.value)
            assert np.all(np.asarray(out.value) <= out.ci_high)


def test_the_gradient_certificate_is_honest() -> None:
    """gradient_bound is an upper bound of the exact gradient norm (40-digit arithmetic) at
    arbitrary points and at the solver's minimisers, where the float gradient alone is below
    the exact norm about half of the time (so a bound without the error margin fails here)."""
    gen = np.random.default_rng(5)
    z = np.column_stack([np.ones(60), gen.uniform(-1, 1, (60, 2))])
    label = (gen.random(60) < 0.4).astype(float)
    for scale in (1e-3, 1.0, 30.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0):
        b = gen.normal(0, 3, 3)
        theta = (
            gen.normal(0, scale, 3) if scale else solve(z, label, 0.7, b, target=1e-6, steps=30)[0]
        )
        exact = exact_gradient(theta, z, label, 0.7)
        norm = math.sqrt(
            sum(float(g + Decimal(float(v))) ** 2 for g, v in zip(exact, b, strict=True))
        )
        assert norm <= gradient_bound(theta, z, label, 0.7, b)[1]


def test_a_one_step_budget_still_gives_a_certified_release() -> None:
    """With the public step budget at 1 the unchecked last iterate (the old trust-region solver
    stopped after one iteration) is far from a γ-minimiser; the solver's continuation certifies
    ‖∇F‖ <= γ (checked in exact arithmetic), and the public release is on the grid with the
    same charge."""
    perturbation = plan(steps=1)
    z, label = rows(FEATURE_2), LABEL_2
    b = perturbation.draw(SeededRng(3), 1)[0]
    ridge, gamma = perturbation.ridge, perturbation.gradient

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        eta = z @ theta
        value = np.sum(np.logaddexp(0, eta) - label * eta) + ridge / 2 * theta @ theta + b @ theta
        return float(value), z.T @ (1 / (1 + np.exp(-eta)) - label) + ridge * theta + b

    stopped = optimize.minimize(
        objective, np.zeros(2), jac=True, method="trust-exact",
        hess=lambda th: hessian_sum(th, z) + ridge * np.eye(2), options={"maxiter": 1},
    ).x  # fmt: skip
    assert gradient_bound(stopped, z, label, ridge, b)[1] > 100 * gamma
    theta, bound, certified = solve(z, label, ridge, b, target=gamma, steps=1)
    exact = exact_gradient(theta, z, label, ridge)
    norm = math.sqrt(sum(float(g + Decimal(float(v))) ** 2 for g, v in zip(exact, b, strict=True)))
    assert certified
    assert norm <= bound <= gamma
    for delta, cost in ((DELTA, ApproxDP(EPSILON, DELTA)), (0.0, PureDP(EPSILON))):
        out = logistic_regression(
            FEATURE_2[:, None], LABEL_2, epsilon=EPSILON, delta=delta, x_lower=-1, x_upper=1,
            solver_steps=1, rng=SeededRng(4),
        )  # fmt: skip
        assert out.cost == cost
        units = np.asarray(out.value) / plan(delta).grid
        assert np.array_equal(units, np.round(units))
