"""The SQL front end: the supported subset, refusals naming the construct, injection attempts."""

from __future__ import annotations

import pytest

import dpcurator.query.frontend.builder as qb
from dpcurator.errors import DomainError, ParameterError, UnsupportedQueryError
from dpcurator.query import ir
from dpcurator.query.frontend.row_expressions import col
from dpcurator.query.frontend.sql import parse_sql
from dpcurator.query.plan.planner import plan_query
from dpcurator.query.schema import Metadata

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
        .filter(col("age") >= 18)
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


def test_parse_failures_are_clean_refusals_without_terminal_codes() -> None:
    for sql, expected in [
        ("SELECT COUNT(*) FROM pums WHERE sex = 'F", "unterminated string"),
        ("SELECT COUNT(*) FROM pums WHERE ((", "could not be parsed at line 1"),
        ("SELECT COUNT(*) FROM pums WHERE age >", "could not be parsed"),
    ]:
        with pytest.raises(UnsupportedQueryError, match=expected) as refused:
            parse_sql(sql, META)
        assert "\x1b" not in str(refused.value)
    with pytest.raises(UnsupportedQueryError, match="spelling of SELECT") as refused:
        parse_sql("SELEC x", META)
    assert "ALIAS" not in str(refused.value)


def test_nesting_beyond_the_limit_is_refused_before_the_parser_recurses() -> None:
    for where in [
        "age" + " + 1" * 600 + " > 0",
        "(" * 300 + "age > 1" + ")" * 300,
        "NOT " * 600 + "age > 1",
        "- " * 5000 + "age > 1",
        "CASE WHEN " * 200 + "age > 1" + " THEN TRUE END" * 200,
    ]:
        with pytest.raises(UnsupportedQueryError, match="MAX_EXPRESSION_DEPTH = 32"):
            parse_sql(f"SELECT COUNT(*) FROM pums WHERE {where}", META)


def test_the_depth_limit_is_exact_and_long_and_or_chains_are_one_level() -> None:
    def nested(functions: int) -> str:  # depth: SUM's parenthesis, then one per ABS(
        return "SELECT SUM(" + "ABS(" * functions + "age" + ")" * functions + ") FROM pums"

    plan_query(parse_sql(nested(31), META), META, epsilon=1)  # depth 32 parses and plans
    with pytest.raises(UnsupportedQueryError, match="MAX_EXPRESSION_DEPTH"):
        parse_sql(nested(32), META)
    chain = " OR ".join(f"age = {i}" for i in range(1500))
    query = parse_sql(f"SELECT COUNT(*) FROM pums WHERE ({chain}) AND sex = 'F' AND age > 1", META)
    assert isinstance(query.where, ir.And)
    assert len(query.where.args) == 3
    assert isinstance(query.where.args[0], ir.Or)
    assert len(query.where.args[0].args) == 1500


def test_the_sql_text_length_is_limited() -> None:
    padding = "/*" + "x" * 20_000 + "*/"
    with pytest.raises(UnsupportedQueryError, match="MAX_SQL_LENGTH"):
        parse_sql(f"SELECT COUNT(*) {padding} FROM pums", META)


def test_clamp_gives_an_aggregate_its_bounds_and_the_hint_offers_it() -> None:
    query = parse_sql(
        "SELECT SUM(CLAMP(pid, 0, 10)) AS s, MEDIAN(CLAMP(pid, 1, 9)) FROM pums", META
    )
    assert (query.aggregates[0].lower, query.aggregates[0].upper) == (0, 10)
    assert (query.aggregates[1].lower, query.aggregates[1].upper) == (1, 9)
    with pytest.raises(UnsupportedQueryError, match="whole argument of an aggregate"):
        parse_sql("SELECT COUNT(*) FROM pums WHERE CLAMP(age, 0, 1) > 0", META)
    with pytest.raises(DomainError, match=r"SQL: SUM\(CLAMP\(pid, 0, 100\)\)"):
        plan_query(parse_sql("SELECT SUM(pid) FROM pums", META), META, epsilon=1)
