"""What the synthesizers share: the released result, the privacy steps, query selection.

Selection uses the project's exact exponential mechanism
(:func:`~dpcurator.mechanisms.exponential_mechanism`, McSherry & Talwar 2007) on integer scores:
a float score q of sensitivity Δ is put on the grid floor(q·2^k), whose sensitivity is at most
ceil(2^k·Δ) + 1 grid units, with the public k making 2^k·Δ about 2^20. An ε-DP exponential
mechanism is ε²/8-zCDP (it is ε-bounded-range: Cesar & Rogers 2021), which is how zCDP
synthesizers (MST, AIM) account for it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcurator.accounting.events import PrivacyEvent
from dpcurator.core.numbers import fraction_down
from dpcurator.mechanisms import exponential_mechanism
from dpcurator.random import Rng, default_rng
from dpcurator.synth.domain import Clique, SynthDomain

#: Grid steps spanned by a score's sensitivity (see the module docstring).
SCORE_GRID_BITS = 20

#: A progress callback of a synthesizer: a short message and the fraction done, in [0, 1].
Progress = Callable[[str, float], None]
_LOG = logging.getLogger("dpcurator.synth")


def report(progress: Progress | None, message: str, done: float) -> None:
    """Log ``message`` (INFO, logger ``dpcurator.synth``) and pass it to ``progress``. The
    messages carry released quantities only (rounds, shares of the budget spent)."""
    _LOG.info("%s (%.0f%%)", message, 100 * done)
    if progress is not None:
        progress(message, done)


def sample_rows(rows: int | None, total: float) -> int:
    """How many records to draw: ``rows`` if given (public), else the model's noisy total."""
    return max(round(total), 1) if rows is None else rows


@dataclass(frozen=True)
class Step:
    """One private step: ``kind`` (``measure`` or ``select``), the marginal measured or chosen,
    and its exact cost (ρ under zCDP, ε under pure DP)."""

    kind: str
    clique: Clique
    cost: Fraction


@dataclass(frozen=True)
class SyntheticData:
    """A synthetic table and how it was made.

    Attributes:
        frame: the records, with the input's columns and types (bins decoded by the rule of
            :mod:`dpcurator.synth.domain`).
        codes: the same records as per-column codes of ``domain``.
        domain: the public domain.
        method: ``"mst"``, ``"aim"``, ``"mwem"`` or ``"independent"``.
        event: the charge (as recorded by the session's budget filter).
        steps: every private step and its exact cost (their sum is at most the charge).
    """

    frame: pd.DataFrame
    codes: dict[str, npt.NDArray[np.int64]]
    domain: SynthDomain
    method: str
    event: PrivacyEvent
    steps: tuple[Step, ...] = field(default=())

    def spent(self) -> Fraction:
        """The exact sum of the steps' costs."""
        return sum((s.cost for s in self.steps), Fraction(0))

    def to_csv(self, path: str) -> None:
        """Write the records as CSV."""
        self.frame.to_csv(path, index=False)

    def to_parquet(self, path: str) -> None:
        """Write the records as Parquet."""
        self.frame.to_parquet(path, index=False)


def selection_epsilon(rho: Fraction) -> Fraction:
    """The largest (rounded-down) ε whose exponential mechanism is within ρ-zCDP: sqrt(8ρ)."""
    return fraction_down(math.sqrt(8 * float(rho)))


def select(scores: npt.ArrayLike, sensitivity: float, epsilon: Fraction, rng: Rng | None) -> int:
    """An index chosen by the ε-DP exponential mechanism on ``scores`` of ``sensitivity``,
    through the integer grid of the module docstring."""
    values = np.asarray(scores, dtype=np.float64)
    k = SCORE_GRID_BITS - math.frexp(sensitivity)[1]
    scale = math.ldexp(1.0, k)
    grid = np.floor(np.clip(values * scale, -(2.0**62), 2.0**62)).astype(np.int64)
    grid_sensitivity = math.ceil(sensitivity * scale) + 1
    return int(exponential_mechanism(grid, epsilon, grid_sensitivity, rng)[0])


def _shares(weights: npt.NDArray[np.float64], total: int) -> npt.NDArray[np.float64]:
    """``total`` split in proportion to the weights clipped at 0 (evenly when none is positive)."""
    positive = np.clip(np.nan_to_num(weights, nan=0.0), 0.0, None)
    mass = positive.sum()
    if mass > 0:
        return np.asarray(positive / mass * total, dtype=np.float64)
    return np.full(positive.size, total / positive.size)


def round_counts_randomly(
    weights: npt.NDArray[np.float64], total: int, rng: Rng | None
) -> npt.NDArray[np.int64]:
    """Non-negative integers summing to ``total``, each the floor of its share or one more: the
    extra units go to cells drawn by systematic sampling with inclusion probabilities equal to
    the fractional parts (one uniform draw), so every count's expectation is its share. Largest
    remainders would give a group of one record always its most likely value."""
    share = _shares(weights, total)
    counts = np.floor(share)
    extra = total - int(counts.sum())
    if extra > 0:
        cumulative = np.cumsum(share - counts)
        cumulative *= extra / cumulative[-1]
        offset = float((rng or default_rng()).uint64(1)[0]) / 2.0**64
        below = np.concatenate(([0.0], cumulative[:-1]))
        counts += np.floor(cumulative - offset) - np.floor(below - offset)
    return np.asarray(counts, dtype=np.int64)


def round_counts(weights: npt.NDArray[np.float64], total: int) -> npt.NDArray[np.int64]:
    """Non-negative integers summing to ``total`` in proportion to ``weights`` (largest
    remainders; deterministic)."""
    return largest_remainders(_shares(weights, total), total)


def largest_remainders(share: npt.NDArray[np.float64], total: int) -> npt.NDArray[np.int64]:
    """The floors of non-negative ``share``, plus one for the cells with the largest fractional
    parts (ties to the lower index) until they sum to ``total`` (at least the floors' sum)."""
    counts = np.floor(share).astype(np.int64)
    extra = total - int(counts.sum())
    if extra > 0:
        counts[np.argsort(-(share - counts), kind="stable")[:extra]] += 1
    return np.asarray(counts, dtype=np.int64)


def shuffle(values: npt.NDArray[np.int64], rng: Rng | None) -> npt.NDArray[np.int64]:
    """A uniformly random permutation of ``values`` (random keys from dpcurator.random)."""
    keys = (rng or default_rng()).uint64(values.size)
    return np.asarray(values[np.argsort(keys, kind="stable")], dtype=np.int64)


def combined(
    first: npt.ArrayLike, first_sigma: float, second: npt.ArrayLike, second_sigma: float
) -> tuple[npt.NDArray[np.float64], float]:
    """Two noisy vectors of the same counts combined by inverse variance, and the result's σ."""
    precision = 1 / first_sigma**2 + 1 / second_sigma**2
    one, two = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    return (one / first_sigma**2 + two / second_sigma**2) / precision, float(precision**-0.5)


def independent_column(
    noisy: npt.NDArray[np.float64], rows: int, rng: Rng | None
) -> npt.NDArray[np.int64]:
    """``rows`` codes in proportion to noisy 1-way counts clipped at 0 (largest remainders), in
    random order: a column drawn independently of the others."""
    return shuffle(np.repeat(np.arange(noisy.size), round_counts(noisy, rows)), rng)


def records_from_table(
    table: npt.NDArray[np.float64], domain: SynthDomain, total: int, rng: Rng | None
) -> dict[str, npt.NDArray[np.int64]]:
    """``total`` records whose full contingency table rounds ``table`` (shape: every column's
    codes), in random order."""
    counts = round_counts(table.ravel(), total)
    cells = shuffle(np.repeat(np.arange(counts.size), counts), rng)
    codes = np.unravel_index(cells, table.shape)
    return {
        name: np.asarray(c, dtype=np.int64) for name, c in zip(domain.names, codes, strict=True)
    }


def synthetic(
    codes: dict[str, npt.NDArray[np.int64]],
    domain: SynthDomain,
    method: str,
    event: PrivacyEvent,
    steps: list[Step],
    *,
    rng: Rng | None = None,
) -> SyntheticData:
    """The result object of a synthesizer; ``rng`` draws the values within bins (decoding is
    post-processing of the released codes)."""
    return SyntheticData(domain.decode(codes, rng), codes, domain, method, event, tuple(steps))
