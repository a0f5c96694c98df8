"""SQL text to one parsed SELECT: tokenizing, nesting limits and sqlglot's parser, with every
failure turned into a free :class:`~dpcurator.errors.UnsupportedQueryError`.

The text's length is checked against :data:`~dpcurator.query.plan.limits.MAX_SQL_LENGTH` and its
nesting against :data:`~dpcurator.query.plan.limits.MAX_EXPRESSION_DEPTH` on the tokens before the
(recursive) parser runs, and again on the tree. The statement is translated by
:mod:`dpcurator.query.frontend.sql` (statements) and :mod:`dpcurator.query.frontend.expressions`
(row-level expressions); SQL text is never executed or re-emitted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokenizer_core import Token, TokenType

from dpcurator._validation import fail
from dpcurator.errors import UnsupportedQueryError
from dpcurator.query.plan.limits import (
    MAX_EXPRESSION_DEPTH,
    MAX_SQL_LENGTH,
    check_at_most,
    check_depth,
    depth_exceeded,
)

_DIALECT = Dialect.get_or_raise("duckdb")

#: Tokens that open a nesting level of the parser, and those that close one.
_OPENING = frozenset({TokenType.L_PAREN, TokenType.CASE})
_CLOSING = frozenset({TokenType.R_PAREN, TokenType.END})
#: Prefix operators: each one in a row nests the parser one level deeper.
_PREFIX = frozenset({TokenType.NOT, TokenType.DASH, TokenType.PLUS, TokenType.TILDE})
#: Tokens after which ``-`` and ``+`` are binary operators, not prefixes.
_OPERAND_ENDS = frozenset(
    {
        TokenType.VAR,
        TokenType.IDENTIFIER,
        TokenType.NUMBER,
        TokenType.STRING,
        TokenType.R_PAREN,
        TokenType.END,
        TokenType.NULL,
        TokenType.TRUE,
        TokenType.FALSE,
    }
)
#: Wrapper levels of a parsed SELECT around its expressions (SELECT, alias, column name).
_TREE_WRAPPERS = 3
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
_PARSE_FAILURE = "The SQL could not be parsed"


def parse_select(sql: str) -> exp.Select:
    """The one SELECT statement of ``sql``, checked against the text's limits (see
    :func:`~dpcurator.query.frontend.sql.parse_sql`), not yet translated."""
    if not isinstance(sql, str) or not sql.strip():
        raise fail("sql", "query", "a non-empty SQL string", sql)
    check_at_most("The SQL text length", len(sql), "MAX_SQL_LENGTH", MAX_SQL_LENGTH)
    tokens = _tokenize(sql)
    _check_token_nesting(tokens)
    statements = _parse(tokens, sql)
    if len(statements) != 1:
        raise UnsupportedQueryError(
            f"Exactly one SQL statement is accepted; got {len(statements)} (stacked statements "
            "are refused)."
        )
    statement = statements[0]
    if not isinstance(statement, exp.Select):
        first = tokens[0]
        if first.token_type in (TokenType.VAR, TokenType.IDENTIFIER):
            raise UnsupportedQueryError(
                f"Only SELECT queries are accepted; the text starts with {first.text!r}, which "
                "is not a SQL keyword (check the spelling of SELECT)."
            )
        raise UnsupportedQueryError(
            f"Only SELECT queries are accepted; got a {statement.key.upper()} statement."
        )
    tree: exp.Expr = statement
    check_depth(tree, _tree_children, slack=_TREE_WRAPPERS)
    return statement


def _clean(text: str) -> str:
    """sqlglot's message without terminal colour codes, on one line."""
    return " ".join(_ANSI_ESCAPE.sub("", text).split())


def _tokenize(sql: str) -> list[Token]:
    try:
        tokens: list[Token] = _DIALECT.tokenize(sql)
    except TokenError as exc:
        raise UnsupportedQueryError(
            f"{_PARSE_FAILURE}: it has an unterminated string or quoted name, or a character "
            f"outside SQL ({_clean(str(exc))[:200]})."
        ) from exc
    if not tokens:
        raise UnsupportedQueryError(f"{_PARSE_FAILURE}: it holds no SQL statement.")
    return tokens


def _check_token_nesting(tokens: list[Token]) -> None:
    """Refuse nesting beyond MAX_EXPRESSION_DEPTH from the tokens alone: parentheses, CASE and
    runs of prefix operators (NOT, unary minus) are what the parser recurses on."""
    bases = [0]
    run = 0
    previous: TokenType | None = None
    for token in tokens:
        kind = token.token_type
        if kind in _PREFIX and (kind == TokenType.NOT or previous not in _OPERAND_ENDS):
            run += 1
        elif kind in _OPENING:
            bases.append(bases[-1] + run + 1)
            run = 0
        elif kind in _CLOSING:
            if len(bases) > 1:
                bases.pop()
            run = 0
        else:
            run = 0
        if bases[-1] + run > MAX_EXPRESSION_DEPTH:
            raise depth_exceeded()
        previous = kind


def _parse(tokens: list[Token], sql: str) -> list[exp.Expr]:
    try:
        parsed = _DIALECT.parser().parse(tokens, sql)
    except ParseError as exc:
        detail = exc.errors[0] if exc.errors else {}
        where = f" at line {detail.get('line')}, column {detail.get('col')}" if detail else ""
        description = _clean(str(detail.get("description", exc)))
        raise UnsupportedQueryError(f"{_PARSE_FAILURE}{where}: {description}.") from exc
    except RecursionError:  # only when the caller's own stack is already deep
        raise depth_exceeded() from None
    except Exception as exc:  # sqlglot raises assorted errors on malformed text
        raise UnsupportedQueryError(
            f"{_PARSE_FAILURE} ({type(exc).__name__}); check the syntax of the query."
        ) from exc
    return [statement for statement in parsed if statement is not None]


def _tree_children(node: exp.Expr) -> Iterable[tuple[exp.Expr, int]]:
    """Children of a parsed node with the depth each adds: parentheses and CASE branches add
    none (their content is the level), nor does an operand of the same AND or OR chain."""
    chain = isinstance(node, exp.And | exp.Or)
    for child in node.iter_expressions():
        same = chain and type(child) is type(node)
        yield child, 0 if same or isinstance(child, exp.Paren | exp.If) else 1
