"""Private multiplicative weights (dpcurator.interactive) vs independent Laplace answers on adult.

Run ``python benchmarks/pmw.py``. Data: the private-pgm discretisation of UCI Adult
(/work/shared/data/adult_privatepgm, 48,842 rows, integer codes; see its README), six columns
with public keys 0..size-1 from ``adult-domain.json`` (workclass, education-num, marital-status,
occupation, sex, income>50K: 60,480 cells). Workload: ``--queries`` (1,000) random 2-way counting
queries ``COUNT(*) WHERE a = u AND b = v`` (a random pair of columns, random keys), the same for
every method. At total ε (1):

* PMW: one curator (``--updates`` c, ``--threshold`` T), charged ε once, answers every query;
* independent Laplace: each query answered by the Laplace mechanism at ε / queries (basic
  composition; sensitivity 1);
* MWEM synthetic data (``dpcurator.synth.mwem``, all 2-way marginals, ``--mwem-rounds``) at ε:
  every query is counted on the synthetic records (post-processing).

Prints the mean and maximum absolute error (rows) over the queries, averaged over ``--runs``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from dpcurator.accounting import Budget
from dpcurator.errors import BudgetExceededError
from dpcurator.interactive import PrivateMultiplicativeWeights
from dpcurator.mechanisms import Laplace
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from dpcurator.random import SecureRng
from dpcurator.synth.mwem import mwem

DATA = Path("/work/shared/data/adult_privatepgm")
COLUMNS = {
    "workclass": "workclass",
    "education-num": "education_num",
    "marital-status": "marital_status",
    "occupation": "occupation",
    "sex": "sex",
    "income>50K": "income",
}


def load() -> tuple[pd.DataFrame, Metadata]:
    """The adult frame (renamed columns) and its public metadata (keys from the domain file)."""
    sizes = json.loads((DATA / "adult-domain.json").read_text())
    frame = pd.read_csv(DATA / "adult.csv", usecols=list(COLUMNS)).rename(columns=COLUMNS)
    columns = {
        new: {"type": "int", "keys": list(range(sizes[old]))} for old, new in COLUMNS.items()
    }
    return frame, Metadata.from_dict({"table": "adult", "columns": columns})


def workload(
    frame: pd.DataFrame, metadata: Metadata, count: int, seed: int
) -> list[dict[str, int]]:
    """``count`` random 2-way counting queries (public: drawn from the metadata only)."""
    generator = np.random.default_rng(seed)
    names = list(frame.columns)
    queries = []
    for _ in range(count):
        first, second = generator.choice(len(names), size=2, replace=False)
        query = {}
        for index in (first, second):
            keys = metadata.column(names[index]).public_keys or ()
            query[names[index]] = int(generator.integers(len(keys)))  # keys are 0..size-1
        queries.append(query)
    return queries


def truth(frame: pd.DataFrame, query: dict[str, int]) -> int:
    mask = np.ones(len(frame), dtype=bool)
    for column, value in query.items():
        mask &= frame[column].to_numpy() == value
    return int(mask.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--threshold", type=float, default=1500.0)
    parser.add_argument("--svt-fraction", type=float, default=0.75)
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mwem-rounds", type=int, default=30)
    args = parser.parse_args()
    frame, metadata = load()
    rng = SecureRng()
    rows: dict[str, list[np.ndarray]] = {"PMW": [], "independent Laplace": [], "MWEM": []}
    seconds = 0.0
    answered = []
    for run in range(args.runs):
        queries = workload(frame, metadata, args.queries, seed=run)
        truths = np.array([truth(frame, q) for q in queries])
        start = time.perf_counter()
        session = Session.from_data(
            frame, metadata=metadata, budget=Budget(args.epsilon), engine="duckdb", rng=rng
        )
        curator = PrivateMultiplicativeWeights(
            session,
            epsilon=args.epsilon,
            max_updates=args.updates,
            threshold=args.threshold,
            svt_fraction=args.svt_fraction,
            passes=args.passes,
        )
        pmw = []
        for query in queries:
            try:
                pmw.append(curator.count(query))
            except BudgetExceededError:  # updates used up: the rest are unanswered
                break
        seconds += time.perf_counter() - start
        answered.append(len(pmw))
        rows["PMW"].append(np.abs(np.array(pmw) - truths[: len(pmw)]))
        laplace = Laplace.for_epsilon(args.epsilon / args.queries, 1)
        rows["independent Laplace"].append(np.abs(laplace.release_integers(truths, rng) - truths))
        synth_session = Session.from_data(
            frame, metadata=metadata, budget=Budget(args.epsilon), engine="duckdb", rng=rng
        )
        records = mwem(synth_session, epsilon=args.epsilon, rounds=args.mwem_rounds).frame
        synthetic = np.array([truth(records, q) for q in queries])
        rows["MWEM"].append(np.abs(synthetic - truths))
    print(
        f"adult (n = {len(frame):,}), {args.queries} random 2-way counting queries, total "
        f"eps = {args.epsilon}, {args.runs} runs; PMW: c = {args.updates}, T = {args.threshold}"
        f", answered {min(answered)}..{max(answered)} of {args.queries}, "
        f"{seconds / args.runs:.1f} s per run"
    )
    print(f"{'method':<22} {'mean |err|':>11} {'max |err|':>10}")
    for method, errors in rows.items():
        mean = np.mean([e.mean() for e in errors])
        worst = np.mean([e.max() for e in errors])
        print(f"{method:<22} {mean:>11.1f} {worst:>10.1f}")


if __name__ == "__main__":
    main()
