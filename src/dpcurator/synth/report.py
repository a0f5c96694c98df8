"""The owner's utility report of a synthetic table: a JSON summary and an HTML page with plots.

FOR THE DATA OWNER ONLY. The report compares the synthetic records with the REAL data, so it is
not differentially private and must not be published with the synthetic data (the page and the
summary say so). It holds:

* workload error: the mean total variation distance (TVD, half the L1 distance of the
  normalised tables) over all 1-, 2- and 3-way marginals of at most ``max_cells`` cells, real
  versus synthetic, on the release's public domain codes;
* the worst pairs: the ``top`` (default 5) 2-way marginals with the largest TVD, largest first,
  each with its TVD (real data, so owner-only like every figure here);
* the correlation matrices (Pearson, on the codes) of the real and synthetic tables;
* ML efficacy (Jordon et al. 2022): a scikit-learn random forest trained on the synthetic records
  and on the real training records, both tested on a held-out real sample, for a ``target``
  column; the accuracy gap is the efficacy loss;
* the privacy parameters: the charge and every step with its exact cost.
"""

from __future__ import annotations

import base64
import html
import importlib
import io
import itertools
import json
from typing import Any

import numpy as np
import pandas as pd

from dpcurator._validation import check_int, fail
from dpcurator.random import SeededRng
from dpcurator.synth.common import SyntheticData, shuffle
from dpcurator.synth.marginals import tabulate

NOTICE = (
    "For the data owner only: this report compares the synthetic data with the real data. "
    "It is NOT differentially private; do not publish it."
)


def marginal_tvds(
    real: dict[str, np.ndarray], synthetic: SyntheticData, way: int, max_cells: int = 10_000
) -> dict[tuple[str, ...], float]:
    """The TVD of every ``way``-way marginal of at most ``max_cells`` cells, real vs synthetic."""
    domain = synthetic.domain
    errors = {}
    for clique in itertools.combinations(domain.names, way):
        if domain.cells(clique) > max_cells:
            continue
        x = tabulate(real, domain, clique).astype(np.float64)
        y = tabulate(synthetic.codes, domain, clique).astype(np.float64)
        errors[clique] = 0.5 * float(np.abs(x / max(x.sum(), 1) - y / max(y.sum(), 1)).sum())
    return errors


def mean_tvd(
    real: dict[str, np.ndarray], synthetic: SyntheticData, way: int, max_cells: int = 10_000
) -> float | None:
    """Mean TVD over every ``way``-way marginal of at most ``max_cells`` cells (None: none)."""
    errors = marginal_tvds(real, synthetic, way, max_cells)
    return float(np.mean(list(errors.values()))) if errors else None


def worst_pairs(
    real: dict[str, np.ndarray], synthetic: SyntheticData, top: int = 5, max_cells: int = 10_000
) -> list[dict[str, Any]]:
    """The ``top`` 2-way marginals with the largest TVD, largest first (ties: column order)."""
    errors = marginal_tvds(real, synthetic, 2, max_cells)
    ranked = sorted(errors.items(), key=lambda item: -item[1])[:top]
    return [{"pair": list(pair), "tvd": round(tvd, 4)} for pair, tvd in ranked]


def _ml_efficacy(
    train: pd.DataFrame, synthetic: pd.DataFrame, test: pd.DataFrame, target: str
) -> dict[str, float]:
    ensemble = importlib.import_module("sklearn.ensemble")
    features = [c for c in train.columns if c != target]

    def accuracy(frame: pd.DataFrame) -> float:
        model = ensemble.RandomForestClassifier(n_estimators=50, random_state=0)
        model.fit(frame[features].to_numpy(), frame[target].to_numpy())
        return float(model.score(test[features].to_numpy(), test[target].to_numpy()))

    real, synth = accuracy(train), accuracy(synthetic)
    return {"real_accuracy": real, "synthetic_accuracy": synth, "efficacy_loss": real - synth}


def utility_summary(
    real: pd.DataFrame,
    synthetic: SyntheticData,
    *,
    target: str | None = None,
    holdout: float = 0.2,
    max_cells: int = 10_000,
    seed: int = 0,
    top: int = 5,
) -> dict[str, Any]:
    """The JSON-able summary (see the module docstring). ``seed`` splits the real rows;
    ``top``: how many worst 2-way pairs to list."""
    check_int("utility_summary", "top", top, minimum=1)
    if target is not None and target not in synthetic.domain.names:
        raise fail("utility_summary", "target", f"one of {list(synthetic.domain.names)}", target)
    domain = synthetic.domain
    codes = domain.encode(real)
    inside = np.all([c >= 0 for c in codes.values()], axis=0)
    real_codes = {n: c[inside] for n, c in codes.items()}
    real_frame = pd.DataFrame(real_codes)
    synth_frame = pd.DataFrame(synthetic.codes)
    summary: dict[str, Any] = {
        "notice": NOTICE,
        "method": synthetic.method,
        "rows": {"real": int(inside.sum()), "synthetic": len(synth_frame)},
        "mean_tvd": {f"{k}-way": mean_tvd(real_codes, synthetic, k, max_cells) for k in (1, 2, 3)},
        "worst_pairs": worst_pairs(real_codes, synthetic, top, max_cells),
        "correlation": {
            "columns": list(domain.names),
            "real": real_frame.corr().fillna(0).round(4).values.tolist(),
            "synthetic": synth_frame.corr().fillna(0).round(4).values.tolist(),
        },
        "privacy": {
            "charge": str(synthetic.event.to_dict()),
            "steps": [
                {"kind": s.kind, "marginal": list(s.clique), "cost": str(s.cost)}
                for s in synthetic.steps
            ],
        },
    }
    if target is not None:
        order = shuffle(np.arange(len(real_frame)), SeededRng(seed))  # owner-side split
        cut = int(len(order) * (1 - holdout))
        train, test = real_frame.iloc[order[:cut]], real_frame.iloc[order[cut:]]
        efficacy = _ml_efficacy(train, synth_frame, test, target)
        summary["ml_efficacy"] = {"target": target, **efficacy}
    return summary


def _png(figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def utility_html(summary: dict[str, Any]) -> str:
    """The HTML page of a summary: the notice, the numbers, and embedded PNG plots."""
    importlib.import_module("matplotlib").use("Agg")
    plt = importlib.import_module("matplotlib.pyplot")
    names = summary["correlation"]["columns"]
    figure, axes = plt.subplots(1, 2, figsize=(11, 5))
    for axis, key in zip(axes, ("real", "synthetic"), strict=True):
        image = axis.imshow(np.asarray(summary["correlation"][key]), vmin=-1, vmax=1, cmap="RdBu")
        axis.set_title(f"correlation: {key}")
        axis.set_xticks(range(len(names)), names, rotation=90, fontsize=7)
        axis.set_yticks(range(len(names)), names, fontsize=7)
    figure.colorbar(image, ax=axes, shrink=0.7)
    correlation = _png(figure)
    plt.close(figure)
    figure, axis = plt.subplots(figsize=(5, 3))
    tvd = {k: v for k, v in summary["mean_tvd"].items() if v is not None}
    axis.bar(list(tvd), list(tvd.values()))
    axis.set_ylabel("mean TVD (lower is better)")
    workload = _png(figure)
    plt.close(figure)
    details = html.escape(
        json.dumps({k: v for k, v in summary.items() if k != "correlation"}, indent=2)
    )
    rows = "".join(
        f"<tr><td>{html.escape(' × '.join(w['pair']))}</td><td>{w['tvd']:.4f}</td></tr>"
        for w in summary.get("worst_pairs", [])
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Utility report</title></head>"
        f"<body><h1>Utility report ({html.escape(summary['method'])})</h1>"
        f"<p><strong>{html.escape(NOTICE)}</strong></p>"
        f"<h2>Workload error</h2><img alt='mean TVD' src='data:image/png;base64,{workload}'>"
        "<h2>Largest 2-way errors</h2><table><tr><th>pair</th><th>TVD</th></tr>"
        f"{rows}</table>"
        f"<h2>Correlations</h2><img alt='correlations' src='data:image/png;base64,{correlation}'>"
        f"<h2>Summary</h2><pre>{details}</pre></body></html>"
    )
