"""Peer quantiles on the quantile benchmark's data (runs inside ``.bench-venv``).

Usage: peer_quantiles.py DATA.npz EPSILON — prints one JSON object mapping "library|task" (task:
``<distribution> p<level>``) to a list of releases, one per data set of the file, or to an error:

* diffprivlib (IBM) ``tools.quantile``: the exponential mechanism over the intervals between the
  sorted values (Smith 2011), ε-DP.
* OpenDP 0.16 (Polars plugin) ``dp.quantile``: the exponential mechanism over 1,025 candidates
  evenly spaced between the bounds, ε-DP.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from diffprivlib import tools
from peer_opendp import collect, opendp_statistic

#: The quantile levels of the benchmark (its task names read ``p25``, ``p50``, ``p75``).
LEVELS = (0.25, 0.5, 0.75)


def main() -> None:
    data = np.load(sys.argv[1])
    eps = float(sys.argv[2])
    out: dict[str, object] = {}
    for dist in ("normal", "lognormal"):
        x, (low, high) = data[dist], data[f"{dist}_bounds"]
        bounds = (float(low), float(high))
        for p in LEVELS:
            task = f"{dist} p{round(100 * p)}"
            out[f"diffprivlib|{task}"] = collect(
                lambda i, p=p, x=x, b=bounds: float(tools.quantile(x[i], p, epsilon=eps, bounds=b)),  # type: ignore[misc]
                x.shape[0],
            )
            out[f"opendp|{task}"] = collect(
                lambda i, p=p, x=x, b=bounds: opendp_statistic(x[i], eps, b, "quantile", p),  # type: ignore[misc]
                x.shape[0],
            )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
