"""POP consumption (upstream ``ConsumerProcessor`` + ``PopMessageResultFilterImpl``): receive,
ack, change the invisible time, and the proxy-driven DLQ move of a message whose attempts are
used up.

A popped message whose tag the subscription does not take is acked at once; one whose
``reconsumeTimes`` reached the group's max attempts is forwarded to the DLQ (and acked) instead of
being delivered, as upstream's proxy does: so a non-FIFO message lands in the DLQ on the pop after
its last failed attempt.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ferrymq.broker.pop.extra_info import build_extra_info
from ferrymq.message import MessageConst, MessageExt
from ferrymq.proxy import receipt_handle as rh
from ferrymq.proxy.backend import Backend, PopOutcome, PopStatus
from ferrymq.proxy.errors import Code, ProxyError
from ferrymq.proxy.processor.producer import ProducerProcessor
from ferrymq.remoting import headers

log = logging.getLogger(__name__)

MAX_MSG_NUMS_FOR_POP = 32
INIT_MODE_MAX = 1  # ConsumeInitMode.MAX: a new group starts at the end of each queue


@dataclass(frozen=True, slots=True)
class Filter:
    """A subscription expression: TAG (``*`` or ``a || b``) or SQL92, passed to the broker."""

    expression_type: str
    expression: str

    def tags(self) -> frozenset[str] | None:
        """The tag set of a TAG filter, None for every tag (``*``, empty) or for SQL92."""
        if self.expression_type != "TAG":
            return None
        text = self.expression.strip()
        if not text or text == "*":
            return None
        return frozenset(t.strip() for t in text.split("||") if t.strip())

    def matches(self, msg: MessageExt) -> bool:
        tags = self.tags()
        return tags is None or msg.properties.get(MessageConst.PROPERTY_TAGS) in tags


def now_ms() -> int:
    return int(time.time() * 1000)


def decode_handle(text: str) -> rh.ReceiptHandle:
    """A client's handle; a garbage one is an INTERNAL_SERVER_ERROR as upstream answers it."""
    try:
        return rh.decode(text)
    except rh.ReceiptHandleError as exc:
        raise ProxyError(Code.INTERNAL_SERVER_ERROR, str(exc)) from None


def check_not_expired(handle: rh.ReceiptHandle) -> None:
    if handle.is_expired(now_ms()):
        raise ProxyError(Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")


class ConsumerProcessor:
    def __init__(self, backend: Backend, producer: ProducerProcessor) -> None:
        self.backend = backend
        self.producer = producer

    async def pop(
        self,
        *,
        broker_name: str,
        group: str,
        topic: str,
        batch: int,
        invisible_ms: int,
        poll_ms: int,
        flt: Filter,
        fifo: bool,
        max_attempts: int,
        attempt_id: str | None,
        timeout_s: float,
    ) -> PopOutcome:
        header = headers.PopMessageRequestHeader(
            consumer_group=group,
            topic=topic,
            queue_id=-1,
            max_msg_nums=min(max(batch, 1), MAX_MSG_NUMS_FOR_POP),
            invisible_time=invisible_ms,
            poll_time=poll_ms,
            born_time=now_ms(),
            init_mode=INIT_MODE_MAX,
            exp_type=flt.expression_type,
            exp=flt.expression,
            order=fifo,
            attempt_id=attempt_id,
        )
        outcome = await self.backend.pop(broker_name, header, timeout_s)
        if outcome.status is not PopStatus.FOUND:
            return outcome
        kept: list[MessageExt] = []
        for msg in outcome.messages:
            handle_text = msg.properties[rh.PROPERTY_POP_CK]
            msg_id = msg.properties.get(
                MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, msg.msg_id
            )
            try:
                if not flt.matches(msg):
                    await self.ack(group, topic, handle_text, msg_id)
                elif msg.reconsume_times >= max_attempts:
                    await self.forward_to_dlq(group, topic, handle_text, msg_id)
                else:
                    kept.append(msg)
            except ProxyError as exc:
                # upstream delivers the message when its filter step fails
                log.warning("filtering popped message %s of %s failed: %s", msg_id, group, exc)
                kept.append(msg)
        # FOUND with nothing left is answered "no match message" (upstream's stream writer)
        return PopOutcome(PopStatus.FOUND, kept, outcome.rest_num)

    async def ack(self, group: str, topic: str, handle_text: str, message_id: str) -> None:
        handle = decode_handle(handle_text)
        check_not_expired(handle)
        await self.backend.ack(
            handle.broker_name,
            headers.AckMessageRequestHeader(
                consumer_group=group,
                topic=handle.real_topic(topic, group),
                queue_id=handle.queue_id,
                extra_info=handle.text,
                offset=handle.offset,
            ),
        )

    async def change_invisible_time(
        self, group: str, topic: str, handle_text: str, invisible_ms: int
    ) -> str:
        """The new receipt handle."""
        handle = decode_handle(handle_text)
        check_not_expired(handle)
        real_topic = handle.real_topic(topic, group)
        answer = await self.backend.change_invisible_time(
            handle.broker_name,
            headers.ChangeInvisibleTimeRequestHeader(
                consumer_group=group,
                topic=real_topic,
                queue_id=handle.queue_id,
                extra_info=handle.text,
                offset=handle.offset,
                invisible_time=invisible_ms,
            ),
        )
        new = build_extra_info(
            handle.offset,
            answer.pop_time,
            answer.invisible_time,
            answer.revive_qid,
            real_topic,
            handle.broker_name,
            handle.queue_id,
            handle.offset,
        )
        return rh.with_commit_log_offset(new, handle.commit_log_offset)

    async def forward_to_dlq(
        self, group: str, topic: str, handle_text: str, message_id: str
    ) -> None:
        handle = decode_handle(handle_text)
        await self.producer.forward_to_dlq(handle, message_id, group, topic)
        await self.ack(group, topic, handle_text, message_id)
