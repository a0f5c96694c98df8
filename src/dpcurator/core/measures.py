"""Privacy measures: what a release costs, as immutable exact values.

* :class:`PureDP` — ε-differential privacy (Dwork, McSherry, Nissim & Smith 2006).
* :class:`ApproxDP` — (ε, δ)-differential privacy (Dwork, Kenthapadi, McSherry, Mironov &
  Naor 2006).
* :class:`ZCDP` — ρ-zero-concentrated differential privacy (Bun & Steinke 2016).

Values are frozen, validated at construction, and hold :class:`~fractions.Fraction` parameters so
that sums and comparisons are exact. Addition is basic sequential composition within one measure.
Conversions that need transcendental functions round in the safe direction
(:mod:`dpcurator.core.numbers`).

They print for people: ``str`` gives ``ε = 0.5``, ``(ε = 1, δ = 1e-06)`` or ``ρ = 0.125``, after
an optional label (``remaining: ε = 0.5``; see :meth:`PureDP.labelled`), and ``repr`` gives
``PureDP(epsilon=0.5)``, exact: a parameter that is not a double prints as a Fraction. The label
is presentation only: it takes no part in equality, hashing or arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Self

from dpcurator._validation import check_nonnegative, check_probability, fail
from dpcurator.core.numbers import fraction_up, to_fraction


def exact_repr(value: Fraction) -> str:
    """``repr`` of an exact parameter: the double's shortest repr when the Fraction is a double
    (``0.1`` for Fraction(0.1)), else the Fraction's (``Fraction(1, 3)``)."""
    as_float = float(value)
    if math.isfinite(as_float) and Fraction(as_float) == value:
        return repr(as_float)
    return repr(value)


def readable(value: Fraction) -> str:
    """A parameter for people: 6 significant digits (``0.5``, ``1``, ``1e-06``)."""
    return f"{float(value):.6g}"


def _nonnegative_fraction(owner: str, name: str, value: object) -> Fraction:
    if type(value) is Fraction and value >= 0:  # the common, already exact case: no checks
        return value
    check_nonnegative(owner, name, value)
    return to_fraction(value, owner=owner, name=name)


@dataclass(frozen=True, order=False)
class PureDP:
    """ε-DP: for neighbouring x, x' and every event S, P[M(x) ∈ S] <= e^ε P[M(x') ∈ S]."""

    epsilon: Fraction
    label: str = field(default="", compare=False, repr=False)

    def __init__(self, epsilon: object, *, label: str = "") -> None:
        object.__setattr__(self, "epsilon", _nonnegative_fraction("PureDP", "epsilon", epsilon))
        object.__setattr__(self, "label", label)

    def labelled(self, label: str) -> Self:
        """The same cost, printed after ``label`` (e.g. ``remaining: ε = 0.5``)."""
        return replace(self, label=label)

    def __add__(self, other: PureDP) -> PureDP:
        """Basic sequential composition: ε-costs add."""
        return PureDP(self.epsilon + other.epsilon)

    def fits_within(self, other: PureDP) -> bool:
        """Whether this cost is at most ``other``."""
        return self.epsilon <= other.epsilon

    def to_approx(self) -> ApproxDP:
        """ε-DP is (ε, 0)-DP."""
        return ApproxDP(self.epsilon, 0)

    def to_zcdp(self) -> ZCDP:
        """ε-DP implies (ε²/2)-zCDP (Bun & Steinke 2016, Proposition 1.4). Exact."""
        return ZCDP(self.epsilon**2 / 2)

    def __str__(self) -> str:
        return _prefixed(self.label, f"ε = {readable(self.epsilon)}")

    def __repr__(self) -> str:
        return f"PureDP(epsilon={exact_repr(self.epsilon)})"


@dataclass(frozen=True, order=False)
class ApproxDP:
    """(ε, δ)-DP: P[M(x) ∈ S] <= e^ε P[M(x') ∈ S] + δ for neighbouring x, x' and every S."""

    epsilon: Fraction
    delta: Fraction
    label: str = field(default="", compare=False, repr=False)
    #: A sentence printed after the amounts, e.g. what a remaining δ is kept for.
    note: str = field(default="", compare=False, repr=False)

    def __init__(
        self, epsilon: object, delta: object = 0, *, label: str = "", note: str = ""
    ) -> None:
        object.__setattr__(self, "epsilon", _nonnegative_fraction("ApproxDP", "epsilon", epsilon))
        if not (type(delta) is Fraction and 0 <= delta < 1):  # else already exact and valid
            check_probability("ApproxDP", "delta", delta, open_high=True)
            delta = to_fraction(delta, owner="ApproxDP", name="delta")
        object.__setattr__(self, "delta", delta)
        object.__setattr__(self, "label", label)
        object.__setattr__(self, "note", note)

    def labelled(self, label: str) -> Self:
        """The same cost, printed after ``label``."""
        return replace(self, label=label)

    def __add__(self, other: ApproxDP) -> ApproxDP:
        """Basic sequential composition: ε and δ add (Dwork et al. 2006)."""
        return ApproxDP(self.epsilon + other.epsilon, self.delta + other.delta)

    def fits_within(self, other: ApproxDP) -> bool:
        """Whether this cost is at most ``other`` in both ε and δ."""
        return self.epsilon <= other.epsilon and self.delta <= other.delta

    def to_approx(self) -> ApproxDP:
        """Identity: already (ε, δ)."""
        return self

    def __str__(self) -> str:
        text = f"(ε = {readable(self.epsilon)}, δ = {readable(self.delta)})"
        if self.note:
            text += f" ({self.note})"
        return _prefixed(self.label, text)

    def __repr__(self) -> str:
        return f"ApproxDP(epsilon={exact_repr(self.epsilon)}, delta={exact_repr(self.delta)})"


@dataclass(frozen=True, order=False)
class ZCDP:
    """ρ-zCDP: the Rényi divergence of every order α > 1 between M(x) and M(x') is <= ρ·α."""

    rho: Fraction
    label: str = field(default="", compare=False, repr=False)

    def __init__(self, rho: object, *, label: str = "") -> None:
        object.__setattr__(self, "rho", _nonnegative_fraction("ZCDP", "rho", rho))
        object.__setattr__(self, "label", label)

    def labelled(self, label: str) -> Self:
        """The same cost, printed after ``label``."""
        return replace(self, label=label)

    def __add__(self, other: ZCDP) -> ZCDP:
        """zCDP composes additively in ρ (Bun & Steinke 2016, Lemma 2.3)."""
        return ZCDP(self.rho + other.rho)

    def fits_within(self, other: ZCDP) -> bool:
        """Whether this cost is at most ``other``."""
        return self.rho <= other.rho

    def to_approx(self, delta: object) -> ApproxDP:
        """ρ-zCDP implies (ε, δ)-DP for every δ > 0.

        Uses the conversion of Canonne, Kamath & Steinke 2020 (Proposition 12 / Corollary 13),
        ε = inf_{α>1} ρα + log(1/(αδ)) / (α-1) + log(1 - 1/α), which is never worse than the
        classical ε = ρ + 2·sqrt(ρ·log(1/δ)) of Bun & Steinke 2016. The minimum over α is found
        numerically and the result is rounded up.
        """
        check_probability("ZCDP.to_approx", "delta", delta, open_low=True, open_high=True)
        d = float(to_fraction(delta))
        rho = float(self.rho)
        if rho == 0:
            return ApproxDP(0, delta)
        classic = rho + 2 * math.sqrt(rho * math.log(1 / d))
        best = classic
        # Golden-section search over log(alpha - 1); the objective is unimodal in alpha.
        lo, hi = -20.0, 20.0
        inv_phi = (math.sqrt(5) - 1) / 2

        def objective(log_am1: float) -> float:
            a = 1 + math.exp(log_am1)
            return rho * a + (math.log(1 / (a * d))) / (a - 1) + math.log1p(-1 / a)

        for _ in range(200):
            c = hi - inv_phi * (hi - lo)
            e = lo + inv_phi * (hi - lo)
            if objective(c) < objective(e):
                hi = e
            else:
                lo = c
        best = min(best, objective((lo + hi) / 2))
        return ApproxDP(fraction_up(max(best, 0.0)), delta)

    def __str__(self) -> str:
        return _prefixed(self.label, f"ρ = {readable(self.rho)}")

    def __repr__(self) -> str:
        return f"ZCDP(rho={exact_repr(self.rho)})"


Measure = PureDP | ApproxDP | ZCDP


def _prefixed(label: str, text: str) -> str:
    return f"{label}: {text}" if label else text


def require_measure(owner: str, name: str, value: object) -> Measure:
    """Return ``value`` if it is one of the privacy measures."""
    if not isinstance(value, PureDP | ApproxDP | ZCDP):
        raise fail(owner, name, "a PureDP, ApproxDP or ZCDP cost", value)
    return value
