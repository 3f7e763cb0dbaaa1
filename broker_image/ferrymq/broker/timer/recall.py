"""RECALL_MESSAGE (370) (upstream ``RecallMessageProcessor``): take back a timer message before it
is due, by the recall handle its send returned.

The recall is itself a timer message for the original's time, on the original's topic, with
``TIMER_DEL_UNIQKEY`` naming it; stored through the timer rewrite, it reaches the timer service,
which then drops the original. Answers as upstream: NO_PERMISSION when recallMessageEnable is off,
ILLEGAL_OPERATION for a bad handle, another topic or broker, or a time already past.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ferrymq.broker.semantics import SendSemanticsStore
from ferrymq.broker.timer.timer_message import (
    RecallHandleError,
    build_delete_key,
    decode_recall_handle,
)
from ferrymq.broker.topic_config import TopicConfigManager
from ferrymq.message import MessageConst, MessageInner
from ferrymq.remoting.bodies import PERM_WRITE
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.server import RemotingServer

__all__ = ["RecallMessageProcessor"]

RECALL_MESSAGE_TAG = "_RECALL_TAG_"  # upstream RecallMessageProcessor.RECALL_MESSAGE_TAG


class RecallMessageProcessor:
    def __init__(
        self,
        send_store: SendSemanticsStore,
        topics: TopicConfigManager,
        *,
        broker_name: str,
        enabled: Callable[[], bool],
        max_delay_sec: int,
        broker_permission: Callable[[], int],
        store_host: tuple[str, int],
        is_slave: Callable[[], bool] = lambda: False,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.send_store = send_store
        self.topics = topics
        self.broker_name = broker_name
        self.enabled = enabled
        self.max_delay_sec = max_delay_sec
        self.broker_permission = broker_permission
        self.store_host = store_host
        self.is_slave = is_slave
        self.clock_ms = clock_ms

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.RECALL_MESSAGE, self.process)

    async def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields
        topic = ext.get("topic") or ""
        if not self.enabled():
            return request.response(
                ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden"
            )
        if self.is_slave():
            return request.response(
                ResponseCode.SLAVE_NOT_AVAILABLE, "recall failed, broker service not available"
            )
        if not self.broker_permission() & PERM_WRITE:
            return request.response(
                ResponseCode.SERVICE_NOT_AVAILABLE, "recall failed, broker service not available"
            )
        if self.topics.get(topic) is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST, f"recall failed, the topic[{topic}] not exist"
            )
        try:
            handle = decode_recall_handle(ext.get("recallHandle"))
        except RecallHandleError as exc:
            return request.response(ResponseCode.ILLEGAL_OPERATION, str(exc))
        if handle.topic != topic:
            return request.response(
                ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match"
            )
        if handle.broker_name != self.broker_name:
            return request.response(
                ResponseCode.ILLEGAL_OPERATION, "recall failed, broker service not available"
            )
        try:
            timestamp = int(handle.timestamp)
        except ValueError:
            timestamp = -1
        left = timestamp - self.clock_ms()
        if left <= 0 or left >= self.max_delay_sec * 1000:
            return request.response(
                ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid"
            )
        now = self.clock_ms()
        props = {
            MessageConst.PROPERTY_TAGS: RECALL_MESSAGE_TAG,
            MessageConst.PROPERTY_TIMER_DEL_UNIQKEY: build_delete_key(topic, handle.message_id),
            MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: handle.message_id,
            MessageConst.PROPERTY_TIMER_DELIVER_MS: handle.timestamp,
            MessageConst.PROPERTY_PRODUCER_GROUP: ext.get("producerGroup") or "",
        }
        msg = MessageInner.create(
            topic,
            0,
            b"0",
            props,
            born_timestamp=now,
            born_host=channel_host(channel, self.store_host),
        )
        result = await self.send_store.put_message(msg)
        if not result.is_ok:
            return request.response(ResponseCode.SYSTEM_ERROR, "recall failed, execute error")
        return request.response(ResponseCode.SUCCESS, None, {"msgId": handle.message_id})


def channel_host(channel: Channel, default: tuple[str, int]) -> tuple[str, int]:
    """The client's (ip, port) as a born host; ``default`` when the channel has no address."""
    host, _, port = (channel.remote_addr or "").rpartition(":")
    if host and port.isdigit():
        return host, int(port)
    return default
