"""Message filtering: tag subscriptions and SQL92 property expressions (upstream ``filter/``)."""

from ferrymq.filter.expression import FilterEvaluationError, evaluate, matches
from ferrymq.filter.message_filter import (
    ExpressionType,
    FilterNotSupportedError,
    MessageFilter,
    SqlMessageFilter,
    TagMessageFilter,
    build_message_filter,
    check_subscription,
)
from ferrymq.filter.sql92 import FilterCompileError, compile_sql92
from ferrymq.filter.tag_filter import TagSubscription, parse_tag_expression, tags_match

__all__ = [
    "ExpressionType",
    "FilterCompileError",
    "FilterEvaluationError",
    "FilterNotSupportedError",
    "MessageFilter",
    "SqlMessageFilter",
    "TagMessageFilter",
    "TagSubscription",
    "build_message_filter",
    "check_subscription",
    "compile_sql92",
    "evaluate",
    "matches",
    "parse_tag_expression",
    "tags_match",
]
