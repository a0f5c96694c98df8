"""Sample-and-aggregate: any estimator, person-level blocks, public fills, noise CI coverage."""

from __future__ import annotations

import numpy as np
import pandas as pd
import polars as pl
import pytest
from scipy import stats

from dpcurator.errors import ParameterError
from dpcurator.estimators.sample_aggregate import block_ids, blocks_for, sample_and_aggregate
from dpcurator.random import SeededRng
from tests.stat_tools import ALPHA


def test_failing_estimators_get_the_fill_and_never_raise() -> None:
    x = np.arange(1000.0)

    def broken(block: np.ndarray) -> object:
        if block.size % 2:
            raise RuntimeError("private detail")
        return [np.nan] if block.size % 3 == 0 else "not a number"

    out = sample_and_aggregate(
        broken, x, epsilon=1e4, lower=0, upper=10, fill=7, blocks=20, rng=SeededRng(1)
    )
    assert float(out.value[0]) == pytest.approx(7.0, abs=1e-3)
    empty = sample_and_aggregate(
        np.mean, x[:3], epsilon=1e4, lower=0, upper=10, blocks=50, rng=SeededRng(2)
    )  # more blocks than rows: empty blocks fill with the midpoint
    assert 4.0 < float(empty.value[0]) < 5.1


def test_person_ids_keep_a_person_in_one_block() -> None:
    person = np.repeat(np.arange(300), 4)
    ids = block_ids(person.size, 17, person, SeededRng(3))
    for pid in range(300):
        assert np.unique(ids[person == pid]).size == 1


@pytest.mark.parametrize("kind", ["numpy", "pandas", "polars"])
def test_large_epsilon_is_the_mean_of_block_estimates(kind: str) -> None:
    x = np.random.default_rng(4).normal(2.0, 1.0, 5000)
    data = {"numpy": x, "pandas": pd.Series(x), "polars": pl.Series(x)}[kind]
    out = sample_and_aggregate(
        lambda b: [b.mean(), b.std()], data, epsilon=1e4, lower=[-5, 0], upper=[5, 5],
        rng=SeededRng(5),
    )  # fmt: skip
    assert float(out.value[0]) == pytest.approx(x.mean(), abs=0.01)
    assert float(out.value[1]) == pytest.approx(x.std(), abs=0.05)  # small blocks: biased std


def test_default_blocks_follow_the_theory_and_bad_parameters_are_refused() -> None:
    assert blocks_for(10**6) == round(10**3.6)
    assert 10**3 < blocks_for(10**6) < 10**4  # ω(√n), o(n^(2/3))
    with pytest.raises(ParameterError, match="'upper'"):
        sample_and_aggregate(np.mean, [1.0], epsilon=1, lower=1, upper=0)
    with pytest.raises(ParameterError, match="'person'"):
        sample_and_aggregate(np.mean, [1.0, 2.0], epsilon=1, lower=0, upper=1, person=[1])


def coverage(shrink: float, reps: int = 300) -> tuple[int, int]:
    """How many of ``reps`` seeded releases' intervals hold 3, and how many still do when narrowed
    by ``shrink`` around the value (the power check; the same releases)."""
    x = np.full(2000, 3.0)  # every block estimate is exactly 3: the aggregate's truth
    rng = SeededRng(6)
    hits = narrow = 0
    for _ in range(reps):
        out = sample_and_aggregate(np.mean, x, epsilon=1.0, lower=0, upper=10, rng=rng)
        centre = float(out.value[0])
        hits += abs(3.0 - centre) <= float(out.ci_high[0]) - centre
        narrow += abs(3.0 - centre) <= (float(out.ci_high[0]) - centre) * shrink
    return hits, narrow


@pytest.mark.statistical
def test_noise_ci_covers() -> None:
    """Binomial test (ALPHA) of coverage >= 0.95 - 0.03; a 5x narrower CI is caught."""
    hits, narrow = coverage(0.2)
    assert stats.binomtest(hits, 300, 0.92, alternative="less").pvalue > ALPHA
    assert stats.binomtest(narrow, 300, 0.92, alternative="less").pvalue < ALPHA


def test_widened_winsorised_mean_when_blocks_allow() -> None:
    """With k = 2000 blocks the quartiles localise the block means (spread ~0.14): the noise
    scale falls from the box's 200/(kε) = 0.1 to the range's ~4e-4 (Smith 2011)."""
    gen, rng = np.random.default_rng(7), SeededRng(7)
    errors = []
    for _ in range(10):
        x = gen.normal(3.0, 1.0, 100_000)
        out = sample_and_aggregate(
            np.mean, x, epsilon=1.0, lower=-100, upper=100, blocks=2000, rng=rng
        )
        errors.append(float(out.value[0]) - float(x.mean()))
        assert float(out.ci_high[0] - out.ci_low[0]) < 0.01  # the range's noise, not the box's
    assert float(np.sqrt(np.mean(np.square(errors)))) < 0.005
