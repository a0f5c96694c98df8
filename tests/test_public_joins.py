"""JOIN of the private table with public lookup tables (issue 18 §3;
dpcurator.query.frontend.join)."""

from __future__ import annotations

import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.errors import DomainError, ParameterError, UnsupportedQueryError
from dpcurator.random import SeededRng

VICTIM = 4322
PEOPLE = pd.read_csv(dpc.demo_path("people.csv"))
META = dpc.Metadata.from_yaml(dpc.demo_path("people.yaml"))
ZONES = pd.DataFrame({"region": ["North", "South", "East", "West"], "zone": ["A", "A", "B", "C"]})
JOINED = (
    "SELECT z.zone, COUNT(*) AS n FROM people JOIN zones z ON people.region = z.region "
    "GROUP BY z.zone"
)


def _exact(session: dpc.Session, plan: object) -> dict:  # type: ignore[type-arg]
    return session._compute(plan.exact).groups  # type: ignore[attr-defined]


def _session(frame: pd.DataFrame, engine: str = "duckdb", zones: object = ZONES) -> dpc.Session:
    return dpc.Session.from_data(
        frame,
        metadata=META,
        budget=dpc.Budget(epsilon=100),
        rng=SeededRng(7),
        engine=engine,
        public_tables={"zones": zones},
    )


@pytest.mark.parametrize("engine", ["duckdb", "polars", "memory"])
def test_joined_counts_match_the_join_and_take_keys_from_the_public_table(engine: str) -> None:
    session = _session(PEOPLE, engine)
    plan = session.plan(JOINED, epsilon=1.0)
    assert plan.keys == (("A",), ("B",), ("C",))  # public keys from the public table
    truth = PEOPLE.merge(ZONES, on="region").groupby("zone").size()
    counts = {key[0]: next(iter(v.values())) for key, v in _exact(session, plan).items()}
    assert counts == truth.to_dict()


def test_a_person_moves_joined_counts_by_at_most_the_l1_bound() -> None:
    """Neighbour test: removing one person changes the exact joined counts by <= 1 in L1
    (each private row matches one public row at most), and nothing but the values."""
    query = (
        "SELECT z.zone, COUNT(*) AS n, SUM(z.weight) AS w FROM people "
        "LEFT JOIN zones z ON people.region = z.region GROUP BY z.zone"
    )
    zones = ZONES.assign(weight=[1.0, 2.0, 3.0, 4.0])
    full, minus = (_session(f, zones=zones) for f in (PEOPLE, PEOPLE[PEOPLE.pid != VICTIM]))
    plans = [s.plan(query, epsilon=1.0) for s in (full, minus)]
    assert plans[0] == plans[1]
    assert plans[0].outputs[0].parts[0].sensitivity == 1  # as without the join
    results = [_exact(s, p) for s, p in zip((full, minus), plans, strict=True)]
    moved = sum(
        abs(int(results[0][k][a]) - int(results[1].get(k, {}).get(a, 0)))
        for k in results[0]
        for a in results[0][k]
        if "count" in a
    )
    assert moved == 1
    released = [s.sql(query, epsilon=1.0) for s in (full, minus)]
    assert [r.cost for r in released] == [released[0].cost] * 2
    assert [[k for k, _ in r.rows] for r in released] == [[("A",), ("B",), ("C",)]] * 2


def test_duplicate_public_keys_are_refused_at_registration_naming_the_column() -> None:
    duplicated = pd.DataFrame({"region": ["North", "North"], "zone": ["A", "B"]})
    with pytest.raises(ParameterError, match=r"key column 'region'.*'North' appears more"):
        META.with_public_tables({"zones": {"data": duplicated, "keys": ["region"]}})
    with pytest.raises(DomainError, match="duplicate values in 'region'"):
        _session(PEOPLE, zones=duplicated).plan(JOINED, epsilon=1.0)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT COUNT(*) FROM people a JOIN people b ON a.pid = b.pid", "private–private"),
        ("SELECT COUNT(*) FROM people JOIN other o ON people.region = o.region", "only public"),
        ("SELECT COUNT(*) FROM people RIGHT JOIN zones z ON people.region = z.region", "RIGHT"),
        ("SELECT COUNT(*) FROM people CROSS JOIN zones", "CROSS"),
        ("SELECT COUNT(*) FROM people JOIN zones USING (region)", "USING"),
        ("SELECT COUNT(*) FROM people JOIN zones z ON people.age = z.region", "types differ"),
    ],
)
def test_unsupported_joins_are_refused_free_by_name(sql: str, message: str) -> None:
    session = _session(PEOPLE)
    with pytest.raises(UnsupportedQueryError, match=message):
        session.sql(sql, epsilon=1.0)
    assert session.spent() == dpc.PureDP(0)
