"""PullConsumer: the application picks queues and offsets itself (upstream DefaultMQPullConsumer).

No rebalance and no listener: ``fetch_subscribe_message_queues`` lists a topic's queues, ``pull``
reads from an offset (``block=True`` long-polls the broker until a message arrives or the suspend
time ends), and progress is kept with ``update_consume_offset`` / ``fetch_consume_offset`` on the
broker (clustering) and pushed by ``persist`` (also every 5 s by the client instance and on
shutdown). The consumer heartbeats as CONSUME_ACTIVELY with the topics it has touched, so admin
tools list it in its group.
"""

from __future__ import annotations

from typing import Any

from ferrymq.client import running_info
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.broker_api import PullResult
from ferrymq.client.credentials import ClientSecurity
from ferrymq.client.errors import NoRouteError
from ferrymq.client.instance import ClientInstance
from ferrymq.client.lifecycle import ClientMember
from ferrymq.client.offset_store import BrokerOffsetBackend, OffsetStore, ReadOffsetType
from ferrymq.client.pull_service import filter_by_tags, pull_sys_flag
from ferrymq.client.push_consumer import build_subscription
from ferrymq.remoting import bodies, headers


class PullConsumer(ClientMember):
    role = "consumer"

    def __init__(
        self,
        group: str,
        namesrv_addr: str | list[str] | None = None,
        *,
        instance: ClientInstance | None = None,
        security: ClientSecurity | None = None,
        suspend_timeout: float = 15.0,
        timeout: float = 3.0,
    ) -> None:
        super().__init__(group, namesrv_addr, instance, security)
        self.suspend_timeout = suspend_timeout
        self.timeout = timeout
        self.offset_store = OffsetStore(BrokerOffsetBackend(self.instance, group))
        self.subscriptions: dict[str, bodies.SubscriptionData] = {}
        self._touched: set[MessageQueue] = set()

    def _register(self) -> None:
        self.instance.register_consumer(self)

    async def _stop_parts(self) -> None:
        await self.persist()

    async def _unregister(self) -> None:
        await self.instance.unregister(None, self.group)

    # --- ConsumerMember -------------------------------------------------------------------------
    def consumer_data(self) -> bodies.ConsumerData:
        return bodies.ConsumerData(
            group_name=self.group,
            consume_type=bodies.ConsumeType.CONSUME_ACTIVELY,
            message_model=bodies.MessageModel.CLUSTERING,
            subscription_data_set=list(self.subscriptions.values()),
        )

    def subscribed_topics(self) -> list[str]:
        return list(self.subscriptions)

    async def do_rebalance(self) -> None:
        return None

    async def persist_offsets(self) -> None:
        await self.persist()

    def running_info(self) -> dict[str, Any]:
        return {
            "properties": running_info.consumer_properties(
                consume_type="CONSUME_ACTIVELY",
                namesrv_addrs=self.instance.namesrv_addrs,
                start_timestamp_ms=self.start_timestamp_ms,
                fields={"consumerGroup": self.group},
            ),
            "subscriptionSet": [],
            "mqTable": {},
        }

    # --- API ------------------------------------------------------------------------------------
    async def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        self.check_running()
        await self.instance.update_route(topic)
        queues = self.instance.routes.subscribe.get(topic, [])
        if not queues:
            raise NoRouteError(f"topic {topic!r} has no readable queue")
        if topic not in self.subscriptions:
            self.subscriptions[topic] = build_subscription(topic, "*")
            await self.instance.send_heartbeat_to_all_brokers()
        return list(queues)

    async def pull(
        self,
        mq: MessageQueue,
        expression: str = "*",
        offset: int = 0,
        max_nums: int = 32,
        *,
        block: bool = False,
    ) -> PullResult:
        """Read up to ``max_nums`` messages of ``mq`` from ``offset`` (tag-filtered client-side too)."""
        self.check_running()
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        if not 0 < max_nums <= 1024:
            raise ValueError(f"max_nums must be in 1..1024, got {max_nums}")
        sub = build_subscription(mq.topic, expression)
        header = headers.PullMessageRequestHeader(
            consumer_group=self.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=pull_sys_flag(False, block, True),
            commit_offset=0,
            suspend_timeout_millis=int(self.suspend_timeout * 1000) if block else 0,
            subscription=sub.sub_string,
            sub_version=sub.sub_version,
            expression_type=sub.expression_type,
        )
        addr = await self.instance.find_broker_addr(mq.broker_name, mq.topic, master=False)
        timeout = self.timeout + (self.suspend_timeout if block else 0.0)
        result = await self.instance.broker.pull_message(addr, header, timeout)
        result.messages = filter_by_tags(result.messages, sub)
        return result

    def update_consume_offset(self, mq: MessageQueue, offset: int) -> None:
        self._touched.add(mq)
        self.offset_store.update_offset(mq, offset, increase_only=False)

    async def fetch_consume_offset(self, mq: MessageQueue, from_store: bool = True) -> int:
        kind = (
            ReadOffsetType.READ_FROM_STORE if from_store else ReadOffsetType.MEMORY_FIRST_THEN_STORE
        )
        return await self.offset_store.read_offset(mq, kind)

    async def persist(self) -> None:
        await self.offset_store.persist_all(sorted(self._touched))

    async def max_offset(self, mq: MessageQueue) -> int:
        addr = await self.instance.find_broker_addr(mq.broker_name, mq.topic, master=False)
        return await self.instance.broker.get_max_offset(addr, mq)

    async def min_offset(self, mq: MessageQueue) -> int:
        addr = await self.instance.find_broker_addr(mq.broker_name, mq.topic, master=False)
        return await self.instance.broker.get_min_offset(addr, mq)
