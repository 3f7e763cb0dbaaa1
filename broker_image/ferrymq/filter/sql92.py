"""SQL92 property filter compiler: expression text -> :mod:`ferrymq.filter.expression` nodes.

The grammar (``sql92.lark``) is the subset upstream RocketMQ accepts (``filter/SelectorParser.jj``):
comparisons ``= <> != > >= < <=``, ``[NOT] BETWEEN a AND b``, ``[NOT] IN ('x', ...)``,
``IS [NOT] NULL``, ``[NOT] CONTAINS|STARTSWITH|ENDSWITH``, ``AND``, ``OR``, ``NOT`` and parentheses;
literals are integers (decimal or hex, optional ``L``), floats, ``'strings'`` (``''`` escapes a quote),
``TRUE``, ``FALSE`` and ``NULL``.

Compile-time checks follow upstream ``ComparisonExpression``: ordering operators take numbers only
(a string or boolean literal is rejected), ``= NULL`` is rejected (use ``IS NULL``), ``BETWEEN``
bounds must not be NULL and the lower one must not exceed the upper one, ``IN`` needs a property on
its left, and the whole expression must be boolean. Every failure is a :class:`FilterCompileError`
whose message says what and where, so the broker can answer SUBSCRIPTION_PARSE_FAILED with it.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import (
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
    VisitError,
)

from ferrymq.filter.expression import (
    And,
    Compare,
    Constant,
    Expression,
    InList,
    IsNull,
    Not,
    Or,
    Property,
    StringMatch,
    Value,
)

__all__ = ["FilterCompileError", "compile_sql92"]

MAX_EXPRESSION_LENGTH = 65536
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


class FilterCompileError(ValueError):
    """An expression that is not a valid SQL92 filter; the message explains why."""


class _Reject(Exception):
    """Raised inside the transformer; turned into FilterCompileError by compile_sql92."""


@lru_cache(maxsize=1)
def _parser() -> Lark:
    grammar = resources.files("ferrymq.filter").joinpath("sql92.lark").read_text("utf-8")
    return Lark(grammar, parser="lalr", maybe_placeholders=False)


def _is_boolean(node: Expression) -> bool:
    if isinstance(node, Constant):
        return isinstance(node.value, bool)
    return not isinstance(node, Property)


def _describe(node: Expression) -> str:
    if isinstance(node, Constant):
        if node.value is None:
            return "NULL"
        if isinstance(node.value, bool):
            return "TRUE" if node.value else "FALSE"
        if isinstance(node.value, str):
            return "'" + node.value.replace("'", "''") + "'"
        return str(node.value)
    if isinstance(node, Property):
        return node.name
    return "a boolean expression"


def _check_ordering_operand(node: Expression, op: str) -> None:
    # upstream checkLessThanOperand: only numbers (or properties) can be ordered
    if isinstance(node, Constant):
        if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return
        raise _Reject(f"value {_describe(node)} cannot be compared with '{op}': numbers only")
    if not isinstance(node, Property):
        raise _Reject(f"{_describe(node)} cannot be compared with '{op}'")


def _check_equal_operands(left: Expression, right: Expression, op: str) -> None:
    for node in (left, right):
        if isinstance(node, Constant) and node.value is None:
            raise _Reject(f"NULL cannot be compared with '{op}'; use IS NULL or IS NOT NULL")
    if (
        isinstance(left, Constant)
        and isinstance(right, Constant)
        and isinstance(left.value, bool) != isinstance(right.value, bool)
    ):
        raise _Reject(f"{_describe(left)} cannot be compared with {_describe(right)}")


def _unquote(token: Token) -> str:
    return str(token)[1:-1].replace("''", "'")


def _parse_number(sign: str, token: Token) -> Value:
    text = str(token)
    negative = sign == "-"
    if token.type == "FLOAT":
        value = float(text.rstrip("fFdD"))
        return -value if negative else value
    if token.type == "HEX_INT":
        number = int(text.rstrip("lL")[2:], 16)
    else:
        digits = text.rstrip("lL")
        # upstream reads a leading 0 as octal (Java/JMS literal rules)
        number = int(digits, 8) if len(digits) > 1 and digits.startswith("0") else int(digits)
    number = -number if negative else number
    if not _LONG_MIN <= number <= _LONG_MAX:
        raise _Reject(f"number {sign}{text} is out of the long range")
    return number


@v_args(inline=True)
class _ToExpression(Transformer[Token, Expression]):
    # --- values -------------------------------------------------------------------------
    def string(self, token: Token) -> Expression:
        return Constant(_unquote(token))

    def signed_number(self, *parts: Token) -> Expression:
        if len(parts) == 2:
            return Constant(_parse_number(str(parts[0]), parts[1]))
        return Constant(_parse_number("", parts[0]))

    def true(self, _t: Token) -> Expression:
        return Constant(True)

    def false(self, _t: Token) -> Expression:
        return Constant(False)

    def null(self, _t: Token) -> Expression:
        return Constant(None)

    def prop(self, token: Token) -> Expression:
        return Property(str(token))

    def string_list(self, *tokens: Token) -> frozenset[str]:
        return frozenset(_unquote(t) for t in tokens)

    # --- comparisons --------------------------------------------------------------------
    def eq(self, left: Expression, right: Expression) -> Expression:
        _check_equal_operands(left, right, "=")
        return Compare("=", left, right)

    def ne(self, left: Expression, _op: Token, right: Expression) -> Expression:
        _check_equal_operands(left, right, "<>")
        return Compare("<>", left, right)

    def _ordered(self, op: str, left: Expression, right: Expression) -> Expression:
        _check_ordering_operand(left, op)
        _check_ordering_operand(right, op)
        return Compare(op, left, right)

    def gt(self, left: Expression, right: Expression) -> Expression:
        return self._ordered(">", left, right)

    def ge(self, left: Expression, right: Expression) -> Expression:
        return self._ordered(">=", left, right)

    def lt(self, left: Expression, right: Expression) -> Expression:
        return self._ordered("<", left, right)

    def le(self, left: Expression, right: Expression) -> Expression:
        return self._ordered("<=", left, right)

    def between(
        self, value: Expression, _b: Token, low: Expression, _a: Token, high: Expression
    ) -> Expression:
        for bound in (low, high):
            if isinstance(bound, Constant) and bound.value is None:
                raise _Reject("BETWEEN bounds cannot be NULL")
        if isinstance(low, Constant) and isinstance(high, Constant):
            _check_ordering_operand(low, "BETWEEN")
            _check_ordering_operand(high, "BETWEEN")
            if high.value < low.value:  # type: ignore[operator]
                raise _Reject(
                    f"BETWEEN lower bound {_describe(low)} is greater than upper bound "
                    f"{_describe(high)}"
                )
        return And(self._ordered(">=", value, low), self._ordered("<=", value, high))

    def not_between(
        self, value: Expression, _n: Token, _b: Token, low: Expression, _a: Token, high: Expression
    ) -> Expression:
        return Or(self._ordered("<", value, low), self._ordered(">", value, high))

    def _in(self, value: Expression, values: frozenset[str], negated: bool) -> Expression:
        if not isinstance(value, Property):
            raise _Reject(f"IN needs a property on its left, got {_describe(value)}")
        return InList(value, values, negated)

    def in_(self, value: Expression, _i: Token, values: frozenset[str]) -> Expression:
        return self._in(value, values, False)

    def not_in(self, value: Expression, _n: Token, _i: Token, values: frozenset[str]) -> Expression:
        return self._in(value, values, True)

    def is_null(self, value: Expression, _i: Token, _n: Token) -> Expression:
        return IsNull(value, False)

    def is_not_null(self, value: Expression, _i: Token, _n: Token, _nl: Token) -> Expression:
        return IsNull(value, True)

    def _match(self, op: str, left: Expression, right: Expression, negated: bool) -> Expression:
        if not isinstance(right, Constant) or not isinstance(right.value, str):
            raise _Reject(f"{op.upper()} needs a string literal on its right")
        if not isinstance(left, Property):
            raise _Reject(f"{op.upper()} needs a property on its left")
        return StringMatch(op, left, right, negated)

    def contains(self, left: Expression, _o: Token, right: Expression) -> Expression:
        return self._match("contains", left, right, False)

    def not_contains(self, left: Expression, _n: Token, _o: Token, right: Expression) -> Expression:
        return self._match("contains", left, right, True)

    def startswith(self, left: Expression, _o: Token, right: Expression) -> Expression:
        return self._match("startswith", left, right, False)

    def not_startswith(
        self, left: Expression, _n: Token, _o: Token, right: Expression
    ) -> Expression:
        return self._match("startswith", left, right, True)

    def endswith(self, left: Expression, _o: Token, right: Expression) -> Expression:
        return self._match("endswith", left, right, False)

    def not_endswith(self, left: Expression, _n: Token, _o: Token, right: Expression) -> Expression:
        return self._match("endswith", left, right, True)

    # --- logic --------------------------------------------------------------------------
    def bare(self, value: Expression) -> Expression:
        if not _is_boolean(value):
            raise _Reject(f"{_describe(value)} is not a boolean condition")
        return value

    def _logic_operand(self, node: Expression, op: str) -> Expression:
        if not _is_boolean(node):
            raise _Reject(f"{_describe(node)} is not a boolean condition for {op}")
        return node

    def and_(self, left: Expression, _a: Token, right: Expression) -> Expression:
        return And(self._logic_operand(left, "AND"), self._logic_operand(right, "AND"))

    def or_(self, left: Expression, _o: Token, right: Expression) -> Expression:
        return Or(self._logic_operand(left, "OR"), self._logic_operand(right, "OR"))

    def not_(self, _n: Token, operand: Expression) -> Expression:
        return Not(self._logic_operand(operand, "NOT"))


def _syntax_message(text: str, exc: UnexpectedInput) -> str:
    column = getattr(exc, "column", None)
    where = f" at column {column}" if isinstance(column, int) and column > 0 else ""
    if isinstance(exc, UnexpectedEOF) or (
        isinstance(exc, UnexpectedToken) and exc.token.type == "$END"
    ):
        return f"unexpected end of expression {text!r}"
    if isinstance(exc, UnexpectedCharacters):
        pos = exc.pos_in_stream or 0
        return f"unexpected character {text[pos]!r}{where} in {text!r}"
    if isinstance(exc, UnexpectedToken):
        return f"unexpected {str(exc.token)!r}{where} in {text!r}"
    return f"syntax error{where} in {text!r}"


def compile_sql92(text: str) -> Expression:
    """Compile a SQL92 filter; raises :class:`FilterCompileError` with the reason.

    Not cached here: callers that see the same subscription repeatedly (the pull processor) keep
    the compiled filter themselves; the tree is immutable, so sharing it is safe.
    """
    if text is None or not text.strip():
        raise FilterCompileError("SQL92 expression is empty")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise FilterCompileError(
            f"SQL92 expression is {len(text)} characters; at most {MAX_EXPRESSION_LENGTH}"
        )
    try:
        tree: Tree[Token] = _parser().parse(text)
    except UnexpectedInput as exc:
        raise FilterCompileError(_syntax_message(text, exc)) from None
    try:
        result = _ToExpression().transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, _Reject):
            raise FilterCompileError(f"{exc.orig_exc} in {text!r}") from None
        raise
    if not _is_boolean(result):
        raise FilterCompileError(f"expression {text!r} does not result in a boolean value")
    return result
