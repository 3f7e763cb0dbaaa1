"""HEART_BEAT (34), UNREGISTER_CLIENT (35), CHECK_CLIENT_CONFIG (46) (upstream ClientManageProcessor)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from ferrymq.broker.client_registry import ClientChannelInfo, ConsumerManager, ProducerManager
from ferrymq.broker.processors.common import guarded
from ferrymq.broker.subscription_groups import SubscriptionGroupManager
from ferrymq.broker.topic_config import TopicConfigManager, retry_topic
from ferrymq.filter import check_subscription
from ferrymq.remoting.bodies import (
    PERM_READ,
    PERM_WRITE,
    HeartbeatData,
    MessageModel,
)
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import UnregisterClientRequestHeader
from ferrymq.remoting.server import RemotingServer

log = logging.getLogger(__name__)


class ClientManageProcessor:
    def __init__(
        self,
        consumers: ConsumerManager,
        producers: ProducerManager,
        groups: SubscriptionGroupManager,
        topics: TopicConfigManager,
        *,
        enable_property_filter: bool = False,
        on_topic_created: Callable[[str], None] = lambda topic: None,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.consumers = consumers
        self.producers = producers
        self.groups = groups
        self.topics = topics
        self.enable_property_filter = enable_property_filter
        self.on_topic_created = on_topic_created
        self.clock_ms = clock_ms
        # one watcher per client connection: a closed connection leaves its groups at once
        self._watched: dict[int, asyncio.Task[None]] = {}

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.HEART_BEAT, guarded(self.heart_beat))
        server.register(RequestCode.UNREGISTER_CLIENT, guarded(self.unregister_client))
        server.register(RequestCode.CHECK_CLIENT_CONFIG, guarded(self.check_client_config))

    def heart_beat(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        data = HeartbeatData.decode(request.body_bytes())
        now = self.clock_ms()
        info = ClientChannelInfo(
            channel=channel,
            client_id=data.client_id,
            language=request.language,
            version=request.version,
            last_update_timestamp=now,
        )
        channel.attrs["client_id"] = data.client_id
        self._watch(channel)
        for consumer in data.consumer_data_set:
            group_config = self.groups.find(consumer.group_name)
            notify = True
            if group_config is not None:
                notify = group_config.notify_consumer_ids_changed_enable
                if consumer.message_model is MessageModel.CLUSTERING:
                    # retry topic of the group, so failed messages can be sent back (upstream)
                    name = retry_topic(consumer.group_name)
                    if self.topics.get(name) is None:
                        self.topics.create_in_send_back(
                            name, max(1, group_config.retry_queue_nums), PERM_READ | PERM_WRITE
                        )
                        self.on_topic_created(name)
            self.consumers.register_consumer(
                consumer.group_name,
                info,
                consumer.consume_type,
                consumer.message_model,
                consumer.consume_from_where,
                consumer.subscription_data_set,
                notify=notify,
            )
        for producer in data.producer_data_set:
            self.producers.register_producer(producer.group_name, info)
        return request.response(ResponseCode.SUCCESS)

    def unregister_client(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        header = UnregisterClientRequestHeader.from_ext(request.ext_fields)
        if header.producer_group:
            self.producers.unregister_producer(header.producer_group, channel)
        if header.consumer_group:
            group_config = self.groups.find(header.consumer_group)
            notify = group_config.notify_consumer_ids_changed_enable if group_config else True
            self.consumers.unregister_consumer(header.consumer_group, channel, notify=notify)
        return request.response(ResponseCode.SUCCESS)

    def check_client_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG: body {group, subscriptionData}; refuse unparsable expressions."""
        body = request.body_json() or {}
        sub = body.get("subscriptionData") if isinstance(body, dict) else None
        if isinstance(sub, dict):
            reason = check_subscription(
                sub.get("expressionType"),
                sub.get("subString"),
                enable_property_filter=self.enable_property_filter,
            )
            if reason is not None:
                return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, reason)
        return request.response(ResponseCode.SUCCESS)

    def on_channel_closed(self, channel: Channel) -> None:
        self.consumers.on_channel_closed(channel)
        self.producers.on_channel_closed(channel)

    def _watch(self, channel: Channel) -> None:
        key = id(channel)
        if key in self._watched:
            return

        async def wait() -> None:
            try:
                await channel.wait_closed()
            finally:
                self._watched.pop(key, None)
            self.on_channel_closed(channel)

        self._watched[key] = asyncio.get_running_loop().create_task(wait())

    def stop_watching(self) -> None:
        for task in self._watched.values():
            task.cancel()
        self._watched.clear()
