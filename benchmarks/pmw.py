"""Private multiplicative weights (dpcurator.interactive) vs independent Laplace answers on adult.

Run ``python benchmarks/pmw.py``. Data: the private-pgm discretisation of UCI Adult
(/work/shared/data/adult_privatepgm, 48,842 rows, integer codes; see its README), six columns
with public keys 0..size-1 from ``adult-domain.json`` (workclass, education-num, marital-status,
occupation, sex, income>50K: 60,480 cells). Workload: ``--queries`` (1,000) random 2-way counting
queries ``COUNT(*) WHERE a = u AND b = v`` (a random pair of columns, random keys), the same for
every method. At total ε (1):

* PMW: one curator, charged ε once, answers the queries online, with its defaults: c = d(d-1)
  updates (two per pair of the d columns), T from ε, c and k = ``--queries``
  (:class:`~dpcurator.interactive.PrivateMultiplicativeWeights`), each update measuring the
  query's whole 2-way marginal; ``--updates`` and ``--threshold`` override c and T;
* PMW as it was before marginal updates (``--before``: c = 60, T = 1,500, 10 passes, each
  update measuring the query alone), for the before/after table of ``docs/pmw.md``;
* independent Laplace: each query answered by the Laplace mechanism at ε / queries (basic
  composition; sensitivity 1);
* MWEM synthetic data (``dpcurator.synth.mwem``, all 2-way marginals, ``--mwem-rounds``) at ε:
  every query is counted on the synthetic records (post-processing).

Prints the mean and maximum absolute error (rows) over the answered queries (a PMW curator
refuses once its updates are used up; the header says how many it answered), each averaged over
``--runs`` workloads (seeds ``--seed``, ``--seed`` + 1, ...), and the spread of the means over
the runs. ``--skip-mwem`` leaves MWEM out (its run is the slowest).
"""

from __future__ import annotations

import argparse
import json
import time
from fractions import Fraction
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
    parser.add_argument("--updates", type=int, default=None, help="c (default: d(d-1))")
    parser.add_argument("--threshold", type=float, default=None, help="T (default: from c, k)")
    parser.add_argument("--svt-fraction", type=float, default=0.75)
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mwem-rounds", type=int, default=30)
    parser.add_argument("--before", action="store_true", help="also run PMW as it was")
    parser.add_argument("--seed", type=int, default=0, help="the first workload's seed")
    parser.add_argument("--skip-mwem", action="store_true")
    args = parser.parse_args()
    frame, metadata = load()
    rng = SecureRng()
    pmw_kinds = {
        "PMW": {"max_updates": args.updates, "threshold": args.threshold},
        "PMW before (c=60, T=1500)": {"max_updates": 60, "threshold": 1500.0},
    }
    if not args.before:
        del pmw_kinds["PMW before (c=60, T=1500)"]
    rows: dict[str, list[np.ndarray]] = {name: [] for name in pmw_kinds}
    rows["independent Laplace"] = []
    if not args.skip_mwem:
        rows["MWEM"] = []
    seconds = dict.fromkeys(pmw_kinds, 0.0)
    answered: dict[str, list[int]] = {name: [] for name in pmw_kinds}
    for run in range(args.seed, args.seed + args.runs):
        queries = workload(frame, metadata, args.queries, seed=run)
        truths = np.array([truth(frame, q) for q in queries])
        for name, chosen in pmw_kinds.items():
            start = time.perf_counter()
            session = Session.from_data(
                frame, metadata=metadata, budget=Budget(args.epsilon), engine="duckdb", rng=rng
            )
            curator = PrivateMultiplicativeWeights(
                session,
                epsilon=args.epsilon,
                queries=args.queries,
                svt_fraction=Fraction(args.svt_fraction).limit_denominator(1000),
                passes=args.passes,
                max_marginal_cells=0 if name != "PMW" else 1024,
                **chosen,
            )
            pmw = []
            for query in queries:
                try:
                    pmw.append(curator.count(query))
                except BudgetExceededError:  # updates used up: the rest are unanswered
                    break
            seconds[name] += time.perf_counter() - start
            answered[name].append(len(pmw))
            rows[name].append(np.abs(np.array(pmw) - truths[: len(pmw)]))
        laplace = Laplace.for_epsilon(args.epsilon / args.queries, 1)
        rows["independent Laplace"].append(np.abs(laplace.release_integers(truths, rng) - truths))
        if args.skip_mwem:
            continue
        synth_session = Session.from_data(
            frame, metadata=metadata, budget=Budget(args.epsilon), engine="duckdb", rng=rng
        )
        records = mwem(synth_session, epsilon=args.epsilon, rounds=args.mwem_rounds).frame
        synthetic = np.array([truth(records, q) for q in queries])
        rows["MWEM"].append(np.abs(synthetic - truths))
    report(args, len(frame), rows, answered, seconds)


def report(
    args: argparse.Namespace,
    size: int,
    rows: dict[str, list[np.ndarray]],
    answered: dict[str, list[int]],
    seconds: dict[str, float],
) -> None:
    """Print the table: mean and max absolute error per method, and how many PMW answered."""
    print(
        f"adult (n = {size:,}), {args.queries} random 2-way counting queries, total "
        f"eps = {args.epsilon}, {args.runs} runs (seeds {args.seed}..{args.seed + args.runs - 1})"
    )
    for name, counts in answered.items():
        print(
            f"{name}: answered {min(counts)}..{max(counts)} of "
            f"{args.queries}, {seconds[name] / args.runs:.1f} s per run"
        )
    print(f"{'method':<26} {'mean |err|':>11} {'(min..max over runs)':>21} {'max |err|':>10}")
    for method, errors in rows.items():
        means = [e.mean() for e in errors]
        spread = f"{min(means):.1f}..{max(means):.1f}"
        worst = np.mean([e.max() for e in errors])
        print(f"{method:<26} {np.mean(means):>11.1f} {spread:>21} {worst:>10.1f}")


if __name__ == "__main__":
    main()
