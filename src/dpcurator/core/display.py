"""How numbers read for people: released values, confidence levels, group keys, and privacy
amounts (ε, δ, ρ) rounded outward to a stated precision.

Standard library only, so that the command line can print a server's answer without loading the
query engines or numeric libraries. Everything here is post-processing of released or public
values (no privacy cost).

Privacy amounts are exact fractions in the ledger. For people they are written with at most
:data:`AMOUNT_DIGITS` significant digits, rounded *outward*: what was charged or spent rounds up,
what is left (or allowed) rounds down, so a display never understates spending or overstates the
budget. A rounded amount is written with ``≤`` or ``≥`` instead of ``=`` (``ε≤4.301``: at most
4.301 was spent); an amount with few digits is written exactly (``ε=0.5``, ``δ=1e-5``).
"""

from __future__ import annotations

import math
from fractions import Fraction

MISSING = "—"
_WHOLE = 2.0**53

#: Significant digits of a privacy amount shown to people (exact values: ``--exact``, JSON).
AMOUNT_DIGITS = 4
#: Decimal exponents written positionally (0.001 … 999999); others as ``9.9e-6``, ``2e7``.
_POSITIONAL = range(-3, 6)
#: Significant digits up to which an exact amount is written as a decimal, not ``n/d``.
_EXACT_DIGITS = 20


def level_text(alpha: float) -> str:
    """``95%`` for α = 0.05."""
    return f"{round(100 * (1 - alpha), 6):g}%"


def number(value: float | None) -> str:
    """A released number for people: ``1203``, ``41234.6``, ``1.5e-07``; None is ``—``."""
    if value is None:
        return MISSING
    if math.isfinite(value) and value.is_integer() and abs(value) <= _WHOLE:
        return str(int(value))
    return f"{value:.6g}"


def key_text(value: object) -> str:
    """A group key for people (``NULL`` for a missing key)."""
    return "NULL" if value is None else str(value)


def exact_amount(value: Fraction | int | float | str) -> Fraction:
    """An amount as an exact fraction: a Fraction or int as it is, text (``"1/10"``,
    ``"0.1"``) parsed exactly, and a float as the decimal it prints as (``0.1`` is 1/10: a
    server's float is the nearest float to the exact amount, so its text is as close)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"an amount must be finite, got {value!r}")
        return Fraction(repr(value))
    return Fraction(value)


def _exponent(value: Fraction) -> int:
    """The decimal exponent e of ``value`` > 0: 10**e <= value < 10**(e + 1), exactly."""
    exponent = math.floor(math.log10(value))  # may be off by one near a power of ten
    while Fraction(10) ** exponent > value:
        exponent -= 1
    while Fraction(10) ** (exponent + 1) <= value:
        exponent += 1
    return exponent


def _significant(value: Fraction, digits: int) -> tuple[int, int] | None:
    """``(n, e)`` with value == n * 10**e and n of at most ``digits`` digits (n not a multiple
    of 10), or None when ``value`` has more significant digits (or does not terminate)."""
    if value == 0:
        return 0, 0
    lowest = _exponent(abs(value)) - digits + 1
    scaled = value / Fraction(10) ** lowest
    if scaled.denominator != 1:
        return None
    n, e = scaled.numerator, lowest
    while n % 10 == 0:
        n, e = n // 10, e + 1
    return n, e


def _decimal(n: int, e: int) -> str:
    """n * 10**e as text: positional for moderate sizes, else ``9.899e-6``."""
    sign, digits = ("-" if n < 0 else ""), str(abs(n))
    if n == 0:
        return "0"
    exponent = e + len(digits) - 1  # of the leading digit
    if exponent in _POSITIONAL:
        if e >= 0:
            return sign + digits + "0" * e
        point = len(digits) + e
        whole = digits[:point] if point > 0 else "0"
        return f"{sign}{whole}.{'0' * max(0, -point)}{digits[max(0, point) :]}"
    mantissa = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
    return f"{sign}{mantissa}e{exponent}"


def rounded_amount(
    value: Fraction | int | float | str, *, up: bool, digits: int = AMOUNT_DIGITS
) -> tuple[str, bool]:
    """An amount for people and whether it was rounded: ``value`` itself if it has at most
    ``digits`` significant digits, else rounded to ``digits`` digits up (``up``) or down."""
    exact = exact_amount(value)
    found = _significant(exact, digits)
    if found is not None:
        return _decimal(*found), False
    lowest = _exponent(abs(exact)) - digits + 1
    scaled = exact / Fraction(10) ** lowest
    n = math.ceil(scaled) if up else math.floor(scaled)
    while n and n % 10 == 0:  # 9.9996 up is 10.00: 10
        n, lowest = n // 10, lowest + 1
    return _decimal(n, lowest), True


def amount_text(
    value: Fraction | int | float | str,
    *,
    up: bool,
    exact: bool = False,
    digits: int = AMOUNT_DIGITS,
) -> str:
    """``=0.5``, ``≤4.301`` (rounded up: at most that much) or ``≥0.6999`` (rounded down: at
    least that much), to follow a symbol such as ``ε``; ``exact``: the exact value (``=1/3``)."""
    if exact:
        return f"={exact_text(value)}"
    text, rounded = rounded_amount(value, up=up, digits=digits)
    if not rounded:
        return f"={text}"
    return f"{'≤' if up else '≥'}{text}"


def exact_text(value: Fraction | int | float | str) -> str:
    """An amount exactly: a decimal when it terminates within 20 significant digits, else the
    fraction ``n/d`` in lowest terms."""
    exact = exact_amount(value)
    found = _significant(exact, _EXACT_DIGITS)
    return _decimal(*found) if found is not None else str(exact)


def rounding_note(exact_hint: str, digits: int = AMOUNT_DIGITS) -> str:
    """The stated precision of rounded amounts, for a line under a display that shows one;
    ``exact_hint`` says where the exact values are (e.g. ``--exact prints them exactly``)."""
    return f"≤ rounded up, ≥ rounded down, to {digits} significant digits ({exact_hint})"
