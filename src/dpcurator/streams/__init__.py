"""Private statistics of streams (issue 16, part 3; issue 27, item 1).

* :class:`ContinualSum` — running counts and bounded sums released after every event by the
  binary tree mechanism (Dwork, Naor, Pitassi & Rothblum 2010; Chan, Shi & Song 2011), event-level
  ε-DP with error polylogarithmic in the horizon.
* :class:`CorrelatedContinualSum` — the same releases under ρ-zCDP with correlated discrete
  Gaussian noise: a Buffered Linear Toeplitz approximation (Dvijotham et al. 2024) of the
  square-root factorization of the prefix-sum matrix (Fichtenberger, Henzinger & Upadhyay 2023),
  exact on an integer lattice, O(log T) memory, event or user level, known or unknown horizon.
* :class:`KaryContinualSum` — pure ε with a k-ary tree of the best k for the horizon and
  Honaker's consistent (bottom-up) estimates.
* :class:`PanPrivateDensity` — the fraction of a public universe of users that appeared, with an
  internal state that is itself ε-DP (Dwork, Naor, Pitassi, Rothblum & Yekhanin 2010), persisted
  as that private state only.
* :class:`PanPrivateIncidence` — the fraction that appeared at least k times, from one ε-DP
  counter modulo a public m per user (the same paper's incidence counter).
"""

from __future__ import annotations

from dpcurator.streams.correlated import CorrelatedContinualSum
from dpcurator.streams.incidence import PanPrivateIncidence
from dpcurator.streams.kary import KaryContinualSum
from dpcurator.streams.pan_private import DensityEstimate, PanPrivateDensity
from dpcurator.streams.tree import ContinualSum, sum_of_laplace_halfwidth

__all__ = [
    "ContinualSum",
    "CorrelatedContinualSum",
    "DensityEstimate",
    "KaryContinualSum",
    "PanPrivateDensity",
    "PanPrivateIncidence",
    "sum_of_laplace_halfwidth",
]
