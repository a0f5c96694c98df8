"""Decoding numeric bins by the public rule (issue 28 item 6): declared point masses get a bin of
their own and decode exactly, other bins spread their values over the bin (never all on the
midpoint), the metadata field is validated in the user's words, and the owner's utility report
names the worst 2-way pairs. Every draw is seeded (declared seeds below)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.accounting import PrivacyFilter, PureEvent, ZCDPAccountant
from dpcurator.core.measures import ZCDP
from dpcurator.errors import ParameterError
from dpcurator.query.schema import ColumnMeta
from dpcurator.random import SeededRng
from dpcurator.synth.common import synthetic
from dpcurator.synth.domain import SynthDomain, column_domain
from dpcurator.synth.mst import independent
from dpcurator.synth.report import utility_summary, worst_pairs


def _meta(point_masses: object = (0,), **extra: object) -> dpc.Metadata:
    gain: dict[str, object] = {"type": "int", "lower": 0, "upper": 99999, **extra}
    if point_masses is not None:
        gain["point_masses"] = list(point_masses)  # type: ignore[call-overload]
    return dpc.Metadata.from_dict(
        {
            "table": "t",
            "columns": {
                "gain": gain,
                "age": {"type": "int", "lower": 17, "upper": 90},
                "sex": {"type": "string", "keys": ["F", "M"]},
            },
        }
    )


def _frame(n: int = 5000) -> pd.DataFrame:
    """gain is 0 in 90 % of rows (declared seed 3)."""
    gen = np.random.default_rng(3)
    gain = np.where(gen.random(n) < 0.9, 0, gen.integers(1, 99999, n))
    return pd.DataFrame(
        {"gain": gain, "age": gen.integers(17, 91, n), "sex": gen.choice(["F", "M"], n)}
    )


def test_a_declared_point_mass_gets_its_own_bin_and_decodes_exactly() -> None:
    domain = column_domain(_meta().column("gain"))
    assert domain.edges[:2] == (0.0, 1.0)  # [0, 1): only 0
    assert domain.masses[0] == 0.0
    assert all(m is None for m in domain.masses[1:])
    values = domain.decode(np.zeros(1000, dtype=np.int64), SeededRng(1))
    assert (values == 0).all()
    # the bin after the point mass starts at 1: no synthetic 0 comes from it
    after = domain.decode(np.ones(1000, dtype=np.int64), SeededRng(1))
    assert after.min() >= 1


@pytest.mark.parametrize(
    "column",
    [
        ColumnMeta("g", "int", 0, 99999, point_masses=(0, 99999)),
        ColumnMeta("f", "float", 0.0, 10.0, point_masses=(0.0, 5.0, 10.0)),
        ColumnMeta("a", "int", 17, 90),
        ColumnMeta("h", "float", -1.0, 1.0),
    ],
)
def test_decoded_values_stay_in_their_bin_and_are_spread(column: ColumnMeta) -> None:
    """encode(decode(codes)) == codes, and in every bin holding more than one value no single
    value (the midpoint included) gets more than its uniform share plus 6 standard deviations
    plus 5 (an int bin of w values: Binomial(400, 1/w); for the widest bins, λ = 0.13, a count of
    6 has p < 1e-8 per value, alpha < 1e-3 over the test); in a float bin
    every draw is distinct (seed 2). Midpoint decoding puts all 400 on one value and fails."""
    domain = column_domain(column)
    per_bin = 400
    codes = np.repeat(np.arange(domain.size), per_bin)
    values = domain.decode(codes, SeededRng(2))
    assert (domain.encode(values) == codes).all()
    low, high, exact = domain._ranges()
    for code in range(domain.size):
        inside = values[codes == code]
        if exact[code] or low[code] == high[code]:
            assert inside.nunique() == 1
            continue
        if column.type == "float":
            assert inside.nunique() == per_bin, code
            continue
        share = 1 / (high[code] - low[code] + 1)
        limit = per_bin * share + 6 * np.sqrt(per_bin * share * (1 - share)) + 5
        assert int(inside.value_counts().iloc[0]) <= limit, code
        assert inside.min() >= low[code]
        assert inside.max() <= high[code]


def test_decoding_is_reproducible_from_the_seed() -> None:
    domain = column_domain(ColumnMeta("f", "float", 0.0, 10.0))
    codes = np.arange(domain.size)
    first = domain.decode(codes, SeededRng(5))
    assert first.equals(domain.decode(codes, SeededRng(5)))
    assert not first.equals(domain.decode(codes, SeededRng(6)))


def test_synthetic_share_of_zeros_follows_the_dp_marginal() -> None:
    """Independent marginals at ρ = 5 (σ of a count ≈ 0.8): the share of exact zeros in the
    synthetic gain is the noisy share of the [0, 1) bin, within 0.01 of the real 0.9; real mean
    ~5000 and the synthetic mean within 15 % (seed 4)."""
    frame = _frame()
    budget = PrivacyFilter(ZCDP(5), ZCDPAccountant())
    session = dpc.Session.from_data(frame, metadata=_meta(), budget_filter=budget)
    result = independent(session, rho=5, rng=SeededRng(4))
    real_zero = float((frame["gain"] == 0).mean())
    synth_zero = float((result.frame["gain"] == 0).mean())
    assert abs(synth_zero - real_zero) < 0.01
    assert result.frame["gain"].mean() == pytest.approx(frame["gain"].mean(), rel=0.15)
    assert result.frame["age"].nunique() > 60  # 32 bins, spread over 74 ages


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"type": "string", "keys": ["a"], "point_masses": ["a"]}, "numeric column"),
        ({"type": "int", "point_masses": [0]}, "'lower'/'upper' bounds"),
        ({"type": "int", "lower": 0, "upper": 9, "point_masses": [12]}, "within [0, 9]. Got 12"),
        ({"type": "int", "lower": 0, "upper": 9, "point_masses": [0.5]}, "type int. Got 0.5"),
        ({"type": "int", "lower": 0, "upper": 9, "point_masses": [1, 1]}, "distinct"),
        ({"type": "int", "lower": 0, "upper": 9, "point_masses": 0}, "a list of values"),
        ({"type": "float", "lower": 0, "upper": 9, "point_masses": [True]}, "type float"),
    ],
)
def test_point_masses_are_validated_naming_the_column(spec: dict[str, object], words: str) -> None:
    with pytest.raises(ParameterError) as caught:
        dpc.Metadata.from_dict({"table": "t", "columns": {"gain": spec}})
    message = str(caught.value)
    assert "'point_masses'" in message
    assert "column 'gain'" in message
    assert words in message


def test_point_masses_round_trip_and_follow_new_bounds() -> None:
    meta = _meta((0, 500))
    again = dpc.Metadata.from_dict(meta.to_dict())
    assert again.column("gain").point_masses == (0, 500)
    assert meta.with_bounds("gain", 100, 1000).column("gain").point_masses == (500,)
    assert _meta(None).column("gain").point_masses is None


def test_the_owner_report_lists_the_worst_pairs_first() -> None:
    """Synthetic rows keep gain and sex but shuffle age: every pair with age is off, and the
    report ranks them first (seed 7)."""
    frame = _frame(3000)
    frame["age"] = np.where(frame["sex"] == "F", 20, 80)  # age determined by sex
    domain = SynthDomain.from_metadata(_meta())
    broken = frame.copy()
    broken["age"] = np.random.default_rng(7).permutation(broken["age"].to_numpy())
    result = synthetic(domain.encode(broken), domain, "test", PureEvent(1), [])
    summary = utility_summary(frame, result, top=2)
    pairs = summary["worst_pairs"]
    assert [p["pair"] for p in pairs] == [["age", "sex"], ["gain", "age"]]
    assert pairs[0]["tvd"] > 0.4 > pairs[1]["tvd"]
    assert len(worst_pairs(domain.encode(frame), result)) == 3  # 3 pairs, top 5
    with pytest.raises(ParameterError, match="'top'"):
        utility_summary(frame, result, top=0)
