"""DP partition selection: release only groups whose noisy person count clears a threshold.

When group keys are not public, releasing the set of groups present in the data reveals members
(PITFALLS: "group keys from the data"). Instead each candidate group's count of distinct persons
(each person bounded to ``max_groups`` groups) gets discrete Laplace noise of scale m/ε and the
group is released only when the noisy count reaches a threshold τ.

Privacy guarantee: (ε, δ)-DP (Korolova, Kenthapadi, Mishra & Ntoulas 2009; Wilson, Zhang, Lam et
al. 2020; Desfontaines, Voss, Gipson & Mandayam 2022). Groups present in both neighbours are
covered by the Laplace mechanism (L1 sensitivity m ⇒ ε); a group that exists only because of one
person has count at most 1, and is released with probability P[1 + Z >= τ]; τ is the smallest
integer with m·P[Z >= τ - 1] <= δ, so the union over the person's m groups costs at most δ.
For the discrete Laplace with p = exp(-1/b), P[Z >= t] = p^t / (1 + p) for t >= 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, check_positive, check_probability
from dpcurator.core.measures import ApproxDP
from dpcurator.core.numbers import to_fraction
from dpcurator.mechanisms.laplace import Laplace, smallest_tail_index
from dpcurator.random import Rng


@dataclass(frozen=True)
class PartitionSelection:
    """Laplace noise on person counts plus a release threshold: (ε, δ)-DP group selection."""

    laplace: Laplace
    threshold: int
    epsilon: Fraction
    delta: Fraction

    @property
    def cost(self) -> ApproxDP:
        """The (ε, δ) cost of one selection."""
        return ApproxDP(self.epsilon, self.delta)

    def select(
        self, person_counts: npt.ArrayLike, rng: Rng | None = None
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
        """Which groups to release (boolean mask) and their noisy person counts."""
        noisy = self.laplace.release_integers(np.asarray(person_counts, dtype=np.int64), rng)
        return noisy >= self.threshold, noisy


def partition_selection_threshold(
    epsilon: object, delta: object, max_groups: int
) -> PartitionSelection:
    """Build the (ε, δ)-DP partition selection for persons contributing to <= max_groups groups."""
    owner = "partition_selection_threshold"
    eps = to_fraction(check_positive(owner, "epsilon", epsilon))
    check_probability(owner, "delta", delta, open_low=True, open_high=True)
    m = check_int(owner, "max_groups", max_groups, minimum=1)
    laplace = Laplace.for_epsilon(eps, m)
    d = to_fraction(delta, owner=owner, name="delta")
    # The smallest t >= 1 with m p^t / (1 + p) <= δ, i.e. 2 p^t / (1 + p) <= 2δ / m: exact
    # closed form with bounded work for every admissible scale. Then τ = t + 1.
    t = smallest_tail_index(laplace.scale, 2 * d / m)
    return PartitionSelection(laplace, t + 1, eps, d)
