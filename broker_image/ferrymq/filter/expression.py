"""The compiled form of a SQL92 filter: immutable expression nodes and their evaluation.

Mirrors upstream ``org.apache.rocketmq.filter.expression`` (itself taken from ActiveMQ's JMS
selector): values are SQL three-valued, ``None`` meaning unknown. A message matches only when the
whole expression evaluates to ``True``.

Typing follows upstream ``ComparisonExpression``: message properties are strings; a literal is an
int (Java long), a float (Java double), a string or a boolean. When a comparison mixes a string
with a number, the string is converted to the number's type (upstream converts string expressions);
a string that does not convert raises :class:`FilterEvaluationError`, which makes the message not
match (upstream catches the exception and skips the message). ``<``, ``<=``, ``>`` and ``>=`` between
two strings compare them as doubles, and are an error when either is not numeric.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Value = bool | int | float | str | None

__all__ = [
    "And",
    "Compare",
    "Constant",
    "Expression",
    "FilterEvaluationError",
    "InList",
    "IsNull",
    "Not",
    "Or",
    "Property",
    "StringMatch",
    "Value",
    "evaluate",
    "matches",
    "matches_with",
    "to_function",
]


class FilterEvaluationError(ValueError):
    """A comparison that cannot be made for this message (e.g. ``a > 5`` with ``a='x'``)."""


@dataclass(frozen=True, slots=True)
class Constant:
    value: Value


@dataclass(frozen=True, slots=True)
class Property:
    name: str


@dataclass(frozen=True, slots=True)
class Compare:
    op: str  # one of = <> > >= < <=
    left: Expression
    right: Expression


@dataclass(frozen=True, slots=True)
class InList:
    prop: Property
    values: frozenset[str]
    negated: bool


@dataclass(frozen=True, slots=True)
class IsNull:
    operand: Expression
    negated: bool


@dataclass(frozen=True, slots=True)
class StringMatch:
    op: str  # contains | startswith | endswith
    left: Expression
    right: Expression
    negated: bool


@dataclass(frozen=True, slots=True)
class And:
    left: Expression
    right: Expression


@dataclass(frozen=True, slots=True)
class Or:
    left: Expression
    right: Expression


@dataclass(frozen=True, slots=True)
class Not:
    operand: Expression


Expression = Constant | Property | Compare | InList | IsNull | StringMatch | And | Or | Not

# Java Long.valueOf accepts an optional sign and decimal digits only.
_JAVA_LONG = re.compile(r"[+-]?\d+")
# Java Double.valueOf: optional blanks, sign, NaN/Infinity or a decimal with exponent and d/f suffix.
_JAVA_DOUBLE = re.compile(r"\s*[+-]?(NaN|Infinity|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[fFdD]?)\s*")


def _to_long(text: str) -> int:
    if not _JAVA_LONG.fullmatch(text):
        raise FilterEvaluationError(f"{text!r} is not an integer")
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise FilterEvaluationError(f"{text!r} is out of the long range")
    return value


def _to_double(text: str) -> float:
    if not _JAVA_DOUBLE.fullmatch(text):
        raise FilterEvaluationError(f"{text!r} is not a number")
    cleaned = text.strip().rstrip("fFdD") if "Infinity" not in text else text.strip()
    return float(cleaned)


def _to_bool(text: str) -> bool:
    # Boolean.valueOf: "true" in any case is true, anything else false
    return text.lower() == "true"


def _kind(value: Value) -> type:
    # bool is a subclass of int in Python: keep them apart as Java does
    return bool if isinstance(value, bool) else type(value)


def _compare(lv: Value, rv: Value) -> int:
    """-1/0/1 for two non-null values, converting up as upstream ``__compare`` does."""
    lk, rk = _kind(lv), _kind(rv)
    if lk is not rk:
        if lk is bool:
            if rk is not str:
                return -1
            rv = _to_bool(rv)  # type: ignore[arg-type]
        elif lk is int:
            if rk is float:
                lv = float(lv)  # type: ignore[arg-type]
            elif rk is str:
                rv = _to_long(rv)  # type: ignore[arg-type]
            else:
                return -1
        elif lk is float:
            if rk is int:
                rv = float(rv)  # type: ignore[arg-type]
            elif rk is str:
                rv = _to_double(rv)  # type: ignore[arg-type]
            else:
                return -1
        elif lk is str:
            if rk is bool:
                lv = _to_bool(lv)  # type: ignore[arg-type]
            elif rk is int:
                lv = _to_long(lv)  # type: ignore[arg-type]
            elif rk is float:
                lv = _to_double(lv)  # type: ignore[arg-type]
            else:
                return -1
        else:
            return -1
    if lv == rv:
        return 0
    return -1 if lv < rv else 1  # type: ignore[operator]


def _eval_compare(node: Compare, props: Mapping[str, str]) -> bool | None:
    lv = evaluate(node.left, props)
    rv = evaluate(node.right, props)
    if node.op in ("=", "<>"):
        # upstream doCreateEqual; <> is NOT(=)
        if (lv is None) != (rv is None):
            equal: bool | None = None if lv is None else False
        elif lv is None or (lv == rv and _kind(lv) is _kind(rv)):
            equal = True
        else:
            equal = _compare(lv, rv) == 0
        if node.op == "=" or equal is None:
            return equal
        return not equal
    if lv is None or rv is None:
        return None
    if isinstance(lv, str) and isinstance(rv, str):
        # ordering strings is illegal upstream; numeric strings are compared as doubles
        answer = _compare(_to_double(lv), _to_double(rv))
    else:
        answer = _compare(lv, rv)
    if node.op == ">":
        return answer > 0
    if node.op == ">=":
        return answer >= 0
    if node.op == "<":
        return answer < 0
    return answer <= 0


def _eval_string_match(node: StringMatch, props: Mapping[str, str]) -> bool | None:
    lv = evaluate(node.left, props)
    rv = evaluate(node.right, props)
    if not isinstance(lv, str) or not isinstance(rv, str):
        return None
    if node.op == "contains":
        result = rv in lv
    elif node.op == "startswith":
        result = lv.startswith(rv)
    else:
        result = lv.endswith(rv)
    return result != node.negated


def evaluate(node: Expression, props: Mapping[str, str]) -> Value:
    """The SQL value of ``node`` for a message with ``props``; None is SQL unknown."""
    if isinstance(node, Constant):
        return node.value
    if isinstance(node, Property):
        return props.get(node.name)
    if isinstance(node, Compare):
        return _eval_compare(node, props)
    if isinstance(node, And):
        lv = evaluate(node.left, props)
        if lv is None:
            return None
        if lv is not True:
            return False
        rv = evaluate(node.right, props)
        return None if rv is None else rv is True
    if isinstance(node, Or):
        lv = evaluate(node.left, props)
        if lv is True:
            return True
        rv = evaluate(node.right, props)
        return None if rv is None else rv is True
    if isinstance(node, Not):
        value = evaluate(node.operand, props)
        return None if value is None else value is not True
    if isinstance(node, InList):
        value = props.get(node.prop.name)
        if value is None:
            return None
        return (value in node.values) != node.negated
    if isinstance(node, IsNull):
        return (evaluate(node.operand, props) is None) != node.negated
    return _eval_string_match(node, props)


def matches(node: Expression, props: Mapping[str, str]) -> bool:
    """True only when ``node`` is true for ``props``; unknown and errors do not match."""
    try:
        return evaluate(node, props) is True
    except FilterEvaluationError:
        return False


Predicate = Callable[[Mapping[str, str]], Value]


def to_function(node: Expression) -> Predicate:
    """``node`` as nested closures: same values as :func:`evaluate`, without the per-node type
    dispatch on every message (the broker evaluates one subscription against many messages)."""
    if isinstance(node, Constant):
        value = node.value
        return lambda props: value
    if isinstance(node, Property):
        name = node.name
        return lambda props: props.get(name)
    if isinstance(node, Compare):
        fast = _property_vs_literal(node)
        if fast is not None:
            return fast
        compare = node

        def compare_(props: Mapping[str, str]) -> Value:
            return _eval_compare(compare, props)

        return compare_
    if isinstance(node, And):
        left, right = to_function(node.left), to_function(node.right)

        def and_(props: Mapping[str, str]) -> Value:
            lv = left(props)
            if lv is None:
                return None
            if lv is not True:
                return False
            rv = right(props)
            return None if rv is None else rv is True

        return and_
    if isinstance(node, Or):
        left, right = to_function(node.left), to_function(node.right)

        def or_(props: Mapping[str, str]) -> Value:
            if left(props) is True:
                return True
            rv = right(props)
            return None if rv is None else rv is True

        return or_
    if isinstance(node, Not):
        operand = to_function(node.operand)

        def not_(props: Mapping[str, str]) -> Value:
            value = operand(props)
            return None if value is None else value is not True

        return not_
    if isinstance(node, InList):
        name, values, negated = node.prop.name, node.values, node.negated

        def in_(props: Mapping[str, str]) -> Value:
            value = props.get(name)
            if value is None:
                return None
            return (value in values) != negated

        return in_
    if isinstance(node, IsNull):
        operand, negated = to_function(node.operand), node.negated
        return lambda props: (operand(props) is None) != negated
    match = node

    def match_(props: Mapping[str, str]) -> Value:
        return _eval_string_match(match, props)

    return match_


_ORDERING: dict[str, Callable[[Any, Any], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


def _property_vs_literal(node: Compare) -> Predicate | None:
    """The common shapes ``prop <op> number`` and ``prop = 'text'`` without generic dispatch.

    Same results as :func:`_eval_compare`: the property string converts to the literal's type
    (a failed conversion raises), a missing property is unknown.
    """
    if not isinstance(node.left, Property) or not isinstance(node.right, Constant):
        return None
    name, literal, op = node.left.name, node.right.value, node.op
    kind = _kind(literal)
    if kind is str and op in ("=", "<>"):
        text = literal
        equal = op == "="

        def string_eq(props: Mapping[str, str]) -> Value:
            value = props.get(name)
            return None if value is None else (value == text) == equal

        return string_eq
    if kind not in (int, float):
        return None
    convert = _to_long if kind is int else _to_double
    number = literal
    if op in _ORDERING:
        ordering = _ORDERING[op]

        def ordered(props: Mapping[str, str]) -> Value:
            value = props.get(name)
            return None if value is None else ordering(convert(value), number)

        return ordered
    equal = op == "="

    def numeric_eq(props: Mapping[str, str]) -> Value:
        value = props.get(name)
        return None if value is None else (convert(value) == number) == equal

    return numeric_eq


def matches_with(predicate: Predicate, props: Mapping[str, str]) -> bool:
    """True only when the compiled predicate is true for ``props`` (unknown/errors: no match)."""
    try:
        return predicate(props) is True
    except FilterEvaluationError:
        return False
