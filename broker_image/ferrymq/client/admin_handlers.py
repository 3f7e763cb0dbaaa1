"""What a client answers when the broker relays an admin request to it (upstream
ClientRemotingProcessor): RESET_CONSUMER_CLIENT_OFFSET (220, oneway: the group's consumer moves
to the offsets in the body), GET_CONSUMER_STATUS_FROM_CLIENT (221: the offsets it holds) and
CONSUME_MESSAGE_DIRECTLY (309: consume the message in the body now, answer how it went).

A consumer member takes part by having ``reset_offset(topic, offsets)``,
``consume_status(topic)`` and ``consume_directly(msg)``; members without them are skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any, Protocol

from ferrymq.client.allocate import MessageQueue
from ferrymq.remoting import bodies
from ferrymq.remoting.bodies import (
    BodyError,
    ConsumeMessageDirectlyResult,
    GetConsumerStatusBody,
    ResetOffsetBody,
)
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import (
    GetConsumerStatusRequestHeader,
    HeaderError,
    ResetOffsetRequestHeader,
)
from ferrymq.store.record import decode_messages

log = logging.getLogger(__name__)


class _Members(Protocol):
    @property
    def client_id(self) -> str: ...

    @property
    def consumers(self) -> Mapping[str, Any]: ...


def to_client_mq(mq: bodies.MessageQueue) -> MessageQueue:
    return MessageQueue(mq.topic, mq.broker_name, mq.queue_id)


def to_wire_mq(mq: MessageQueue) -> bodies.MessageQueue:
    return bodies.MessageQueue(topic=mq.topic, broker_name=mq.broker_name, queue_id=mq.queue_id)


async def on_reset_offset(
    instance: _Members, channel: Channel, request: RemotingCommand
) -> RemotingCommand | None:
    try:
        header = ResetOffsetRequestHeader.from_ext(request.ext_fields)
        body = ResetOffsetBody.decode(request.body_bytes())
    except (HeaderError, BodyError) as exc:
        log.warning("%s: unreadable reset-offset request: %s", instance.client_id, exc)
        return None
    member = instance.consumers.get(header.group)
    reset = getattr(member, "reset_offset", None)
    if reset is None:
        log.warning("%s: reset-offset for unknown group %s", instance.client_id, header.group)
        return None
    offsets = {to_client_mq(mq): off for mq, off in body.offset_table.items()}
    log.info("%s: resetting %s/%s to %s", instance.client_id, header.group, header.topic, offsets)
    await reset(header.topic, offsets)
    return None  # upstream sends it oneway


def on_consumer_status(
    instance: _Members, channel: Channel, request: RemotingCommand
) -> RemotingCommand:
    header = GetConsumerStatusRequestHeader.from_ext(request.ext_fields)
    member = instance.consumers.get(header.group)
    status = getattr(member, "consume_status", None)
    if status is None:
        return request.response(
            ResponseCode.SYSTEM_ERROR,
            f"the consumer group [{header.group}] not exist in this client",
        )
    table: dict[MessageQueue, int] = status(header.topic)
    body = GetConsumerStatusBody(
        message_queue_table={to_wire_mq(mq): off for mq, off in table.items()}
    )
    return request.response(ResponseCode.SUCCESS, None, None, body.encode())


async def on_consume_directly(
    instance: _Members, channel: Channel, request: RemotingCommand
) -> RemotingCommand:
    """Upstream consumeMessageDirectly: the listener gets the message once, outside any queue's
    flow; the answer is a ConsumeMessageDirectlyResult (CR_SUCCESS, CR_LATER or CR_THROW_EXCEPTION)."""
    group = request.ext_fields.get("consumerGroup", "")
    member = instance.consumers.get(group)
    consume = getattr(member, "consume_directly", None)
    if consume is None:
        return request.response(
            ResponseCode.SYSTEM_ERROR, f"the consumer group [{group}] not exist in this client"
        )
    try:
        [msg] = decode_messages(request.body_bytes())
    except ValueError as exc:
        return request.response(ResponseCode.SYSTEM_ERROR, f"unreadable message: {exc}")
    started = time.monotonic()
    result, remark = await consume(msg, request.ext_fields.get("brokerName", ""))
    body = ConsumeMessageDirectlyResult(
        order=False,
        auto_commit=True,
        consume_result=result,
        remark=remark,
        spent_time_mills=int((time.monotonic() - started) * 1000),
    )
    return request.response(ResponseCode.SUCCESS, None, None, body.encode())
