"""Conformance rows of the SQL hypothesis tests (issue 27 item 2; the matrix of
:mod:`tests.privacy_matrix`): each test function × relation × unit, by brute force on the tiny
table's worst-case neighbours (same seed on both sides, every draw's loss against the charge and
its calibration). Unlike the array tests, a person column is served (the engine bounds each
person to r rows in g cells, which the sensitivity assumes). ``PROPTEST(y, y)`` uses the tiny
table's only two-key column twice: its 2×2 table is still the test's release (the cells a person
can reach are what the audit moves)."""

from __future__ import annotations

import pytest

import dpcurator as dpc
from dpcurator.query.frontend.sql import TEST_FUNCTIONS
from tests.privacy_matrix import (
    LEVELS,
    RELATIONS,
    Engines,
    Kind,
    audit,
    module_engines,  # noqa: F401 (the fixture engines)
)


def _test(text: str) -> Kind:
    def release(session: dpc.Session, rng: object) -> object:
        return session.sql(text, epsilon=1.0)

    return Kind(f"sql test: {text}", release)


#: A row for every SQL test function (tests/test_privacy_matrix_registry.py checks the names).
KINDS = {
    kind.name: kind
    for kind in [
        _test("SELECT TTEST(x, y) FROM t"),
        _test("SELECT TTEST(x, 5.0) FROM t"),
        _test("SELECT TTEST(x - y) FROM t"),
        _test("SELECT ANOVA(x, g) FROM t"),
        _test("SELECT PROPTEST(y, y) FROM t"),
        _test("SELECT CHI2(g, h) FROM t"),
        _test("SELECT CHI2(g) FROM t"),
        _test("SELECT KS(x, y, 2.5, 5, 7.5) FROM t"),
    ]
}


def test_every_sql_test_function_has_a_row() -> None:
    named = {name.split(": ", 1)[1].split()[1].split("(")[0] for name in KINDS}
    assert named == {name.upper() for name in TEST_FUNCTIONS}


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("relation", RELATIONS)
@pytest.mark.parametrize("name", sorted(KINDS))
def test_sql_hypothesis_test_conforms(
    name: str, relation: str, level: str, monkeypatch: pytest.MonkeyPatch, engines: Engines
) -> None:
    """On every pair of worst-case neighbours, the test loses at most the ε it charges."""
    assert audit(KINDS[name], relation, level, monkeypatch, engines) == []
