"""GET_TOPIC_CONFIG (351) and GET_SUBSCRIPTIONGROUP_CONFIG (352) (upstream
``AdminBrokerProcessor.getTopicConfig`` / ``getSubscriptionGroup``): one topic's or one group's
config, as the 5.x proxy reads a topic's ``message.type`` and a group's retry/orderly settings."""

from __future__ import annotations

import orjson

from ferrymq.broker.subscription_groups import SubscriptionGroupManager
from ferrymq.broker.topic_config import TopicConfigManager
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.server import RemotingServer

__all__ = ["ConfigGetProcessor"]


class ConfigGetProcessor:
    def __init__(self, topics: TopicConfigManager, groups: SubscriptionGroupManager) -> None:
        self.topics = topics
        self.groups = groups

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_TOPIC_CONFIG, self.get_topic_config)
        server.register(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, self.get_group_config)

    def get_topic_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        topic = request.ext_fields.get("topic") or ""
        config = self.topics.get(topic)
        if config is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}"
            )
        # TopicConfigAndQueueMapping: the TopicConfig fields, flat, plus mappingDetail
        body = {**config.to_json_obj(), "mappingDetail": None}
        return request.response(ResponseCode.SUCCESS, None, None, orjson.dumps(body))

    def get_group_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        group = request.ext_fields.get("group") or ""
        config = self.groups.find(group)
        if config is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker"
            )
        return request.response(ResponseCode.SUCCESS, None, None, config.encode())
