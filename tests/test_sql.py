"""The SQL front end: the supported subset, refusals naming the construct, injection attempts."""

from __future__ import annotations

import pytest

import dpcurator.query.builder as qb
from dpcurator.errors import DomainError, ParameterError, UnsupportedQueryError
from dpcurator.query import ir
from dpcurator.query.schema import Metadata
from dpcurator.query.sql import parse_sql

META = Metadata.from_dict(
    {
        "table": "pums",
        "schema": "census",
        "person_column": "pid",
        "columns": {
            "pid": {"type": "int"},
            "age": {"type": "int", "lower": 0, "upper": 100},
            "sex": {"type": "string", "keys": ["F", "M"]},
            "income": {"type": "float", "lower": 0, "upper": 500000},
        },
    }
)


def test_the_issue_query_translates_to_the_builder_query() -> None:
    parsed = parse_sql(
        "SELECT sex, COUNT(*) AS n, AVG(income) AS mean_income, MEDIAN(age) AS med_age "
        "FROM pums WHERE age >= 18 GROUP BY sex",
        META,
    )
    built = (
        qb.Query("pums")
        .filter(qb.col("age") >= 18)
        .group_by("sex")
        .agg(
            qb.count().alias("n"),
            qb.mean("income").alias("mean_income"),
            qb.median("age").alias("med_age"),
        )
    )
    assert parsed == built


def test_expressions_become_ir_with_literal_values() -> None:
    query = parse_sql(
        "SELECT COUNT(*) FROM census.pums AS p WHERE (p.age BETWEEN 18 AND 65 OR age IN (1, 2)) "
        "AND NOT income IS NULL AND sex <> 'F' AND ABS(-age) * 2 / 3 - 1 + 0.5 < 100 "
        "AND CASE WHEN age > 50 THEN 'old' ELSE 'young' END = 'old' AND LOWER(sex) = 'm' "
        "AND COALESCE(income, 0) >= 0 AND income IS NOT NULL",
        META,
    )
    where = query.where
    assert isinstance(where, ir.And)
    text = repr(where)
    for fragment in (
        "Between",
        "In(arg=Col(name='age'), values=(1, 2))",
        "IsNull",
        "Lit(value='F')",
        "Func(name='abs'",
        "Case(",
        "Func(name='lower'",
        "Func(name='coalesce'",
    ):
        assert fragment in text


def test_aggregate_kinds() -> None:
    query = parse_sql(
        "SELECT COUNT(*), COUNT(income), COUNT(DISTINCT pid), SUM(income), AVG(age), "
        "VARIANCE(age), STDDEV(age), MEDIAN(age), QUANTILE(age, 0.25), "
        "PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY age), MIN(age), MAX(age), "
        "HISTOGRAM(age, 0, 100, 4) FROM pums",
        META,
    )
    kinds = [(a.kind, a.p) for a in query.aggregates]
    assert kinds == [
        ("count", None),
        ("count", None),
        ("count_persons", None),
        ("sum", None),
        ("mean", None),
        ("variance", None),
        ("stddev", None),
        ("quantile", 0.5),
        ("quantile", 0.25),
        ("quantile", 0.9),
        ("quantile", 0.0),
        ("quantile", 1.0),
        ("histogram", None),
    ]
    assert query.aggregates[-1].bins == 4


def test_group_by_alias_expression_and_order_by_outputs() -> None:
    query = parse_sql(
        "SELECT CASE WHEN age >= 65 THEN 'senior' ELSE 'other' END AS band, COUNT(*) AS n "
        "FROM pums GROUP BY band ORDER BY n DESC, band",
        META,
    )
    assert [g.name for g in query.groups] == ["band"]
    assert isinstance(query.groups[0].expr, ir.Case)
    assert query.order_by == (("n", True), ("band", False))


REFUSED = [
    ("SELECT COUNT(*) FROM pums a JOIN pums b ON a.pid = b.pid", "JOIN"),
    ("SELECT COUNT(*) FROM pums, pums", "JOIN"),
    ("SELECT COUNT(*) FROM (SELECT * FROM pums)", "subqueries"),
    ("SELECT COUNT(*) FROM pums WHERE age IN (SELECT age FROM pums)", "subqueries"),
    ("SELECT COUNT(*) FROM pums WHERE age > (SELECT MIN(age) FROM pums)", "subqueries"),
    ("WITH t AS (SELECT * FROM pums) SELECT COUNT(*) FROM t", "WITH"),
    ("SELECT SUM(age) OVER (PARTITION BY sex) FROM pums", "window"),
    ("SELECT COUNT(*) FROM pums LIMIT 5", "LIMIT"),
    ("SELECT COUNT(*) FROM pums OFFSET 5", "OFFSET"),
    ("SELECT COUNT(*) FROM pums GROUP BY sex HAVING COUNT(*) > 5", "HAVING"),
    ("SELECT COUNT(*) FROM pums ORDER BY age", "ORDER BY"),
    ("SELECT DISTINCT sex FROM pums", "DISTINCT"),
    ("SELECT age FROM pums", "row-level"),
    ("SELECT * FROM pums", r"SELECT \*"),
    ("SELECT COUNT(*) FROM pums UNION SELECT COUNT(*) FROM pums", "SELECT"),
    ("SELECT COUNT(DISTINCT sex) FROM pums", "DISTINCT"),
    ("SELECT AVG(age) + 1 FROM pums", "outermost"),
    ("SELECT COUNT(*) FROM pums WHERE COUNT(*) > 1", "WHERE"),
    ("SELECT COUNT(*) FROM read_csv('/etc/passwd')", "FROM must name"),
    ("SELECT COUNT(*) FROM pums GROUP BY 1", "position"),
    ("SELECT COUNT(*) FROM pums WHERE random() < 0.5", "not supported"),
    ("SELECT VAR_POP(age) FROM pums", "not supported"),
    ("SELECT sex FROM pums GROUP BY sex", "no aggregate"),
    ("SELECT COUNT(*) FROM pums WHERE age IS TRUE", "IS"),
    ("DELETE FROM pums", "DELETE"),
    ("DROP TABLE pums", "DROP"),
    ("SELECT COUNT(*) FROM pums; SELECT COUNT(*) FROM pums", "one SQL statement"),
    ("SELECT COUNT(*) FROM pums WHERE sex = ''; DROP TABLE pums; --'", "one SQL statement"),
    ("SELECT COUNT(*) FROM pums WHERE ((", "could not be parsed"),
]


@pytest.mark.parametrize(("sql", "construct"), REFUSED)
def test_constructs_outside_the_subset_are_refused(sql: str, construct: str) -> None:
    with pytest.raises(UnsupportedQueryError, match=construct):
        parse_sql(sql, META)


def test_unknown_names_are_clear_errors() -> None:
    with pytest.raises(UnsupportedQueryError, match="Unknown table 'other'"):
        parse_sql("SELECT COUNT(*) FROM other", META)
    with pytest.raises(UnsupportedQueryError, match="Unknown table"):
        parse_sql("SELECT COUNT(*) FROM wrong.pums", META)
    with pytest.raises(DomainError, match="Unknown column 'salary'"):
        parse_sql("SELECT SUM(salary) FROM pums", META)
    with pytest.raises(ParameterError, match="'query'"):
        parse_sql("   ", META)


@pytest.mark.parametrize(
    "payload",
    [
        "x'; DROP TABLE pums; --",
        "' OR '1'='1",
        "F\\'; SELECT * FROM pums; --",
        "/* */ UNION SELECT pid FROM pums",
    ],
)
def test_injection_payloads_in_string_literals_stay_literal_values(payload: str) -> None:
    escaped = payload.replace("'", "''")
    query = parse_sql(f"SELECT COUNT(*) FROM pums WHERE sex = '{escaped}'", META)
    assert query.where == ir.Compare("=", ir.Col("sex"), ir.Lit(payload))


def test_comments_are_ignored() -> None:
    query = parse_sql("SELECT COUNT(*) /* hi */ FROM pums -- ; DROP TABLE pums", META)
    assert query.where is None
    assert [a.kind for a in query.aggregates] == ["count"]
