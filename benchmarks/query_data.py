"""The data of the query benchmark (``query.py``, ``open_table.py``, ``spark_cluster.py``): the
generated table and its public metadata.

N rows, ``value ~ N(50, 30^2)`` clamped to [0, 100], :data:`GROUPS` public groups ``g``, about
:data:`ROWS_PER_PERSON` rows per person ``uid``; the user-level metadata bounds each person to
:data:`MAX_GROUPS` groups and :data:`MAX_ROWS` rows per group.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

import dpcurator as dpc

GROUPS = 1_000
ROWS_PER_PERSON = 10
MAX_GROUPS, MAX_ROWS = 5, 2  # the user-level bound of the bounded query (as in peer_queries.py)


def metadata(user_level: bool) -> dpc.Metadata:
    """Public metadata: bounds of ``value``, the public key set of ``g``, the privacy unit."""
    document: dict[str, object] = {
        "table": "t",
        "columns": {
            "value": {"type": "float", "lower": 0.0, "upper": 100.0},
            "g": {"type": "int", "keys": list(range(GROUPS))},
            "uid": {"type": "int"},
        },
    }
    if user_level:
        document |= {
            "person_column": "uid",
            "max_rows_per_person": MAX_ROWS,
            "max_groups_per_person": MAX_GROUPS,
        }
    return dpc.Metadata.from_dict(document)


def generate(rows: int) -> pa.Table:
    """The benchmark table (value, group g, person uid)."""
    rng = np.random.default_rng(2024)
    return pa.table(
        {
            "value": np.clip(rng.normal(50.0, 30.0, rows), 0.0, 100.0),
            "g": rng.integers(0, GROUPS, rows),
            "uid": rng.integers(0, max(rows // ROWS_PER_PERSON, 1), rows),
        }
    )
