"""diffprivlib's KMeans, PCA, GaussianNB and DecisionTreeClassifier (on the coded data set, with
the codes' bounds) on the shared data sets (runs in .bench-venv; prints JSON). Usage:
peer_mining.py DATA.npz EPSILON REPS."""

from __future__ import annotations

import json
import sys
import time
import warnings

import numpy as np
from diffprivlib.models import PCA, DecisionTreeClassifier, GaussianNB, KMeans
from mining_metrics import captured_variance, inertia, matched_accuracy


def main() -> None:
    data = np.load(sys.argv[1])
    epsilon, reps = float(sys.argv[2]), int(sys.argv[3])
    X, y, test_X, test_y = data["X"], data["y"], data["test_X"], data["test_y"]
    bounds = (data["lower"], data["upper"])
    k = int(y.max()) + 1
    warnings.simplefilter("ignore")
    out: dict[str, list[float]] = {}

    def record(name: str, score: float, seconds: float) -> None:
        out.setdefault(name + ".score", []).append(score)
        out.setdefault(name + ".seconds", []).append(seconds)

    codes = data["codes"]
    code_bounds = (np.zeros(codes.shape[1]), data["values"] - 1.0)  # the public domains
    norm = float(np.linalg.norm(data["upper"] - data["lower"]))
    for _ in range(reps):
        start = time.perf_counter()
        km = KMeans(n_clusters=k, epsilon=epsilon, bounds=bounds).fit(X)
        record("kmeans", inertia(X, km.cluster_centers_), time.perf_counter() - start)
        start = time.perf_counter()
        pca = PCA(n_components=2, epsilon=epsilon, bounds=bounds, data_norm=norm).fit(X)
        record("pca", captured_variance(X, pca.components_), time.perf_counter() - start)
        start = time.perf_counter()
        nb = GaussianNB(epsilon=epsilon, bounds=bounds).fit(X, y)
        record("nb", matched_accuracy(nb.predict(test_X), test_y), time.perf_counter() - start)
        start = time.perf_counter()
        tree = DecisionTreeClassifier(
            max_depth=3, epsilon=epsilon, bounds=code_bounds, classes=[0, 1]
        ).fit(codes, data["code_y"])
        score = float(np.mean(tree.predict(data["code_test"]) == data["code_test_y"]))
        record("id3", score, time.perf_counter() - start)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
