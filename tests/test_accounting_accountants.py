"""Accountants against independent closed forms (mpmath/Fraction) and against dp_accounting."""

from __future__ import annotations

import math
from fractions import Fraction

import dp_accounting as dpa
import mpmath as mp
import pytest

from dpcurator.accounting.accountants import BasicAccountant, ZCDPAccountant
from dpcurator.accounting.accountants_advanced import (
    AdvancedCompositionAccountant,
    drv_epsilon,
    kov_epsilon,
)
from dpcurator.accounting.accountants_pld import PLDAccountant
from dpcurator.accounting.accountants_rdp import RDPAccountant
from dpcurator.accounting.composition import group_privacy, parallel_composition
from dpcurator.accounting.events import (
    ApproxEvent,
    GaussianEvent,
    LaplaceEvent,
    ParallelEvent,
    PureEvent,
    RepeatedEvent,
    ZCDPEvent,
)
from dpcurator.core.measures import ZCDP, ApproxDP, PureDP
from dpcurator.errors import ParameterError

mp.mp.dps = 50


def drv_reference(epsilons: list[float], slack: float) -> mp.mpf:
    """Dwork, Rothblum & Vadhan 2010, Theorem III.3 (sum form)."""
    squares = mp.fsum(mp.mpf(e) ** 2 for e in epsilons)
    drift = mp.fsum(mp.mpf(e) * mp.expm1(mp.mpf(e)) for e in epsilons)
    return mp.sqrt(2 * mp.log(1 / mp.mpf(slack)) * squares) + drift


def kov_reference(epsilon: Fraction, k: int, slack: float) -> Fraction:
    """Kairouz, Oh & Viswanath 2015, Theorem 3.3, by direct binomial summation for every i."""
    e = mp.mpf(epsilon.numerator) / epsilon.denominator
    best = k * epsilon
    for i in range(k // 2 + 1):
        delta_i = (
            mp.fsum(
                mp.binomial(k, ell) * (mp.exp((k - ell) * e) - mp.exp((k - 2 * i + ell) * e))
                for ell in range(i)
            )
            / (1 + mp.exp(e)) ** k
        )
        if delta_i <= slack:
            best = min(best, (k - 2 * i) * epsilon)
    return best


def gaussian_reference_delta(sigma: float, epsilon: mp.mpf) -> mp.mpf:
    s = mp.mpf(sigma)
    return mp.ncdf(1 / (2 * s) - epsilon * s) - mp.exp(epsilon) * mp.ncdf(
        -1 / (2 * s) - epsilon * s
    )


def exact_gaussian_epsilon(sigma: float, delta: float) -> mp.mpf:
    return mp.findroot(lambda e: gaussian_reference_delta(sigma, e) - delta, 1.0)


# --- basic ---------------------------------------------------------------------------------------


def test_basic_sums_exactly_and_keeps_pure() -> None:
    events = [PureEvent(Fraction(1, 10))] * 10 + [LaplaceEvent(3, 1)]
    assert BasicAccountant().total(events) == PureDP(Fraction(4, 3))
    mixed = [*events, ApproxEvent(Fraction(1, 2), Fraction(1, 10**6))]
    assert BasicAccountant().total(mixed) == ApproxDP(Fraction(11, 6), Fraction(1, 10**6))
    assert BasicAccountant().total([RepeatedEvent(PureEvent(Fraction(1, 4)), 8)]) == PureDP(2)
    assert BasicAccountant().total([]) == PureDP(0)


def test_basic_refuses_gaussian_with_hint() -> None:
    with pytest.raises(ParameterError, match=r"costing ρ.*ZCDPAccountant") as refused:
        BasicAccountant().cost_in([GaussianEvent(1, 1)], ApproxDP(1, 1e-6))
    assert "Event(" not in str(refused.value)  # the release by its cost, not by its repr


# --- advanced / optimal --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("eps", "k", "slack"), [(0.1, 50, 1e-6), (0.5, 10, 1e-3), (0.01, 400, 1e-9)]
)
def test_drv_matches_formula(eps: float, k: int, slack: float) -> None:
    computed = drv_epsilon([(ApproxDP(eps, 0), k)], Fraction(slack))
    exact = drv_reference([eps] * k, slack)
    assert computed >= exact
    assert computed <= exact * (1 + mp.mpf("1e-12"))


def test_drv_heterogeneous() -> None:
    epsilons = [0.1, 0.2, 0.2, 0.05]
    terms = [(ApproxDP(0.1, 0), 1), (ApproxDP(0.2, 0), 2), (ApproxDP(0.05, 0), 1)]
    computed = drv_epsilon(terms, Fraction(1, 1000))
    exact = drv_reference(epsilons, 1e-3)
    assert exact <= computed <= exact * (1 + mp.mpf("1e-12"))


@pytest.mark.parametrize(
    ("eps", "k", "slack"),
    [
        (Fraction(1, 2), 10, 1e-3),
        (Fraction(1, 10), 30, 1e-5),
        (Fraction(1), 7, 0.05),
        (Fraction(1, 5), 1, 1e-3),
    ],
)
def test_kov_matches_direct_summation(eps: Fraction, k: int, slack: float) -> None:
    assert kov_epsilon(eps, k, Fraction(slack)) == kov_reference(eps, k, slack)


def test_advanced_accountant_takes_best() -> None:
    accountant = AdvancedCompositionAccountant(1e-6)
    events = [LaplaceEvent(10, 1)] * 50  # ε = 0.1 each
    result = accountant.total(events)
    kov = kov_reference(Fraction(1, 10), 50, 1e-6)
    drv = drv_reference([0.1] * 50, 1e-6)
    assert result.epsilon == min(kov, 5)
    assert kov < drv < 5
    assert result.delta == Fraction(1e-6)
    repeated = accountant.total([RepeatedEvent(LaplaceEvent(10, 1), 50)])
    assert repeated == result
    # a single event: basic is optimal and spends no slack
    assert accountant.total([LaplaceEvent(10, 1)]) == ApproxDP(Fraction(1, 10), 0)
    # δ of the events adds to the slack
    approx = accountant.total([ApproxEvent(Fraction(1, 10), Fraction(1, 10**8))] * 50)
    assert approx.delta == Fraction(50, 10**8) + Fraction(1e-6)


def test_advanced_heterogeneous_uses_drv() -> None:
    events = [LaplaceEvent(10, 1)] * 100 + [LaplaceEvent(20, 1)] * 100
    result = AdvancedCompositionAccountant(1e-6).total(events)
    exact = drv_reference([0.1] * 100 + [0.05] * 100, 1e-6)
    assert exact <= result.epsilon <= exact * (1 + mp.mpf("1e-12"))


def test_advanced_validation() -> None:
    for bad in [0, 1, -1, math.nan]:
        with pytest.raises(ParameterError, match="'delta_slack' parameter"):
            AdvancedCompositionAccountant(bad)
    with pytest.raises(ParameterError, match="costing ρ") as refused:
        AdvancedCompositionAccountant(1e-6).total([ZCDPEvent(1)])
    assert "Event(" not in str(refused.value)


# --- zCDP ----------------------------------------------------------------------------------------


def test_zcdp_accountant() -> None:
    events = [LaplaceEvent(10, 1)] * 50 + [GaussianEvent(2, 1), ZCDPEvent(Fraction(1, 8))]
    rho = 50 * Fraction(1, 200) + Fraction(1, 8) + Fraction(1, 8)
    assert ZCDPAccountant().total(events) == ZCDP(rho)
    assert ZCDPAccountant().total(events, 1e-6) == ZCDP(rho).to_approx(1e-6)
    with pytest.raises(ParameterError, match="zCDP cost"):
        ZCDPAccountant().total([ApproxEvent(1, 1e-6)])


# --- RDP and PLD vs dp_accounting and exact values -----------------------------------------------


def test_rdp_gaussian_matches_dp_accounting_and_exact() -> None:
    ours = RDPAccountant().total([GaussianEvent(5, 1)] * 10, 1e-6).epsilon
    theirs = dpa.rdp.RdpAccountant()
    theirs.compose(dpa.GaussianDpEvent(5.0), 10)
    assert ours >= theirs.get_epsilon(1e-6)
    assert ours == pytest.approx(theirs.get_epsilon(1e-6), rel=1e-12)
    assert ours >= exact_gaussian_epsilon(5 / math.sqrt(10), 1e-6)


def test_rdp_randomized_response_curve_closed_form() -> None:
    curve = RDPAccountant(orders=[2.0, 3.0]).curve([PureEvent(1)])
    p = mp.e / (1 + mp.e)
    q = 1 - p
    for order, value in zip([2, 3], curve, strict=True):
        exact = mp.log(p**order * q ** (1 - order) + q**order * p ** (1 - order)) / (order - 1)
        assert value >= exact * (1 - mp.mpf("1e-12"))
        assert value == pytest.approx(float(exact), rel=1e-9)


def test_rdp_laplace_never_below_dp_accounting_laplace() -> None:
    ours = RDPAccountant().total([LaplaceEvent(10, 1)] * 50, 1e-6).epsilon
    theirs = dpa.rdp.RdpAccountant()
    theirs.compose(dpa.LaplaceDpEvent(10.0), 50)
    assert ours >= theirs.get_epsilon(1e-6)
    through_zcdp = ZCDPAccountant().total([LaplaceEvent(10, 1)] * 50, 1e-6)
    assert isinstance(through_zcdp, ApproxDP)
    assert ours <= through_zcdp.epsilon


def test_rdp_parallel_and_repeated() -> None:
    accountant = RDPAccountant()
    parallel = accountant.curve([ParallelEvent([GaussianEvent(5, 1), LaplaceEvent(3, 1)])])
    parts = [accountant.curve([GaussianEvent(5, 1)]), accountant.curve([LaplaceEvent(3, 1)])]
    assert list(parallel) == [max(a, b) for a, b in zip(*parts, strict=True)]
    repeated = accountant.curve([RepeatedEvent(GaussianEvent(5, 1), 3)])
    assert list(repeated) == pytest.approx(list(3 * parts[0]))
    with pytest.raises(ParameterError, match=r"'delta' parameter of RDPAccountant\.total"):
        accountant.total([GaussianEvent(5, 1)])
    with pytest.raises(ParameterError, match="Rényi"):
        accountant.total([ApproxEvent(1, 1e-6)], 1e-5)


def test_pld_gaussian_close_to_the_continuous_curve_at_moderate_sigma() -> None:
    # Gaussian events are discrete (tests/test_accounting_pld_discrete.py checks validity against
    # the exact discrete δ); at σ = 5 the discrete and continuous curves nearly coincide.
    ours = PLDAccountant().total([GaussianEvent(5, 1)] * 10, 1e-6).epsilon
    exact = exact_gaussian_epsilon(5 / math.sqrt(10), 1e-6)
    assert exact * mp.mpf("0.99") <= ours <= exact * mp.mpf("1.01")


def test_pld_laplace_pessimistic() -> None:
    ours = PLDAccountant().total([RepeatedEvent(LaplaceEvent(10, 1), 50)], 1e-6).epsilon
    theirs = dpa.pld.PLDAccountant()
    theirs.compose(dpa.LaplaceDpEvent(10.0), 50)
    assert ours >= theirs.get_epsilon(1e-6)
    assert ours <= BasicAccountant().total([LaplaceEvent(10, 1)] * 50).epsilon
    with pytest.raises(ParameterError, match="ZCDPAccountant or RDPAccountant"):
        PLDAccountant().total([ZCDPEvent(1)], 1e-6)


# --- fits, group privacy, parallel composition ---------------------------------------------------


def test_fits_in_each_budget_measure() -> None:
    tenth = PureEvent(Fraction(1, 10))
    assert BasicAccountant().fits([tenth] * 9, tenth, PureDP(1))
    assert not BasicAccountant().fits([tenth] * 10, tenth, PureDP(1))
    assert BasicAccountant().fits([tenth] * 9, tenth, ApproxDP(1, 1e-6))
    with pytest.raises(ParameterError, match="pure ε cost"):  # never chargeable to a pure budget
        BasicAccountant().fits([], ApproxEvent(1, 1e-6), PureDP(5))
    assert ZCDPAccountant().fits([GaussianEvent(1, 1)], GaussianEvent(1, 1), ZCDP(1))
    assert not ZCDPAccountant().fits([GaussianEvent(1, 1)] * 2, GaussianEvent(1, 1), ZCDP(1))
    gaussian = [GaussianEvent(5, 1)] * 10
    total = ZCDPAccountant().total(gaussian, 1e-6)
    assert isinstance(total, ApproxDP)
    eps = total.epsilon
    assert ZCDPAccountant().fits(gaussian[1:], gaussian[0], ApproxDP(eps, 1e-6))
    assert not ZCDPAccountant().fits(gaussian[1:], gaussian[0], ApproxDP(eps * 0.999, 1e-6))
    with pytest.raises(ParameterError, match="'budget' parameter"):
        BasicAccountant().fits([], tenth, 1.0)  # type: ignore[arg-type]


def test_group_privacy() -> None:
    assert group_privacy(PureDP(Fraction(1, 3)), 3) == PureDP(1)
    assert group_privacy(ZCDP(Fraction(1, 2)), 3) == ZCDP(Fraction(9, 2))
    result = group_privacy(ApproxDP(Fraction(1, 10), Fraction(1, 10**6)), 4)
    assert isinstance(result, ApproxDP)
    exact = 4 * mp.exp(3 * mp.mpf("0.1")) * mp.mpf("1e-6")
    assert result.epsilon == Fraction(4, 10)
    assert exact <= result.delta <= exact * (1 + mp.mpf("1e-12"))
    with pytest.raises(ParameterError, match="'k' parameter of group_privacy"):
        group_privacy(ApproxDP(1, 0.1), 10)
    with pytest.raises(ParameterError, match="'k' parameter of group_privacy must be >= 1"):
        group_privacy(PureDP(1), 0)


def test_parallel_composition() -> None:
    assert parallel_composition([PureDP(1), PureDP(3)]) == PureDP(3)
    assert parallel_composition([ApproxDP(1, 1e-3), ApproxDP(2, 1e-6)]) == ApproxDP(2, 1e-3)
    assert parallel_composition([ZCDP(1), ZCDP(Fraction(1, 2))]) == ZCDP(1)
    with pytest.raises(ParameterError, match="one measure type"):
        parallel_composition([PureDP(1), ZCDP(1)])
    with pytest.raises(ParameterError, match="one measure type"):
        parallel_composition([])
