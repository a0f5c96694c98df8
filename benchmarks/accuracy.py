"""Error of a DP mean under the old equal split and the planner's variance-minimising split.

Run ``python benchmarks/accuracy.py`` (``--quick`` for fewer trials). Data: 10^4 lognormal(0, 1)
values clamped to [0, 10] (a fixed seed). For each ε, the mean of ``AVG(x)`` as the planner plans
it (centred at 5, count and centred fixed-point sum with discrete Laplace noise) is released
``trials`` times with

* before: half of ε on the count and half on the sum (the old rule);
* after: the planner's split (:mod:`dpcurator.query.plan.split`: sum : count = 1 : q^(1/3));
* public n: the sum alone with all of ε and the mean divided by the true n (what OpenDP and
  diffprivlib do when the table size is public; not available under add/remove-one DP), as a
  reference.

Prints a markdown table of the mean absolute error of each (and after/before). Nothing here reads
private data beyond the synthetic sample.
"""

from __future__ import annotations

import argparse
import math
from fractions import Fraction

import numpy as np

import dpcurator.query.frontend.builder as qb
from dpcurator.mechanisms import Laplace
from dpcurator.query.plan.planner import plan_query
from dpcurator.query.schema import Metadata
from dpcurator.random import SeededRng

LOWER, UPPER, ROWS = 0.0, 10.0, 10_000
META = Metadata.from_dict(
    {"table": "t", "columns": {"x": {"type": "float", "lower": LOWER, "upper": UPPER}}}
)


def run(trials: int, epsilons: list[float]) -> str:
    values = np.clip(np.random.default_rng(2024).lognormal(0.0, 1.0, ROWS), LOWER, UPPER)
    truth = float(values.mean())
    rng = SeededRng(7)
    lines = [
        "| ε | MAE before (equal split) | MAE after (planner) | after / before | MAE public n |",
        "|---|---|---|---|---|",
    ]
    for epsilon in epsilons:
        plan = plan_query(qb.Query("t").agg(qb.mean("x")), META, epsilon=epsilon)
        (output,) = plan.outputs
        count_part, sum_part = output.parts
        exact_sum = next(a for a in plan.exact.aggregates if a.kind == "sum")
        k = exact_sum.grid_exponent
        units = np.rint(np.ldexp(values, -k)).astype(np.int64) - exact_sum.offset
        exact = np.array([ROWS, int(units.sum())], dtype=np.int64)
        unit = math.ldexp(1.0, k)
        half = Fraction(epsilon) / 2
        splits = {
            "before": (
                Laplace.for_epsilon(half, count_part.sensitivity),
                Laplace.for_epsilon(half, sum_part.sensitivity),
            ),
            "after": (count_part.laplace, sum_part.laplace),
        }
        errors = {}
        for name, (count_noise, sum_noise) in splits.items():
            counts = count_noise.release_integers(np.full(trials, exact[0]), rng)
            sums = sum_noise.release_integers(np.full(trials, exact[1]), rng) * unit
            means = np.clip(output.centre + sums / np.maximum(counts, 1), LOWER, UPPER)
            errors[name] = float(np.abs(means - truth).mean())
        public = Laplace.for_epsilon(Fraction(epsilon), (UPPER - LOWER) / unit)
        noisy = public.release_integers(
            np.full(trials, int(np.rint(np.ldexp(values, -k)).sum())), rng
        )
        errors["public"] = float(np.abs(noisy * unit / ROWS - truth).mean())
        ratio = errors["after"] / errors["before"]
        lines.append(
            f"| {epsilon:g} | {errors['before']:.5f} | {errors['after']:.5f} | {ratio:.3f} | "
            f"{errors['public']:.5f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 trials instead of 20,000")
    args = parser.parse_args()
    print(run(2_000 if args.quick else 20_000, [0.1, 1.0]))


if __name__ == "__main__":
    main()
