"""How releases and costs read: reprs, summary(), to_pandas(long=True), HTML, plot, histogram
labels (issue 17, items 11 and 12).

Releases here use ε = 1e9 per query: the discrete Laplace noise is then 0 with probability
> 1 - 1e-300 per value, so the printed tables are exact strings.
"""

from __future__ import annotations

import math
from fractions import Fraction

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.container import BarContainer, ErrorbarContainer

from dpcurator.accounting import Budget
from dpcurator.core.measures import ZCDP, ApproxDP, PureDP
from dpcurator.errors import ParameterError
from dpcurator.query.backends import open_backend
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from dpcurator.random import SeededRng

HUGE = 1e9
_METADATA = {
    "table": "t",
    "columns": {
        "age": {"type": "int", "lower": 0, "upper": 120},
        "score": {"type": "float", "lower": 0, "upper": 1},
        "sex": {"type": "string", "keys": ["F", "M"]},
        "town": {"type": "string", "keys": ["<script>alert(1)</script>", "a&b"]},
    },
}


def _session(frame: pd.DataFrame, budget: Budget | None = None) -> Session:
    backend = open_backend(frame, table="t", engine="duckdb")
    metadata = Metadata.from_dict(_METADATA)
    return Session(backend, metadata, budget=budget or Budget(1e12), rng=SeededRng(5))


@pytest.fixture(autouse=True)
def _agg_backend() -> None:
    plt.switch_backend("Agg")


@pytest.fixture
def frame() -> pd.DataFrame:
    """Ages inside and outside the histogram ranges used below (10 and 95 out of [80, 90])."""
    return pd.DataFrame(
        {
            "age": [10, 33, 34, 66, 67, 80, 84, 85, 89, 95],
            "score": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95],
            "sex": ["F", "F", "M", "M", "F", "M", "F", "M", "F", "F"],
            "town": ["<script>alert(1)</script>"] * 4 + ["a&b"] * 6,
        }
    )


# ----------------------------------------------------------------------------------------------
# Costs and budgets


def test_measures_and_budgets_print_for_people() -> None:
    assert str(PureDP(0.5)) == "ε = 0.5"
    assert str(ApproxDP(1, 1e-6)) == "(ε = 1, δ = 1e-06)"
    assert str(ZCDP(0.125)) == "ρ = 0.125"
    assert repr(PureDP(0.1)) == "PureDP(epsilon=0.1)"  # the double 0.1, exactly
    assert repr(PureDP(Fraction(1, 3))) == "PureDP(epsilon=Fraction(1, 3))"
    assert repr(ApproxDP(1, 1e-6)) == "ApproxDP(epsilon=1.0, delta=1e-06)"
    assert repr(ZCDP(0.125)) == "ZCDP(rho=0.125)"
    assert str(Budget(1)) == "budget: ε = 1"
    assert str(Budget(0.5, 1e-6)) == "budget: (ε = 0.5, δ = 1e-06)"
    assert repr(Budget(0.5, 1e-6)) == "Budget(epsilon=0.5, delta=1e-06)"
    labelled = PureDP(0.5).labelled("remaining")
    assert str(labelled) == "remaining: ε = 0.5"
    assert labelled == PureDP(0.5)  # a label is presentation only
    assert hash(labelled) == hash(PureDP(0.5))
    assert str(labelled + PureDP(0.25)) == "ε = 0.75"


def test_cost_spent_and_remaining_are_labelled(frame: pd.DataFrame) -> None:
    session = _session(frame, Budget(1))
    release = session.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
    assert f"{release.cost} {session.remaining()}" == "cost: ε = 0.5 remaining: ε = 0.5"
    assert str(session.spent()) == "spent: ε = 0.5"
    assert repr(release.cost) == "PureDP(epsilon=0.5)"
    assert session.remaining() == PureDP(0.5)
    assert str(session.estimate("SELECT COUNT(*) AS n FROM t", epsilon=0.25).cost) == (
        "cost: ε = 0.25"
    )


# ----------------------------------------------------------------------------------------------
# Tables


def test_summary_is_a_table_with_ci_level_cost_and_rows(frame: pd.DataFrame) -> None:
    release = _session(frame).sql(
        "SELECT sex, COUNT(*) AS n, AVG(score) AS mean_score, MEDIAN(age) AS med "
        "FROM t GROUP BY sex",
        epsilon=HUGE,
        alpha=0.1,
    )
    expected = "\n".join(
        [
            "2 rows · cost: ε = 1e+09 · 90% CI",
            "sex  statistic      value  90% CI",
            "F    n                  6  [6, 6]",
            "F    mean_score  0.558333  [0.558333, 0.558333]",
            "F    med               76  [44, 107]",
            "M    n                  4  [4, 4]",
            "M    mean_score     0.525  [0.525, 0.525]",
            "M    med               71  [59, 82]",
        ]
    )  # a median's interval is its refined bins' noise-only interval (no "—: no interval" note)
    assert release.summary() == expected
    assert str(release) == expected
    lines = expected.splitlines()
    assert release.summary(max_lines=2) == "\n".join(
        [*lines[:4], "… 4 more lines: summary() shows them all"]
    )


def test_repr_html_escapes_keys_and_shows_cost_and_level(frame: pd.DataFrame) -> None:
    release = _session(frame).sql("SELECT town, COUNT(*) AS n FROM t GROUP BY town", epsilon=HUGE)
    page = release._repr_html_()
    assert "<script>" not in page
    assert "<th>&lt;script&gt;alert(1)&lt;/script&gt;</th>" in page
    assert "<th>a&amp;b</th>" in page
    assert "<caption>2 rows · cost: ε = 1e+09 · 95% CI</caption>" in page
    assert "<td>4 <small>[4, 4]</small></td>" in page


def test_to_pandas_wide_and_long(frame: pd.DataFrame) -> None:
    release = _session(frame).sql(
        "SELECT sex, COUNT(*) AS n, HISTOGRAM(age, 0, 100, 3) AS h FROM t GROUP BY sex",
        epsilon=HUGE,
    )
    wide = release.to_pandas()
    assert list(wide.columns[:4]) == ["sex", "n", "n_ci_low", "n_ci_high"]
    assert wide.attrs == {"ci_level": 0.95, "cost": "cost: ε = 1e+09"}
    long = release.to_pandas(long=True)
    assert list(long.columns) == [
        "sex",
        "statistic",
        "bin",
        "bin_low",
        "bin_high",
        "value",
        "ci_low",
        "ci_high",
        "ci_level",
    ]
    females = long[(long.sex == "F") & (long.statistic == "h")]
    assert females.bin.tolist() == ["<34", "[34,67)", ">=67"]
    assert females.bin_low.tolist() == [-math.inf, 34, 67]
    assert females.bin_high.tolist() == [34, 67, math.inf]
    assert females.value.tolist() == [2, 0, 4]  # ages 10, 33 | - | 67, 84, 89, 95
    assert set(long.ci_level) == {0.95}
    count = long[(long.sex == "M") & (long.statistic == "n")].iloc[0]
    assert count.value == 4
    assert pd.isna(count.bin)
    assert math.isnan(count.bin_low)


# ----------------------------------------------------------------------------------------------
# Histograms


def test_histogram_edge_bins_are_labelled_open(frame: pd.DataFrame) -> None:
    """Ages 10 and 95 lie outside [80, 90]: they are counted in the edge bins, as labelled."""
    session = _session(frame)
    release = session.sql("SELECT HISTOGRAM(age, 80, 90, 2) AS h FROM t", epsilon=HUGE)
    assert release.value_columns == ("h<85", "h>=85")
    assert [e.value for e in release.rows[0][1]] == [7, 3]  # 10..84 | 85, 89, 95
    assert session.sql(
        "SELECT HISTOGRAM(age, 80, 90, 1) AS h FROM t", epsilon=HUGE
    ).value_columns == ("h[all]",)


def test_integer_histograms_have_integer_edges_and_floats_keep_theirs(
    frame: pd.DataFrame,
) -> None:
    session = _session(frame)
    release = session.sql("SELECT HISTOGRAM(age, 0, 100, 3) AS h FROM t", epsilon=HUGE)
    assert release.value_columns == ("h<34", "h[34,67)", "h>=67")
    assert [e.value for e in release.rows[0][1]] == [2, 2, 6]  # 33 and 66 end their bins
    scores = session.sql("SELECT HISTOGRAM(score, 0, 1, 3) AS s FROM t", epsilon=HUGE)
    assert scores.value_columns == ("s<0.333333", "s[0.333333,0.666667)", "s>=0.666667")
    # one bin per integer would be empty for some bins: the equal-width edges are shown
    narrow = session.sql("SELECT HISTOGRAM(age, 0, 2, 4) AS h FROM t", epsilon=HUGE)
    assert narrow.value_columns == ("h<0.5", "h[0.5,1)", "h[1,1.5)", "h>=1.5")


# ----------------------------------------------------------------------------------------------
# Plot


def _error_bars(ax: Axes) -> int:
    """The vertical error bars drawn (one segment per bar with an interval)."""
    containers = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    return sum(len(c.lines[2][0].get_segments()) for c in containers)


def _bars(ax: Axes) -> int:
    return sum(len(c) for c in ax.containers if isinstance(c, BarContainer))


def test_plot_draws_grouped_bars_with_ci_error_bars(frame: pd.DataFrame) -> None:
    session = _session(frame)
    release = session.sql(
        "SELECT sex, COUNT(*) AS n, AVG(score) AS m, MEDIAN(age) AS med FROM t GROUP BY sex",
        epsilon=HUGE,
    )
    ax = release.plot()
    assert _bars(ax) == 6  # 2 groups x 3 statistics
    assert _error_bars(ax) == 6  # every statistic has an interval, the median's too
    med = next(c for c in ax.containers if isinstance(c, BarContainer) and c.get_label() == "med")
    assert med.errorbar is not None
    drawn = [tuple(segment[:, 1]) for segment in med.errorbar.lines[2][0].get_segments()]
    assert drawn == [(e[2].ci_low, e[2].ci_high) for _, e in release.rows] == [(44, 107), (59, 82)]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["F", "M"]
    assert ax.get_ylabel() == "value (95% CI)"
    legend = ax.get_legend()
    assert legend is not None
    assert len(legend.get_texts()) == 3
    histogram = session.sql(
        "SELECT sex, HISTOGRAM(age, 0, 100, 3) AS h FROM t GROUP BY sex", epsilon=HUGE
    ).plot("h")
    assert _bars(histogram) == _error_bars(histogram) == 6  # 3 bins x 2 groups
    assert [t.get_text() for t in histogram.get_xticklabels()] == ["<34", "[34,67)", ">=67"]
    assert histogram.get_ylabel() == "h (95% CI)"
    single = session.sql("SELECT COUNT(*) AS n FROM t", epsilon=HUGE).plot("n")
    assert _bars(single) == _error_bars(single) == 1
    with pytest.raises(ParameterError, match="one of"):
        release.plot("nope")
    plt.close("all")
