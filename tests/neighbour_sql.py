"""The SQL generator of the neighbour adversary (:mod:`tests.neighbour_queries`): queries of the
supported SQL subset over the demo table (:func:`queries`), biased toward adversarial expressions
(CASE on the victim's person id, int64-edge and 1e300 literals, division by zero, string/number
mixes, filters selecting one person, partition selection, tiny ε, many histogram bins), and the
refined quantile queries every engine is checked on (:data:`QUANTILE_QUERIES`).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

#: The person id the neighbours remove or change (a row of the demo table).
VICTIM = 4322
INT64_MAX = 2**63 - 1
_NUMBERS = ("age", "income", "hours")
_KEYS = {
    "sex": ("F", "M"),
    "region": ("North", "East", "South", "West"),
    "education": ("primary", "secondary", "bachelor", "master", "doctorate"),
}
_EXTREME_LITERALS = (
    "0",
    "1",
    "-1",
    "0.5",
    "90",
    str(VICTIM),
    str(INT64_MAX),
    f"-{INT64_MAX}",
    "-9223372036854775808",
    str(2**63),
    str(2**64),
    "1e300",
    "-1e300",
    "1e-300",
    "1.5e308",
)
EPSILONS = (1e-12, 1e-10, 1e-9, 1e-6, 1e-3, 0.1, 1.0, 5.0)


@dataclass(frozen=True)
class NeighbourQuery:
    """One SQL query with its requested ε and δ."""

    sql: str
    epsilon: float
    delta: float = 0.0

    def __str__(self) -> str:
        return f"{self.sql}  [ε={self.epsilon:g}, δ={self.delta:g}]"


#: Refined quantiles (issue 14): a float MEDIAN (a second engine pass over the window its first
#: level chose) and a grouped QUANTILE (each group's window counted through a CASE on its key),
#: with their noise-only intervals. Only the values and intervals may differ between neighbours.
QUANTILE_QUERIES = {
    "float median": NeighbourQuery("SELECT MEDIAN(income) AS m FROM people", 1.0),
    "grouped quantile": NeighbourQuery(
        "SELECT region, QUANTILE(hours, 0.9) AS q FROM people GROUP BY region", 0.5
    ),
}


def _literal() -> st.SearchStrategy[str]:
    return st.one_of(st.integers(-100, 100).map(str), st.sampled_from(_EXTREME_LITERALS))


def _string_column() -> st.SearchStrategy[str]:
    return st.sampled_from(sorted(_KEYS))


def _numbers() -> st.SearchStrategy[str]:
    """Numeric row expressions: arithmetic, functions, CASE on the victim, mixes and x/0.

    Mostly expressions of bounded columns (so the planner can bound them and the engine runs),
    with the person column, string columns and extreme literals mixed in.
    """
    base = st.one_of(st.sampled_from(_NUMBERS), _literal(), st.just("pid"))

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        op = st.sampled_from(("+", "-", "*", "/"))
        function = st.sampled_from(("ABS", "ROUND", "FLOOR", "CEIL"))
        return st.one_of(
            st.builds("({} {} {})".format, inner, op, inner),
            st.builds(f"(CASE WHEN pid = {VICTIM} THEN {{}} ELSE {{}} END)".format, inner, inner),
            st.builds("{}({})".format, function, inner),
            st.builds("({} / 0)".format, inner),
            st.builds("COALESCE({}, {})".format, inner, inner),
            st.builds("LENGTH({})".format, _string_column()),
            st.builds("({} + {})".format, _string_column(), inner),  # a string/number mix
        )

    return st.recursive(base, extend, max_leaves=5)


def _simple_predicates() -> st.SearchStrategy[str]:
    comparison = st.sampled_from(("=", "<>", "<", "<=", ">", ">="))
    strings = _string_column()
    key = st.sampled_from(sorted({k for keys in _KEYS.values() for k in keys}))
    width = st.integers(0, 3)
    return st.one_of(
        st.builds("{} {} {}".format, _numbers(), comparison, _numbers()),
        st.just(f"pid = {VICTIM}"),
        st.just(f"pid <> {VICTIM}"),
        st.builds(lambda k: f"pid BETWEEN {VICTIM - k} AND {VICTIM + k}", width),
        st.builds("{} = '{}'".format, strings, key),
        st.builds("{} = {}".format, strings, _literal()),  # a string/number mix
        st.builds("{} IN ('{}', '{}')".format, strings, key, key),
        st.builds("UPPER({}) = 'SOUTH'".format, strings),
        st.builds("{} IS NULL".format, _numbers()),
        st.sampled_from(("employed", "NOT employed", "hours IS NOT NULL", "employed = 1")),
        st.builds(f"{{}} IN (1, 2, {VICTIM})".format, _numbers()),
        st.builds("{} BETWEEN {} AND {}".format, _numbers(), _literal(), _literal()),
        st.builds(
            f"(CASE WHEN pid = {VICTIM} THEN age * {{}} ELSE 0 END) = 0".format,
            st.sampled_from(_EXTREME_LITERALS),
        ),
        st.builds(f"(pid = {VICTIM} AND {{}} = {{}})".format, strings, _literal()),
    )


def _predicates() -> st.SearchStrategy[str]:
    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.builds("({} AND {})".format, inner, inner),
            st.builds("({} OR {})".format, inner, inner),
            st.builds("NOT ({})".format, inner),
        )

    return st.recursive(_simple_predicates(), extend, max_leaves=3)


#: HISTOGRAM (lower, upper) pairs: ordinary, int64 edges, near the float range, tiny.
_HISTOGRAM_RANGES = (
    "0, 100",
    "18, 90",
    "-1, 1",
    "-1e300, 1e300",
    f"-{INT64_MAX}, {INT64_MAX}",
    "0, 1e-300",
)


def _aggregates() -> st.SearchStrategy[str]:
    value = _numbers()
    moment = st.sampled_from(("SUM", "AVG", "VARIANCE", "STDDEV", "MEDIAN", "MIN", "MAX"))
    p = st.sampled_from(("0", "0.01", "0.5", "0.99", "1"))
    bins = st.sampled_from(("1", "2", "10", "1000", "4096"))
    return st.one_of(
        st.just("COUNT(*)"),
        st.just("COUNT(DISTINCT pid)"),
        st.builds("COUNT({})".format, value),
        st.builds("{}({})".format, moment, value),
        st.builds("QUANTILE({}, {})".format, value, p),
        st.builds("PERCENTILE_CONT({}) WITHIN GROUP (ORDER BY {})".format, p, value),
        st.builds("HISTOGRAM({}, {}, {})".format, value, st.sampled_from(_HISTOGRAM_RANGES), bins),
    )


#: GROUP BY choices: none, columns with public keys, and keys only partition selection releases.
_GROUPINGS = (
    (),
    ("sex",),
    ("region",),
    ("education", "employed"),
    ("age",),
    ("income",),
    ("hours",),
    ("pid",),
)


@st.composite
def queries(draw: st.DrawFn) -> NeighbourQuery:
    """A query of the supported SQL subset over the demo table (see
    :mod:`dpcurator.query.frontend.sql`)."""
    groups = draw(st.sampled_from(_GROUPINGS))
    aggregates = draw(st.lists(_aggregates(), min_size=1, max_size=2))
    items = [*groups, *(f"{a} AS a{i}" for i, a in enumerate(aggregates))]
    sql = f"SELECT {', '.join(items)} FROM people"
    if draw(st.booleans()):
        sql += f" WHERE {draw(_predicates())}"
    if groups:
        sql += f" GROUP BY {', '.join(groups)}"
    delta = draw(st.sampled_from((1e-6, 0.0)))
    return NeighbourQuery(sql, draw(st.sampled_from(EPSILONS)), delta)
