"""Generate the built-in demo dataset (synthetic, public): src/dpcurator/demo/people.csv.

The rows are drawn once from fixed distributions with a fixed seed and committed; nothing here
is privacy noise (numpy's generator is fine for synthetic demo data, never for DP releases).
The metadata next to it (people.yaml) is written by hand: bounds and keys are public facts.

Usage: python scripts/make_demo_data.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

ROWS = 5000
SEED = 20240601
OUT = Path(__file__).resolve().parents[1] / "src" / "dpcurator" / "demo" / "people.csv"
REGIONS = ["North", "East", "South", "West"]
EDUCATION = ["primary", "secondary", "bachelor", "master", "doctorate"]


def main() -> None:
    rng = np.random.default_rng(SEED)  # noqa: TID251  # synthetic public data, not DP noise
    age = rng.integers(18, 91, ROWS)
    sex = rng.choice(["F", "M"], ROWS)
    region = rng.choice(REGIONS, ROWS, p=[0.3, 0.2, 0.35, 0.15])
    education = rng.choice(EDUCATION, ROWS, p=[0.15, 0.4, 0.28, 0.14, 0.03])
    level = np.array([EDUCATION.index(e) for e in education])
    income = np.round(np.exp(rng.normal(9.6 + 0.25 * level + 0.01 * (age - 18), 0.6)), 2)
    employed = (rng.random(ROWS) < np.where(age < 66, 0.8, 0.15)).astype(bool)
    hours = np.where(employed, np.clip(rng.normal(38, 8, ROWS), 1, 80), 0).round().astype(float)
    hours[rng.random(ROWS) < 0.05] = np.nan  # some missing answers
    frame = pd.DataFrame(
        {
            "pid": np.arange(1, ROWS + 1),
            "age": age,
            "sex": sex,
            "region": region,
            "education": education,
            "income": np.minimum(income, 400000.0),
            "employed": employed,
            "hours": hours,
        }
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(OUT, index=False)
    print(f"wrote {len(frame)} rows to {OUT}")  # a script reports what it did


if __name__ == "__main__":
    main()
