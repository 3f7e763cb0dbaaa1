"""Consumer failover on real processes: a push consumer keeps consuming from the slave within 40 s
of a master SIGKILL, returns to the master after its restart, and skips no message."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from ferrymq.client.broker_api import SendStatus
from ferrymq.client.process_queue import FlowLimits
from ferrymq.client.producer import Producer
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.message import Message, MessageExt
from ferrymq.remoting.bodies import ConsumeFromWhere
from ferrymq.remoting.client import RemotingClient

from .cluster_helpers import broker_addr, ha_cluster, pin_ports, runtime_info, wait_slave_connected
from .test_master_kill import TOPIC, check_broker_has, create_topic

FAILOVER_LIMIT_S = 40.0


async def produce(namesrv: str, prefix: str, count: int) -> set[bytes]:
    sent: set[bytes] = set()
    async with Producer(f"failover_p_{prefix}", namesrv) as producer:
        for i in range(count):
            body = f"{prefix}-{i}".encode()
            result = await producer.send(Message(TOPIC, body))
            assert result.status is SendStatus.SEND_OK, result
            sent.add(body)
    return sent


async def wait_count(got: dict[bytes, float], count: int, timeout: float, what: str) -> float:
    """Wait until ``count`` distinct messages were consumed; returns the seconds it took."""
    start = time.monotonic()
    while len(got) < count:
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: {len(got)} of {count} consumed after {timeout:.0f}s")
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def test_consumer_fails_over_to_slave_and_back(tmp_path: Path) -> None:
    from ferrymq.client.broker_api import BrokerApi

    with ha_cluster(tmp_path / "cluster") as cluster:
        client = RemotingClient()
        master_addr, slave_addr = broker_addr(cluster, 0), broker_addr(cluster, 1)
        pin_ports(cluster.brokers[0])
        await wait_slave_connected(client, master_addr, 30)
        await create_topic(client, master_addr)
        await check_broker_has(BrokerApi(client), slave_addr, {}, 30)

        first = await produce(cluster.namesrv_addr, "a", 400)
        got: dict[bytes, float] = {}

        async def listener(msgs: list[MessageExt], context: object) -> None:
            for msg in msgs:
                got.setdefault(msg.body, time.monotonic())
            await asyncio.sleep(0.02)  # a slow consumer: most messages are still on the broker

        consumer = PushConsumer(
            "failover_group",
            cluster.namesrv_addr,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            consume_thread_max=1,
            pull_batch_size=4,
            flow_limits=FlowLimits(max_count=4),
        )
        consumer.subscribe(TOPIC, "*")
        consumer.register_listener(listener)
        await consumer.start()
        try:
            await wait_count(got, 40, 60, "consumption from the master")
            cluster.brokers[0].proc.kill()
            await asyncio.to_thread(cluster.brokers[0].proc.wait, 30)
            at_kill = len(got)
            # beyond everything prefetched before the kill (4 queues x (batch + limit)): these
            # messages were pulled after the master died, i.e. from the slave
            took = await wait_count(got, at_kill + 40, FAILOVER_LIMIT_S, "failover to the slave")
            assert took <= FAILOVER_LIMIT_S
            print(f"consumption resumed from the slave {took:.1f}s after the master kill")
            slave_pulls = int((await runtime_info(client, slave_addr))["msgGetTotalTodayNow"])
            assert slave_pulls > 0

            await asyncio.to_thread(cluster.restart_broker, 0)
            await wait_slave_connected(client, master_addr, 30)
            second = await produce(cluster.namesrv_addr, "b", 100)
            everything = first | second
            # the consumer returns to the restarted master (after its next route refresh and
            # heartbeat): the master serves its pulls or holds them (long polling)
            deadline = time.monotonic() + 120
            while True:
                info = await runtime_info(client, master_addr)
                back = int(info["msgGetTotalTodayNow"]) > 0 or int(info["heldPullRequests"]) > 0
                if back and everything <= set(got):
                    break
                assert time.monotonic() < deadline, (
                    f"after the restart: back on the master={back}, "
                    f"{len(everything - set(got))} messages never consumed"
                )
                await asyncio.sleep(0.5)
            assert everything <= set(got)  # nothing skipped (duplicates would be allowed)
        finally:
            await consumer.shutdown()
            await client.close()
