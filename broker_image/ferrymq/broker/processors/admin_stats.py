"""Monitoring administration, as upstream AdminBrokerProcessor answers it:
QUERY_CONSUME_TIME_SPAN (303), GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305),
CLEAN_EXPIRED_CONSUMEQUEUE (306), VIEW_BROKER_STATS_DATA (315), CLEAN_UNUSED_TOPIC (316),
GET_BROKER_CONSUME_STATS (317), QUERY_CONSUME_QUEUE (321), GET_ALL_PRODUCER_INFO (328)."""

from __future__ import annotations

import logging
import time
from typing import Protocol

from ferrymq.broker.client_registry import ConsumerManager, ProducerManager
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.consumer_offsets import ConsumerOffsetManager
from ferrymq.broker.processors.common import guarded
from ferrymq.broker.stats_manager import BrokerStatsManager
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.broker.subscription_groups import SubscriptionGroupManager
from ferrymq.broker.topic_config import TopicConfigManager, is_system_topic
from ferrymq.remoting.bodies import (
    BrokerStatsData,
    BrokerStatsItem,
    ConsumeQueueData,
    ConsumeStats,
    ConsumeStatsList,
    MessageQueue,
    OffsetWrapper,
    ProducerInfo,
    ProducerTableInfo,
    QueryConsumeQueueResponseBody,
    QueryConsumeTimeSpanBody,
    QueueTimeSpan,
    TopicList,
)
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import (
    GetConsumeStatsInBrokerHeader,
    QueryConsumeQueueRequestHeader,
    QueryConsumeTimeSpanRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)
from ferrymq.remoting.server import RemotingServer
from ferrymq.topic_validator import SYSTEM_TOPIC_SET

log = logging.getLogger(__name__)


class ConsumeQueueAccess(Protocol):
    """What 306/316/321 need of the store beyond the processors' port."""

    def consume_queue_units(
        self, topic: str, queue_id: int, index: int, count: int
    ) -> list[tuple[int, int, int, int]] | None: ...

    def consume_queue_topics(self) -> list[str]: ...

    def clean_expired_consume_queues(self, keep: set[str]) -> int: ...


class AdminStatsProcessor:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStorePort,
        cq: ConsumeQueueAccess,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        consumers: ConsumerManager,
        producers: ProducerManager,
        stats: BrokerStatsManager,
    ) -> None:
        self.config = config
        self.store = store
        self.cq = cq
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.consumers = consumers
        self.producers = producers
        self.stats = stats

    def register_to(self, server: RemotingServer) -> None:
        table = {
            RequestCode.QUERY_CONSUME_TIME_SPAN: self.consume_time_span,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: self.system_topics,
            RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE: self.clean_expired_consume_queue,
            RequestCode.VIEW_BROKER_STATS_DATA: self.view_stats,
            RequestCode.CLEAN_UNUSED_TOPIC: self.clean_unused_topic,
            RequestCode.GET_BROKER_CONSUME_STATS: self.broker_consume_stats,
            RequestCode.QUERY_CONSUME_QUEUE: self.query_consume_queue,
            RequestCode.GET_ALL_PRODUCER_INFO: self.all_producers,
        }
        for code, handler in table.items():
            server.register(code, guarded(handler))

    def _mq(self, topic: str, qid: int) -> MessageQueue:
        return MessageQueue(topic=topic, broker_name=self.config.broker_name, queue_id=qid)

    def consume_time_span(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = QueryConsumeTimeSpanRequestHeader.from_ext(request.ext_fields)
        config = self.topics.get(h.topic)
        if config is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        now = int(time.time() * 1000)
        spans = []
        for qid in range(config.write_queue_nums):
            min_time = self.store.get_earliest_message_time(h.topic, qid)
            max_offset = max(0, self.store.get_max_offset_in_queue(h.topic, qid))
            max_time = self.store.get_message_store_timestamp(h.topic, qid, max_offset - 1)
            consumer_offset = self.offsets.query_offset(h.group, h.topic, qid)
            consume_time = (
                self.store.get_message_store_timestamp(h.topic, qid, consumer_offset - 1)
                if consumer_offset > 0
                else min_time
            )
            delay = 0
            if consumer_offset < max_offset:
                next_time = self.store.get_message_store_timestamp(
                    h.topic, qid, max(0, consumer_offset)
                )
                delay = now - next_time
            spans.append(
                QueueTimeSpan(
                    message_queue=self._mq(h.topic, qid),
                    min_time_stamp=min_time,
                    max_time_stamp=max_time,
                    consume_time_stamp=consume_time,
                    delay_time=delay,
                )
            )
        body = QueryConsumeTimeSpanBody(consume_time_span_set=spans)
        return request.response(ResponseCode.SUCCESS, None, None, body.encode())

    def system_topics(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        body = TopicList(topic_list=sorted(SYSTEM_TOPIC_SET))
        return request.response(ResponseCode.SUCCESS, None, None, body.encode())

    def _keep(self) -> set[str]:
        return set(self.topics.table) | SYSTEM_TOPIC_SET

    def clean_expired_consume_queue(
        self, channel: Channel, request: RemotingCommand
    ) -> RemotingCommand:
        removed = self.cq.clean_expired_consume_queues(self._keep())
        log.info(
            "cleanExpiredConsumeQueue by %s: %d queue(s) removed", channel.remote_addr, removed
        )
        return request.response(ResponseCode.SUCCESS)

    def clean_unused_topic(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        keep = self._keep()
        unused = [
            t for t in self.cq.consume_queue_topics() if t not in keep and not is_system_topic(t)
        ]
        removed = self.store.delete_topics(unused) if unused else 0
        log.warning("cleanUnusedTopic by %s: %s (%d removed)", channel.remote_addr, unused, removed)
        return request.response(ResponseCode.SUCCESS)

    def view_stats(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = ViewBrokerStatsDataRequestHeader.from_ext(request.ext_fields)
        snaps = self.stats.stats_item(h.stats_name, h.stats_key)
        if snaps is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The stats <{h.stats_name}> <{h.stats_key}> not exist",
            )
        minute, hour, day = (BrokerStatsItem(sum=s.sum, tps=s.tps, avgpt=s.avgpt) for s in snaps)
        body = BrokerStatsData(stats_minute=minute, stats_hour=hour, stats_day=day)
        return request.response(ResponseCode.SUCCESS, None, None, body.encode())

    def broker_consume_stats(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = GetConsumeStatsInBrokerHeader.from_ext(request.ext_fields)
        out = ConsumeStatsList(broker_addr=self.config.broker_addr)
        for group in sorted(self.groups.table):
            stats_of_group: list[ConsumeStats] = []
            info = self.consumers.get(group)
            for topic in sorted(self.offsets.topics_of_group(group)):
                config = self.topics.get(topic)
                if config is None:
                    continue
                if h.is_order and not config.order:
                    continue
                if (
                    info is not None
                    and info.subscription_table
                    and topic not in info.subscription_table
                ):
                    continue
                stats = ConsumeStats()
                for qid in range(config.write_queue_nums):
                    broker_offset = max(0, self.store.get_max_offset_in_queue(topic, qid))
                    consumer_offset = max(0, self.offsets.query_offset(group, topic, qid))
                    last = 0
                    if consumer_offset > 0:
                        last = max(
                            0,
                            self.store.get_message_store_timestamp(topic, qid, consumer_offset - 1),
                        )
                    stats.offset_table[self._mq(topic, qid)] = OffsetWrapper(
                        broker_offset=broker_offset,
                        consumer_offset=consumer_offset,
                        last_timestamp=last,
                    )
                out.total_diff += stats.compute_total_diff()
                stats_of_group.append(stats)
            out.consume_stats_list.append({group: stats_of_group})
        return request.response(ResponseCode.SUCCESS, None, None, out.encode())

    def query_consume_queue(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = QueryConsumeQueueRequestHeader.from_ext(request.ext_fields)
        units = self.cq.consume_queue_units(h.topic, h.queue_id, h.index, max(0, h.count))
        if units is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"{h.queue_id}@{h.topic} is not exist!"
            )
        body = QueryConsumeQueueResponseBody(
            max_queue_index=max(0, self.store.get_max_offset_in_queue(h.topic, h.queue_id)),
            min_queue_index=max(0, self.store.get_min_offset_in_queue(h.topic, h.queue_id)),
        )
        if h.consumer_group:
            info = self.consumers.get(h.consumer_group)
            sub = info.find_subscription(h.topic) if info is not None else None
            body.subscription_data = sub
            if sub is None:
                body.filter_data = f"{h.consumer_group}@{h.topic} is not online!"
        body.queue_data = [
            ConsumeQueueData(physic_offset=phy, physic_size=size, tags_code=tags)
            for _index, phy, size, tags in units
        ]
        return request.response(ResponseCode.SUCCESS, None, None, body.encode())

    def all_producers(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        data: dict[str, list[ProducerInfo]] = {}
        for group in sorted(self.producers.table):
            data[group] = [
                ProducerInfo(
                    client_id=c.client_id,
                    remote_ip=c.client_addr,
                    language=c.language,
                    version=c.version,
                    last_update_timestamp=c.last_update_timestamp,
                )
                for c in self.producers.channels_of(group)
            ]
        body = ProducerTableInfo(data=data)
        return request.response(ResponseCode.SUCCESS, None, None, body.encode())


class StoreConsumeQueues:
    """``ConsumeQueueAccess`` over the message store's ConsumeQueue table."""

    def __init__(self, store: MessageStorePort) -> None:
        self.store = store

    def consume_queue_units(
        self, topic: str, queue_id: int, index: int, count: int
    ) -> list[tuple[int, int, int, int]] | None:
        """``(index, commitLogOffset, size, tagsCode)`` of up to ``count`` units from ``index``;
        None when the queue does not exist."""
        cq = self.store.consume_queues.find(topic, queue_id)
        if cq is None:
            return None
        out = []
        start = max(index, cq.min_offset_in_queue)
        for i in range(start, min(cq.max_offset_in_queue, index + count)):
            unit = cq.get_unit(i)
            if unit is None:
                break
            out.append((i, *unit))
        return out

    def consume_queue_topics(self) -> list[str]:
        return list(self.store.consume_queues.topics())

    def clean_expired_consume_queues(self, keep: set[str]) -> int:
        """Upstream cleanExpiredConsumerQueue: queues of topics no longer configured whose
        messages are all gone go; every other queue's min offset follows the CommitLog's."""
        store = self.store
        queues = store.consume_queues
        gone = [
            topic
            for topic in queues.topics()
            if topic not in keep
            and all(
                cq.max_offset_in_queue <= cq.min_offset_in_queue
                for cq in queues.queues_of(topic).values()
            )
        ]
        removed = store.delete_topics(gone) if gone else 0
        queues.correct_min_offsets(store.min_phy_offset)
        return removed
