"""MWEM's multiplicative-weights step stays finite when the noisy total is small (small ε).

Seen failing before the shift by the largest exponent: exp(3000 / 2) overflowed to inf, the table
became NaN and, under the suite's warnings-as-errors, the release failed.
"""

from __future__ import annotations

import numpy as np

from dpcurator.synth.mwem import _multiply


def test_update_with_a_tiny_noisy_total_stays_a_distribution() -> None:
    table = np.full((3, 4), 1 / 12)
    noisy = np.array([3000.0, -5.0, 2.0])  # a noisy marginal far above a noisy total of 1
    updated = _multiply(table, (0,), noisy, total=1.0)
    assert np.all(np.isfinite(updated))
    assert np.isclose(updated.sum(), 1.0)
    # the measured cell takes (almost) all the weight, as the unshifted update would in reals
    assert updated[0].sum() > 0.999


def test_update_matches_the_textbook_rule_when_it_is_finite() -> None:
    gen = np.random.default_rng(7)
    table = gen.random((2, 3, 2))
    table /= table.sum()
    noisy = np.array([[30.0, 10.0], [25.0, 40.0]])
    total = 100.0
    current = table.sum(axis=1)
    factor = np.exp((noisy - total * current) / (2 * total))
    expected = table * factor[:, None, :]
    expected /= expected.sum()
    assert np.allclose(_multiply(table, (0, 2), noisy, total), expected)
