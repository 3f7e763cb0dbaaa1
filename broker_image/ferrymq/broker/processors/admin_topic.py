"""Topic administration: UPDATE_AND_CREATE_TOPIC (17), GET_ALL_TOPIC_CONFIG (21),
DELETE_TOPIC_IN_BROKER (215), GET_TOPIC_STATS_INFO (202) (upstream AdminBrokerProcessor, topic part).

A change calls ``on_topics_changed`` so the app persists topics.json and re-registers with every
NameServer at once (the route appears without waiting for the 30 s registration)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ferrymq.broker import topic_attributes
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.consumer_offsets import ConsumerOffsetManager
from ferrymq.broker.processors.common import guarded, guarded_async
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.broker.topic_config import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    TopicConfigManager,
    check_topic_name,
    is_system_topic,
)
from ferrymq.remoting.bodies import (
    MessageQueue,
    TopicConfig,
    TopicFilterType,
    TopicOffset,
    TopicStatsTable,
)
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import (
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    GetTopicStatsInfoRequestHeader,
)
from ferrymq.remoting.server import RemotingServer

log = logging.getLogger(__name__)

MAX_QUEUE_NUMS = 1024


def validate_create_topic(h: CreateTopicRequestHeader, cluster_name: str) -> str | None:
    """Pure: the reason a topic cannot be created with these settings, or None."""
    reason = check_topic_name(h.topic)
    if reason is not None:
        return reason
    if h.topic in (AUTO_CREATE_TOPIC_KEY_TOPIC, cluster_name):
        return f"the topic[{h.topic}] is conflict with system reserved words"
    if (
        not 1 <= h.read_queue_nums <= MAX_QUEUE_NUMS
        or not 1 <= h.write_queue_nums <= MAX_QUEUE_NUMS
    ):
        return (
            f"readQueueNums/writeQueueNums must be within 1..{MAX_QUEUE_NUMS}, got "
            f"{h.read_queue_nums}/{h.write_queue_nums}"
        )
    if not 0 <= h.perm <= 7:
        return f"perm must be within 0..7, got {h.perm}"
    if h.topic_filter_type not in TopicFilterType.__members__:
        return f"topicFilterType must be SINGLE_TAG or MULTI_TAG, got {h.topic_filter_type!r}"
    return None


class AdminTopicProcessor:
    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        store: MessageStorePort,
        *,
        on_topics_changed: Callable[[], Awaitable[None] | None] = lambda: None,
    ) -> None:
        self.config = config
        self.topics = topics
        self.offsets = offsets
        self.store = store
        self.on_topics_changed = on_topics_changed

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.UPDATE_AND_CREATE_TOPIC, guarded_async(self.create_topic))
        server.register(RequestCode.GET_ALL_TOPIC_CONFIG, guarded(self.all_topic_config))
        server.register(RequestCode.DELETE_TOPIC_IN_BROKER, guarded_async(self.delete_topic))
        server.register(RequestCode.GET_TOPIC_STATS_INFO, guarded(self.topic_stats))

    async def create_topic(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_ext(request.ext_fields)
        reason = validate_create_topic(h, self.config.broker_cluster_name)
        if reason is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, reason)
        existing = self.topics.get(h.topic)
        attributes = dict(existing.attributes) if existing is not None else {}
        if h.attributes:
            try:
                operations = topic_attributes.parse_operations(h.attributes)
                attributes = topic_attributes.alter(
                    attributes,
                    operations,
                    create=existing is None,
                    allow_mixed=self.config.enable_mixed_message_type,
                )
            except topic_attributes.AttributeRefused as error:
                return request.response(error.code, str(error))
        config = TopicConfig(
            topic_name=h.topic,
            read_queue_nums=h.read_queue_nums,
            write_queue_nums=h.write_queue_nums,
            perm=h.perm,
            topic_filter_type=TopicFilterType[h.topic_filter_type],
            topic_sys_flag=h.topic_sys_flag,
            order=h.order,
            attributes=attributes,
        )
        self.topics.update(config)
        log.info("topic %s created/updated by %s", h.topic, channel.remote_addr)
        await self._saved()
        return request.response(ResponseCode.SUCCESS)

    def all_topic_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, None, None, self.topics.wrapper().encode())

    async def delete_topic(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = DeleteTopicRequestHeader.from_ext(request.ext_fields)
        if is_system_topic(h.topic):
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"the topic[{h.topic}] is a system topic: not deleted"
            )
        self.topics.delete(h.topic)
        self.offsets.remove_topic(h.topic)
        self.store.delete_topics([h.topic])
        log.info("topic %s deleted by %s", h.topic, channel.remote_addr)
        await self._saved()
        return request.response(ResponseCode.SUCCESS)

    async def _saved(self) -> None:
        """Answer once topics.json is written, as upstream (TopicConfigManager persists before
        the response): a broker killed right after a SUCCESS kept the topic on Apache and lost
        it on ferrymq (tests/interop/test_reference_launcher.py, at load average 14)."""
        saving = self.on_topics_changed()
        if saving is not None:
            # shielded: the save goes on even if this request is given up
            await asyncio.shield(saving)

    def topic_stats(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = GetTopicStatsInfoRequestHeader.from_ext(request.ext_fields)
        config = self.topics.get(h.topic)
        if config is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        stats = TopicStatsTable()
        for qid in range(config.write_queue_nums):
            mq = MessageQueue(topic=h.topic, broker_name=self.config.broker_name, queue_id=qid)
            max_off = self.store.get_max_offset_in_queue(h.topic, qid)
            last = (
                self.store.get_message_store_timestamp(h.topic, qid, max_off - 1)
                if max_off > 0
                else 0
            )
            stats.offset_table[mq] = TopicOffset(
                min_offset=max(0, self.store.get_min_offset_in_queue(h.topic, qid)),
                max_offset=max(0, max_off),
                last_update_timestamp=max(0, last),
            )
        return request.response(ResponseCode.SUCCESS, None, None, stats.encode())
