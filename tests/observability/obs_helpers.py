"""Helpers of the observability tests: the cluster handle, waiting with a deadline, consumers
that commit often (so the broker sees their progress within the tests' short windows)."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass

import polling
from ferrymq.broker.app import BrokerApp
from ferrymq.client import ConsumeContext, Message, MessageExt, Producer, PushConsumer
from ferrymq.client.admin import AdminClient
from ferrymq.client.instance import ClientInstance
from ferrymq.client.process_queue import FlowLimits
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.remoting.bodies import ConsumeFromWhere

# observability scenarios wait on scrapes and consumers: longer and coarser than the default
wait_for = functools.partial(polling.wait_for, timeout=20.0, every=0.05)


@dataclass
class ObsCluster:
    namesrv: NamesrvApp
    broker: BrokerApp
    metrics_port: int

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.addr

    async def create_topic(self, topic: str, queues: int = 4) -> None:
        async with AdminClient(self.namesrv_addr) as admin:
            await admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)

            async def routed() -> bool:
                route = await admin.instance.namesrv.get_route(topic)
                return route is not None and bool(route.queue_datas)

            await wait_for(routed, what=f"route of {topic}")


async def produce(producer: Producer, topic: str, count: int, prefix: str = "m") -> None:
    for i in range(count):
        await producer.send(Message(topic, f"{prefix}-{i}".encode()))


class Consumer:
    """A push consumer whose listener waits ``delay`` seconds per message (one at a time when
    delayed, so its rate is about 1/delay) and whose instance commits every 0.2 s."""

    def __init__(self, cluster: ObsCluster, group: str, topic: str, delay: float = 0.0) -> None:
        self.instance = ClientInstance(
            cluster.namesrv_addr, persist_offset_interval=0.2, rebalance_interval=1.0
        )
        self.consumer = PushConsumer(
            group,
            instance=self.instance,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            consume_thread_max=1 if delay else 20,
            pull_batch_size=8 if delay else 32,
            # a slow consumer keeps little in memory, so its pulls (which commit) stay frequent
            flow_limits=FlowLimits(max_count=16) if delay else None,
        )
        self.consumer.subscribe(topic, "*")
        self.delay = delay
        self.count = 0
        self.consumer.register_listener(self._listen)

    async def _listen(self, msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        for _ in msgs:
            if self.delay:
                # the consumer's processing time, not synchronisation
                await asyncio.sleep(self.delay)
            self.count += 1

    async def start(self) -> None:
        await self.consumer.start()

    async def stop(self) -> None:
        await self.consumer.shutdown()
        await self.instance.shutdown()
