"""ferrymq's PushConsumer and Producer follow an automatic failover: the master is killed while
both run; the producer's sends land on the elected master, and the consumer (which learns of the
new master from the NameServer as soon as the dead one fails its pulls, not at the 30 s route
poll) receives every acknowledged message. Re-deliveries are counted and printed."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from pathlib import Path

from ferrymq.client import ConsumeFromWhere, PushConsumer
from ferrymq.message import MessageExt
from ferrymq.remoting.client import RemotingClient

from .failover_helpers import (
    TOPIC,
    Recorder,
    failover_cluster,
    group_state,
    produce,
    wait_healthy,
    wait_until,
)
from .test_failover_chaos import prepare


async def test_consumer_and_producer_follow_the_new_master(tmp_path: Path) -> None:
    with failover_cluster(tmp_path / "cluster") as cluster:
        client = RemotingClient()
        master = await prepare(client, cluster)
        received: Counter[bytes] = Counter()

        def listener(msgs: list[MessageExt], context: object) -> None:
            for m in msgs:
                received[m.body] += 1

        consumer = PushConsumer(
            "failover_consumer",
            cluster.namesrv_addr,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        )
        consumer.subscribe(TOPIC, "*")
        consumer.register_listener(listener)
        await consumer.start()
        rec = Recorder()
        stop = asyncio.Event()
        producer = asyncio.create_task(produce(cluster.namesrv_addr, rec, stop, 9))
        try:

            async def consumed_all() -> bool:
                return all(body in received for body in list(rec.acks.values()))

            async def acks_at_least(n: int) -> bool:
                return len(rec.acks) >= n

            await wait_until("100 acks", lambda: acks_at_least(100), 60)
            await wait_until("consumed before the kill", consumed_all, 30)
            cluster.brokers[master - 1].proc.kill()
            killed_at = time.monotonic()
            await asyncio.to_thread(cluster.brokers[master - 1].proc.wait, 30)

            async def elected() -> bool:
                s = await group_state(client, cluster.controller_addr)
                return s.get("masterBrokerId") not in (None, master)

            await wait_until("a new master", elected, 30)
            target = len(rec.acks) + 100
            await wait_until("100 acks on the new master", lambda: acks_at_least(target), 30)
            stop.set()
            await asyncio.wait_for(producer, 30)
            # well inside the consumer's 30 s route poll: it followed the dead master's errors
            await wait_until("every acknowledged message consumed", consumed_all, 25)
            followed_in = time.monotonic() - killed_at
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer, 30)
            await consumer.shutdown()
        redelivered = sum(n - 1 for n in received.values())
        print(
            f"\nconsumer caught up {followed_in:.1f}s after the kill; {len(rec.acks)} acked, "
            f"{redelivered} re-delivered"
        )
        await wait_healthy(client, cluster, members=2)
        await client.close()
