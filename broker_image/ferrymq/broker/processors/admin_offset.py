"""Offset administration: INVOKE_BROKER_TO_RESET_OFFSET (222, mqadmin resetOffsetByTime; the
broker tells each online consumer with RESET_CONSUMER_CLIENT_OFFSET 220),
INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223, asks each consumer with
GET_CONSUMER_STATUS_FROM_CLIENT 221) and CLONE_GROUP_OFFSET (314).

A reset answers as upstream 5.x's server-side reset (``useServerSideResetOffset``, on by
default; ``resetOffsetInner``): a topic this broker lacks -> TOPIC_NOT_EXIST "Topic <t> does not
exist"; an unknown group -> SUBSCRIPTION_GROUP_NOT_EXIST "Group <g> does not exist"; otherwise
the offsets are committed on the broker, for an offline group too (mqadmin resetOffsetByTime and
skipAccumulatedMessage print the table). A timestamp with no message at or after it resolves to
the queue's max offset, a negative one to the queue's end. A status query with nobody online ->
SYSTEM_ERROR "No Any Consumer online...".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ferrymq.broker.client_registry import ConsumerManager
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.consumer_offsets import ConsumerOffsetManager
from ferrymq.broker.processors.common import guarded, guarded_async
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.broker.subscription_groups import SubscriptionGroupManager
from ferrymq.broker.topic_config import TopicConfigManager
from ferrymq.remoting.bodies import (
    BodyError,
    GetConsumerStatusBody,
    MessageQueue,
    ResetOffsetBody,
)
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.headers import (
    CloneGroupOffsetRequestHeader,
    GetConsumerStatusRequestHeader,
    ResetOffsetRequestHeader,
)
from ferrymq.remoting.server import RemotingServer

log = logging.getLogger(__name__)

# upstream invokeSync(channel, request, 5000)
CLIENT_TIMEOUT_S = 5.0


class OffsetRefused(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


@dataclass(slots=True)
class AdminOffsetProcessor:
    """The offset-administration codes of the module docstring, over the broker's managers."""

    config: BrokerConfig
    store: MessageStorePort
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    consumers: ConsumerManager

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, guarded_async(self.reset_offset))
        server.register(
            RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, guarded_async(self.consumer_status)
        )
        server.register(RequestCode.CLONE_GROUP_OFFSET, guarded(self.clone_group_offset))

    # --- 222 --------------------------------------------------------------------------------
    def plan_reset(self, h: ResetOffsetRequestHeader) -> dict[MessageQueue, int]:
        """The new offset of each queue; raises OffsetRefused with upstream's code and remark
        (5.x's server-side reset, ``resetOffsetInner``)."""
        config = self.topics.get(h.topic)
        if config is None:
            raise OffsetRefused(ResponseCode.TOPIC_NOT_EXIST, f"Topic {h.topic} does not exist")
        if h.group not in self.groups.table:  # known, not auto-created by asking
            raise OffsetRefused(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {h.group} does not exist"
            )
        table: dict[MessageQueue, int] = {}
        if h.queue_id >= 0:
            min_offset = self.store.get_min_offset_in_queue(h.topic, h.queue_id)
            max_offset = self.store.get_max_offset_in_queue(h.topic, h.queue_id)
            if h.offset is not None and h.offset != -1:
                if (min_offset >= 0 and h.offset < min_offset) or h.offset > max_offset + 1:
                    raise OffsetRefused(
                        ResponseCode.SYSTEM_ERROR,
                        f"Target offset {h.offset} not in consume queue range "
                        f"[{min_offset}-{max_offset}]",
                    )
                offset = h.offset
            else:
                offset = self._search(h.topic, h.queue_id, h.timestamp)
            table[self._mq(h.topic, h.queue_id)] = offset
            return table
        for qid in range(config.read_queue_nums):
            if h.offset is not None and h.offset >= 0:
                # ferrymq's admin client: every queue to one offset, clamped to its range
                low = max(0, self.store.get_min_offset_in_queue(h.topic, qid))
                high = max(0, self.store.get_max_offset_in_queue(h.topic, qid))
                table[self._mq(h.topic, qid)] = min(max(h.offset, low), high)
            else:
                table[self._mq(h.topic, qid)] = self._search(h.topic, qid, h.timestamp)
        return table

    def _mq(self, topic: str, qid: int) -> MessageQueue:
        return MessageQueue(topic=topic, broker_name=self.config.broker_name, queue_id=qid)

    def _search(self, topic: str, qid: int, timestamp: int) -> int:
        """Upstream searchOffsetByTimestamp: a negative time is the queue's end."""
        if timestamp < 0:
            return max(0, self.store.get_max_offset_in_queue(topic, qid))
        return max(0, self.store.get_offset_in_queue_by_time(topic, qid, timestamp))

    async def reset_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        """5.x server-side reset: the offsets are committed on the broker, whether the group is
        online or not; online consumers are also told (RESET_CONSUMER_CLIENT_OFFSET), since
        ferrymq's pulls do not consult a reset table as upstream 5.x's do."""
        h = ResetOffsetRequestHeader.from_ext(request.ext_fields)
        log.info(
            "[reset-offset] by %s: topic=%s group=%s timestamp=%d offset=%s force=%s",
            channel.remote_addr,
            h.topic,
            h.group,
            h.timestamp,
            h.offset,
            h.is_force,
        )
        try:
            table = self.plan_reset(h)
        except OffsetRefused as refused:
            return request.response(refused.code, refused.remark)
        for mq, offset in table.items():
            self.offsets.commit_offset(h.group, h.topic, mq.queue_id, offset)
        body = ResetOffsetBody(offset_table=table).encode()
        info = self.consumers.get(h.group)
        notify = ResetOffsetRequestHeader(topic=h.topic, group=h.group, timestamp=h.timestamp)
        for client in list(info.channels.values()) if info is not None else []:
            cmd = RemotingCommand.request(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET, notify.to_ext(), body, oneway=True
            )
            try:
                client.channel.invoke_oneway(cmd)
            except RemotingError as exc:
                log.error("[reset-offset] telling %s failed: %s", client.client_id, exc)
        return request.response(ResponseCode.SUCCESS, None, None, body)

    # --- 223 --------------------------------------------------------------------------------
    async def consumer_status(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = GetConsumerStatusRequestHeader.from_ext(request.ext_fields)
        info = self.consumers.get(h.group)
        if info is None or not info.channels:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"No Any Consumer online in the consumer group: [{h.group}]",
            )
        ask = GetConsumerStatusRequestHeader(topic=h.topic, group=h.group)
        table: dict[str, dict[MessageQueue, int]] = {}
        for client in list(info.channels.values()):
            if h.client_addr and h.client_addr != client.client_id:
                continue
            cmd = RemotingCommand.request(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, ask.to_ext())
            try:
                answer = await client.channel.invoke(cmd, CLIENT_TIMEOUT_S)
                if answer.code == ResponseCode.SUCCESS and answer.body_bytes():
                    status = GetConsumerStatusBody.decode(answer.body_bytes())
                    table[client.client_id] = status.message_queue_table
            except (RemotingError, BodyError) as exc:
                # upstream logs and leaves the client out of the answer
                log.error("[get-consumer-status] %s: %s", client.client_id, exc)
        body = GetConsumerStatusBody(consumer_table=table)
        return request.response(ResponseCode.SUCCESS, None, None, body.encode())

    # --- 314 --------------------------------------------------------------------------------
    def clone_group_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = CloneGroupOffsetRequestHeader.from_ext(request.ext_fields)
        topics = {h.topic} if h.topic else self.offsets.topics_of_group(h.src_group)
        for topic in sorted(topics):
            if self.topics.get(topic) is None:
                log.warning("[cloneGroupOffset] topic config not exist, %s", topic)
                continue
            if not h.offline:
                info = self.consumers.get(h.src_group)
                if (
                    info is not None
                    and info.subscription_table
                    and topic not in info.subscription_table
                ):
                    continue
            for qid, offset in self.offsets.query_group_topic(h.src_group, topic).items():
                self.offsets.commit_offset(h.dest_group, topic, qid, offset)
        return request.response(ResponseCode.SUCCESS)
