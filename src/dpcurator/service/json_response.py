"""The service's JSON responses: strict JSON (RFC 8259), which has no NaN or infinity.

A float that is not finite is written as ``null``: Python's ``json`` (and pydantic-core's
``to_json`` by default) would write ``Infinity``/``NaN``, which strict parsers (browsers'
``JSON.parse``, most clients) refuse. The planner refuses queries whose values can overflow
(a defence in depth, not the first line).
"""

from __future__ import annotations

from fastapi.responses import JSONResponse
from pydantic_core import to_json


class FiniteJSONResponse(JSONResponse):
    """JSON rendered by pydantic-core (fast), with non-finite floats written as ``null``."""

    def render(self, content: object) -> bytes:
        return to_json(content, inf_nan_mode="null")
