"""SQL92 and tag filters as pure functions (the cluster test is test_filter_cluster.py)."""

from __future__ import annotations

import contextlib
import re

import pytest
from ferrymq.filter import (
    FilterCompileError,
    FilterNotSupportedError,
    SqlMessageFilter,
    TagMessageFilter,
    build_message_filter,
    check_subscription,
    compile_sql92,
    matches,
    parse_tag_expression,
    tags_match,
)
from ferrymq.filter.expression import (
    And,
    Compare,
    Constant,
    FilterEvaluationError,
    InList,
    IsNull,
    Not,
    Or,
    Property,
    evaluate,
    to_function,
)
from ferrymq.message import java_string_hash
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("expression", "props", "expected"),
    [
        ("a > 5", {"a": "6"}, True),
        ("a > 5", {"a": "5"}, False),
        ("a >= 5", {"a": "5"}, True),
        ("a < 5.5", {"a": "5.4"}, True),
        ("a <= -1", {"a": "-1"}, True),
        ("a > 5", {}, False),  # unknown is not a match
        ("a > 5", {"a": "six"}, False),  # cannot convert: not a match (upstream)
        ("a > 5", {"a": "6.5"}, False),  # Long.valueOf("6.5") fails upstream too
        ("a > 5.0", {"a": "6.5"}, True),
        ("a = 5", {"a": "5"}, True),
        ("a = 5", {"a": "05"}, True),
        ("a = 'x'", {"a": "x"}, True),
        ("a = 'x'", {"a": "X"}, False),
        ("a <> 'x'", {"a": "y"}, True),
        ("a != 'x'", {"a": "x"}, False),
        ("a <> 'x'", {}, False),
        ("a = 'it''s'", {"a": "it's"}, True),
        ("a BETWEEN 1 AND 3", {"a": "1"}, True),
        ("a between 1 and 3", {"a": "3"}, True),
        ("a BETWEEN 1 AND 3", {"a": "4"}, False),
        ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
        ("a NOT BETWEEN 1 AND 3", {"a": "2"}, False),
        ("a IN ('x', 'y')", {"a": "y"}, True),
        ("a IN ('x', 'y')", {"a": "z"}, False),
        ("a NOT IN ('x', 'y')", {"a": "z"}, True),
        ("a NOT IN ('x', 'y')", {}, False),
        ("a IS NULL", {}, True),
        ("a IS NULL", {"a": ""}, False),
        ("a IS NOT NULL", {"a": "1"}, True),
        ("a = 1 AND b = 2", {"a": "1", "b": "2"}, True),
        ("a = 1 AND b = 2", {"a": "1", "b": "3"}, False),
        ("a = 1 OR b = 2", {"b": "2"}, True),
        ("NOT a = 1", {"a": "2"}, True),
        ("NOT (a = 1 OR b = 2)", {"a": "2", "b": "3"}, True),
        ("a = 1 OR b = 2 AND c = 3", {"a": "1"}, True),  # AND binds tighter
        ("(a = 1 OR b = 2) AND c = 3", {"a": "1"}, False),
        ("TAGS = 'TagA' AND region IN ('eu')", {"TAGS": "TagA", "region": "eu"}, True),
        ("flag = TRUE", {"flag": "true"}, True),
        ("flag = TRUE", {"flag": "no"}, False),
        ("TRUE", {}, True),
        ("FALSE OR a = 1", {"a": "1"}, True),
        ("a > 0x10", {"a": "17"}, True),
        ("name CONTAINS 'oo'", {"name": "foo"}, True),
        ("name STARTSWITH 'fo' AND name NOT ENDSWITH 'x'", {"name": "foo"}, True),
    ],
)
def test_sql92_evaluation(expression: str, props: dict[str, str], expected: bool) -> None:
    assert matches(compile_sql92(expression), props) is expected


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("", "empty"),
        ("a >", "unexpected end"),
        ("a > 'x'", "numbers only"),
        ("a < TRUE", "numbers only"),
        ("a = NULL", "IS NULL"),
        ("a BETWEEN 3 AND 1", "greater than upper bound"),
        ("a BETWEEN NULL AND 1", "cannot be NULL"),
        ("'x' IN ('x')", "needs a property"),
        ("a", "not a boolean"),
        ("a AND b = 1", "not a boolean"),
        ("a ^ 1", "unexpected character '^'"),
        ("a = = 1", "unexpected"),
        ("a IN (1, 2)", "unexpected"),
        ("TRUE = 1", "cannot be compared"),
        ("a > 99999999999999999999", "long range"),
        ("(a = 1", "unexpected end"),
    ],
)
def test_sql92_compile_errors_name_the_reason(expression: str, reason: str) -> None:
    with pytest.raises(FilterCompileError, match=re.escape(reason)):
        compile_sql92(expression)


@settings(deadline=None)
@given(st.integers(-(2**40), 2**40), st.integers(-(2**40), 2**40))
def test_integer_comparisons_agree_with_arithmetic(value: int, literal: int) -> None:
    props = {"a": str(value)}
    assert matches(compile_sql92(f"a > {literal}"), props) is (value > literal)
    assert matches(compile_sql92(f"a <= {literal}"), props) is (value <= literal)
    assert matches(compile_sql92(f"a = {literal}"), props) is (value == literal)
    assert matches(compile_sql92(f"a <> {literal}"), props) is (value != literal)


@settings(deadline=None)
@given(st.integers(-1000, 1000), st.integers(-1000, 1000), st.integers(-1000, 1000))
def test_between_is_inclusive_range(value: int, low: int, high: int) -> None:
    low, high = min(low, high), max(low, high)
    expr = compile_sql92(f"a BETWEEN {low} AND {high}")
    assert matches(expr, {"a": str(value)}) is (low <= value <= high)
    negated = compile_sql92(f"a NOT BETWEEN {low} AND {high}")
    assert matches(negated, {"a": str(value)}) is not (low <= value <= high)


@settings(deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_string_literals_round_trip(text: str) -> None:
    quoted = "'" + text.replace("'", "''") + "'"
    assert matches(compile_sql92(f"a = {quoted}"), {"a": text})


@settings(deadline=None)
@given(st.text(max_size=60))
def test_arbitrary_text_never_crashes_the_compiler(text: str) -> None:
    with contextlib.suppress(FilterCompileError):
        compile_sql92(text)


def test_tag_expression_parsing_and_recheck() -> None:
    sub = parse_tag_expression(" TagA || TagB ||  ")
    assert sub.tags == {"TagA", "TagB"}
    assert sub.codes == {java_string_hash("TagA"), java_string_hash("TagB")}
    assert tags_match(sub, "TagA") and not tags_match(sub, "TagC") and not tags_match(sub, None)
    for everything in (None, "", "*", "  *  "):
        assert parse_tag_expression(everything).is_all
        assert tags_match(parse_tag_expression(everything), None)


def test_message_filters_implement_the_store_protocol() -> None:
    tag = build_message_filter("TAG", "TagA", enable_property_filter=False)
    assert isinstance(tag, TagMessageFilter)
    assert tag.is_matched_by_consume_queue(java_string_hash("TagA"))
    assert not tag.is_matched_by_consume_queue(java_string_hash("TagB"))
    assert tag.is_matched_by_commit_log(None, {})
    sql = build_message_filter("sql92", "a > 1", enable_property_filter=True)
    assert isinstance(sql, SqlMessageFilter)
    assert sql.is_matched_by_consume_queue(123)
    assert sql.is_matched_by_commit_log(None, {"a": "2"})
    assert not sql.is_matched_by_commit_log(None, {"a": "1"})


def test_sql92_disabled_and_bad_types_are_rejected_with_reasons() -> None:
    with pytest.raises(FilterNotSupportedError, match="enablePropertyFilter"):
        build_message_filter("SQL92", "a > 1", enable_property_filter=False)
    assert "TAG or SQL92" in (check_subscription("XPATH", "x", enable_property_filter=True) or "")
    assert check_subscription("SQL92", "a >", enable_property_filter=True)
    assert check_subscription("SQL92", "a > 1", enable_property_filter=True) is None
    assert check_subscription(None, "TagA || TagB", enable_property_filter=False) is None


_leaf_value = st.one_of(
    st.integers(-5, 5), st.sampled_from(["1", "2", "x", "eu"]), st.booleans(), st.none()
)
_props = st.dictionaries(
    st.sampled_from(["a", "b", "c"]), st.sampled_from(["1", "2", "-3", "x", "eu", "true"])
)
_operand = st.one_of(
    st.builds(Constant, _leaf_value), st.builds(Property, st.sampled_from(["a", "b", "c"]))
)
_condition = st.recursive(
    st.one_of(
        st.builds(Compare, st.sampled_from(["=", "<>", ">", ">=", "<", "<="]), _operand, _operand),
        st.builds(
            InList,
            st.builds(Property, st.sampled_from(["a", "b"])),
            st.frozensets(st.sampled_from(["1", "x", "eu"])),
            st.booleans(),
        ),
        st.builds(IsNull, _operand, st.booleans()),
        st.builds(Constant, st.booleans()),
    ),
    lambda inner: st.one_of(
        st.builds(And, inner, inner), st.builds(Or, inner, inner), st.builds(Not, inner)
    ),
    max_leaves=8,
)


@settings(deadline=None, max_examples=300)
@given(_condition, _props)
def test_compiled_predicates_agree_with_the_reference_evaluator(
    node: object, props: dict[str, str]
) -> None:
    def outcome(fn: object) -> object:
        try:
            return fn()  # type: ignore[operator]
        except FilterEvaluationError:
            return "error"

    assert outcome(lambda: evaluate(node, props)) == outcome(lambda: to_function(node)(props))  # type: ignore[arg-type]
