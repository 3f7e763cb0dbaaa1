"""Topic message types (upstream ``TopicMessageType``, ``DefaultTopicMessageTypeValidator``). Pure.

A topic's type is its ``message.type`` attribute (NORMAL when unset; UNSPECIFIED when the topic is
unknown); a message's type follows from its properties. The proxy refuses a message whose type is
not the topic's (MIXED takes any) with MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, and advertises the
types a topic accepts in each route entry so that clients check before sending.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from ferrymq.message import MessageConst
from ferrymq.proxy.errors import Code, ProxyError

MESSAGE_TYPE_ATTRIBUTE = "message.type"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"


class TopicMessageType(enum.StrEnum):
    UNSPECIFIED = "UNSPECIFIED"
    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    MIXED = "MIXED"


def of_attributes(attributes: Mapping[str, str] | None) -> TopicMessageType:
    """The type of a topic with these attributes (keys with or without upstream's ``+``)."""
    attrs = attributes or {}
    raw = attrs.get(MESSAGE_TYPE_ATTRIBUTE) or attrs.get("+" + MESSAGE_TYPE_ATTRIBUTE)
    if not raw:
        return TopicMessageType.NORMAL
    try:
        return TopicMessageType(raw.upper())
    except ValueError:
        return TopicMessageType.NORMAL


def of_properties(
    properties: Mapping[str, str], *, timer_delay_ms: bool = True
) -> TopicMessageType:
    """Upstream TopicMessageType.parseFromMessageProperty; with ``timer_delay_ms`` False,
    GrpcConverter's variant for received messages (TIMER_DELAY_MS alone is not DELAY there)."""
    if properties.get(MessageConst.PROPERTY_TRANSACTION_PREPARED) == "true":
        return TopicMessageType.TRANSACTION
    if (
        MessageConst.PROPERTY_DELAY_TIME_LEVEL in properties
        or PROPERTY_TIMER_DELIVER_MS in properties
        or PROPERTY_TIMER_DELAY_SEC in properties
        or (timer_delay_ms and PROPERTY_TIMER_DELAY_MS in properties)
    ):
        return TopicMessageType.DELAY
    if MessageConst.PROPERTY_SHARDING_KEY in properties:
        return TopicMessageType.FIFO
    return TopicMessageType.NORMAL


def validate(expected: TopicMessageType, actual: TopicMessageType) -> None:
    """Raises MESSAGE_PROPERTY_CONFLICT_WITH_TYPE unless a topic of ``expected`` takes ``actual``."""
    if expected is TopicMessageType.MIXED or expected is actual:
        return
    raise ProxyError(
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        f"TopicMessageType validate failed, the expected type is {expected.value}, "
        f"but actual type is {actual.value}",
    )


def accepted(topic_type: TopicMessageType) -> list[TopicMessageType]:
    """What a route entry advertises (RouteActivity.parseTopicMessageType); UNSPECIFIED alone
    for a type it does not know."""
    if topic_type is TopicMessageType.MIXED:
        return [
            TopicMessageType.NORMAL,
            TopicMessageType.FIFO,
            TopicMessageType.DELAY,
            TopicMessageType.TRANSACTION,
        ]
    return [topic_type]
