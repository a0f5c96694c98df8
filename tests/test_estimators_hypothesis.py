"""The DP hypothesis tests (dpcurator.estimators.hypothesis): type-I error at most α under the
privacy noise, power against the public test, and their privacy setup.

Statistical tests are seeded. Each type-I check runs R = :data:`REPEATS` null data sets and
declares α = 0.05 for the DP test and CHECK_ALPHA = 0.001 for the check itself: it fails when the
rejections exceed the (1 − CHECK_ALPHA) quantile of Binomial(R, α) — the Monte Carlo tolerance
(≈ +6 points at R = 150). The check's power is shown by
:func:`test_a_null_that_ignores_the_noise_is_caught`: the same procedure on the tests with the
noise left out of their simulated null rejects far above the bound at n = 100, ε = 0.1.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import stats

from dpcurator.core.measures import ZCDP, PureDP
from dpcurator.errors import ParameterError, UnsupportedQueryError
from dpcurator.estimators import difference_of_means_test
from dpcurator.estimators import hypothesis as ht
from dpcurator.estimators.hypothesis import chi_square, ks, moments, proportions
from dpcurator.query.privacy_unit import PrivacyUnit
from dpcurator.random import SeededRng
from tests.hypothesis_cases import CASES

ALPHA = 0.05
CHECK_ALPHA = 0.001
REPEATS = 150
#: Monte Carlo draws of each test's null inside the checks (valid at any M; coarser p-values).
DRAWS = 49


def rejection_bound(repeats: int, alpha: float = ALPHA) -> int:
    """The most rejections a level-α test may show in ``repeats`` null runs (one-sided binomial
    check at CHECK_ALPHA)."""
    return int(stats.binom.ppf(1 - CHECK_ALPHA, repeats, alpha))


def rejections(
    name: str,
    n: int,
    epsilon: float,
    effect: float,
    repeats: int,
    *,
    public_test: bool = False,
    rho: bool = False,
) -> tuple[int, int]:
    """(DP rejections, public rejections) at α over ``repeats`` seeded data sets (the public
    test runs only when asked; ``epsilon`` is ρ when ``rho``)."""
    dp = public = 0
    for i in range(repeats):
        seed = 7919 * i + n
        run = CASES[name].run
        p_dp, p_public = run(n, effect, epsilon, seed, DRAWS, public=public_test, rho=rho)
        dp += p_dp <= ALPHA
        public += p_public <= ALPHA
    return dp, public


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon", [0.1, 1.0])
@pytest.mark.parametrize("n", [100, 10_000])
@pytest.mark.parametrize("name", sorted(CASES))
def test_type_one_error_is_at_most_alpha(name: str, n: int, epsilon: float) -> None:
    """Under H0, the DP test rejects at most α of the time (+ the declared Monte Carlo
    tolerance), at small and large n and ε."""
    dp, _ = rejections(name, n, epsilon, 0.0, REPEATS)
    assert dp <= rejection_bound(REPEATS), f"{dp}/{REPEATS} rejections at α = {ALPHA}"


@pytest.mark.statistical
@pytest.mark.parametrize(("n", "rho"), [(100, 0.005), (10_000, 0.5)])
@pytest.mark.parametrize("name", sorted(CASES))
def test_type_one_error_is_at_most_alpha_under_zcdp(name: str, n: int, rho: float) -> None:
    """The same check with discrete Gaussian noise at ρ (ρ = ε²/2 for ε = 0.1 and 1)."""
    dp, _ = rejections(name, n, rho, 0.0, REPEATS, rho=True)
    assert dp <= rejection_bound(REPEATS), f"{dp}/{REPEATS} rejections at α = {ALPHA}"


def _zero_noise(rng: Any, noise: Any, shape: tuple[int, ...]) -> np.ndarray:
    return np.zeros(shape)


@pytest.mark.statistical
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_null_that_ignores_the_noise_is_caught(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Power of the type-I check: a broken version whose simulated null leaves out the privacy
    noise (the classical reference distribution applied to noisy statistics) over-rejects at
    n = 100, ε = 0.1, and the check above would fail on it."""
    for module in (moments, proportions, chi_square, ks):
        monkeypatch.setattr(module, "noise_draws", _zero_noise)
    repeats = 60
    dp, _ = rejections(name, 100, 0.1, 0.0, repeats)
    assert dp > rejection_bound(repeats), f"only {dp}/{repeats} rejections"


#: (n per group, effect size) at which each test's power is checked at ε = 1: a medium effect
#: (Cohen's d = 0.5, f = 0.25, h = 0.3, w = 0.3) at a size where the public test has power ≈ 1.
POWER_POINTS = {
    "one_sample_t_test": (100, 0.5),
    "paired_t_test": (100, 0.5),
    "welch_t_test": (200, 0.5),
    "one_way_anova": (150, 0.25),
    "two_proportion_z_test": (400, 0.3),
    "goodness_of_fit_test": (300, 0.3),
    "independence_test": (300, 0.3),
    "ks_test": (300, 0.5),
}
#: The least power the DP test must show there (the public test's is reported beside it).
MIN_POWER = 0.6


@pytest.mark.statistical
@pytest.mark.parametrize("name", sorted(CASES))
def test_power_against_the_public_test(name: str) -> None:
    """At ε = 1 and a medium effect, the DP test keeps most of the public test's power: its
    rejection rate is at least MIN_POWER (one-sided binomial check at CHECK_ALPHA: the count
    must exceed the CHECK_ALPHA quantile of Binomial(R, MIN_POWER))."""
    n, effect = POWER_POINTS[name]
    repeats = 60
    dp, public = rejections(name, n, 1.0, effect, repeats, public_test=True)
    floor = int(stats.binom.ppf(CHECK_ALPHA, repeats, MIN_POWER))
    shown = f"DP power {dp / repeats:.2f}, public {public / repeats:.2f}"
    print(f"{name}: n = {n}, effect {effect}: {shown}")
    assert dp > floor, f"power {dp}/{repeats} (public test: {public}/{repeats})"


# ----------------------------------------------------------------------------------------------
# The privacy setup: ε, the unit, refusals


def _scales(unit: PrivacyUnit | None) -> dict[str, float]:
    result = ht.one_sample_t_test(
        [1.0, 2.0, 3.0], mean=2.0, lower=0, upper=4, epsilon=1.0, unit=unit, simulations=9,
        rng=SeededRng(1),
    )  # fmt: skip
    return dict(result.noise)


def test_sensitivity_comes_from_the_privacy_unit() -> None:
    """The noise scales follow the unit's count_l1: twice as large under replace-one (two
    sides) and for r = 2 rows a person, four times for both."""
    base = _scales(None)
    assert base == _scales(PrivacyUnit())
    # counts at ε/10 with Δ = 1; sums at 7ε/10 with Δ = h = 2; squares at 2ε/10 with Δ = h²/2
    assert base["n"] == pytest.approx(10.0)
    assert base["sum of (x - 2)"] == pytest.approx(2 / 0.7, rel=1e-3)
    for unit, factor in [
        (PrivacyUnit(relation="replace_one", public_size=3), 2),
        (PrivacyUnit(rows=2), 2),
        (PrivacyUnit(relation="replace_one", rows=2, public_size=3), 4),
    ]:
        scaled = _scales(unit)
        for name, scale in base.items():
            assert scaled[name] == pytest.approx(factor * scale, rel=1e-3), (unit, name)


def test_zcdp_noise_comes_from_the_unit_and_costs_rho() -> None:
    """Under ρ the counts get a discrete Gaussian of Δ₂² = count_l2_squared (×2 under
    replace-one: σ × √2) and the sums Δ₂ = rows_changed·h (×2 under replace-one)."""
    results = {}
    for unit in (PrivacyUnit(), PrivacyUnit(relation="replace_one", public_size=3)):
        results[unit.relation] = ht.one_sample_t_test(
            [1.0, 2.0, 3.0], mean=2.0, lower=0, upper=4, rho=0.5, unit=unit, simulations=9,
            rng=SeededRng(1),
        )  # fmt: skip
    base, replaced = results["add_remove"], results["replace_one"]
    assert base.cost == ZCDP(Fraction(1, 2))
    # counts at ρ/10 with Δ₂² = 1: σ² = 1/(2·0.05) = 10
    assert base.noise["n"] == pytest.approx(10**0.5)
    assert replaced.noise["n"] == pytest.approx(2**0.5 * base.noise["n"])
    name = "sum of (x - 2)"
    assert replaced.noise[name] == pytest.approx(2 * base.noise[name], rel=1e-3)
    with pytest.raises(ParameterError, match="exactly one of epsilon and rho"):
        ht.welch_t_test([1.0], [2.0], lower=0, upper=4, epsilon=1.0, rho=0.5)


def test_a_person_column_is_refused_before_the_data_is_read() -> None:
    """Arrays carry no person ids: a user-level unit is refused, naming the column, before the
    data is touched (the data here would raise if read)."""

    class Untouchable:
        def to_numpy(self) -> None:
            raise AssertionError("the data was read")

    unit = PrivacyUnit(person_column="pid", rows=2, groups=2)
    for name, test in ht.TESTS.items():
        with pytest.raises(UnsupportedQueryError, match="pid"):
            _call(name, test, Untouchable(), unit)


def _call(name: str, test: Any, data: Any, unit: PrivacyUnit) -> object:
    common: dict[str, Any] = {"epsilon": 1.0, "unit": unit, "simulations": 9}
    bounded = {"lower": 0, "upper": 10} | common
    if name == "one_sample_t_test":
        return test(data, mean=5, **bounded)
    if name in ("paired_t_test", "welch_t_test"):
        return test(data, data, **bounded)
    if name == "one_way_anova":
        return test(data, data, **bounded)
    if name == "two_proportion_z_test":
        return test(data, data, **common)
    if name == "goodness_of_fit_test":
        return test(data, ["a", "b"], [0.5, 0.5], **common)
    if name == "independence_test":
        return test(data, data, ["a", "b"], ["a", "b"], **common)
    return test(data, data, edges=[5.0], **common)


def test_result_reports_cost_statistics_and_summary() -> None:
    result = ht.welch_t_test(
        np.full(300, 6.0), np.full(300, 4.0), lower=0, upper=10, epsilon=0.5, simulations=99,
        rng=SeededRng(4),
    )  # fmt: skip
    assert result.cost == PureDP(Fraction(1, 2))
    assert result.rejects(0.05)
    assert result.estimate == pytest.approx(2.0, abs=0.5)
    assert set(result.released) >= {"n", "mean", "variance"}
    text = result.summary()
    for part in ("two-sample t (Welch)", "ε = 0.5", "p-value", "noise scale", "H0"):
        assert part in text
    assert str(result) == text


def test_the_old_name_of_the_two_sample_test_still_works() -> None:
    assert difference_of_means_test is ht.welch_t_test


@pytest.mark.parametrize(
    ("call", "parameter"),
    [
        (lambda: ht.one_sample_t_test([1.0], mean=20, lower=0, upper=10, epsilon=1), "mean"),
        (lambda: ht.one_sample_t_test([1.0], mean=5, lower=10, upper=0, epsilon=1), "lower"),
        (lambda: ht.one_sample_t_test([1.0], mean=5, lower=0, upper=10, epsilon=0), "epsilon"),
        (lambda: ht.welch_t_test([1.0], [2.0], lower=0, upper=1, epsilon=1, alternative="up"),
         "alternative"),
        (lambda: ht.one_way_anova([1.0], lower=0, upper=1, epsilon=1), "samples"),
        (lambda: ht.goodness_of_fit_test(["a"], ["a", "b"], [1.0], epsilon=1), "probabilities"),
        (lambda: ht.ks_test([1.0], [2.0], edges=[2.0, 1.0], epsilon=1), "edges"),
        (lambda: ht.paired_t_test([1.0, 2.0], [1.0], lower=0, upper=3, epsilon=1), "second"),
    ],
)  # fmt: skip
def test_errors_name_the_parameter(call: Any, parameter: str) -> None:
    with pytest.raises(ParameterError, match=parameter):
        call()


def test_one_sided_alternatives_point_the_right_way() -> None:
    data = np.full(500, 6.0)
    kwargs: dict[str, Any] = {"mean": 5.0, "lower": 0, "upper": 10, "epsilon": 1.0}
    greater = ht.one_sample_t_test(data, alternative="greater", rng=SeededRng(2), **kwargs)
    less = ht.one_sample_t_test(data, alternative="less", rng=SeededRng(2), **kwargs)
    assert greater.p_value < 0.01
    assert less.p_value > 0.99
