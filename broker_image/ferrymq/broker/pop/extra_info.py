"""POP receipt handles and the offset-info strings of a POP response (upstream ``ExtraInfoUtil``,
``ReceiptHandle``, ``KeyBuilder``), pure.

A popped message's ``POP_CK`` property (the 5.x receipt handle) is the space-separated
``startOffset popTime invisibleTime reviveQid topicType brokerName queueId queueOffset``;
upstream's proxy appends the message's commitLogOffset as a 9th field. ``topicType`` is ``0`` for
the topic itself, ``1`` for the V1 retry topic ``%RETRY%<group>_<topic>`` and ``2`` for the V2
one ``%RETRY%<group>+<topic>``. ``reviveQid`` 999 marks an orderly (FIFO) pop.

A POP response does not carry the handles: Java's MQClientAPIImpl.processPopResponse rebuilds
them from the response header's ``startOffsetInfo`` (``type queueId startOffset`` per queue,
``;``-joined), ``msgOffsetInfo`` (``type queueId off1,off2,...``) and ``orderCountInfo``
(``type qo<queueId>%<offset> count``), so these strings must be exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ferrymq.topic_validator import RETRY_GROUP_TOPIC_PREFIX

__all__ = [
    "NORMAL_TOPIC",
    "POP_ORDER_REVIVE_QUEUE",
    "RETRY_TOPIC",
    "RETRY_TOPIC_V2",
    "ExtraInfo",
    "ExtraInfoError",
    "build_extra_info",
    "msg_offset_info",
    "order_count_info",
    "parse_extra_info",
    "pop_retry_topic",
    "real_topic",
    "retry_type",
    "start_offset_info",
]

NORMAL_TOPIC = "0"
RETRY_TOPIC = "1"
RETRY_TOPIC_V2 = "2"
POP_ORDER_REVIVE_QUEUE = 999  # upstream KeyBuilder.POP_ORDER_REVIVE_QUEUE
SEPARATOR = " "  # upstream MessageConst.KEY_SEPARATOR


class ExtraInfoError(ValueError):
    """A receipt handle that does not parse (upstream: IllegalArgumentException)."""


def pop_retry_topic(topic: str, group: str, *, v2: bool = False) -> str:
    """The POP retry topic of ``group`` on ``topic`` (upstream KeyBuilder.buildPopRetryTopic)."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}{'+' if v2 else '_'}{topic}"


def retry_type(topic: str) -> str:
    """``0``, ``1`` or ``2``: the topicType field of a handle for a message read from ``topic``."""
    if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return NORMAL_TOPIC
    return RETRY_TOPIC_V2 if "+" in topic else RETRY_TOPIC


def real_topic(topic: str, group: str, topic_type: str) -> str:
    """The topic a handle's message was read from (upstream ExtraInfoUtil.getRealTopic)."""
    if topic_type == NORMAL_TOPIC:
        return topic
    if topic_type == RETRY_TOPIC:
        return pop_retry_topic(topic, group)
    if topic_type == RETRY_TOPIC_V2:
        return pop_retry_topic(topic, group, v2=True)
    raise ExtraInfoError(f"getRetry fail, format is wrong: {topic_type!r}")


@dataclass(frozen=True, slots=True)
class ExtraInfo:
    start_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    topic_type: str
    broker_name: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int = -1

    @property
    def is_order(self) -> bool:
        return self.revive_qid == POP_ORDER_REVIVE_QUEUE

    @property
    def next_visible_time(self) -> int:
        return self.pop_time + self.invisible_time


def build_extra_info(
    start_offset: int,
    pop_time: int,
    invisible_time: int,
    revive_qid: int,
    topic: str,
    broker_name: str,
    queue_id: int,
    queue_offset: int | None = None,
) -> str:
    """Upstream ExtraInfoUtil.buildExtraInfo (7 fields, or 8 with the message's queue offset)."""
    fields = [
        str(start_offset),
        str(pop_time),
        str(invisible_time),
        str(revive_qid),
        retry_type(topic),
        broker_name,
        str(queue_id),
    ]
    if queue_offset is not None:
        fields.append(str(queue_offset))
    return SEPARATOR.join(fields)


def parse_extra_info(text: str | None) -> ExtraInfo:
    """A receipt handle with at least 7 fields (the 8th, queue offset, defaults to the start
    offset; a 9th is the proxy's commitLogOffset); raises ExtraInfoError naming the problem."""
    if text is None:
        raise ExtraInfoError("split extraInfo is null")
    parts = text.split(SEPARATOR)
    if len(parts) < 7:
        raise ExtraInfoError(f"Parse failed, dataList size {len(parts)}")
    try:
        start = int(parts[0])
        return ExtraInfo(
            start_offset=start,
            pop_time=int(parts[1]),
            invisible_time=int(parts[2]),
            revive_qid=int(parts[3]),
            topic_type=parts[4],
            broker_name=parts[5],
            queue_id=int(parts[6]),
            queue_offset=int(parts[7]) if len(parts) > 7 else start,
            commit_log_offset=int(parts[8]) if len(parts) > 8 else -1,
        )
    except ValueError as exc:
        raise ExtraInfoError(f"Parse failed, {exc}") from None


def _join(items: Sequence[str]) -> str:
    return ";".join(items)


def start_offset_info(entries: Sequence[tuple[str, int, int]]) -> str:
    """``(topic, queueId, startOffset)`` per popped queue -> the startOffsetInfo header."""
    return _join([f"{retry_type(t)} {q} {so}" for t, q, so in entries])


def msg_offset_info(entries: Sequence[tuple[str, int, Sequence[int]]]) -> str:
    """``(topic, queueId, [queue offsets])`` per popped queue -> the msgOffsetInfo header."""
    return _join([f"{retry_type(t)} {q} {','.join(map(str, offs))}" for t, q, offs in entries])


def order_count_info(entries: Sequence[tuple[str, int, int, int]]) -> str:
    """``(topic, queueId, queueOffset, count)`` per message -> the orderCountInfo header
    (upstream buildQueueOffsetOrderCountInfo: the client sets reconsumeTimes from it)."""
    return _join([f"{retry_type(t)} qo{q}%{o} {c}" for t, q, o, c in entries])
