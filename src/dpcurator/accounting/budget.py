"""The user-facing total privacy budget (ε, δ).

A :class:`Budget` is what a data owner grants: the whole release history must satisfy
(ε, δ)-differential privacy (Dwork, Kenthapadi, McSherry, Mironov & Naor 2006), or pure ε-DP when
δ = 0 (Dwork, McSherry, Nissim & Smith 2006). zCDP budgets are plain
:class:`~dpcurator.core.measures.ZCDP` measures, used with a zCDP accountant.

Values are exact Fractions. A float such as 0.1 is kept as its exact binary value
(0.1000000000000000055...), so ten charges of 0.1 exceed a budget of 1; pass
``Fraction(1, 10)`` for exact decimal budgets.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dpcurator._validation import check_nonnegative, check_probability
from dpcurator.core.measures import ApproxDP, PureDP, exact_repr, readable
from dpcurator.core.numbers import to_fraction


@dataclass(frozen=True)
class Budget:
    """A total privacy budget: (ε, δ)-DP with ε >= 0 finite and δ in [0, 1); δ = 0 is pure DP."""

    epsilon: Fraction
    delta: Fraction

    def __init__(self, epsilon: object, delta: object = 0) -> None:
        check_nonnegative("Budget", "epsilon", epsilon)
        check_probability("Budget", "delta", delta, open_high=True)
        object.__setattr__(self, "epsilon", to_fraction(epsilon, owner="Budget", name="epsilon"))
        object.__setattr__(self, "delta", to_fraction(delta, owner="Budget", name="delta"))

    def as_measure(self) -> PureDP | ApproxDP:
        """The budget as a privacy measure: PureDP when δ = 0, ApproxDP otherwise."""
        if self.delta == 0:
            return PureDP(self.epsilon)
        return ApproxDP(self.epsilon, self.delta)

    def __str__(self) -> str:
        """``budget: ε = 1`` (pure DP) or ``budget: (ε = 1, δ = 1e-06)``."""
        if self.delta == 0:
            return f"budget: ε = {readable(self.epsilon)}"
        return f"budget: (ε = {readable(self.epsilon)}, δ = {readable(self.delta)})"

    def __repr__(self) -> str:
        return f"Budget(epsilon={exact_repr(self.epsilon)}, delta={exact_repr(self.delta)})"
