"""Consumer administration: GET_ALL_CONSUMER_OFFSET (43), UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), DELETE_SUBSCRIPTIONGROUP (207),
GET_CONSUMER_CONNECTION_LIST (203), GET_PRODUCER_CONNECTION_LIST (204), GET_CONSUME_STATS (208),
QUERY_TOPIC_CONSUME_BY_WHO (300), and GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY
(309) relayed to the named client."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from ferrymq.broker.client_registry import ClientChannelInfo, ConsumerManager, ProducerManager
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.consumer_offsets import ConsumerOffsetManager
from ferrymq.broker.processors.common import encode_message_ext, guarded, guarded_async
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.broker.subscription_groups import SubscriptionGroupManager
from ferrymq.broker.topic_config import TopicConfigManager
from ferrymq.message import MessageDecodeError, decode_message_id
from ferrymq.remoting.bodies import (
    Connection,
    ConsumerConnection,
    ConsumeStats,
    GroupList,
    MessageQueue,
    OffsetWrapper,
    ProducerConnection,
    SubscriptionGroupConfig,
)
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError, RemotingTimeoutError
from ferrymq.remoting.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
)
from ferrymq.remoting.server import RemotingServer

log = logging.getLogger(__name__)

# upstream callConsumer waits this long for the client's answer
RUNNING_INFO_TIMEOUT_S = 5.0


def connections(channels: Iterable[ClientChannelInfo]) -> list[Connection]:
    """The Connection entries of GET_CONSUMER/PRODUCER_CONNECTION_LIST bodies."""
    return [
        Connection(
            client_id=c.client_id,
            client_addr=c.client_addr,
            language=c.language,
            version=c.version,
        )
        for c in channels
    ]


@dataclass(slots=True)
class AdminConsumerProcessor:
    """The consumer-administration codes of the module docstring, over the broker's managers."""

    config: BrokerConfig
    store: MessageStorePort
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    consumers: ConsumerManager
    producers: ProducerManager

    def register_to(self, server: RemotingServer) -> None:
        table = {
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.all_consumer_offset,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_groups,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_group,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
            RequestCode.GET_CONSUME_STATS: self.consume_stats,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.consumed_by_who,
        }
        for code, handler in table.items():
            server.register(code, guarded(handler))
        server.register(
            RequestCode.GET_CONSUMER_RUNNING_INFO, guarded_async(self.consumer_running_info)
        )
        server.register(
            RequestCode.CONSUME_MESSAGE_DIRECTLY, guarded_async(self.consume_message_directly)
        )

    async def consumer_running_info(
        self, channel: Channel, request: RemotingCommand
    ) -> RemotingCommand:
        """Relay to the client's own connection and hand its answer back (upstream callConsumer)."""
        group = request.ext_fields.get("consumerGroup", "")
        client_id = request.ext_fields.get("clientId", "")
        return await self._call_consumer(
            request, group, client_id, request.ext_fields, request.body
        )

    async def consume_message_directly(
        self, channel: Channel, request: RemotingCommand
    ) -> RemotingCommand:
        """CONSUME_MESSAGE_DIRECTLY (309): the stored message named by msgId, relayed to the
        named consumer, which consumes it and answers a ConsumeMessageDirectlyResult."""
        h = ConsumeMessageDirectlyResultRequestHeader.from_ext(request.ext_fields)
        try:
            _host, _port, offset = decode_message_id(h.msg_id or "")
        except MessageDecodeError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        msg = self.store.look_message_by_offset(offset)
        if msg is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"no message with msgId {h.msg_id} in this broker"
            )
        ext = {**request.ext_fields, "brokerName": self.config.broker_name}
        config = self.topics.get(msg.topic)
        if config is not None:
            ext["topicSysFlag"] = str(config.topic_sys_flag)
        return await self._call_consumer(
            request, h.consumer_group, h.client_id or "", ext, encode_message_ext(msg)
        )

    async def _call_consumer(
        self,
        request: RemotingCommand,
        group: str,
        client_id: str,
        ext: dict[str, str],
        body: object,
    ) -> RemotingCommand:
        info = self.consumers.get(group)
        target = None
        if info is not None:
            target = next((c for c in info.channels.values() if c.client_id == client_id), None)
        if target is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online"
            )
        relay = RemotingCommand.request(request.code, ext, body)  # type: ignore[arg-type]
        try:
            answer = await target.channel.invoke(relay, RUNNING_INFO_TIMEOUT_S)
        except RemotingTimeoutError:
            return request.response(
                ResponseCode.CONSUME_MSG_TIMEOUT,
                f"consumer <{group}> <{client_id}> did not answer within {RUNNING_INFO_TIMEOUT_S:.0f}s",
            )
        except RemotingError as exc:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"relay to <{group}> <{client_id}> failed: {exc}"
            )
        return request.response(answer.code, answer.remark, answer.ext_fields, answer.body)

    def all_consumer_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, None, None, self.offsets.wrapper().encode())

    def update_group(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        config = SubscriptionGroupConfig.decode(request.body_bytes())
        if not config.group_name.strip():
            return request.response(ResponseCode.SYSTEM_ERROR, "groupName must not be empty")
        self.groups.update(config)
        log.info("subscription group %s updated by %s", config.group_name, channel.remote_addr)
        return request.response(ResponseCode.SUCCESS)

    def all_groups(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, None, None, self.groups.wrapper().encode())

    def delete_group(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = DeleteSubscriptionGroupRequestHeader.from_ext(request.ext_fields)
        self.groups.delete(h.group_name)
        if h.clean_offset:
            self.offsets.remove_group(h.group_name)
        return request.response(ResponseCode.SUCCESS)

    def consumer_connections(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = GetConsumerConnectionListRequestHeader.from_ext(request.ext_fields)
        info = self.consumers.get(h.consumer_group)
        if info is None or not info.channels:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"the consumer group[{h.consumer_group}] not online",
            )
        body = ConsumerConnection(
            connection_set=connections(info.channels.values()),
            subscription_table=dict(info.subscription_table),
            consume_type=info.consume_type,
            message_model=info.message_model,
            consume_from_where=info.consume_from_where,
        )
        return request.response(ResponseCode.SUCCESS, None, None, body.encode())

    def producer_connections(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = GetProducerConnectionListRequestHeader.from_ext(request.ext_fields)
        infos = self.producers.channels_of(h.producer_group)
        if not infos:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"the producer group[{h.producer_group}] not exist"
            )
        body = ProducerConnection(connection_set=connections(infos))
        return request.response(ResponseCode.SUCCESS, None, None, body.encode())

    def consume_stats(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        """Upstream getConsumeStats: the given topic, else the topics the group committed
        offsets on; with the group online, only the topics it subscribes to."""
        h = GetConsumeStatsRequestHeader.from_ext(request.ext_fields)
        group = h.consumer_group
        topics = {h.topic} if h.topic else self.offsets.topics_of_group(group)
        info = self.consumers.get(group)
        if info is not None and info.subscription_table:
            topics &= set(info.subscription_table)
        stats = ConsumeStats()
        for topic in sorted(topics):
            config = self.topics.get(topic)
            if config is None:
                continue
            pulled = self.offsets.query_pull_offsets(group, topic)
            for qid in range(config.read_queue_nums):
                mq = MessageQueue(topic=topic, broker_name=self.config.broker_name, queue_id=qid)
                broker_offset = max(0, self.store.get_max_offset_in_queue(topic, qid))
                consumer_offset = max(0, self.offsets.query_offset(group, topic, qid))
                last = 0
                if consumer_offset > 0:
                    last = max(
                        0,
                        self.store.get_message_store_timestamp(topic, qid, consumer_offset - 1),
                    )
                stats.offset_table[mq] = OffsetWrapper(
                    broker_offset=broker_offset,
                    consumer_offset=consumer_offset,
                    pull_offset=max(consumer_offset, pulled.get(qid, consumer_offset)),
                    last_timestamp=last,
                )
        return request.response(ResponseCode.SUCCESS, None, None, stats.encode())

    def consumed_by_who(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = QueryTopicConsumeByWhoRequestHeader.from_ext(request.ext_fields)
        groups = set(self.consumers.groups_of_topic(h.topic)) | self.offsets.groups_of_topic(
            h.topic
        )
        body = GroupList(group_list=sorted(groups))
        return request.response(ResponseCode.SUCCESS, None, None, body.encode())
