"""Synthetic UCI Adult with its raw numeric columns: what bin decoding keeps (issue 28 item 6).

Data: ``../shared/data/adult_uci/adult.data`` (32,561 rows; ``?`` kept as its own key). The
metadata is public: the string columns' keys are the values listed in ``adult.names`` (the file
holds no others), the numeric columns' bounds are their documented ranges, and
``capital-gain``/``capital-loss`` declare ``point_masses: [0]`` (``--plain`` leaves them out, the
metadata of the old release). ``fnlwgt`` (a survey weight) is left out. One run: (ε, δ = 1e-9)
converted to ρ-zCDP as in ``synth.py``, MST or AIM on a DuckDB session, then, against the real
rows (owner-side figures, not private):

* the mean TVD over all 2-way marginals and the worst pair, on ONE evaluation binning for every
  run (each column's public domain WITHOUT point masses: 32 bins), so runs with different bins
  are scored alike;
* the synthetic mean of capital-gain and its share of zeros (real: 1077.6, 91.7 %), and the
  number of distinct ages (real: 73).

``python benchmarks/synth_adult.py --methods mst aim --epsilon 1 [--plain] [--seed 0]``
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import dpcurator as dpc
from dpcurator.accounting import PrivacyFilter, ZCDPAccountant
from dpcurator.core.measures import ZCDP
from dpcurator.query.schema import Metadata
from dpcurator.random import SeededRng
from dpcurator.synth.aim import aim
from dpcurator.synth.domain import SynthDomain
from dpcurator.synth.mst import mst

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "adult_uci" / "adult.data"
COLUMNS = [
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
    "income",
]
NUMERIC = {
    "age": (17, 90),
    "education-num": (1, 16),
    "capital-gain": (0, 99999),
    "capital-loss": (0, 4356),
    "hours-per-week": (1, 99),
}
DELTA = 1e-9


def load() -> pd.DataFrame:
    """The raw rows, without fnlwgt."""
    frame = pd.read_csv(DATA, header=None, names=COLUMNS, skipinitialspace=True)
    return frame.drop(columns=["fnlwgt"])


def metadata(frame: pd.DataFrame, *, plain: bool) -> Metadata:
    """The public metadata (keys as listed in adult.names; see the module docstring)."""
    columns: dict[str, Any] = {}
    for name in frame.columns:
        if name in NUMERIC:
            lower, upper = NUMERIC[name]
            spec: dict[str, Any] = {"type": "int", "lower": lower, "upper": upper}
            if not plain and name in ("capital-gain", "capital-loss"):
                spec["point_masses"] = [0]
            columns[name] = spec
        else:
            columns[name] = {"type": "string", "keys": sorted(frame[name].unique().tolist())}
    return Metadata.from_dict(
        {"table": "adult", "person_column": None, "max_rows_per_person": 1, "columns": columns}
    )


def rho_for(epsilon: float, delta: float = DELTA) -> float:
    """ρ with ρ + 2·sqrt(ρ·log(1/δ)) = ε."""
    log = math.log(1 / delta)
    return (math.sqrt(epsilon + log) - math.sqrt(log)) ** 2


def tvd2(real: pd.DataFrame, synthetic: pd.DataFrame, domain: SynthDomain) -> dict[str, Any]:
    """Mean and worst 2-way TVD on ``domain``'s codes."""
    x, y = domain.encode(real), domain.encode(synthetic)
    errors = {}
    for a, b in itertools.combinations(domain.names, 2):
        shape = (domain.column(a).size, domain.column(b).size)
        p = np.bincount(np.ravel_multi_index((x[a], x[b]), shape), minlength=math.prod(shape))
        q = np.bincount(np.ravel_multi_index((y[a], y[b]), shape), minlength=math.prod(shape))
        errors[f"{a} × {b}"] = 0.5 * float(np.abs(p / p.sum() - q / q.sum()).sum())
    worst = max(errors, key=errors.__getitem__)
    return {
        "mean_tvd2": float(np.mean(list(errors.values()))),
        "worst": worst,
        "worst_tvd": errors[worst],
    }


def run(method: str, epsilon: float, *, plain: bool, seed: int) -> dict[str, Any]:
    frame = load()
    meta = metadata(frame, plain=plain)
    evaluation = SynthDomain.from_metadata(metadata(frame, plain=True))
    rho = rho_for(epsilon)
    session = dpc.Session.from_data(
        frame, metadata=meta, budget_filter=PrivacyFilter(ZCDP(rho), ZCDPAccountant())
    )
    synthesizer = {"mst": mst, "aim": aim}[method]
    start, cpu = time.perf_counter(), time.process_time()
    result = synthesizer(session, rho=rho, rng=SeededRng(seed))
    synthetic = result.frame
    return {
        "method": method,
        "epsilon": epsilon,
        "decoding": "midpoints, no point masses" if plain else "point_masses [0], spread",
        **tvd2(frame, synthetic, evaluation),
        "capital_gain_mean": float(synthetic["capital-gain"].mean()),
        "capital_gain_zero_share": float((synthetic["capital-gain"] == 0).mean()),
        "distinct_ages": int(synthetic["age"].nunique()),
        "real_capital_gain_mean": float(frame["capital-gain"].mean()),
        "real_distinct_ages": int(frame["age"].nunique()),
        "wall_s": round(time.perf_counter() - start, 1),
        "cpu_s": round(time.process_time() - cpu, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["mst"], choices=["mst", "aim"])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--plain", action="store_true", help="no point masses (old metadata)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for method in args.methods:
        print(json.dumps(run(method, args.epsilon, plain=args.plain, seed=args.seed)), flush=True)


if __name__ == "__main__":
    main()
