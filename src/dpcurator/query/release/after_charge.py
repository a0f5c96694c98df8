"""The post-charge step of every release: total from the analyst's point of view.

Once a release is charged, the class and text of an error could depend on the data (an engine's
message may quote a value), so whatever fails after the charge reaches the analyst as one
constant :class:`~dpcurator.errors.BackendError` (:data:`~dpcurator.errors.ENGINE_FAILURE_MESSAGE`)
and the details go to the owner's log (logger ``dpcurator.engine``) only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from dpcurator.errors import ENGINE_FAILURE_MESSAGE, BackendError

_ENGINE_LOG = logging.getLogger("dpcurator.engine")
_T = TypeVar("_T")


def after_charge(work: Callable[[], _T]) -> _T:
    """Run the post-charge part of a release; any exception becomes
    ``BackendError(ENGINE_FAILURE_MESSAGE)``, the original logged on ``dpcurator.engine``."""
    try:
        return work()
    except Exception as exc:
        _ENGINE_LOG.exception("the engine failed after the charge: %s", type(exc).__name__)
        raise BackendError(ENGINE_FAILURE_MESSAGE) from None
