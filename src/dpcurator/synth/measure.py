"""Exact marginals computed by the session's engine, and their noisy measurements.

A marginal over a clique of columns is one GROUP BY query with public group keys (every cell of
the public domain, :mod:`dpcurator.synth.domain`) and one ``count`` per group, built as an
:class:`~dpcurator.query.ir.AggregatePlan` and run by the session's engine (DuckDB, Polars,
Spark, memory): a large table never enters pandas, only the cell counts come back. User-level
contribution bounding applies as for any grouped query: each person keeps at most g cells of each
marginal and r rows in each.

Sensitivities of one marginal's count vector come from the table's privacy unit
(:mod:`dpcurator.query.privacy_unit`): L1 = s·r·g', L2 = r·sqrt(s·g') with g' = min(g, cells)
and s = 2 under replace-one, else 1 (each kept row moves one count by one).

The charge is one event, derived from public inputs before any data is read, reserved through
the session's budget filter (:meth:`~dpcurator.query.session.Session.compute_exact`); the
engine runs after it, and nothing leaves this module without noise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dpcurator.accounting.events import PrivacyEvent
from dpcurator.query import ir
from dpcurator.query.session import Session
from dpcurator.synth.domain import Clique, SynthDomain


def marginal_plan(session: Session, domain: SynthDomain, clique: Clique) -> ir.AggregatePlan:
    """The GROUP BY plan of one marginal: every public cell a group, one count each."""
    domain.check_marginal(clique)
    metadata = session.metadata
    return ir.AggregatePlan(
        table=metadata.table,
        aggregates=(ir.ExactAggregate("n", "count"),),
        group_by=tuple(domain.column(name).group_column() for name in clique),
        group_keys=domain.group_keys(clique),
        bound=metadata.contribution_bound,
    )


def exact_marginals(
    session: Session,
    domain: SynthDomain,
    cliques: Sequence[Clique],
    event: PrivacyEvent,
    *,
    description: str,
) -> dict[Clique, npt.NDArray[np.int64]]:
    """Charge ``event`` (once), then the EXACT count array (shape: the clique's codes) of each
    clique, computed by the session's engine. The caller must add noise before releasing."""
    plans = [marginal_plan(session, domain, clique) for clique in cliques]
    results = session.compute_exact(plans, event, description=description)
    marginals: dict[Clique, npt.NDArray[np.int64]] = {}
    for clique, plan, result in zip(cliques, plans, results, strict=True):
        assert plan.group_keys is not None  # marginal plans always have public keys
        index = {key: i for i, key in enumerate(plan.group_keys)}
        counts = np.zeros(len(plan.group_keys), dtype=np.int64)
        for key, values in result.groups.items():
            cell = index.get(tuple(key))
            if cell is not None:  # total: an unexpected group is ignored, never an error
                counts[cell] = int(values.get("n", 0))  # type: ignore[call-overload]
        marginals[clique] = counts.reshape(domain.shape(clique))
    return marginals
