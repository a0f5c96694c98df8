"""SuLQ mining (dpcurator.mining) against diffprivlib at equal ε: accuracy and time.

Run ``python benchmarks/mining.py`` (``--quick`` for fewer repetitions). A shared synthetic data
set (five Gaussian blobs in 6 dimensions, public bounds [-10, 10]^6, 20,000 training rows) is
written to a temporary file and both libraries fit on it; diffprivlib runs in ``.bench-venv``
(``peers.py``). Scores: k-means inertia (mean squared distance to the nearest centre, lower is
better; non-private optimum printed), PCA captured variance of 2 components (higher is better),
Gaussian naive Bayes test accuracy, and decision-tree test accuracy (depth 3) on a second shared
data set of categorical codes (:func:`coded_dataset`; ours: ID3 on noisy counts, diffprivlib:
``DecisionTreeClassifier``, a random tree with noisy leaf counts, given the codes' bounds). All
mechanisms are pure ε-DP on both sides. Last, the session-table path at ``--rows`` (10^6) rows on
DuckDB (``KMeans.fit(session, columns=...)``, ``ID3.fit(session, ...)``) against the array path on
the same rows.
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
from dpcurator.mining import ID3, PCA, GaussianNB, KMeans
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


#: Category counts of the coded data set's attributes.
VALUES = (3, 4, 2, 3, 5, 2, 4, 3)


def coded_dataset(n: int) -> dict[str, np.ndarray]:
    """Codes of 8 categorical attributes (:data:`VALUES`) and a binary label given by a depth-3
    rule of attributes 1, 3 and 4, 10% of labels flipped (a fixed seed: the data is public)."""
    generator = np.random.default_rng(20260102)
    codes = np.stack([generator.integers(0, v, size=2 * n) for v in VALUES], axis=1)
    rule = (codes[:, 1] == 3) | ((codes[:, 1] < 2) & (codes[:, 3] == 2)) | (codes[:, 4] == 0)
    labels = (rule ^ (generator.random(2 * n) < 0.1)).astype(np.int64)
    return {
        "codes": codes[:n],
        "code_y": labels[:n],
        "code_test": codes[n:],
        "code_test_y": labels[n:],
        "values": np.array(VALUES),
    }


def ours(data: dict[str, np.ndarray], epsilon: float, reps: int) -> dict[str, list[float]]:
    X, y, bounds = data["X"], data["y"], (data["lower"], data["upper"])
    k = int(y.max()) + 1
    rng = SecureRng()
    out: dict[str, list[float]] = {}
    for _ in range(reps):
        start = time.perf_counter()
        km = KMeans(k, epsilon, bounds, rows=len(X)).fit(X, rng)  # n public here
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
        start = time.perf_counter()
        tree = ID3(epsilon, VALUES, classes=2, max_depth=3).fit(data["codes"], data["code_y"], rng)
        score = float(np.mean(tree.predict(data["code_test"]) == data["code_test_y"]))
        out.setdefault("id3.score", []).append(score)
        out.setdefault("id3.seconds", []).append(time.perf_counter() - start)
    return out


def session_path(rows: int, epsilon: float) -> None:
    """Seconds of k-means (5 clusters, 5 iterations), PCA and ID3 (depth 3) at ``rows`` rows: a
    DuckDB session table (opened once, not timed) against the array path (which opens its own
    session)."""
    data = dataset(rows)
    names = [f"c{j}" for j in range(data["X"].shape[1])]
    frame = pd.DataFrame(data["X"], columns=names)
    columns = {name: {"type": "float", "lower": -10.0, "upper": 10.0} for name in names}
    metadata = Metadata.from_dict({"table": "blobs", "columns": columns})
    session = Session.from_data(frame, metadata=metadata, budget=Budget(10 * epsilon))
    bounds = (data["lower"], data["upper"])
    coded = coded_dataset(rows)
    attributes = [f"a{j}" for j in range(len(VALUES))]
    codes = pd.DataFrame(coded["codes"], columns=attributes).assign(y=coded["code_y"])
    keys = {
        name: {"type": "int", "keys": list(range(v))}
        for name, v in zip(attributes, VALUES, strict=True)
    }
    keys["y"] = {"type": "int", "keys": [0, 1]}
    tree_metadata = Metadata.from_dict({"table": "codes", "columns": keys})
    tree_session = Session.from_data(codes, metadata=tree_metadata, budget=Budget(epsilon))
    for label, fit in (
        ("kmeans session", lambda: KMeans(5, epsilon, iterations=5).fit(session, columns=names)),
        ("kmeans array", lambda: KMeans(5, epsilon, bounds, iterations=5).fit(data["X"])),
        ("pca session", lambda: PCA(2, epsilon).fit(session, columns=names)),
        ("pca array", lambda: PCA(2, epsilon, bounds).fit(data["X"])),
        (
            "id3 session",
            lambda: ID3(epsilon).fit(tree_session, columns=attributes, label="y"),
        ),
        (
            "id3 array",
            lambda: ID3(epsilon, VALUES, classes=2).fit(coded["codes"], coded["code_y"]),
        ),
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
    data = {**dataset(20_000), **coded_dataset(20_000)}
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
                ("id3", "test accuracy"),
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
