"""Validation helpers that produce the one message format of :mod:`dpcurator.errors`.

Each helper checks one constraint and raises :class:`~dpcurator.errors.ParameterError` naming the
parameter, its owner (the function or class being built), the constraint and the value received.
"""

from __future__ import annotations

import difflib
import math
import operator
from collections.abc import Iterable
from fractions import Fraction
from numbers import Integral, Real

from dpcurator.errors import ParameterError

Number = int | float | Fraction


def _shown(value: object) -> str:
    """``value`` as the user would write it: an exact fraction as a decimal (``0``, ``0.1``,
    ``0.3333333333`` to 10 significant digits), never ``Fraction(0, 1)``; other values by repr."""
    if isinstance(value, Fraction):
        if value.denominator == 1:
            return str(value.numerator)
        return f"{float(value):.10g}"
    return repr(value)


def fail(owner: str, name: str, constraint: str, value: object, hint: str = "") -> ParameterError:
    """Build the standard error: "The 'name' parameter of owner must be constraint. Got value."."""
    message = f"The '{name}' parameter of {owner} must be {constraint}. Got {_shown(value)}."
    if hint:
        message += f" {hint}"
    return ParameterError(message)


def check_real(owner: str, name: str, value: object, *, allow_inf: bool = False) -> Number:
    """Return ``value`` if it is a real number (not bool, not NaN; infinite only if allowed)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise fail(owner, name, "a real number", value)
    number: Number
    if isinstance(value, int | float | Fraction):
        number = value
    elif isinstance(value, Integral):  # numpy integers and other Integrals
        number = int(value)
    else:  # numpy floats of other widths and other Reals
        number = float(value)
    if isinstance(number, float):
        if math.isnan(number):
            raise fail(owner, name, "a number, not NaN", value)
        if math.isinf(number) and not allow_inf:
            raise fail(owner, name, "finite", value)
    return number


def check_positive(owner: str, name: str, value: object, *, allow_inf: bool = False) -> Number:
    """Return ``value`` if it is a real number > 0."""
    number = check_real(owner, name, value, allow_inf=allow_inf)
    if not number > 0:
        raise fail(owner, name, "> 0", value)
    return number


def check_nonnegative(owner: str, name: str, value: object, *, allow_inf: bool = False) -> Number:
    """Return ``value`` if it is a real number >= 0."""
    number = check_real(owner, name, value, allow_inf=allow_inf)
    if not number >= 0:
        raise fail(owner, name, ">= 0", value)
    return number


def check_probability(
    owner: str, name: str, value: object, *, open_low: bool = False, open_high: bool = False
) -> Number:
    """Return ``value`` if it lies in [0, 1] (ends excluded when ``open_low``/``open_high``)."""
    number = check_real(owner, name, value)
    low_ok = number > 0 if open_low else number >= 0
    high_ok = number < 1 if open_high else number <= 1
    if not (low_ok and high_ok):
        interval = ("(" if open_low else "[") + "0, 1" + (")" if open_high else "]")
        raise fail(owner, name, f"in {interval}", value)
    return number


def check_int(owner: str, name: str, value: object, *, minimum: int | None = None) -> int:
    """Return ``value`` as an int if it is an integer (numpy integers too, not bool)."""
    if isinstance(value, bool):
        raise fail(owner, name, "an integer", value)
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError as exc:
        raise fail(owner, name, "an integer", value) from exc
    if minimum is not None and number < minimum:
        raise fail(owner, name, f">= {minimum}", value)
    return number


def unknown_fields(where: str, unknown: Iterable[object], known: Iterable[str]) -> ParameterError:
    """The error for fields not in ``known``: each named, with the closest known field as a
    hint (``column 'age' has an unknown field 'lowr' (did you mean 'lower'?)``), then the list
    of fields ``where`` takes."""
    choices = sorted(known)
    named = []
    for field in sorted(map(str, unknown)):
        close = difflib.get_close_matches(field, choices, n=1, cutoff=0.6)
        named.append(f"{field!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    noun = "an unknown field" if len(named) == 1 else "unknown fields"
    return ParameterError(
        f"{where} has {noun} {', '.join(named)}. Its fields are: {', '.join(choices)}."
    )


def check_bounds(owner: str, lower: object, upper: object) -> tuple[float, float]:
    """Public finite bounds with lower < upper, and a finite upper - lower."""
    low = float(check_real(owner, "lower", lower))
    high = float(check_real(owner, "upper", upper))
    if not low < high:
        raise fail(owner, "upper", f"> lower ({low})", upper)
    if not math.isfinite(high - low):
        raise fail(owner, "upper", f"within about 1.8e308 of lower ({low})", upper,
                   "upper - lower must be a finite number: narrow the bounds.")  # fmt: skip
    return low, high
