"""SuLQ mining (dpcurator.mining) against diffprivlib at equal ε: accuracy and time.

Run ``python benchmarks/mining.py`` (``--quick`` for fewer repetitions). A shared synthetic data
set (five Gaussian blobs in 6 dimensions, public bounds [-10, 10]^6, 20,000 training rows) is
written to a temporary file and both libraries fit on it; diffprivlib runs in ``.bench-venv``
(``peers.py``). Scores: k-means inertia (mean squared distance to the nearest centre, lower is
better; non-private optimum printed), PCA captured variance of 2 components (higher is better),
Gaussian naive Bayes test accuracy. All mechanisms are pure ε-DP on both sides. Last, the
session-table path at ``--rows`` (10^6) rows on DuckDB (``KMeans.fit(session, columns=...)``)
against the array path on the same rows.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from mining_metrics import captured_variance, inertia, matched_accuracy
from peers import run_peer_script

from dpcurator.accounting import Budget
from dpcurator.mining import PCA, GaussianNB, KMeans
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from dpcurator.random import SecureRng


def dataset(n: int, dims: int = 6, k: int = 5) -> dict[str, np.ndarray]:
    """Blobs with fixed centres (a fixed seed: the benchmark data is public)."""
    generator = np.random.default_rng(20260101)
    centres = generator.uniform(-6, 6, size=(k, dims))
    labels = generator.integers(0, k, size=2 * n)
    X = np.clip(centres[labels] + generator.normal(0, 1.5, size=(2 * n, dims)), -10, 10)
    return {
        "X": X[:n],
        "y": labels[:n],
        "test_X": X[n:],
        "test_y": labels[n:],
        "lower": np.full(dims, -10.0),
        "upper": np.full(dims, 10.0),
        "centres": centres,
    }


def ours(data: dict[str, np.ndarray], epsilon: float, reps: int) -> dict[str, list[float]]:
    X, y, bounds = data["X"], data["y"], (data["lower"], data["upper"])
    k = int(y.max()) + 1
    rng = SecureRng()
    out: dict[str, list[float]] = {}
    for _ in range(reps):
        start = time.perf_counter()
        km = KMeans(k, epsilon, bounds).fit(X, rng)
        assert km.cluster_centers_ is not None
        out.setdefault("kmeans.score", []).append(inertia(X, km.cluster_centers_))
        out.setdefault("kmeans.seconds", []).append(time.perf_counter() - start)
        start = time.perf_counter()
        pca = PCA(2, epsilon, bounds).fit(X, rng)
        assert pca.components_ is not None
        out.setdefault("pca.score", []).append(captured_variance(X, pca.components_))
        out.setdefault("pca.seconds", []).append(time.perf_counter() - start)
        start = time.perf_counter()
        nb = GaussianNB(epsilon, bounds, classes=list(range(k))).fit(X, y, rng)
        score = matched_accuracy(nb.predict(data["test_X"]), data["test_y"])
        out.setdefault("nb.score", []).append(score)
        out.setdefault("nb.seconds", []).append(time.perf_counter() - start)
    return out


def session_path(rows: int, epsilon: float) -> None:
    """Seconds of k-means (5 clusters, 5 iterations) and PCA at ``rows`` rows: a DuckDB session
    table (opened once, not timed) against the array path (which opens its own session)."""
    data = dataset(rows)
    names = [f"c{j}" for j in range(data["X"].shape[1])]
    frame = pd.DataFrame(data["X"], columns=names)
    columns = {name: {"type": "float", "lower": -10.0, "upper": 10.0} for name in names}
    metadata = Metadata.from_dict({"table": "blobs", "columns": columns})
    session = Session.from_data(frame, metadata=metadata, budget=Budget(10 * epsilon))
    bounds = (data["lower"], data["upper"])
    for label, fit in (
        ("kmeans session", lambda: KMeans(5, epsilon, iterations=5).fit(session, columns=names)),
        ("kmeans array", lambda: KMeans(5, epsilon, bounds, iterations=5).fit(data["X"])),
        ("pca session", lambda: PCA(2, epsilon).fit(session, columns=names)),
        ("pca array", lambda: PCA(2, epsilon, bounds).fit(data["X"])),
    ):
        start = time.perf_counter()
        fit()
        print(f"{rows:>9,} rows {label:<15} {time.perf_counter() - start:>8.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    reps = 3 if args.quick else 10
    data = dataset(20_000)
    best = inertia(data["X"], data["centres"])
    print(f"non-private k-means inertia at the true centres: {best:.3f}")
    print(
        f"{'eps':>5} {'model':>7} {'metric':>18} {'dpcurator':>10} {'diffprivlib':>12} "
        f"{'ours s':>8} {'peer s':>8}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mining.npz"
        np.savez(path, allow_pickle=False, **data)
        for epsilon in (0.1, 0.5, 1.0):
            mine = ours(data, epsilon, reps)
            peer = run_peer_script("peer_mining.py", str(path), str(epsilon), str(reps))
            for model, metric in (
                ("kmeans", "inertia (lower)"),
                ("pca", "captured var"),
                ("nb", "test accuracy"),
            ):
                theirs = peer[model + ".score"]
                seconds = peer[model + ".seconds"]
                assert isinstance(theirs, list)
                assert isinstance(seconds, list)
                print(
                    f"{epsilon:>5} {model:>7} {metric:>18} "
                    f"{np.median(mine[model + '.score']):>10.3f} {np.median(theirs):>12.3f} "
                    f"{np.median(mine[model + '.seconds']):>8.3f} {np.median(seconds):>8.3f}"
                )
    session_path(args.rows, 1.0)


if __name__ == "__main__":
    main()
