"""AdminClient's monitoring and offset calls (upstream DefaultMQAdminExt): reset a group's offsets
by time or to an offset (INVOKE_BROKER_TO_RESET_OFFSET, falling back to committing on the broker
when no consumer is online, as mqadmin's resetOffsetByTime does), consumer status, topic stats,
consume time spans, broker consume stats, stats items, producers, NameServer config and system
topics. Every call raises the client's MQResponseError subclass of the peer's response code."""

from __future__ import annotations

from typing import TypeVar

from ferrymq.client.errors import ConsumerNotOnlineError, response_error
from ferrymq.client.instance import ClientInstance
from ferrymq.remoting import bodies, headers
from ferrymq.remoting.codes import RequestCode, ResponseCode

_B = TypeVar("_B", bound=bodies.Body)

# upstream resetOffsetByTimestamp's timeout for the broker (which calls each consumer)
RESET_TIMEOUT_S = 10.0


class MonitoringAdmin:
    instance: ClientInstance

    async def topic_masters(self, topic: str) -> dict[str, str]:
        """brokerName -> master address of every broker group hosting ``topic``."""
        route = await self.instance.namesrv.get_route(topic)
        if route is None:
            raise response_error(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}",
            )
        return {
            bd.broker_name: bd.broker_addrs[0] for bd in route.broker_datas if 0 in bd.broker_addrs
        }

    # --- offsets ------------------------------------------------------------------------------
    async def reset_offset(
        self,
        group: str,
        topic: str,
        *,
        timestamp: int = -1,
        offset: int | None = None,
        force: bool = True,
    ) -> dict[bodies.MessageQueue, int]:
        """mqadmin resetOffsetByTime (or to ``offset`` on every queue): the new offset of each
        queue. Online consumers are told by their brokers and move at once; with none online the
        offsets are committed on the brokers directly (upstream resetOffsetByTimeOld), so the
        group starts from them when it comes back."""
        out: dict[bodies.MessageQueue, int] = {}
        header = headers.ResetOffsetRequestHeader(
            topic=topic, group=group, timestamp=timestamp, is_force=force, offset=offset
        )
        for name, addr in sorted((await self.topic_masters(topic)).items()):
            try:
                body = await self.instance.broker.call_body(
                    bodies.ResetOffsetBody,
                    addr,
                    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                    header,
                    timeout=RESET_TIMEOUT_S,
                )
                out.update(body.offset_table)
            except ConsumerNotOnlineError:
                out.update(await self._reset_offline(name, addr, header))
        return out

    async def _reset_offline(
        self, broker_name: str, addr: str, h: headers.ResetOffsetRequestHeader
    ) -> dict[bodies.MessageQueue, int]:
        stats = await self.instance.broker.call_body(
            bodies.ConsumeStats,
            addr,
            RequestCode.GET_CONSUME_STATS,
            headers.GetConsumeStatsRequestHeader(consumer_group=h.group, topic=h.topic),
        )
        out: dict[bodies.MessageQueue, int] = {}
        for mq, wrapper in sorted(stats.offset_table.items()):
            if h.offset is not None and h.offset >= 0:
                target = min(max(0, h.offset), wrapper.broker_offset)
            elif h.timestamp == -1:
                target = wrapper.broker_offset
            else:
                search = await self.instance.broker.call(
                    addr,
                    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                    headers.SearchOffsetRequestHeader(
                        topic=mq.topic, queue_id=mq.queue_id, timestamp=h.timestamp
                    ),
                )
                found = int(search.ext_fields.get("offset", "0"))
                target = (
                    found
                    if h.is_force or found < wrapper.consumer_offset
                    else (wrapper.consumer_offset)
                )
            await self.instance.broker.call(
                addr,
                RequestCode.UPDATE_CONSUMER_OFFSET,
                headers.UpdateConsumerOffsetRequestHeader(
                    consumer_group=h.group,
                    topic=mq.topic,
                    queue_id=mq.queue_id,
                    commit_offset=target,
                ),
            )
            out[mq] = target
        return out

    async def consumer_status(
        self, group: str, topic: str, client_id: str | None = None
    ) -> dict[str, dict[bodies.MessageQueue, int]]:
        """INVOKE_BROKER_TO_GET_CONSUMER_STATUS on every master of the topic, merged: clientId ->
        the offsets that consumer holds."""
        merged: dict[str, dict[bodies.MessageQueue, int]] = {}
        header = headers.GetConsumerStatusRequestHeader(
            topic=topic, group=group, client_addr=client_id
        )
        for addr in sorted((await self.topic_masters(topic)).values()):
            body = await self.instance.broker.call_body(
                bodies.GetConsumerStatusBody,
                addr,
                RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
                header,
            )
            for client, table in body.consumer_table.items():
                merged.setdefault(client, {}).update(table)
        return merged

    # --- stats --------------------------------------------------------------------------------
    async def topic_stats(self, topic: str) -> bodies.TopicStatsTable:
        """GET_TOPIC_STATS_INFO of every master of the topic, merged (mqadmin topicStatus)."""
        merged = bodies.TopicStatsTable()
        header = headers.GetTopicStatsInfoRequestHeader(topic=topic)
        for addr in sorted((await self.topic_masters(topic)).values()):
            table = await self.instance.broker.call_body(
                bodies.TopicStatsTable, addr, RequestCode.GET_TOPIC_STATS_INFO, header
            )
            merged.offset_table.update(table.offset_table)
        return merged

    async def consume_time_span(self, group: str, topic: str) -> list[bodies.QueueTimeSpan]:
        spans: list[bodies.QueueTimeSpan] = []
        header = headers.QueryConsumeTimeSpanRequestHeader(topic=topic, group=group)
        for addr in sorted((await self.topic_masters(topic)).values()):
            body = await self.instance.broker.call_body(
                bodies.QueryConsumeTimeSpanBody, addr, RequestCode.QUERY_CONSUME_TIME_SPAN, header
            )
            spans.extend(body.consume_time_span_set)
        return spans

    async def broker_consume_stats(self, addr: str, order: bool = False) -> bodies.ConsumeStatsList:
        return await self.instance.broker.call_body(
            bodies.ConsumeStatsList,
            addr,
            RequestCode.GET_BROKER_CONSUME_STATS,
            headers.GetConsumeStatsInBrokerHeader(is_order=order),
        )

    async def view_broker_stats(self, addr: str, name: str, key: str) -> bodies.BrokerStatsData:
        return await self.instance.broker.call_body(
            bodies.BrokerStatsData,
            addr,
            RequestCode.VIEW_BROKER_STATS_DATA,
            headers.ViewBrokerStatsDataRequestHeader(stats_name=name, stats_key=key),
        )

    async def all_producer_info(self, addr: str) -> bodies.ProducerTableInfo:
        return await self.instance.broker.call_body(
            bodies.ProducerTableInfo, addr, RequestCode.GET_ALL_PRODUCER_INFO
        )
