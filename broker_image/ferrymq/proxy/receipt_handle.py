"""Receipt handles: the text a 5.x consumer acks with (upstream ``common/consumer/ReceiptHandle``,
``ExtraInfoUtil``, and ``MQClientAPIImpl.processPopResponse`` for building them). Pure.

A handle is space-separated: ``startOffset popTime invisibleTime reviveQid topicType brokerName
queueId queueOffset [commitLogOffset]``. The broker's POP response does not carry one per message:
it carries, per popped queue, ``startOffsetInfo`` (``type queueId startOffset``), ``msgOffsetInfo``
(``type queueId off1,off2,...``) and, for FIFO, ``orderCountInfo`` (``type qo<queueId>%<offset>
count``), ``;``-joined, from which the handle of each message is rebuilt; a message the broker
re-encoded (read from a retry topic) carries its ``POP_CK`` property already. The proxy appends the
message's commitLogOffset (needed to forward it to the DLQ). ``topicType`` is ``0`` for the topic,
``1``/``2`` for the V1/V2 POP retry topic ``%RETRY%<group>_<topic>`` / ``%RETRY%<group>+<topic>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ferrymq.broker.pop.extra_info import (
    POP_ORDER_REVIVE_QUEUE,
    SEPARATOR,
    ExtraInfoError,
    build_extra_info,
    real_topic,
    retry_type,
)
from ferrymq.message import MessageExt

PROPERTY_POP_CK = "POP_CK"
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"


class ReceiptHandleError(ValueError):
    """A handle that does not parse (upstream: IllegalArgumentException from decode)."""


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    start_offset: int
    retrieve_time: int  # the pop time, ms
    invisible_time: int  # ms
    revive_queue_id: int
    topic_type: str
    broker_name: str
    queue_id: int
    offset: int  # the message's queue offset
    commit_log_offset: int
    text: str  # as the client sent it (the broker is given this very text)

    @property
    def next_visible_time(self) -> int:
        return self.retrieve_time + self.invisible_time

    def is_expired(self, now_ms: int) -> bool:
        return self.next_visible_time <= now_ms

    @property
    def is_order(self) -> bool:
        return self.revive_queue_id == POP_ORDER_REVIVE_QUEUE

    def real_topic(self, topic: str, group: str) -> str:
        """The topic the message was popped from (a retry topic for a redelivered one)."""
        try:
            return real_topic(topic, group, self.topic_type)
        except ExtraInfoError:
            return topic  # upstream's ReceiptHandle.getRealTopic: an unknown type is the topic


def decode(text: str) -> ReceiptHandle:
    """Upstream ReceiptHandle.decode: at least 8 fields; raises ReceiptHandleError."""
    parts = text.split(SEPARATOR)
    if len(parts) < 8:
        raise ReceiptHandleError(f"Parse failed, dataList size {len(parts)}")
    try:
        return ReceiptHandle(
            start_offset=int(parts[0]),
            retrieve_time=int(parts[1]),
            invisible_time=int(parts[2]),
            revive_queue_id=int(parts[3]),
            topic_type=parts[4],
            broker_name=parts[5],
            queue_id=int(parts[6]),
            offset=int(parts[7]),
            commit_log_offset=int(parts[8]) if len(parts) > 8 else -1,
            text=text,
        )
    except ValueError as exc:
        raise ReceiptHandleError(f"Parse failed, {exc}") from None


def with_commit_log_offset(handle: str, commit_log_offset: int) -> str:
    """The proxy's handle: the broker's 8 fields plus the commitLogOffset (ConsumerProcessor)."""
    return f"{handle}{SEPARATOR}{commit_log_offset}"


def _parse_info(text: str | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    if not text:
        return out
    for item in text.split(";"):
        fields = item.split(SEPARATOR)
        if len(fields) != 3:
            raise ReceiptHandleError(f"parse {what} error, {text}")
        out[f"{fields[0]}@{fields[1]}"] = fields[2]
    return out


@dataclass(frozen=True, slots=True)
class PopInfo:
    """The POP response header fields handles are built from."""

    pop_time: int
    invisible_time: int
    revive_qid: int
    start_offset_info: str | None
    msg_offset_info: str | None
    order_count_info: str | None


def assign_handles(
    messages: Sequence[MessageExt], info: PopInfo, broker_name: str, topic: str, order: bool
) -> None:
    """Set each popped message's ``POP_CK`` (with the commitLogOffset appended), its FIFO
    delivery count and ``1ST_POP_TIME``, as upstream processPopResponse + createHandle do; the
    messages' topic becomes the requested one. Raises ReceiptHandleError on headers that do not
    describe the messages."""
    start = _parse_info(info.start_offset_info, "startOffsetInfo")
    msg_offsets = {
        k: [int(x) for x in v.split(",")]
        for k, v in _parse_info(info.msg_offset_info, "msgOffsetInfo").items()
    }
    counts = _parse_info(info.order_count_info, "orderCountInfo")
    # the queue offsets of each (type, queue) in the order the messages came
    seen: dict[str, list[int]] = {}
    for msg in messages:
        ck = msg.properties.get(PROPERTY_POP_CK)
        key = f"{decode(ck).topic_type if ck else retry_type(msg.topic)}@{msg.queue_id}"
        seen.setdefault(key, []).append(msg.queue_offset)
    for msg in messages:
        props = msg.properties
        ck = props.get(PROPERTY_POP_CK)
        if ck is None:
            t = retry_type(msg.topic)
            key = f"{t}@{msg.queue_id}"
            if key not in start:
                raise ReceiptHandleError(f"no startOffsetInfo for {key}")
            offsets = msg_offsets.get(key)
            index = seen[key].index(msg.queue_offset)
            queue_offset = (
                offsets[index] if offsets is not None and index < len(offsets) else msg.queue_offset
            )
            ck = build_extra_info(
                int(start[key]),
                info.pop_time,
                info.invisible_time,
                info.revive_qid,
                msg.topic,
                broker_name,
                msg.queue_id,
                queue_offset,
            )
            if order and counts:
                count = counts.get(f"{t}@qo{msg.queue_id}%{msg.queue_offset}") or counts.get(key)
                if count is not None and int(count) > 0:
                    msg.reconsume_times = int(count)
        props[PROPERTY_POP_CK] = with_commit_log_offset(ck, msg.commit_log_offset)
        props.setdefault(PROPERTY_FIRST_POP_TIME, str(info.pop_time))
        msg.topic = topic
