"""Quantile error versus diffprivlib and OpenDP (``python benchmarks/estimators.py --quantiles``).

n = 10^4 values per data set, normal(0, 1) in public bounds [-4, 4] and lognormal(0, 1) in
[0, 100]; the p25, median and p75 at ε ∈ {0.1, 1}; mean absolute error against the sample
quantile over the same data sets for every library (``peer_quantiles.py`` runs the peers).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from peers import run_peer_script

from dpcurator.estimators import dp_quantile
from dpcurator.random import SeededRng

LEVELS = (0.25, 0.5, 0.75)
BOUNDS = {"normal": (-4.0, 4.0), "lognormal": (0.0, 100.0)}


def quantile_rows(n: int, epsilons: list[float], reps: int) -> list[str]:
    """Markdown rows ``| distribution p | library | ε | MAE |``."""
    gen = np.random.default_rng(2025)
    data = {"normal": gen.normal(0, 1, (reps, n)), "lognormal": gen.lognormal(0, 1, (reps, n))}
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "quantiles.npz"
        bounds = {f"{d}_bounds": np.array(b) for d, b in BOUNDS.items()}
        np.savez(path, **data, **bounds)  # type: ignore[arg-type]
        for eps in epsilons:
            results = run_peer_script("peer_quantiles.py", str(path), str(eps))
            rng = SeededRng(2025)
            for dist, (low, high) in BOUNDS.items():
                for p in LEVELS:
                    task = f"{dist} p{round(100 * p)}"
                    x = data[dist]
                    ours = [dp_quantile(row, p, eps, lower=low, upper=high, rng=rng) for row in x]
                    truth = np.quantile(x, p, axis=1)
                    for library, releases in [
                        ("dpcurator", ours),
                        ("diffprivlib", results[f"diffprivlib|{task}"]),
                        ("opendp", results[f"opendp|{task}"]),
                    ]:
                        if isinstance(releases, list):
                            error = f"{np.mean(np.abs(np.asarray(releases) - truth)):.3g}"
                        else:
                            error = str(releases)
                        rows.append(f"| {task} | {library} | {eps} | {error} |")
    return rows
