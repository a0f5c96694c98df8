"""A backend that delegates every call to a real one: the base of the tests' spies and fault
injectors, which override :meth:`ProxyBackend.compute` (count calls, fail after the charge,
wait for a signal)."""

from __future__ import annotations

from dpcurator.query.backends import Backend
from dpcurator.query.ir import AggregatePlan, ExactResult


class ProxyBackend:
    """A backend delegating to ``inner`` (subclasses change compute)."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name

    def tables(self) -> list[str]:
        return self.inner.tables()

    def columns(self, table: str) -> dict[str, str]:
        return self.inner.columns(table)

    def compute(self, plan: AggregatePlan) -> ExactResult:
        return self.inner.compute(plan)

    def close(self) -> None:
        self.inner.close()
