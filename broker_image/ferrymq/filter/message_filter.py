"""Message filters handed to ``MessageStore.get_message`` (upstream ``ExpressionMessageFilter``).

A filter answers twice: first from the ConsumeQueue entry alone (the tags hash), then, for what
passed, from the CommitLog record's properties. Tag subscriptions decide in the first step; SQL92
subscriptions in the second (the upstream Bloom-filter pre-check is an optimisation left out).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ferrymq.filter.expression import Expression, Predicate, matches_with, to_function
from ferrymq.filter.sql92 import FilterCompileError, compile_sql92
from ferrymq.filter.tag_filter import TagSubscription, parse_tag_expression

__all__ = [
    "ExpressionType",
    "FilterNotSupportedError",
    "MessageFilter",
    "SqlMessageFilter",
    "TagMessageFilter",
    "build_message_filter",
    "check_subscription",
]

Buffer = bytes | bytearray | memoryview


class ExpressionType:
    """Upstream ``ExpressionType`` names as they travel in PULL_MESSAGE and heartbeats."""

    TAG = "TAG"
    SQL92 = "SQL92"


class FilterNotSupportedError(FilterCompileError):
    """A SQL92 subscription on a broker with ``enablePropertyFilter=false``."""


class MessageFilter(Protocol):
    def is_matched_by_consume_queue(self, tags_code: int | None) -> bool: ...

    def is_matched_by_commit_log(
        self, record: Buffer | None, properties: Mapping[str, str] | None
    ) -> bool: ...


def _record_properties(record: Buffer | None) -> Mapping[str, str]:
    if record is None:
        return {}
    from ferrymq.store.record import check_record

    checked = check_record(record, 0, len(record), check_crc=False)
    return checked.record.properties if checked.record is not None else {}


@dataclass(frozen=True, slots=True)
class TagMessageFilter:
    subscription: TagSubscription

    def is_matched_by_consume_queue(self, tags_code: int | None) -> bool:
        if self.subscription.is_all or tags_code is None:
            return True
        return tags_code in self.subscription.codes

    def is_matched_by_commit_log(
        self, record: Buffer | None, properties: Mapping[str, str] | None
    ) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class SqlMessageFilter:
    expression_text: str
    expression: Expression
    predicate: Predicate = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "predicate", to_function(self.expression))

    def is_matched_by_consume_queue(self, tags_code: int | None) -> bool:
        return True

    def is_matched_by_commit_log(
        self, record: Buffer | None, properties: Mapping[str, str] | None
    ) -> bool:
        props = properties if properties is not None else _record_properties(record)
        return matches_with(self.predicate, props)


def _normalise_type(expression_type: str | None) -> str:
    if expression_type is None or not expression_type.strip():
        return ExpressionType.TAG
    upper = expression_type.strip().upper()
    if upper not in (ExpressionType.TAG, ExpressionType.SQL92):
        raise FilterCompileError(
            f"expression type {expression_type!r} is not supported; use TAG or SQL92"
        )
    return upper


def build_message_filter(
    expression_type: str | None, expression: str | None, *, enable_property_filter: bool
) -> TagMessageFilter | SqlMessageFilter:
    """The filter for one subscription; raises FilterCompileError (or FilterNotSupportedError).

    Processors answer SUBSCRIPTION_PARSE_FAILED (or SYSTEM_ERROR when SQL92 is disabled, as upstream)
    with ``str(exc)`` as the remark.
    """
    kind = _normalise_type(expression_type)
    if kind == ExpressionType.TAG:
        return TagMessageFilter(parse_tag_expression(expression))
    if not enable_property_filter:
        raise FilterNotSupportedError(
            "the broker does not support SQL92 filtering: set enablePropertyFilter=true"
        )
    text = expression or ""
    return SqlMessageFilter(text, compile_sql92(text))


def check_subscription(
    expression_type: str | None, expression: str | None, *, enable_property_filter: bool
) -> str | None:
    """None when the subscription is usable, else the reason (for CHECK_CLIENT_CONFIG/heartbeats)."""
    try:
        build_message_filter(
            expression_type, expression, enable_property_filter=enable_property_filter
        )
    except FilterCompileError as exc:
        return str(exc)
    return None
