"""Where one AIM run spends its CPU: the run of ``synth.py --one DATASET aim EPSILON`` (seeded),
with the CPU seconds and calls of each phase (exact marginals, model fits, candidate scoring,
selection, sampling) printed after its row.

``PYTHONPATH=src:benchmarks python benchmarks/synth_aim_phases.py adult 1 --seed 0``
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import time
from collections.abc import Callable
from typing import Any

import synth

from dpcurator.random import SeededRng
from dpcurator.synth import _descent, _mbi
from dpcurator.synth import aim as aim_module

SECONDS: collections.Counter[str] = collections.Counter()
CALLS: collections.Counter[str] = collections.Counter()


def timed(label: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` adding its CPU time and one call to ``label``."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            SECONDS[label] += time.process_time() - start
            CALLS[label] += 1

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("epsilon", type=float)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for label, module, name in (
        ("exact marginals", aim_module, "exact_marginals"),
        ("model fits", _descent, "fit"),
        ("scoring", aim_module, "_scored"),
        ("selection", aim_module, "select"),
        ("sampling", _mbi, "sample"),
    ):
        setattr(module, name, timed(label, getattr(module, name)))
    seeded = functools.partial(aim_module.aim, rng=SeededRng(args.seed))
    synth.aim = seeded  # type: ignore[assignment]
    print(json.dumps(synth.run_one(args.dataset, "aim", args.epsilon)))
    print(json.dumps({k: [round(SECONDS[k], 1), CALLS[k]] for k in SECONDS}))


if __name__ == "__main__":
    main()
