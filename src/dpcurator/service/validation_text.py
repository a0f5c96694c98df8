"""Request-validation errors in the client's words (issue 28, item 3).

pydantic describes a refused field as ``body.epsilon: Input should be greater than or equal to
1e-09``: its own location syntax and its own phrasing. The API answers instead with the project's
message format, naming the parameter as the client wrote it, what it must be, and what was sent:
``epsilon must be >= 1e-09; got 0``. Only the request's own values are echoed (no data).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: Where pydantic puts a parameter (``body``, ``query``, ``path``, ...): not the client's words.
_PLACES = frozenset({"body", "query", "path", "header", "cookie"})
#: The longest echo of a refused value.
_ECHO_MAX = 60

#: What a value of each pydantic error type must be (the constraint, without the value).
_MUST_BE: dict[str, str] = {
    "float_type": "a number",
    "float_parsing": "a number",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "finite_number": "a finite number",
    "string_type": "text (a JSON string)",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "tuple_type": "a list",
    "set_type": "a list",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "none_required": "null",
    "datetime_type": "a date and time (ISO 8601)",
    "datetime_parsing": "a date and time (ISO 8601)",
}

#: Constraint types whose limit is in ``ctx``: (ctx key, how the constraint reads).
_LIMITS: dict[str, tuple[str, str]] = {
    "greater_than": ("gt", "> {}"),
    "greater_than_equal": ("ge", ">= {}"),
    "less_than": ("lt", "< {}"),
    "less_than_equal": ("le", "<= {}"),
    "string_too_short": ("min_length", "at least {} characters long"),
    "string_too_long": ("max_length", "at most {} characters long"),
    "too_short": ("min_length", "at least {} items long"),
    "too_long": ("max_length", "at most {} items long"),
    "multiple_of": ("multiple_of", "a multiple of {}"),
}


def parameter_name(loc: Sequence[Any]) -> str:
    """The parameter as the client wrote it: ``epsilon``, ``columns[0].lower``; pydantic's
    places (``body``) and union-member tags (``function-after[...]``, ``float``) dropped."""
    parts = list(loc)
    if parts and parts[0] in _PLACES:
        parts = parts[1:]
    name = ""
    for part in parts:
        if isinstance(part, int):
            name += f"[{part}]"
        elif "[" in str(part) or str(part) in {"float", "int", "str", "bool", "list", "dict"}:
            continue
        else:
            name += f".{part}" if name else str(part)
    return name


def _number(value: object) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def _echo(value: object) -> str:
    """The refused value as JSON (what the client sent), shortened."""
    try:
        text = json.dumps(value, allow_nan=True, default=str)
    except (TypeError, ValueError):
        text = str(value)
    return text if len(text) <= _ECHO_MAX else text[: _ECHO_MAX - 1] + "…"


def _requirement(error: Mapping[str, Any]) -> str | None:
    """What the value must be, or None when the error carries its own sentence."""
    kind = str(error.get("type", ""))
    ctx = error.get("ctx") or {}
    if kind in _MUST_BE:
        return _MUST_BE[kind]
    if kind in _LIMITS:
        key, text = _LIMITS[kind]
        return text.format(_number(ctx.get(key)))
    if kind in {"literal_error", "enum"}:
        return str(ctx.get("expected", "one of the documented values"))
    return None


def error_text(error: Mapping[str, Any]) -> str:
    """One pydantic error as a sentence in the client's words."""
    kind = str(error.get("type", ""))
    name = parameter_name(error.get("loc", ()))
    subject = name or "the request body"
    if kind == "missing":
        return f"{subject} is required"
    if kind == "extra_forbidden":
        return f"{subject} is not a parameter of this request; remove it or check its spelling"
    requirement = _requirement(error)
    if requirement is not None:
        received = error.get("input")
        if kind in {"too_short", "too_long"} and isinstance(received, list | tuple | dict):
            return f"{subject} must be {requirement}; got {len(received)} items"
        return f"{subject} must be {requirement}; got {_echo(received)}"
    ctx = error.get("ctx") or {}
    own = ctx.get("error")
    if own is not None:  # a validator's own sentence (already in the client's words)
        text = str(own)
        return text if not name or text.startswith(name) else f"{name}: {text}"
    message = str(error.get("msg", "is not valid")).replace("Input should be", "must be")
    return f"{subject} {message[0].lower()}{message[1:]}" if message else f"{subject} is not valid"


def translated(errors: Iterable[Mapping[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The problem's detail (sentences joined by ``; ``, each once) and its ``errors`` list
    (each ``{"parameter", "loc", "msg"}``, ``msg`` in the client's words)."""
    sentences: list[str] = []
    listed: list[dict[str, Any]] = []
    for error in errors:
        text = error_text(error).rstrip(".")
        listed.append(
            {
                "parameter": parameter_name(error.get("loc", ())),
                "loc": [str(p) for p in error.get("loc", ())],
                "msg": text,
            }
        )
        if text not in sentences:
            sentences.append(text)
    return "; ".join(sentences) + ".", listed
