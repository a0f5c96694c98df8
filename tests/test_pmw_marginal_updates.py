"""Issue 27 item 4: a PMW update on a cell query measures the cell's whole marginal, and the
default threshold and update count come from public inputs only."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from dpcurator import demo_path
from dpcurator.interactive import PrivateMultiplicativeWeights, counting_query
from dpcurator.interactive.pmw_updates import (
    MarginalMeasurement,
    QueryMeasurement,
    marginal_cell,
    pack,
    unpack,
)
from dpcurator.query.schema import Metadata
from dpcurator.random import SeededRng
from dpcurator.synth.domain import SynthDomain
from tests.test_interactive_pmw import (
    COLUMNS,
    _ask_until_refused,
    _correlated,
    _session,
    _truth,
    _workload,
)


def _domain() -> SynthDomain:
    return SynthDomain.from_metadata(Metadata.from_yaml(demo_path("people.yaml")), COLUMNS)


def test_marginal_cell_reads_the_shape_of_the_query() -> None:
    domain = _domain()
    shape = domain.shape(domain.names)  # sex 2 x region 4 x education 5 x employed 2
    regions = list(domain.columns[1].group_values())
    cell = counting_query(domain, {"region": "North", "sex": "F"})
    assert marginal_cell(cell, shape, 1024) == ((0, 1), regions.index("North"))  # F: code 0
    assert marginal_cell(cell, shape, 8) is not None
    assert marginal_cell(cell, shape, 7) is None  # the sex x region marginal has 8 cells
    assert marginal_cell(counting_query(domain, {}), shape, 1024) == ((), 0)  # the total
    several = counting_query(domain, {"region": ["North", "South"], "sex": "F"})
    assert marginal_cell(several, shape, 1024) is None  # two cells: measured alone
    assert marginal_cell(cell * 0.5, shape, 1024) is None  # not a count


def _exact_marginal(frame: pd.DataFrame, domain: SynthDomain, names: list[str]) -> np.ndarray:
    columns = [domain.columns[domain.names.index(n)] for n in names]
    counts = np.zeros([c.size for c in columns])
    for index in np.ndindex(counts.shape):
        query = {c.name: c.group_values()[i] for c, i in zip(columns, index, strict=True)}
        counts[index] = _truth(frame, query)
    return counts


def test_an_update_on_a_cell_measures_and_fits_its_whole_marginal() -> None:
    frame = _correlated()  # women all live in the North: far from the product start
    curator = PrivateMultiplicativeWeights(
        _session(budget=1e7, frame=frame), COLUMNS, epsilon=1e7, max_updates=5, threshold=0.25
    )
    exact = _exact_marginal(frame, curator.domain, ["sex", "region"])
    before = curator.synthetic.sum(axis=(2, 3)) * curator.noisy_size
    assert round(curator.count({"sex": "F", "region": "North"})) == _truth(
        frame, {"sex": "F", "region": "North"}
    )
    measured = curator._measured[-1]
    assert isinstance(measured, MarginalMeasurement)
    assert measured.axes == (0, 1)
    assert np.array_equal(measured.noisy, exact)  # noise is negligible at this ε
    after = curator.synthetic.sum(axis=(2, 3)) * curator.noisy_size
    # every cell of the marginal moved towards the truth, not only the one asked
    assert np.abs(after - exact).sum() < np.abs(before - exact).sum() / 2
    curator.count({"sex": "F", "region": ["North", "South"]})  # two cells: measured alone
    assert isinstance(curator._measured[-1], QueryMeasurement)


def _errors(frame: pd.DataFrame, seed: int, max_marginal_cells: int) -> list[float]:
    """The absolute errors of the answers before the curator's updates ran out."""
    curator = PrivateMultiplicativeWeights(
        _session(budget=1.0, seed=seed, frame=frame),
        COLUMNS,
        epsilon=1,
        queries=300,
        max_marginal_cells=max_marginal_cells,
    )
    queries = _workload(300, seed=10 + seed)
    answers, _ = _ask_until_refused(curator, queries)
    return [abs(a - _truth(frame, q)) for a, q in zip(answers, queries, strict=False)]


def test_marginal_updates_answer_more_accurately_than_single_queries() -> None:
    """Seeded, 3 workloads of 300 random 2-way counts on the correlated demo table at ε = 1 with
    the default c and T: measuring marginals answers them all, with a lower mean error than
    measuring the queries alone has on the few it answers before its updates run out."""
    frame = _correlated()
    for seed in range(3):
        marginals, alone = _errors(frame, seed, 1024), _errors(frame, seed, 0)
        assert len(marginals) == 300
        assert len(alone) < 100
        assert np.mean(marginals) < np.mean(alone)


def test_measurements_survive_save_and_restore() -> None:
    curator = PrivateMultiplicativeWeights(
        _session(budget=10, frame=_correlated()), COLUMNS, epsilon=10, max_updates=40, threshold=5
    )
    # the start (a product) is far off on both: women all live in the North, and the employed
    # are exactly the bachelors, masters and doctors; the second has two cells
    first = [
        {"sex": "F", "region": "South"},
        {"employed": False, "education": ["master", "bachelor"]},
    ]
    for query in [*first, *_workload(40, seed=1), {}]:
        curator.count(query)
    kinds = [type(m) for m in curator._measured]
    assert kinds[:2] == [MarginalMeasurement, QueryMeasurement]
    shape = curator.domain.shape(curator.domain.names)
    metadata = Metadata.from_yaml(demo_path("people.yaml"))
    again = PrivateMultiplicativeWeights.restore(
        metadata, curator.parameters(), curator.to_bytes(), rng=SeededRng(3)
    )
    for saved in (unpack(pack(curator._measured), shape), again._measured):
        assert len(saved) == len(curator._measured)
        for left, right in zip(saved, curator._measured, strict=True):
            assert type(left) is type(right)
            for name in ("axes", "noisy", "cells", "weights", "value"):
                assert np.array_equal(getattr(left, name, 0), getattr(right, name, 0))
    assert np.array_equal(again.synthetic, curator.synthetic)
    assert again.parameters() == curator.parameters()


def test_default_updates_and_threshold_are_public() -> None:
    """c = d(d-1); T = b ln(2k/c), b = 4Δ/ε_s the sparse vector's query-noise scale: by hand,
    and the same on a neighbouring table (nothing read from the data)."""
    frame = pd.read_csv(demo_path("people.csv"))
    made = [
        PrivateMultiplicativeWeights(
            _session(budget=1.0, frame=table), COLUMNS, epsilon=1, queries=1000
        )
        for table in (frame, frame[frame["pid"] != 4322])
    ]
    # c = 4 * 3 = 12; eps_s = 3/4 * (1 - 1/10) / 12 = 9/160; b = 4 * 160 / 9
    assert made[0].max_updates == 12
    assert made[0].svt_epsilon == Fraction(9, 160)
    # up to the sparse vector's grid (2^-20 of b at most)
    assert made[0].threshold == pytest.approx(640 / 9 * math.log(2000 / 12), rel=2.0**-20)
    assert made[0].parameters() == made[1].parameters()
