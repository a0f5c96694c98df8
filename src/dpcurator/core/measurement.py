"""A Measurement: a randomized function together with its privacy map.

The privacy map sends an input distance (how far apart two neighbouring inputs may be, e.g. the
L1 sensitivity of the statistic a mechanism perturbs, or the number of rows one person owns) to the
privacy loss the release incurs, expressed in one of :mod:`dpcurator.core.measures`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from dpcurator.core.measures import Measure

In = TypeVar("In")
Out = TypeVar("Out")


@dataclass(frozen=True)
class Measurement(Generic[In, Out]):
    """A frozen randomized function with a privacy map.

    Attributes:
        name: a short human name, e.g. "discrete Laplace".
        input_metric: the metric neighbouring inputs are measured in (e.g. "L1", "L2", "symmetric").
        function: the randomized function itself.
        privacy_map: input distance -> privacy loss.
    """

    name: str
    input_metric: str
    function: Callable[[In], Out]
    privacy_map: Callable[[object], Measure]

    def __call__(self, value: In) -> Out:
        return self.function(value)

    def check(self, distance: object, budget: Measure) -> bool:
        """Whether inputs at ``distance`` are ``budget``-close after this measurement."""
        loss = self.privacy_map(distance)
        return type(loss) is type(budget) and loss.fits_within(budget)  # type: ignore[arg-type]
