"""Interactive curators: many queries answered under one budget.

* :class:`~dpcurator.interactive.pmw.PrivateMultiplicativeWeights` (Hardt & Rothblum 2010):
  linear and counting queries over a public domain, answered from a public synthetic
  distribution when the sparse vector test allows, paying only for updates.
"""

from __future__ import annotations

from dpcurator.interactive.linear import counting_query, counting_where, linear_query
from dpcurator.interactive.pmw import PrivateMultiplicativeWeights

__all__ = ["PrivateMultiplicativeWeights", "counting_query", "counting_where", "linear_query"]
